"""von Mises–Fisher utilities on the unit hypersphere S^{k-1} ⊂ R^k (RGSD Sec. 3, App. B–D).

The skill posterior of RGSD is a vMF distribution with fixed concentration κ:

    q(z | s) = C_k(κ) · exp(κ μ(s)ᵀ z),    C_k(κ) = κ^{k/2-1} / ((2π)^{k/2} · I_{k/2-1}(κ))

where I_v is the modified Bessel function of the first kind. We evaluate it through the exponentially
scaled ``scipy.special.ive`` (``I_v(κ) = ive(v, κ) · e^κ``) so that κ = 1000 does not overflow.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.special import ive

__all__ = [
    "check_kappa",
    "mean_resultant_length",
    "uniform_sphere",
    "vmf_kl",
    "vmf_log_normalizer",
    "vmf_log_prob",
    "vmf_sample",
]


def check_kappa(kappa: float) -> float:
    """κ must be a finite positive number (a vMF with κ <= 0 is not a posterior)."""
    if not (isinstance(kappa, int | float) and math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa (κ) must be a finite number > 0, got {kappa!r}")
    return float(kappa)


def vmf_log_normalizer(k: int, kappa: float) -> float:
    """log C_k(κ) = (k/2 − 1) log κ − (k/2) log 2π − log I_{k/2−1}(κ), with log I_v(κ) = log ive(v, κ) + κ."""
    kappa = check_kappa(kappa)
    if k < 2:
        raise ValueError(f"the sphere needs k >= 2 dimensions, got {k}")
    v = k / 2.0 - 1.0
    log_bessel = math.log(float(ive(v, kappa))) + kappa
    return v * math.log(kappa) - (k / 2.0) * math.log(2.0 * math.pi) - log_bessel


def mean_resultant_length(k: int, kappa: float) -> float:
    """A_k(κ) = I_{k/2}(κ) / I_{k/2−1}(κ) = E[μᵀz] for z ~ vMF(μ, κ) (the scaling e^κ cancels)."""
    kappa = check_kappa(kappa)
    return float(ive(k / 2.0, kappa) / ive(k / 2.0 - 1.0, kappa))


def vmf_log_prob(z: torch.Tensor, mu: torch.Tensor, kappa: float) -> torch.Tensor:
    """log q(z | μ) = log C_k(κ) + κ μᵀz, for unit rows ``z`` and ``mu`` (broadcast over leading dims)."""
    return vmf_log_normalizer(z.shape[-1], kappa) + kappa * (mu * z).sum(-1)


def vmf_kl(mu1: torch.Tensor, mu2: torch.Tensor, kappa: float) -> torch.Tensor:
    """KL(vMF(μ₁, κ) ‖ vMF(μ₂, κ)) = κ A_k(κ) (1 − μ₁ᵀμ₂) (same κ: the normalisers cancel).

    E_{z~q₁}[κ μ₁ᵀz − κ μ₂ᵀz] = κ (μ₁ − μ₂)ᵀ E[z] = κ A_k(κ) (μ₁ − μ₂)ᵀ μ₁.
    """
    return kappa * mean_resultant_length(mu1.shape[-1], kappa) * (1.0 - (mu1 * mu2).sum(-1))


def uniform_sphere(n: int, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """z = g / ‖g‖ with g ~ N(0, I_k): uniform on S^{k−1} (the discovery stream's skill prior p(z))."""
    g = torch.randn(n, k, generator=generator)
    return g / g.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _wood_w(n: int, k: int, kappa: float, rng: np.random.Generator) -> np.ndarray:
    """Wood (1994) rejection sampler for w = μᵀz of a vMF on S^{k−1}.

    b = (k−1) / (2κ + sqrt(4κ² + (k−1)²))  (the cancellation-free form of (−2κ + sqrt(4κ²+(k−1)²))/(k−1)),
    x₀ = (1 − b)/(1 + b),  c = κ x₀ + (k−1) log(1 − x₀²);
    draw Z ~ Beta((k−1)/2, (k−1)/2), U ~ U(0, 1), w = (1 − (1+b)Z) / (1 − (1−b)Z);
    accept when κ w + (k−1) log(1 − x₀ w) − c >= log U.
    """
    d = k - 1
    b = d / (2.0 * kappa + math.sqrt(4.0 * kappa**2 + d**2))
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + d * math.log(1.0 - x0**2)
    out = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        zb = rng.beta(d / 2.0, d / 2.0, size=todo.size)
        w = (1.0 - (1.0 + b) * zb) / (1.0 - (1.0 - b) * zb)
        u = rng.uniform(size=todo.size)
        ok = kappa * w + d * np.log(1.0 - x0 * w) - c >= np.log(u)
        out[todo[ok]] = w[ok]
        todo = todo[~ok]
    return out


def vmf_sample(mu: torch.Tensor, kappa: float, n: int | None = None, seed: int = 0) -> torch.Tensor:
    """Samples z ~ vMF(μ, κ) (Wood's algorithm), one per row of ``mu`` or ``n`` for a single ``mu``.

    z = w μ + sqrt(1 − w²) v, with v uniform on the unit sphere of the tangent space at μ: we draw
    (w, sqrt(1−w²) v') around e₁ and reflect e₁ onto μ with the Householder map H = I − 2uuᵀ/‖u‖²,
    u = e₁ − μ.
    """
    kappa = check_kappa(kappa)
    mu = torch.as_tensor(mu, dtype=torch.float32)
    if mu.dim() == 1:
        mu = mu.unsqueeze(0).expand(n or 1, -1)
    elif n is not None and n != mu.shape[0]:
        raise ValueError(f"n={n} but mu has {mu.shape[0]} rows")
    mu = mu / mu.norm(dim=-1, keepdim=True)
    m, k = mu.shape
    rng = np.random.default_rng(seed)
    w = torch.as_tensor(_wood_w(m, k, kappa, rng), dtype=torch.float32).unsqueeze(-1)
    v = torch.as_tensor(rng.standard_normal((m, k - 1)), dtype=torch.float32)
    v = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    x = torch.cat([w, (1.0 - w**2).clamp_min(0.0).sqrt() * v], dim=-1)  # sample around e₁
    e1 = torch.zeros(k)
    e1[0] = 1.0
    u = e1 - mu
    un = (u * u).sum(-1, keepdim=True)
    reflect = un > 1e-12
    hx = x - 2.0 * u * (u * x).sum(-1, keepdim=True) / un.clamp_min(1e-12)
    z = torch.where(reflect, hx, x)
    return z / z.norm(dim=-1, keepdim=True)
