"""Stage 1: the graph autoencoder (Sec. 3.1; layers reconstructed, see README).

Encoder E_φ: dense GIN layers on degree one-hot ⊕ random-walk features, then Linear → Z ∈ R^{N×d}.
Training adds fixed noise, Z_l = Z + σ0 ε. GlobalExtraction: Z_g^j = mean{Z^i : S_g[i] = j}.
Decoder D_ψ(Z_l, Z_g): node i is assigned to y_i = argmax_j cos(Z_l^i, Z_g^j) (the true S_g during AE
training), h_i = MLP([Z_l^i, Z_g^{y_i}, mean_j Z_g^j]) and the edge logit

    e_ij = MLP([h_i ⊙ h_j, |h_i - h_j|, 1[y_i = y_j]])  (+ Σ_k w_k Z_l^{ik} Z_l^{jk} when ``bilinear``)

is symmetric in (i, j) by construction; the diagonal is excluded. The bilinear term gives the decoder
a direct path for A_ij = Σ_k λ_k u_ik u_jk from the adjacency eigen-coordinate inputs. Loss: BCE with
pos_weight = #non-edges / #edges (per batch) + CE(softmax(cos(Z_l^i, Z_g^j) / τ), S_g[i]) + ℓ2 on Z.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import AEConfig
from .data import node_features


def masked_cluster_mean(z: torch.Tensor, labels: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Z_g^j = mean{z_i : labels_i = j}; labels -1 = padding. Returns ([B, K, d], non-empty mask [B, K])."""
    valid = labels >= 0
    onehot = F.one_hot(labels.clamp(min=0), k).float() * valid.unsqueeze(-1).float()  # [B, N, K]
    counts = onehot.sum(1)  # [B, K]
    zg = onehot.transpose(1, 2) @ z / counts.clamp(min=1).unsqueeze(-1)
    return zg, counts > 0


def cosine_logits(zl: torch.Tensor, zg: torch.Tensor, gmask: torch.Tensor) -> torch.Tensor:
    """cos(Z_l^i, Z_g^j) as [B, N, K]; empty clusters get -inf."""
    cos = F.normalize(zl, dim=-1, eps=1e-8) @ F.normalize(zg, dim=-1, eps=1e-8).transpose(1, 2)
    return cos.masked_fill(~gmask.unsqueeze(1), float("-inf"))


def assign(zl: torch.Tensor, zg: torch.Tensor, gmask: torch.Tensor) -> torch.Tensor:
    """y_i = argmax_j cos(Z_l^i, Z_g^j) over non-empty clusters."""
    return cosine_logits(zl, zg, gmask).argmax(-1)


class DenseGIN(nn.Module):
    """h' = MLP((1 + ε) h + A h), padding rows zeroed."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.SiLU(), nn.Linear(d_out, d_out), nn.LayerNorm(d_out))

    def forward(self, h: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.mlp((1 + self.eps) * h + adj @ h) * mask.unsqueeze(-1).float()


class GraphAE(nn.Module):
    """Encoder E_φ, GlobalExtraction pooling and decoder D_ψ of DualDiff's stage 1."""

    def __init__(self, cfg: AEConfig):
        super().__init__()
        self.cfg = cfg
        d_in = cfg.max_degree + 1 + cfg.rw_steps + cfg.spectral_pe + cfg.random_features
        dims = [d_in] + [cfg.hidden] * cfg.layers
        self.gin = nn.ModuleList(DenseGIN(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.to_z = nn.Linear(d_in + cfg.hidden * cfg.layers, cfg.d)  # jumping knowledge: inputs and every layer
        h = cfg.hidden
        self.node_mlp = nn.Sequential(nn.Linear(3 * cfg.d, h), nn.SiLU(), nn.Linear(h, h), nn.SiLU(), nn.Linear(h, h))
        self.edge_mlp = nn.Sequential(nn.Linear(2 * h + 1, h), nn.SiLU(), nn.Linear(h, h), nn.SiLU(), nn.Linear(h, 1))
        self.bilinear = nn.Parameter(torch.zeros(cfg.d)) if cfg.bilinear else None  # w_k of Σ_k w_k Z_l^ik Z_l^jk

    def encode(self, adj: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Z = E_φ(G) ∈ R^{B×N×d} (zero on padding)."""
        h = node_features(adj, mask, self.cfg.max_degree, self.cfg.rw_steps, self.cfg.spectral_pe)
        if self.cfg.random_features:  # random node initialisation: makes nodes of one graph distinguishable
            r = torch.randn(*mask.shape, self.cfg.random_features, generator=generator).to(h)
            h = torch.cat([h, r * mask.unsqueeze(-1).float()], -1)
        outs = [h]
        for layer in self.gin:
            h = layer(h, adj, mask)
            outs.append(h)
        return self.to_z(torch.cat(outs, -1)) * mask.unsqueeze(-1).float()

    def edge_logits(self, zl: torch.Tensor, zg: torch.Tensor, y: torch.Tensor, gmask: torch.Tensor) -> torch.Tensor:
        """e_ij of D_ψ for every pair, [B, N, N] (symmetric; the diagonal is meaningless, masked by callers)."""
        zg_y = torch.gather(zg, 1, y.unsqueeze(-1).expand(-1, -1, zg.shape[-1]))  # Z_g^{y_i}
        g_mean = (zg * gmask.unsqueeze(-1).float()).sum(1) / gmask.float().sum(1, keepdim=True).clamp(min=1)
        h = self.node_mlp(torch.cat([zl, zg_y, g_mean.unsqueeze(1).expand_as(zl)], -1))
        hi, hj = h.unsqueeze(2), h.unsqueeze(1)
        same = (y.unsqueeze(2) == y.unsqueeze(1)).float().unsqueeze(-1)
        pair = torch.cat([hi * hj, (hi - hj).abs(), same], -1)
        logits = self.edge_mlp(pair).squeeze(-1)
        if self.bilinear is not None:
            logits = logits + (zl * self.bilinear) @ zl.transpose(1, 2)
        return logits

    def decode(
        self, zl: torch.Tensor, zg: torch.Tensor, mask: torch.Tensor, gmask: torch.Tensor, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Ĝ = D_ψ(Z_l, Z_g): binary symmetric adjacency, zero diagonal and padding (threshold 0.5)."""
        y = assign(zl, zg, gmask) if y is None else y
        adj = (self.edge_logits(zl, zg, y, gmask) > 0).float()
        pair = (mask.unsqueeze(1) & mask.unsqueeze(2)).float()
        adj = adj * pair * (1 - torch.eye(adj.shape[-1], device=adj.device))
        return torch.maximum(adj, adj.transpose(1, 2))

    def loss(self, adj: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """BCE(edges; pos_weight) + assign_weight · CE(assignment) + z_l2 · ‖Z‖² for one padded batch."""
        cfg = self.cfg
        z = self.encode(adj, mask)
        zl = z + cfg.sigma0 * torch.randn_like(z) * mask.unsqueeze(-1).float()  # Z_l = Z + σ0 ε
        zg, gmask = masked_cluster_mean(z, labels, cfg.K)  # Z_g = Pooling(S_g, Z)
        logits = self.edge_logits(zl, zg, labels.clamp(min=0), gmask)
        n = adj.shape[-1]
        pair = (mask.unsqueeze(1) & mask.unsqueeze(2)) & ~torch.eye(n, dtype=torch.bool, device=adj.device)
        target = adj[pair]
        pos_weight = ((1 - target).sum() / target.sum().clamp(min=1)).detach() if cfg.pos_weight else None
        bce = F.binary_cross_entropy_with_logits(logits[pair], target, pos_weight=pos_weight)
        ce = F.cross_entropy((cosine_logits(zl, zg, gmask) / cfg.assign_tau)[mask], labels[mask])
        l2 = (z[mask] ** 2).sum(-1).mean()
        acc = ((logits[pair] > 0).float() == target).float().mean()
        return bce + cfg.assign_weight * ce + cfg.z_l2 * l2, {
            "bce": bce.detach(),
            "assign_ce": ce.detach(),
            "edge_acc": acc.detach(),
        }


@torch.no_grad()
def edge_accuracy(ae: GraphAE, adj: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Held-out reconstruction from noise-free Z, decoded with the argmax-cosine assignment (the sampling path).

    edge_acc: fraction of node pairs i < j whose edge bit is reconstructed; graph_exact: fraction of
    graphs reconstructed exactly; assign_acc: fraction of nodes whose argmax-cosine cluster is S_g.
    """
    z = ae.encode(adj, mask)
    zg, gmask = masked_cluster_mean(z, labels, ae.cfg.K)
    y = assign(z, zg, gmask)
    rec = ae.decode(z, zg, mask, gmask, y)
    n = adj.shape[-1]
    pair = (mask.unsqueeze(1) & mask.unsqueeze(2)) & torch.ones(n, n, dtype=torch.bool).triu(1)
    correct = (rec == adj) | ~pair
    return {
        "edge_acc": float((rec == adj)[pair].float().mean()),
        "graph_exact": float(correct.flatten(1).all(1).float().mean()),
        "assign_acc": float((y == labels)[mask].float().mean()),
    }
