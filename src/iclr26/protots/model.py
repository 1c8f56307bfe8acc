"""ProtoTS: a forecast is a similarity-weighted mixture of learned prototype curves (Peng et al., 2025).

Read top to bottom: the multi-channel embedding (Eq. 2), the bottleneck mixer (Eq. 3) with the learned
time pooling, the prototype tree and its softmax weights (Eqs. 4-5), the loss (Eq. 6), the split
selection of hierarchical prototype learning (Sec. 3.5), and the expert-steering operations.

Shapes: B instances, L history steps, H horizon steps, T = L + H, d embedding width, C_dis / C_con
discrete / continuous covariates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from iclr26.protots.config import ProtoTSConfig

_EPS = 1e-12


# --------------------------------------------------------------------------------------------------
# Encoder: multi-channel embedding + bottleneck channel fusion
# --------------------------------------------------------------------------------------------------


class MultiChannelEmbedding(nn.Module):
    r"""One channel per variable, summed (Eq. 2)::

        Z_t = gamma(y_t) * 1[t <= L] + sum_j E_j(x^dis_{t,j}) + sum_j psi_j(x^con_{t,j})   in R^d

    gamma: MLP R -> R^d on the target; E_j: one embedding table per discrete variable (with one extra row,
    index ``card_j``, reserved for categories unseen in training); psi_j(x) = W2_j tanh(W1_j x + b1_j) + b2_j,
    a separate nonlinear projection R -> R^d per continuous variable. In the forecast window (t > L) the
    target term is absent, so future targets cannot reach the forecast.
    """

    def __init__(self, n_dis_cards: Sequence[int], n_con: int, L: int, H: int, d: int, con_hidden: int):
        super().__init__()
        self.L, self.H, self.d, self.n_con = L, H, d, n_con
        self.cards = [int(c) for c in n_dis_cards]
        if any(c < 1 for c in self.cards) or n_con < 0:
            raise ValueError(f"bad covariate spec: cards={self.cards}, n_con={n_con}")
        self.gamma = nn.Sequential(nn.Linear(1, d), nn.GELU(), nn.Linear(d, d))
        self.dis_emb = nn.ModuleList(nn.Embedding(c + 1, d) for c in self.cards)
        h = con_hidden
        self.con_w1 = nn.Parameter(torch.randn(n_con, h))
        self.con_b1 = nn.Parameter(torch.zeros(n_con, h))
        self.con_w2 = nn.Parameter(torch.randn(n_con, h, d) / math.sqrt(h))
        self.con_b2 = nn.Parameter(torch.zeros(n_con, d))

    def forward(self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor) -> torch.Tensor:
        """y_in (B, L) or (B, L+H) (the future part is ignored), x_dis (B, T, C_dis) long, x_con (B, T, C_con)."""
        B, T = x_dis.shape[0], self.L + self.H
        if y_in.shape[1] not in (self.L, T):
            raise ValueError(f"y_in has {y_in.shape[1]} steps, expected L={self.L} or L+H={T}")
        if x_dis.shape[1:] != (T, len(self.cards)) or x_con.shape[1:] != (T, self.n_con):
            raise ValueError(
                f"covariates {tuple(x_dis.shape)}/{tuple(x_con.shape)} do not match "
                f"(B, {T}, {len(self.cards)}) / (B, {T}, {self.n_con})"
            )
        y = y_in if y_in.shape[1] == T else torch.cat([y_in, y_in.new_zeros(B, self.H)], 1)
        # gamma(y_t) * 1[t <= L]: where() so that even a NaN/inf future target cannot leak.
        endo = self.gamma(y.unsqueeze(-1))
        hist = (torch.arange(T, device=y.device) < self.L).view(1, T, 1)
        z = torch.where(hist, endo, torch.zeros_like(endo))
        # sum_j E_j(x^dis_{t,j})
        for j, table in enumerate(self.dis_emb):
            z = z + table(x_dis[:, :, j])
        # sum_j psi_j(x^con_{t,j}) = sum_j (tanh(x W1_j + b1_j) W2_j + b2_j)
        if self.n_con:
            hid = torch.tanh(x_con.unsqueeze(-1) * self.con_w1 + self.con_b1)  # (B, T, C_con, h)
            z = z + torch.einsum("btch,chd->btd", hid, self.con_w2) + self.con_b2.sum(0)
        return z


class MixerLayer(nn.Module):
    r"""One bottleneck mixer layer, feature mixing then time mixing (Eq. 3)::

        Z <- MLP_time( MLP_feature(Z)^T )^T,  MLP_feature: d -> d_bottle -> d,  MLP_time: T -> T_h -> T

    with an optional residual connection and pre-LayerNorm around each MLP (``residual``, ``layer_norm``).
    """

    def __init__(self, T: int, d: int, d_bottle: int, time_hidden: int, residual: bool, layer_norm: bool):
        super().__init__()
        self.residual = residual
        self.norm_f = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.feature = nn.Sequential(nn.Linear(d, d_bottle), nn.GELU(), nn.Linear(d_bottle, d))
        self.norm_t = nn.LayerNorm(d) if layer_norm else nn.Identity()
        self.time = nn.Sequential(nn.Linear(T, time_hidden), nn.GELU(), nn.Linear(time_hidden, T))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.feature(self.norm_f(z))  # per time step, across the d features
        z = z + h if self.residual else h
        h = self.time(self.norm_t(z).transpose(1, 2)).transpose(1, 2)  # per feature, across the T steps
        return z + h if self.residual else h


# --------------------------------------------------------------------------------------------------
# Prototypes
# --------------------------------------------------------------------------------------------------


class PrototypeNode(nn.Module):
    """One prototype: embedding mu (d,) and forecast curve p (H,), with optional children (Sec. 3.5)."""

    def __init__(self, mu: torch.Tensor, p: torch.Tensor):
        super().__init__()
        self.mu = nn.Parameter(mu.detach().clone())
        self.p = nn.Parameter(p.detach().clone())
        self.kids = nn.ModuleList()


def prototype_weights(
    z: torch.Tensor, mus: torch.Tensor, squared: bool = False, temperature: float = 1.0
) -> torch.Tensor:
    r"""Softmax over negative Euclidean distances (Eq. 4)::

        f(Z^ | mu_k) = exp(-d(Z^, mu_k)) / sum_i exp(-d(Z^, mu_i)),  d = ||Z^ - mu||_2 (or its square)

    z (B, d), mus (K, d) -> (B, K); every row is non-negative and sums to 1.
    """
    sq = (z.unsqueeze(1) - mus.unsqueeze(0)).pow(2).sum(-1)
    dist = sq if squared else torch.sqrt(sq + _EPS)
    return F.softmax(-dist / temperature, dim=-1)


def assignment_entropy(f: torch.Tensor) -> torch.Tensor:
    r"""Shannon entropy of each row of a weight matrix: H(f) = -sum_i f_i log f_i (0 one-hot, log N uniform)."""
    return -(f * torch.log(f.clamp_min(_EPS))).sum(-1)


def protots_loss(
    y_hat: torch.Tensor, y: torch.Tensor, f_root: torch.Tensor, lam: float, l1_reduction: str = "sum"
) -> torch.Tensor:
    r"""Eq. 6, averaged over the batch::

    loss = ||Y^ - Y||_1 - lambda * sum_i f(Z^|mu_i) log f(Z^|mu_i)          (root level only)

    ``l1_reduction="sum"`` is the paper's L1 norm over the H horizon steps; ``"mean"`` divides it by H.
    """
    if l1_reduction not in ("sum", "mean"):
        raise ValueError(f"l1_reduction must be 'sum' or 'mean', got {l1_reduction!r}")
    err = (y_hat - y).abs()
    l1 = err.sum(-1).mean() if l1_reduction == "sum" else err.mean()
    return l1 + lam * assignment_entropy(f_root).mean()


def select_split(leaf_ids: Sequence[str], assign: torch.Tensor, sample_mae: torch.Tensor, alpha: float) -> list[str]:
    """Which leaves to split (Sec. 3.5): the top ceil(alpha * n_leaves) by mean MAE over the instances
    associated with them (``assign``: index into ``leaf_ids`` per instance). Leaves with no associated
    instance are never chosen; ties keep the order of ``leaf_ids``."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    k = math.ceil(alpha * len(leaf_ids) - 1e-9)
    means = []
    for i, pid in enumerate(leaf_ids):
        mask = assign == i
        if bool(mask.any()):
            means.append((float(sample_mae[mask].mean()), i, pid))
    means.sort(key=lambda t: (-t[0], t[1]))
    return [pid for _, _, pid in means[:k]]


@dataclass
class Explanation:
    """What :meth:`ProtoTS.explain` returns for a batch.

    forecast: (B, H) the forecast.
    root_weights: (B, N) f(Z^ | mu_i).
    top_roots: (B, k) ids of the k heaviest roots; top_weights (B, k) their weights.
    leaf_ids: ids of the leaf prototypes; leaf_weights (B, n_leaves) path products of the softmax
        weights (rows sum to 1); leaf_curves (n_leaves, H): the forecast is leaf_weights @ leaf_curves.
    """

    forecast: torch.Tensor
    root_weights: torch.Tensor
    top_roots: torch.Tensor
    top_weights: torch.Tensor
    leaf_ids: list[str]
    leaf_weights: torch.Tensor
    leaf_curves: torch.Tensor


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


class ProtoTS(nn.Module):
    """ProtoTS (Sec. 3): multi-channel embedding -> bottleneck mixer -> time pooling -> prototype tree.

    n_dis_cards: number of categories of each discrete covariate (an extra index = card is reserved for
    unseen ones). n_con: number of continuous covariates. L, H: lookback and horizon. Prototype ids are
    strings: root ``"i"``, its children ``"i.j"``, and so on.
    """

    def __init__(
        self,
        n_dis_cards: Sequence[int],
        n_con: int,
        L: int,
        H: int,
        cfg: ProtoTSConfig | None = None,
        seed: int | None = None,
    ):
        super().__init__()
        cfg = cfg or ProtoTSConfig()
        if seed is not None:
            torch.manual_seed(seed)
        if cfg.n_roots < 1 or cfg.d < 1 or cfg.d_bottle < 1 or L < 1 or H < 1:
            raise ValueError(
                f"bad ProtoTS sizes: n_roots={cfg.n_roots}, d={cfg.d}, d_bottle={cfg.d_bottle}, L={L}, H={H}"
            )
        self.cfg, self.L, self.H = cfg, L, H
        T = L + H
        self.embed = MultiChannelEmbedding(n_dis_cards, n_con, L, H, cfg.d, cfg.con_hidden)
        th = cfg.time_hidden or T
        self.mixer = nn.ModuleList(
            MixerLayer(T, cfg.d, cfg.d_bottle, th, cfg.residual, cfg.layer_norm) for _ in range(cfg.n_mix)
        )
        # learned linear pooling over time: Z^ = Z^T W, W in R^T (Sec. 3.3)
        self.pool = nn.Parameter(torch.full((T,), 1.0 / T))
        self.roots = nn.ModuleList(PrototypeNode(torch.randn(cfg.d), 0.1 * torch.randn(H)) for _ in range(cfg.n_roots))
        self.last_split: list[str] = []

    # ---- encoder -------------------------------------------------------------------------------
    def encode(self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor) -> torch.Tensor:
        """Z^ (B, d): embedding, N_mix mixer layers, then Z^ = sum_t W_t Z_t."""
        z = self.embed(y_in, x_dis, x_con)
        for layer in self.mixer:
            z = layer(z)
        return torch.einsum("btd,t->bd", z, self.pool)

    def _instance_norm(self, y_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hist = y_in[:, : self.L]
        if not self.cfg.revin:
            return y_in, torch.zeros(len(hist), 1, device=hist.device), torch.ones(len(hist), 1, device=hist.device)
        mean = hist.mean(1, keepdim=True)
        std = hist.std(1, keepdim=True, unbiased=False) + 1e-5
        return (hist - mean) / std, mean, std

    # ---- prototype tree --------------------------------------------------------------------------
    def _weights(self, z: torch.Tensor, nodes: Sequence[PrototypeNode]) -> torch.Tensor:
        mus = torch.stack([n.mu for n in nodes])
        return prototype_weights(z, mus, self.cfg.squared_distance, self.cfg.temperature)

    def _curve(self, node: PrototypeNode, z: torch.Tensor) -> torch.Tensor:
        r"""A node's curve: p_i for a leaf, else sum_j f_i(Z^|mu_{i,j}) * curve_{i,j} (Eq. 5)."""
        if len(node.kids) == 0:
            return node.p.unsqueeze(0).expand(len(z), -1)
        w = self._weights(z, list(node.kids))
        curves = torch.stack([self._curve(c, z) for c in node.kids], dim=1)
        return torch.einsum("bm,bmh->bh", w, curves)

    def forward(
        self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""(Y^ (B, H), root weights f (B, N)) with Y^ = sum_i f(Z^|mu_i) * curve_i (Eqs. 4-5)."""
        y_n, mean, std = self._instance_norm(y_in)
        z = self.encode(y_n, x_dis, x_con)
        f = self._weights(z, list(self.roots))
        curves = torch.stack([self._curve(r, z) for r in self.roots], dim=1)
        y_hat = torch.einsum("bn,bnh->bh", f, curves)
        return y_hat * std + mean, f

    @torch.no_grad()
    def predict(
        self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor, batch_size: int = 1024
    ) -> torch.Tensor:
        """Forecasts (B, H) in eval mode, batched."""
        was = self.training
        self.eval()
        out = [
            self(y_in[i : i + batch_size], x_dis[i : i + batch_size], x_con[i : i + batch_size])[0]
            for i in range(0, len(y_in), batch_size)
        ]
        self.train(was)
        return torch.cat(out) if out else torch.zeros(0, self.H)

    # ---- ids ---------------------------------------------------------------------------------------
    def node(self, pid: str) -> PrototypeNode:
        """The prototype with id ``pid`` ("2", "2.0", ...); KeyError for an unknown id."""
        try:
            parts = [int(s) for s in str(pid).split(".")]
            node = self.roots[parts[0]] if parts[0] >= 0 else None
            for j in parts[1:]:
                node = node.kids[j] if j >= 0 else None
        except (ValueError, IndexError, TypeError):
            node = None
        if node is None:
            raise KeyError(f"unknown prototype id {pid!r}")
        return node

    def leaves(self) -> list[tuple[str, PrototypeNode]]:
        """All leaf prototypes, depth first, as (id, node)."""
        out: list[tuple[str, PrototypeNode]] = []

        def walk(pid: str, n: PrototypeNode) -> None:
            if len(n.kids) == 0:
                out.append((pid, n))
            for j, c in enumerate(n.kids):
                walk(f"{pid}.{j}", c)

        for i, r in enumerate(self.roots):
            walk(str(i), r)
        return out

    def leaf_weights(self, z: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        """(leaf ids, (B, n_leaves)): each leaf's weight is the product of the softmax weights on its path."""
        ids: list[str] = []
        cols: list[torch.Tensor] = []

        def walk(pid: str, nodes: Sequence[PrototypeNode], w_parent: torch.Tensor) -> None:
            w = self._weights(z, nodes)
            for j, n in enumerate(nodes):
                cid = f"{pid}.{j}" if pid else str(j)
                wj = w_parent * w[:, j]
                if len(n.kids) == 0:
                    ids.append(cid)
                    cols.append(wj)
                else:
                    walk(cid, list(n.kids), wj)

        walk("", list(self.roots), torch.ones(len(z), device=z.device))
        return ids, torch.stack(cols, dim=1)

    @torch.no_grad()
    def explain(self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor, k: int = 2) -> Explanation:
        """The forecast with its heaviest root prototypes and the full leaf decomposition."""
        y_n, mean, std = self._instance_norm(y_in)
        z = self.encode(y_n, x_dis, x_con)
        f = self._weights(z, list(self.roots))
        ids, lw = self.leaf_weights(z)
        curves = torch.stack([self.node(i).p for i in ids])
        top_w, top_i = f.topk(min(k, f.shape[1]), dim=1)
        forecast = (lw @ curves) * std + mean
        return Explanation(forecast, f, top_i, top_w, ids, lw, curves)

    @torch.no_grad()
    def init_prototypes(
        self,
        y_in: torch.Tensor,
        x_dis: torch.Tensor,
        x_con: torch.Tensor,
        y: torch.Tensor,
        seed: int = 0,
        iters: int = 10,
    ) -> None:
        """Data initialisation of the roots (not stated in the paper): k-means (k-means++ seeding, ``iters``
        Lloyd steps) on the untrained encoder's Z^ of the given instances; mu_k = centroid k, p_k = mean
        future curve of cluster k. Without it every instance can start nearest to one random mu and the
        softmax collapses onto a single prototype. With ``cfg.unit_distance`` the pooling W and the mu are
        then divided by the median nearest-root distance, so that it is 1 (see :class:`ProtoTSConfig`)."""
        n_roots = len(self.roots)
        if len(y_in) < n_roots:
            raise ValueError(f"init_prototypes needs at least {n_roots} instances, got {len(y_in)}")
        was = self.training
        self.eval()
        y_n, mean, std = self._instance_norm(y_in)
        z = torch.cat(
            [self.encode(y_n[i : i + 1024], x_dis[i : i + 1024], x_con[i : i + 1024]) for i in range(0, len(y_n), 1024)]
        )
        self.train(was)
        target = (y - mean) / std
        gen = torch.Generator().manual_seed(seed)
        centers = z[torch.randint(len(z), (1,), generator=gen)]
        while len(centers) < n_roots:  # k-means++: next centre with probability ~ squared distance
            d2 = torch.cdist(z, centers).min(1).values.pow(2)
            nxt = (
                torch.multinomial(d2 + 1e-12, 1, generator=gen)
                if float(d2.sum()) > 0
                else torch.randint(len(z), (1,), generator=gen)
            )
            centers = torch.cat([centers, z[nxt]])
        for _ in range(iters):
            assign = torch.cdist(z, centers).argmin(1)
            for k in range(n_roots):
                if bool((assign == k).any()):
                    centers[k] = z[assign == k].mean(0)
        dist = torch.cdist(z, centers)
        assign = dist.argmin(1)
        if self.cfg.unit_distance:  # Z^ = Z^T W is linear in W: rescaling W and mu scales every distance
            scale = float(dist.min(1).values.median().clamp_min(1e-6))
            self.pool.div_(scale)
            centers = centers / scale
        for k, node in enumerate(self.roots):
            node.mu.copy_(centers[k])
            members = assign == k
            node.p.copy_(target[members].mean(0) if bool(members.any()) else target.mean(0))

    # ---- hierarchical learning and steering --------------------------------------------------------
    @torch.no_grad()
    def split_prototype(
        self, pid: str, M: int | None = None, eps: float | None = None, generator: torch.Generator | None = None
    ) -> list[str]:
        r"""Split leaf ``pid`` into M children (Sec. 3.5), function-preserving::

            mu_{i,j} = mu_i + eps * N(0, I),   p_{i,j} = p_i

        The forecast is unchanged right after the split (every child curve equals p_i). The parent's p is
        no longer used and stops training. Returns the children's ids.
        """
        M = self.cfg.n_children if M is None else M
        eps = self.cfg.split_eps if eps is None else eps
        if not isinstance(M, int) or M < 1:
            raise ValueError(f"M must be a positive int, got {M!r}")
        parent = self.node(pid)
        if len(parent.kids):
            raise ValueError(f"prototype {pid!r} is already split; split one of its children")
        for _ in range(M):
            noise = torch.randn(parent.mu.shape, generator=generator).to(parent.mu.device)
            parent.kids.append(PrototypeNode(parent.mu + eps * noise, parent.p))
        parent.p.requires_grad_(False)
        self.last_split = [f"{pid}.{j}" for j in range(M)]
        return list(self.last_split)

    @torch.no_grad()
    def split(
        self,
        alpha: float,
        M: int,
        y_in: torch.Tensor,
        x_dis: torch.Tensor,
        x_con: torch.Tensor,
        y: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> list[str]:
        """One level of hierarchical learning: associate each instance with its heaviest leaf, split the top
        alpha share of leaves by mean MAE (:func:`select_split`) into M children each. Returns split ids."""
        was = self.training
        self.eval()
        ids, assign, mae = [], [], []
        for i in range(0, len(y_in), 1024):
            sl = slice(i, i + 1024)
            y_n, mean, std = self._instance_norm(y_in[sl])
            z = self.encode(y_n, x_dis[sl], x_con[sl])
            ids, lw = self.leaf_weights(z)
            assign.append(lw.argmax(1))
            mae.append((self(y_in[sl], x_dis[sl], x_con[sl])[0] - y[sl]).abs().mean(1))
        self.train(was)
        chosen = select_split(ids, torch.cat(assign), torch.cat(mae), alpha)
        new: list[str] = []
        for pid in chosen:
            new += self.split_prototype(pid, M, generator=generator)
        self.last_split = new
        return chosen

    @torch.no_grad()
    def inject_root(self, mu: torch.Tensor, p: torch.Tensor) -> str:
        """Add a root prototype (expert steering); returns its id. mu (d,), p (H,), finite."""
        mu, p = torch.as_tensor(mu, dtype=torch.float32), torch.as_tensor(p, dtype=torch.float32)
        if mu.shape != (self.cfg.d,) or p.shape != (self.H,):
            raise ValueError(
                f"inject_root needs mu ({self.cfg.d},) and p ({self.H},), got {tuple(mu.shape)} and {tuple(p.shape)}"
            )
        if not (torch.isfinite(mu).all() and torch.isfinite(p).all()):
            raise ValueError("inject_root: mu and p must be finite")
        dev = self.roots[0].mu.device
        self.roots.append(PrototypeNode(mu.to(dev), p.to(dev)))
        return str(len(self.roots) - 1)

    @torch.no_grad()
    def inject_root_from_instances(
        self, y_in: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor, y: torch.Tensor
    ) -> str:
        """Inject a root at the mean Z^ of expert-chosen instances, with their mean future curve as p."""
        if len(y_in) == 0:
            raise ValueError("inject_root_from_instances needs at least one instance")
        was = self.training
        self.eval()
        y_n, mean, std = self._instance_norm(y_in)
        z = self.encode(y_n, x_dis, x_con)
        self.train(was)
        return self.inject_root(z.mean(0), ((y - mean) / std).mean(0))

    @torch.no_grad()
    def edit_pattern(self, pid: str, curve: torch.Tensor) -> None:
        """Overwrite leaf ``pid``'s curve p with an expert's curve (H,). The forecast moves by f_k * delta p_k."""
        node = self.node(pid)
        curve = torch.as_tensor(curve, dtype=node.p.dtype)
        if curve.shape != (self.H,) or not torch.isfinite(curve).all():
            raise ValueError(f"edit_pattern needs a finite curve of shape ({self.H},), got {tuple(curve.shape)}")
        if len(node.kids):
            raise ValueError(f"prototype {pid!r} has children; its curve is unused; edit a leaf")
        node.p.copy_(curve.to(node.p.device))

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
