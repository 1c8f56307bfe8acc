"""EDM (Karras et al. 2022) pieces used by both branches: preconditioning, loss weight, noise
levels, and the 2nd-order Heun sampler (EDM Alg. 1, with optional churn of Alg. 2).

Preconditioning, for D_θ(x; σ) = c_skip(σ) x + c_out(σ) F_θ(c_in(σ) x; c_noise(σ)):

    c_skip = σ_d² / (σ² + σ_d²)     c_out = σ σ_d / √(σ² + σ_d²)
    c_in   = 1 / √(σ² + σ_d²)       c_noise = ¼ ln σ
    λ(σ)   = (σ² + σ_d²) / (σ σ_d)²        (loss weight)

Training noise: ln σ ~ N(P_mean, P_std²). Sampling noise levels (i = 0..S-1, then σ_S = 0):

    σ_i = (σ_max^{1/ρ} + i / (S - 1) (σ_min^{1/ρ} - σ_max^{1/ρ}))^ρ
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch


def precondition(sigma: torch.Tensor, sigma_data: float = 1.0) -> tuple[torch.Tensor, ...]:
    """(c_skip, c_out, c_in, c_noise) for noise levels ``sigma`` (any shape)."""
    s2, d2 = sigma**2, sigma_data**2
    c_skip = d2 / (s2 + d2)
    c_out = sigma * sigma_data / (s2 + d2).sqrt()
    c_in = 1.0 / (s2 + d2).sqrt()
    c_noise = sigma.log() / 4
    return c_skip, c_out, c_in, c_noise


def loss_weight(sigma: torch.Tensor, sigma_data: float = 1.0) -> torch.Tensor:
    """λ(σ) = (σ² + σ_d²) / (σ σ_d)²."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def sample_sigma(
    n: int, p_mean: float, p_std: float, generator: torch.Generator | None = None, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """σ = exp(P_mean + P_std · ξ), ξ ~ N(0, 1)."""
    xi = torch.randn(n, generator=generator).to(device)
    return (p_mean + p_std * xi).exp()


def sigma_schedule(steps: int, sigma_min: float, sigma_max: float, rho: float) -> torch.Tensor:
    """σ_0 = σ_max > ... > σ_{S-1} = σ_min, then σ_S = 0 (length S + 1)."""
    if steps < 1:
        raise ValueError(f"need at least one sampling step, got {steps}")
    if steps == 1:
        return torch.tensor([sigma_max, 0.0], dtype=torch.float64)
    i = torch.arange(steps, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    sig = (hi + i / (steps - 1) * (lo - hi)) ** rho
    return torch.cat([sig, torch.zeros(1, dtype=torch.float64)])


Tensors = Sequence[torch.Tensor]
Denoise = Callable[[Tensors, float, int], Tensors]


def heun_sample(
    denoise: Denoise, x: Tensors, sigmas: torch.Tensor, s_churn: float = 0.0, generator: torch.Generator | None = None
) -> list[torch.Tensor]:
    """EDM Heun sampler over a tuple of tensors advanced jointly (both latent branches).

    ``denoise(xs, sigma, n)`` returns D(x; σ) for every tensor at step n. x starts at σ_0 N(0, I).
    Euler step x' = x + (σ_{n+1} - σ̂) d, d = (x - D(x; σ̂)) / σ̂, then the 2nd-order correction
    x' = x + (σ_{n+1} - σ̂) (d + d') / 2 with d' = (x' - D(x'; σ_{n+1})) / σ_{n+1} unless σ_{n+1} = 0.
    """
    xs = [t.clone() for t in x]
    steps = len(sigmas) - 1
    gamma = min(s_churn / steps, math.sqrt(2) - 1) if s_churn > 0 else 0.0
    for n in range(steps):
        s_cur, s_next = float(sigmas[n]), float(sigmas[n + 1])
        s_hat = s_cur * (1 + gamma)
        if s_hat > s_cur:  # churn: add noise to climb from σ_n to σ̂
            extra = math.sqrt(s_hat**2 - s_cur**2)
            xs = [t + extra * torch.randn(t.shape, generator=generator).to(t) for t in xs]
        den = denoise(xs, s_hat, n)
        d = [(t - dd) / s_hat for t, dd in zip(xs, den)]
        x_next = [t + (s_next - s_hat) * di for t, di in zip(xs, d)]
        if s_next > 0:
            den2 = denoise(x_next, s_next, n)
            d2 = [(t - dd) / s_next for t, dd in zip(x_next, den2)]
            x_next = [t + (s_next - s_hat) * (a + b) / 2 for t, a, b in zip(xs, d, d2)]
        xs = x_next
    return xs
