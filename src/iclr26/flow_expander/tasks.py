"""Synthetic tasks of the CPU-scale reproduction (2-D analogues of the paper's Figs. 3-5).

T1 (global expansion, strong verifier, paper Fig. 3): Omega = ellipse (x/3)^2 + (y/1.5)^2 <= 1;
   data = N((-1.2, 0.4), diag(0.5^2, 0.35^2)) truncated to Omega (a corner of the ellipse).
   Upper bound of the entropy: log(area Omega) = log(4.5 pi) = 2.65 nats.
T2 (local expansion, weak verifier, paper Figs. 4-5): x_1 ~ 0.8 N(0, .35^2) + 0.1 N(-2, .25^2)
   + 0.1 N(2, .25^2), x_2 ~ N(0, .3^2); true Omega = {x_1 > -1.2} (the left mode is invalid);
   weak verifier rejects the disc ||x - (-2, 0)|| < 0.8, so Omega_v ⊇ Omega.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .verifiers import DiscRejectionVerifier, EllipseVerifier, HalfPlaneVerifier, Verifier


@dataclass
class Task:
    """A 2-D task: pre-training data, the verifier FE may use, and the true validity check."""

    name: str
    data: torch.Tensor  # (N, 2) pre-training samples
    verifier: Verifier  # what FE's projection sees (strong for T1, weak for T2)
    truth: Verifier  # true validity (evaluation only)
    box: tuple[float, float]  # plotting / coverage box
    max_entropy: float | None = None  # log |Omega| when known


def make_t1(n: int = 20000, seed: int = 0, kappa: float = 15.0) -> Task:
    rng = np.random.default_rng(seed)
    out = []
    while sum(len(o) for o in out) < n:
        z = rng.normal([-1.2, 0.4], [0.5, 0.35], size=(2 * n, 2))
        out.append(z[(z[:, 0] / 3) ** 2 + (z[:, 1] / 1.5) ** 2 <= 1])
    data = torch.tensor(np.concatenate(out)[:n], dtype=torch.float32)
    ver = EllipseVerifier(3.0, 1.5, kappa=kappa)
    return Task("T1", data, ver, ver, (-3.6, 3.6), math.log(4.5 * math.pi))


def make_t2(n: int = 20000, seed: int = 0, kappa: float = 10.0) -> Task:
    rng = np.random.default_rng(seed)
    comp = rng.choice(3, size=n, p=[0.8, 0.1, 0.1])
    mu = np.array([0.0, -2.0, 2.0])[comp]
    sd = np.array([0.35, 0.25, 0.25])[comp]
    x1 = rng.normal(mu, sd)
    x2 = rng.normal(0.0, 0.3, size=n)
    data = torch.tensor(np.stack([x1, x2], 1), dtype=torch.float32)
    return Task(
        "T2", data, DiscRejectionVerifier((-2.0, 0.0), 0.8, kappa=kappa), HalfPlaneVerifier(-1.2, 0), (-3.6, 3.6), None
    )


def t2_density(x: np.ndarray) -> np.ndarray:
    """The T2 data density p_data(x) (the pre-trained model's target)."""
    x1, x2 = x[:, 0], x[:, 1]

    def n(z, m, s):
        return np.exp(-0.5 * ((z - m) / s) ** 2) / (s * math.sqrt(2 * math.pi))

    return (0.8 * n(x1, 0.0, 0.35) + 0.1 * n(x1, -2.0, 0.25) + 0.1 * n(x1, 2.0, 0.25)) * n(x2, 0.0, 0.3)


def t2_fixed_point_kl(
    samples: np.ndarray, beta: float, power: float, kappa: float = 10.0, bin_width: float = 0.1
) -> float:
    """Histogram KL(p_samples(x_1) || p*(x_1)) to the exact-step L-FE fixed point p* ∝ p_data^beta v_s^power
    (power = eta / gamma~), marginalised over x_2 on a grid. A sanity check, not a claim."""
    edges = np.arange(-4.0, 4.0 + 1e-9, bin_width)
    centres = (edges[:-1] + edges[1:]) / 2
    g2 = np.linspace(-3, 3, 121)
    gx, gy = np.meshgrid(centres, g2, indexing="ij")
    grid = np.stack([gx.ravel(), gy.ravel()], 1)
    dist = np.sqrt((grid[:, 0] + 2.0) ** 2 + grid[:, 1] ** 2)
    log_vs = -np.logaddexp(0.0, -kappa * (dist - 0.8))
    logt = beta * np.log(t2_density(grid) + 1e-300) + power * log_vs
    t = np.exp(logt - logt.max()).reshape(len(centres), len(g2)).sum(1)
    t = t / t.sum()
    h, _ = np.histogram(np.clip(samples[:, 0], -3.999, 3.999), bins=edges)
    p = (h + 0.5) / (h + 0.5).sum()
    q = np.maximum(t, 1e-12)
    return float(np.sum(p * np.log(p / q)))
