"""Synthetic tasks (numpy-generated) and the obstacle potential.

* Task A - a dissipative particle process (friction γ*), observed as unpaired snapshots, like single-cell
  time courses: ``Ẍ = −γ*Ẋ − ω² y e_y`` with small Brownian noise on positions, integrated by Euler.
* Task B - Gaussian to Gaussian with a waypoint (guided CWG).
* Task C - Gaussian to Gaussian through two circular obstacles (a navigation proxy for the paper's LiDAR task).
"""

from __future__ import annotations

import numpy as np
import torch

from iclr26.ncgsb.config import TaskAConfig, TaskBConfig, TaskCConfig


def simulate_damped(
    cfg: TaskAConfig, n: int, t_end: float, rng: np.random.Generator, gamma_true: float | None = None
) -> np.ndarray:
    """Positions at time ``t_end`` of ``n`` fresh particles of the Task A process.

    X₀ ~ ½N((−4, −1), s²I) + ½N((−4, 1), s²I), V₀ ~ N(v0, v_std²I); per Euler step dt:
    ``V ← V + dt(−γ*V − ω²(0, y))``, ``X ← X + dt V + noise·√dt·ξ``.
    """
    g = cfg.gamma_true if gamma_true is None else gamma_true
    side = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x = np.stack([np.full(n, -4.0), side], 1) + cfg.x_std * rng.standard_normal((n, 2))
    v = np.asarray(cfg.v0, dtype=np.float64)[None, :] + cfg.v_std * rng.standard_normal((n, 2))
    n_steps = int(round(cfg.n_sim_steps * t_end))
    dt = 1.0 / cfg.n_sim_steps
    for _ in range(n_steps):
        acc = -g * v
        acc[:, 1] -= cfg.omega**2 * x[:, 1]
        v = v + dt * acc
        x = x + dt * v + cfg.noise * np.sqrt(dt) * rng.standard_normal((n, 2))
    return x


def task_a_snapshots(cfg: TaskAConfig, seed: int, gamma_true: float | None = None) -> dict[float, np.ndarray]:
    """Unpaired snapshots: fresh ``n_per_snapshot`` particles for every train and held-out time."""
    rng = np.random.default_rng(seed)
    times = sorted(set(cfg.train_times) | set(cfg.heldout_times))
    return {float(t): simulate_damped(cfg, cfg.n_per_snapshot, t, rng, gamma_true).astype(np.float32) for t in times}


def gaussian_sampler(mean, std: float):
    """Sampler ``(n, generator) -> N(mean, std²I)`` samples."""
    mu = torch.as_tensor(np.asarray(mean, dtype=np.float32))

    def sample(n: int, gen: torch.Generator) -> torch.Tensor:
        return mu + std * torch.randn(n, mu.shape[0], generator=gen)

    return sample


def task_b_samplers(cfg: TaskBConfig):
    """(ρ_a, ρ_b) samplers of Task B."""
    return gaussian_sampler(cfg.source_mean, cfg.std), gaussian_sampler(cfg.target_mean, cfg.std)


def task_c_samplers(cfg: TaskCConfig):
    """(ρ_a, ρ_b) samplers of Task C."""
    return gaussian_sampler(cfg.source_mean, cfg.std), gaussian_sampler(cfg.target_mean, cfg.std)


class ObstaclePotential:
    """``U(x) = c·Σ_i sigmoid((r − |x − o_i|)/τ)``: ≈c inside an obstacle, ≈0 outside."""

    def __init__(self, centres, radius: float, cost: float, tau: float):
        self.centres = torch.as_tensor(np.asarray(centres, dtype=np.float32).reshape(-1, 2))
        self.radius, self.cost, self.tau = float(radius), float(cost), float(tau)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dist = torch.cdist(x, self.centres.to(device=x.device, dtype=x.dtype))
        return self.cost * torch.sigmoid((self.radius - dist) / self.tau).sum(-1)

    def inside(self, x) -> np.ndarray:
        """Boolean mask: which points lie inside an obstacle (hard boundary)."""
        x = np.asarray(x, dtype=np.float64)
        c = self.centres.numpy().astype(np.float64)
        d = np.sqrt(((x[..., None, :] - c) ** 2).sum(-1))
        return (d < self.radius).any(-1)


def task_c_potential(cfg: TaskCConfig, cost: float | None = None) -> ObstaclePotential:
    """The Task C obstacle potential (``cost`` overrides c, e.g. 0 for the potential-free control)."""
    return ObstaclePotential(cfg.obstacles, cfg.radius, cfg.cost if cost is None else cost, cfg.tau)
