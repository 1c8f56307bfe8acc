"""Wasserstein-2 estimators used by CWG: a log-domain debiased Sinkhorn divergence (training), the
induced-coupling step cost (training), and exact W2 (evaluation).

The CWG loss (Sec. 3, "training loss") is a sum of squared W2 distances between particle clouds. Marginal
terms compare generated clouds with data clouds; the geodesic term compares consecutive generated clouds.

* :func:`sinkhorn_divergence` - the debiased entropic divergence
  ``S_ε(α,β) = OT_ε(α,β) − ½ OT_ε(α,α) − ½ OT_ε(β,β)`` with cost ``C(x,y) = |x−y|²`` (so ``S_ε → W2²`` as
  ``ε = blur² → 0``), solved in the log domain with ε-scaling; gradients by the envelope theorem.
* :func:`induced_step_cost` - ``(1/N) Σ_i |X_i^k − X_i^{k−1}|²``, the cost of the coupling the block map
  induces; an upper bound of ``W2²`` that is exact for translations (any optimal map).
* :func:`exact_w2` - exact W2 between two point clouds (assignment problem for equal sizes, POT
  ``ot.emd2`` otherwise).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def sqdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``C_ij = |x_i − y_j|²`` (N, M), clamped at 0 against round-off."""
    c = (x * x).sum(-1)[:, None] + (y * y).sum(-1)[None, :] - 2.0 * x @ y.T
    return c.clamp_min(0.0)


def _softmin(eps: float, cost: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``softmin_ε`` over j: ``−ε log Σ_j exp(h_j − C_ij/ε)`` with ``h_j = log b_j + g_j/ε``."""
    return -eps * torch.logsumexp(h[None, :] - cost / eps, dim=1)


def _eps_schedule(diameter: float, blur: float, scaling: float) -> list[float]:
    """ε-scaling: ``ε_0 = diameter²`` decreasing geometrically by ``scaling²`` to ``blur²`` (inclusive)."""
    if not 0.0 < scaling < 1.0:
        raise ValueError(f"scaling must be in (0, 1), got {scaling}")
    if blur <= 0:
        raise ValueError(f"blur must be > 0, got {blur}")
    n = max(0, int(math.ceil(math.log(max(diameter, blur) / blur) / -math.log(scaling))))
    return [(max(diameter, blur) * scaling**i) ** 2 for i in range(n)] + [blur**2]


def entropic_ot(
    x: torch.Tensor, y: torch.Tensor, blur: float = 0.05, scaling: float = 0.5, n_final: int = 0
) -> torch.Tensor:
    """``OT_ε(α, β)`` between uniform clouds ``x`` (N, D) and ``y`` (M, D), ε = blur².

    Dual form at the fixed point: ``OT_ε = ⟨a, f⟩ + ⟨b, g⟩`` with
    ``f = softmin_ε(C − g)`` and ``g = softmin_ε(Cᵀ − f)``. The potentials are found without gradient;
    one last update is taken with gradient, giving the envelope-theorem gradient
    ``∂OT_ε/∂x_i = Σ_j π_ij ∂_x C(x_i, y_j)``.
    """
    n, m = x.shape[0], y.shape[0]
    log_a = torch.full((n,), -math.log(n), dtype=x.dtype, device=x.device)
    log_b = torch.full((m,), -math.log(m), dtype=x.dtype, device=x.device)
    with torch.no_grad():
        c_xy = sqdist(x, y)
        diameter = float(c_xy.max().sqrt()) if c_xy.numel() else 1.0
        eps_list = _eps_schedule(diameter, blur, scaling) + [blur**2] * n_final
        f = torch.zeros(n, dtype=x.dtype, device=x.device)
        g = torch.zeros(m, dtype=x.dtype, device=x.device)
        for eps in eps_list:  # alternating (block-coordinate) dual ascent at each ε
            f = _softmin(eps, c_xy, log_b + g / eps)
            g = _softmin(eps, c_xy.T, log_a + f / eps)
    eps = blur**2
    # One last update with gradient: x only through the rows (f), y only through the columns (g), so each
    # gradient uses a plan with exact marginals on its own side: ∂OT_ε/∂x_i = Σ_j π_ij ∂_x C(x_i, y_j).
    f_g = _softmin(eps, sqdist(x, y.detach()), log_b + g / eps)
    g_g = _softmin(eps, sqdist(x.detach(), y).T, log_a + f / eps)
    return f_g.mean() + g_g.mean()


def sinkhorn_divergence(
    x: torch.Tensor, y: torch.Tensor, blur: float = 0.05, scaling: float = 0.5, target_term: bool = True
) -> torch.Tensor:
    """Debiased ``S_ε(α,β) = OT_ε(α,β) − ½OT_ε(α,α) − ½OT_ε(β,β)`` (≥ 0, = 0 iff α = β).

    ``target_term=False`` drops ``½OT_ε(β,β)``, a constant when only ``x`` is trained (saves a third of
    the work; the value is then shifted by that constant).
    """
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"sinkhorn_divergence needs (N, D) and (M, D) clouds, got {tuple(x.shape)}, {tuple(y.shape)}")
    out = entropic_ot(x, y, blur, scaling) - 0.5 * entropic_ot(x, x, blur, scaling)
    if target_term:
        out = out - 0.5 * entropic_ot(y, y, blur, scaling)
    return out


def induced_step_cost(x_prev: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Induced-coupling cost ``(1/N) Σ_i |X_i^k − X_i^{k−1}|² ≥ W2²(ρ^{t_k}, ρ^{t_{k−1}})``."""
    return ((x - x_prev) ** 2).sum(-1).mean()


def exact_w2(x, y) -> float:
    """Exact ``W2`` (not squared) between uniform clouds: assignment for equal sizes, ``ot.emd2`` otherwise."""
    x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    y = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"exact_w2 needs (N, D) and (M, D) arrays, got {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    if x.shape[0] == y.shape[0]:
        from scipy.optimize import linear_sum_assignment

        r, c = linear_sum_assignment(cost)
        return float(np.sqrt(cost[r, c].mean()))
    import ot  # POT, for unequal sizes

    a = np.full(x.shape[0], 1.0 / x.shape[0])
    b = np.full(y.shape[0], 1.0 / y.shape[0])
    return float(np.sqrt(max(ot.emd2(a, b, cost, numItermax=1_000_000), 0.0)))


def sinkhorn_plan(x: np.ndarray, y: np.ndarray, blur: float, scaling: float = 0.5) -> np.ndarray:
    """Entropic OT plan ``π_ij`` (N, M) between uniform clouds (rows sum to 1/N), ε = blur²."""
    xt, yt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    n, m = xt.shape[0], yt.shape[0]
    log_a, log_b = torch.full((n,), -math.log(n), dtype=xt.dtype), torch.full((m,), -math.log(m), dtype=xt.dtype)
    c = sqdist(xt, yt)
    f, g = torch.zeros(n, dtype=xt.dtype), torch.zeros(m, dtype=xt.dtype)
    for eps in _eps_schedule(float(c.max().sqrt()), blur, scaling) + [blur**2] * 100:
        f = _softmin(eps, c, log_b + g / eps)
        g = _softmin(eps, c.T, log_a + f / eps)
    eps = blur**2
    log_pi = log_a[:, None] + log_b[None, :] + (f[:, None] + g[None, :] - c) / eps
    return log_pi.exp().numpy()
