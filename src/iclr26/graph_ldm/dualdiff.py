"""Stage 2: two-branch latent diffusion with dual conditioning (Secs. 3.1-3.3).

Two EDM denoisers, D_θl over node latents Z_l ∈ R^{N×d} and D_θg over cluster latents Z_g ∈ R^{K×d},
trained with one shared σ on

    L = λ(σ) (‖D_θl(Z̃_l; σ, C_l) - Z_l0‖² + ‖D_θg(Z̃_g; σ, C_g) - Z_g0‖²).

Self-conditioning supplies earlier estimates Ẑ_l0, Ẑ_g0; the conditions are

    (C_l, C_g) = (FiLM(Ẑ_l0, Ẑ_g0), 0)              with probability p    process (i), global → local
               = (0, [Ẑ_g0, Lin(Pool(MP(Ẑ_l0)))])     with probability 1-p  process (ii), local → global

FiLM: (γ_j, β_j) = Linear(Ẑ_g0^j), y_i = argmax_j cos(Ẑ_l0^i, Ẑ_g0^j), Ẑ'_l0^i = γ_{y_i} ⊙ Ẑ_l0^i + β_{y_i}.
Sampling alternates asymmetrically: process (ii) at step n when n % (m + 1) == 0, else process (i)
("sym": both at every step). Modes on one code path: ``none`` (C ≡ 0), ``self`` (C_l = Ẑ_l0,
C_g = [Ẑ_g0, 0]), ``g2l`` (p = 1), ``l2g`` (p = 0), ``dual`` (p), and ``node`` (local branch only; Z_g
by K-means on the generated Ẑ_l and mean pooling at decode time).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .autoencoder import GraphAE, assign, masked_cluster_mean
from .clustering import kmeans_coords
from .config import MethodConfig
from .denoiser import SetDenoiser
from .edm import heun_sample, loss_weight, precondition, sample_sigma, sigma_schedule

MODES = ("none", "self", "g2l", "l2g", "dual", "node")
SCHEDULES = ("asym", "sym")


def process_at(mode: str, n: int, m: int, schedule: str = "asym") -> str:
    """Which conditions step n uses: none | self | i (global→local) | ii (local→global) | both."""
    if mode in ("none", "self"):
        return mode
    if mode == "node":
        return "self"
    if mode == "g2l":
        return "i"
    if mode == "l2g":
        return "ii"
    if schedule == "sym":
        return "both"
    return "ii" if n % (m + 1) == 0 else "i"


def masked_labels(y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Assignment labels with -1 on padding nodes."""
    return torch.where(mask, y, torch.full_like(y, -1))


class DualDiff(nn.Module):
    """Two-branch EDM denoiser with the dual-conditioning mechanism (``mode`` selects the ablation)."""

    def __init__(
        self,
        d: int,
        K: int,
        cfg: MethodConfig,
        mode: str = "dual",
        ae: GraphAE | None = None,
        latent_mean: torch.Tensor | None = None,
        latent_std: torch.Tensor | None = None,
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
        if cfg.mp_graph == "decoded" and ae is None:
            raise ValueError("mp_graph='decoded' needs the frozen autoencoder")
        self.d, self.K, self.cfg, self.mode = d, K, cfg, mode
        self.net_l = SetDenoiser(2 * d, d, cfg.d_model, cfg.n_layers, cfg.n_heads)  # input [c_in Z̃_l, C_l]
        self.net_g = None if mode == "node" else SetDenoiser(3 * d, d, cfg.d_model, cfg.n_layers, cfg.n_heads)
        self.film = nn.Linear(d, 2 * d)  # (γ_j - 1, β_j) = Linear(Ẑ_g0^j); zero init = identity FiLM
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.mp_attn = nn.MultiheadAttention(d, 1, batch_first=True)
        self.mp_gin = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.pool_lin = nn.Linear(d, d)
        self._ae = (ae,)  # frozen, not a sub-module (never trained here)
        self.register_buffer("mu", torch.zeros(d) if latent_mean is None else latent_mean.clone())
        self.register_buffer("sd", torch.ones(d) if latent_std is None else latent_std.clone())

    @property
    def p(self) -> float:
        """Probability of process (i) in training."""
        return {"g2l": 1.0, "l2g": 0.0, "dual": self.cfg.p}.get(self.mode, 0.0)

    # ---- the denoisers ---------------------------------------------------------------------------
    def _precond(
        self, net: nn.Module, x: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """D(x; σ) = c_skip x + c_out F([c_in x, C]; c_noise), zero on masked tokens."""
        c_skip, c_out, c_in, c_noise = precondition(sigma, self.cfg.sigma_data)
        c_skip, c_out, c_in = (c.view(-1, 1, 1) for c in (c_skip, c_out, c_in))
        out = net(torch.cat([c_in * x, cond], -1), c_noise, mask)
        return (c_skip * x + c_out * out) * mask.unsqueeze(-1).float()

    def denoise_l(self, zl, sigma, cond_l, mask):
        return self._precond(self.net_l, zl, sigma, cond_l, mask)

    def denoise_g(self, zg, sigma, cond_g, gmask):
        return self._precond(self.net_g, zg, sigma, cond_g, gmask)

    # ---- conditions ------------------------------------------------------------------------------
    def film_condition(self, est_l, est_g, mask, gmask) -> torch.Tensor:
        """Process (i): Ẑ'_l0^i = γ_{y_i} ⊙ Ẑ_l0^i + β_{y_i}, y_i = argmax_j cos(Ẑ_l0^i, Ẑ_g0^j)."""
        gb = self.film(est_g)
        gamma, beta = 1 + gb[..., : self.d], gb[..., self.d :]
        idx = assign(est_l, est_g, gmask).unsqueeze(-1).expand(-1, -1, self.d)
        out = torch.gather(gamma, 1, idx) * est_l + torch.gather(beta, 1, idx)
        return out * mask.unsqueeze(-1).float()

    def message_pass(self, est_l, est_g, mask, gmask) -> torch.Tensor:
        """MP(Ẑ_l0): one attention layer over nodes, or one GIN layer on the decoded soft adjacency."""
        if self.cfg.mp_graph == "attention":
            h = est_l + self.mp_attn(est_l, est_l, est_l, key_padding_mask=~mask, need_weights=False)[0]
        else:
            ae = self._ae[0]
            zl, zg = est_l * self.sd + self.mu, est_g * self.sd + self.mu
            soft = torch.sigmoid(ae.edge_logits(zl, zg, assign(zl, zg, gmask), gmask))
            pair = (mask.unsqueeze(1) & mask.unsqueeze(2)).float() * (1 - torch.eye(mask.shape[1]))
            h = self.mp_gin(est_l + (soft * pair) @ est_l)
        return h * mask.unsqueeze(-1).float()

    def local_summary(self, est_l, est_g, mask, gmask) -> torch.Tensor:
        """Lin(Pool(MP(Ẑ_l0))): mean of message-passed node estimates per assigned cluster, [B, K, d]."""
        y = masked_labels(assign(est_l, est_g, gmask), mask)
        pooled, _ = masked_cluster_mean(self.message_pass(est_l, est_g, mask, gmask), y, self.K)
        return self.pool_lin(pooled) * gmask.unsqueeze(-1).float()

    def l2g_condition(self, est_l, est_g, mask, gmask) -> torch.Tensor:
        """Process (ii): C_g = [Ẑ_g0, Lin(Pool(MP(Ẑ_l0)))]."""
        return torch.cat([est_g, self.local_summary(est_l, est_g, mask, gmask)], -1) * gmask.unsqueeze(-1).float()

    def conditions(self, process: str | torch.Tensor, est_l, est_g, mask, gmask):
        """(C_l [B,N,d], C_g [B,K,2d]). ``process``: a name, or a bool [B] (True = process (i))."""
        zl, zg = torch.zeros_like(est_l), torch.zeros(*est_g.shape[:2], 2 * self.d)
        if isinstance(process, torch.Tensor):
            sel = process.view(-1, 1, 1)
            c_l = torch.where(sel, self.film_condition(est_l, est_g, mask, gmask), zl)
            c_g = torch.where(sel, zg, self.l2g_condition(est_l, est_g, mask, gmask))
            return c_l, c_g
        if process == "none":
            return zl, zg
        if process == "self":
            return est_l, torch.cat([est_g, torch.zeros_like(est_g)], -1)
        c_l = self.film_condition(est_l, est_g, mask, gmask) if process in ("i", "both") else zl
        c_g = self.l2g_condition(est_l, est_g, mask, gmask) if process in ("ii", "both") else zg
        return c_l, c_g

    def train_process(self, batch: int) -> str | torch.Tensor:
        """Per-graph choice of conditions in training."""
        if self.mode in ("none", "self"):
            return self.mode
        if self.mode == "node":
            return "self" if self.cfg.node_level_self_cond else "none"
        return torch.rand(batch) < self.p

    # ---- training --------------------------------------------------------------------------------
    def loss(self, zl0, zg0, mask, gmask) -> tuple[torch.Tensor, dict]:
        """One EDM training step's loss on standardised latents (shared σ for both branches)."""
        B = zl0.shape[0]
        sigma = sample_sigma(B, self.cfg.p_mean, self.cfg.p_std).to(zl0)
        s3 = sigma.view(-1, 1, 1)
        zl = zl0 + s3 * torch.randn_like(zl0) * mask.unsqueeze(-1).float()
        zg = zg0 + s3 * torch.randn_like(zg0) * gmask.unsqueeze(-1).float()
        est_l, est_g = torch.zeros_like(zl0), torch.zeros_like(zg0)
        process = self.train_process(B)
        if not (isinstance(process, str) and process == "none") and self.cfg.self_cond_prob > 0:
            use = (torch.rand(B) < self.cfg.self_cond_prob).view(-1, 1, 1)
            with torch.no_grad():
                c_l0, c_g0 = self.conditions("none", est_l, est_g, mask, gmask)
                est_l = torch.where(use, self.denoise_l(zl, sigma, c_l0, mask), est_l)
                if self.net_g is not None:
                    est_g = torch.where(use, self.denoise_g(zg, sigma, c_g0, gmask), est_g)
        c_l, c_g = self.conditions(process, est_l, est_g, mask, gmask)
        lam = loss_weight(sigma, self.cfg.sigma_data)
        mf = mask.unsqueeze(-1).float()
        loss_l = lam * (
            ((self.denoise_l(zl, sigma, c_l, mask) - zl0) ** 2 * mf).sum((1, 2)) / (mf.sum((1, 2)) * self.d)
        )
        total, logs = loss_l.mean(), {"loss_l": loss_l.mean().detach()}
        if self.net_g is not None:
            gf = gmask.unsqueeze(-1).float()
            err = ((self.denoise_g(zg, sigma, c_g, gmask) - zg0) ** 2 * gf).sum((1, 2)) / (gf.sum((1, 2)) * self.d)
            total = total + (lam * err).mean()
            logs["loss_g"] = (lam * err).mean().detach()
        return total, logs

    # ---- sampling --------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        n_nodes: torch.Tensor,
        n_max: int,
        steps: int | None = None,
        schedule: str = "asym",
        generator: torch.Generator | None = None,
        record: list | None = None,
    ):
        """Standardised latents (Z_l [B,N,d], Z_g [B,K,d] or None, mask, gmask) by Heun sampling.

        ``record``: if a list, the process name of every step is appended (for the schedule tests).
        """
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; one of {SCHEDULES}")
        cfg, B = self.cfg, len(n_nodes)
        mask = torch.arange(n_max).unsqueeze(0) < n_nodes.unsqueeze(1)
        gmask = torch.arange(self.K).unsqueeze(0) < n_nodes.clamp(max=self.K).unsqueeze(1)
        sigmas = sigma_schedule(steps or cfg.steps, cfg.sigma_min, cfg.sigma_max, cfg.rho)
        x = [float(sigmas[0]) * torch.randn(B, n_max, self.d, generator=generator) * mask.unsqueeze(-1).float()]
        if self.net_g is not None:
            x.append(
                float(sigmas[0]) * torch.randn(B, self.K, self.d, generator=generator) * gmask.unsqueeze(-1).float()
            )
        state = {"n": -1, "est": (torch.zeros(B, n_max, self.d), torch.zeros(B, self.K, self.d)), "last": None}

        def denoise(xs, s, n):
            if n != state["n"]:  # conditions are fixed within a step, from the previous step's estimates
                if state["last"] is not None:
                    state["est"] = state["last"]
                proc = process_at(self.mode, n, cfg.m, schedule)
                if self.mode == "node" and not cfg.node_level_self_cond:
                    proc = "none"
                if record is not None:
                    record.append(proc)
                state["cond"], state["n"] = self.conditions(proc, *state["est"], mask, gmask), n
            sig = torch.full((B,), s)
            c_l, c_g = state["cond"]
            out = [self.denoise_l(xs[0], sig, c_l, mask)]
            if self.net_g is not None:
                out.append(self.denoise_g(xs[1], sig, c_g, gmask))
                state["last"] = (out[0], out[1])
            else:
                state["last"] = (out[0], state["est"][1])
            return out

        xs = heun_sample(denoise, x, sigmas, cfg.s_churn, generator)
        return xs[0], (xs[1] if len(xs) > 1 else None), mask, gmask

    def destandardise(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Back to the autoencoder's latent space: z σ + μ (zero on masked tokens)."""
        return (z * self.sd + self.mu) * mask.unsqueeze(-1).float()


def posthoc_global(zl: torch.Tensor, mask: torch.Tensor, K: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Node-level baseline: Z_g by K-means on each graph's generated Ẑ_l, then cluster means."""
    labels = torch.full(mask.shape, -1, dtype=torch.long)
    for b in range(zl.shape[0]):
        n = int(mask[b].sum())
        labels[b, :n] = torch.from_numpy(kmeans_coords(zl[b, :n].double().numpy(), K, seed))
    return masked_cluster_mean(zl, labels, K)


def global_local_mismatch(zl: torch.Tensor, zg: torch.Tensor, mask: torch.Tensor, gmask: torch.Tensor) -> np.ndarray:
    """Per graph c = mean_j ‖Ẑ_g^j - mean{Ẑ_l^i : y_i = j}‖ / RMS_j ‖Ẑ_g^j‖ with y_i = argmax_j cos(Ẑ_l^i, Ẑ_g^j).

    Clusters that no node is assigned to are left out of the mean; 0 when Z_g is the cluster mean of Z_l.
    """
    y = masked_labels(assign(zl, zg, gmask), mask)
    means, nonempty = masked_cluster_mean(zl, y, zg.shape[1])
    valid = (nonempty & gmask).float()
    dist = (zg - means).norm(dim=-1)
    num = (dist * valid).sum(1) / valid.sum(1).clamp(min=1)
    den = ((zg.norm(dim=-1) ** 2 * gmask.float()).sum(1) / gmask.float().sum(1).clamp(min=1)).sqrt()
    return (num / den.clamp(min=1e-8)).numpy()
