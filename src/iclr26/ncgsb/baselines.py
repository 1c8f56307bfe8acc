"""Baselines: piecewise OT (McCann) interpolation, piecewise entropic SB, sampler-side guidance, and a small
IMF (DSBM-style) bridge-matching solver for the training-time comparison.

The conservative GSB baseline of the paper (CWG-C) is :class:`~iclr26.ncgsb.bridge.CWGBridge` with γ = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

from iclr26.ncgsb.ot import sinkhorn_plan


def _neighbours(times, t: float) -> tuple[float, float]:
    ts = sorted(float(s) for s in times)
    left = [s for s in ts if s < t]
    right = [s for s in ts if s > t]
    if not left or not right:
        raise ValueError(f"time {t} is not strictly inside the observed times {ts}")
    return left[-1], right[0]


def _equal_size(a: np.ndarray, b: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = min(n, len(a), len(b))
    return a[rng.choice(len(a), n, replace=False)], b[rng.choice(len(b), n, replace=False)]


def sample_plan_rows(plan: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One partner ``j ~ π(i, ·)/Σ_j π(i, j)`` per source point i (keeps the source marginal exact)."""
    cdf = np.cumsum(plan / plan.sum(1, keepdims=True), axis=1)
    u = rng.random((plan.shape[0], 1))
    return np.minimum((cdf < u).sum(1), plan.shape[1] - 1)


def ot_interpolate(snapshots: Mapping[float, np.ndarray], t: float, n: int = 1000, seed: int = 0) -> np.ndarray:
    """Piecewise McCann interpolation: exact OT coupling (assignment) between the neighbouring snapshots
    t_l < t < t_r, then ``x_t = (1 − s) x + s y`` with ``s = (t − t_l)/(t_r − t_l)``."""
    from scipy.optimize import linear_sum_assignment

    tl, tr = _neighbours(snapshots, t)
    rng = np.random.default_rng(seed)
    a, b = _equal_size(np.asarray(snapshots[tl], np.float64), np.asarray(snapshots[tr], np.float64), n, rng)
    cost = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    s = (t - tl) / (tr - tl)
    return (1 - s) * a[r] + s * b[c]


def sb_interpolate(
    snapshots: Mapping[float, np.ndarray], t: float, sigma: float, n: int = 1000, seed: int = 0
) -> np.ndarray:
    """Piecewise entropic SB with a Brownian reference of scale σ (the fixed point of DSBM/IMF):
    the static SB coupling is entropic OT with cost ``|x − y|²`` and ``ε = 2σ²Δt``; each source point draws
    its partner from its row of the plan, and pairs are joined by a Brownian bridge,
    ``x_t = (1 − s)x + s y + σ√(Δt·s(1 − s)) ξ``."""
    if sigma <= 0:
        return ot_interpolate(snapshots, t, n, seed)
    tl, tr = _neighbours(snapshots, t)
    dt = tr - tl
    rng = np.random.default_rng(seed)
    a, b = _equal_size(np.asarray(snapshots[tl], np.float64), np.asarray(snapshots[tr], np.float64), n, rng)
    plan = sinkhorn_plan(a, b, blur=math.sqrt(2 * sigma**2 * dt))
    i = np.arange(len(a))
    j = sample_plan_rows(plan, rng)
    s = (t - tl) / dt
    noise = sigma * math.sqrt(dt * s * (1 - s)) * rng.standard_normal(a[i].shape)
    return (1 - s) * a[i] + s * b[j] + noise


@torch.no_grad()
def sampler_push(
    bridge, x0: torch.Tensor, block: int, y, alpha: float, f: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> torch.Tensor:
    """Sampler-side guidance: run the trained blocks to ``s``, move the particles toward the waypoint,
    ``X^s ← X^s + α(y − f(X^s))`` (a gradient step on ½‖y − f(x)‖² for f = identity), and continue with
    the unchanged downstream blocks. Returns the (K+1, N, D) path."""
    y = torch.as_tensor(np.asarray(y), dtype=x0.dtype)
    f = f or (lambda z: z)
    path = [x0]
    for k, blk in enumerate(bridge.blocks, start=1):
        x = path[-1] + blk(path[-1])
        if k == block:
            x = x + alpha * (y - f(x))
        path.append(x)
    return torch.stack(path)


def calibrate_push(err_target: float, err_unguided: float) -> float:
    """α of :func:`sampler_push` (f = identity) giving guidance error ``err_target``:
    ``‖y − X^s − α(y − X^s)‖ = (1 − α)‖y − X^s‖`` per particle, so ``α = 1 − err_target/err_unguided``."""
    if err_unguided <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - err_target / err_unguided)))


class IMFBridge(nn.Module):
    """A small iterative-Markovian-fitting (DSBM-style) Schrödinger-bridge solver for timing comparisons.

    Drift ``v_θ(x, t)`` is regressed on Brownian-bridge targets ``(x1 − x_t)/(1 − t)`` for pairs from
    the current coupling; the coupling is then refreshed by simulating ``dX = v dt + σ dW`` from fresh
    ρ_a samples (the first coupling is independent). Reference: Shi et al. 2023 (DSBM, forward only).

    Known limitation: without DSBM's backward passes nothing re-imposes ρ_b after the first round, so
    later rounds drift (measured in ``bench``); use the first round, or a forward-backward DSBM.
    """

    def __init__(self, dim: int, sigma: float = 0.1, hidden: int = 64, n_sde: int = 20):
        super().__init__()
        self.dim, self.sigma, self.n_sde = dim, sigma, n_sde
        self.net = nn.Sequential(
            nn.Linear(dim + 1, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, dim)
        )

    def drift(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, t.expand(x.shape[0], 1)], 1))

    @torch.no_grad()
    def sample(self, x0: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
        """Euler-Maruyama from x0 to t = 1."""
        x, h = x0.clone(), 1.0 / self.n_sde
        for i in range(self.n_sde):
            t = torch.full((1, 1), i * h)
            x = x + h * self.drift(x, t) + self.sigma * math.sqrt(h) * torch.randn(x.shape, generator=gen)
        return x

    def fit(
        self,
        source,
        target,
        n_outer: int = 4,
        inner_steps: int = 200,
        n_particles: int = 256,
        lr: float = 1e-3,
        seed: int = 0,
        callback: Callable[[int], bool] | None = None,
    ) -> int:
        """Run IMF; ``callback(total_steps)`` after each outer iteration may return True to stop early.
        Returns the number of regression steps taken."""
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        total = 0
        for outer in range(n_outer):
            for _ in range(inner_steps):
                x0 = source(n_particles, gen)
                x1 = target(n_particles, gen) if outer == 0 else self.sample(x0, gen)
                t = torch.rand(n_particles, 1, generator=gen) * 0.98 + 0.01
                xt = (1 - t) * x0 + t * x1 + self.sigma * torch.sqrt(t * (1 - t)) * torch.randn(x0.shape, generator=gen)
                pred = self.net(torch.cat([xt, t], 1))
                loss = ((pred - (x1 - xt) / (1 - t)) ** 2).sum(-1).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += 1
            if callback is not None and callback(total):
                break
        return total


def sb_paths(a: np.ndarray, b: np.ndarray, sigma: float, n_blocks: int, seed: int = 0) -> np.ndarray:
    """Entropic-SB paths over [0, 1] at t_k = k/K: partners from the rows of the entropic plan (ε = 2σ²), joined by a
    Brownian bridge sampled sequentially,
    ``x_k = x_{k−1} + (x1 − x_{k−1})h/(1 − t_{k−1}) + σ√(h(1 − t_k)/(1 − t_{k−1})) ξ``.
    Returns (K+1, N, D)."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    plan = sinkhorn_plan(a, b, blur=math.sqrt(2 * sigma**2))
    i = np.arange(len(a))
    j = sample_plan_rows(plan, rng)
    x, x1, h = a[i], b[j], 1.0 / n_blocks
    out = [x]
    for k in range(1, n_blocks + 1):
        t_prev, t = (k - 1) * h, k * h
        mean = x + (x1 - x) * h / (1 - t_prev)
        std = sigma * math.sqrt(h * (1 - t) / (1 - t_prev))
        x = mean + std * rng.standard_normal(x.shape)
        out.append(x)
    return np.stack(out)
