"""Temperature-adjusted entropy and the temperature rule of AceReason-Nemotron 1.1 (Sec. 3.4, Fig. 5).

The paper picks the RL sampling temperature ``T`` so that the *temperature-adjusted entropy* of the
policy stays around 0.3 during training. It gives no explicit formula; we use the quantity its RL
framework (verl) logs as ``actor/entropy``: the logits are divided by the rollout temperature, the
entropy of the resulting distribution is taken per response token, and averaged over all response
tokens of the batch (token mean). This reading is an assumption, flagged in the README.

.. math::

    \\pi_T(\\cdot\\mid s) = \\mathrm{softmax}(z(s)/T), \\qquad
    H_T = \\frac{\\sum_{b,t} m_{bt}\\, \\big(-\\sum_v \\pi_T(v\\mid s_{bt}) \\log \\pi_T(v\\mid s_{bt})\\big)}
               {\\sum_{b,t} m_{bt}}

(nats; ``m`` is the response-token mask).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

EntropyAgg = Literal["token-mean", "seq-mean", "none"]

__all__ = [
    "CalibrationResult",
    "calibrate_temperature",
    "select_from_grid",
    "temperature_adjusted_entropy",
    "token_entropy",
]


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-position entropy ``-Σ_v π_T(v) log π_T(v)`` of ``softmax(logits / T)``, shape ``logits.shape[:-1]``.

    Computed as ``logsumexp(z) - Σ_v softmax(z)_v z_v`` with ``z = logits / T`` (verl's
    ``entropy_from_logits`` identity), in float32 or wider.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    z = z / temperature
    p = torch.softmax(z, dim=-1)
    # H = log Σ e^z - Σ p z   (equal to -Σ p log p, without log(0) for vanishing p)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)


def temperature_adjusted_entropy(
    logits: Tensor, temperature: float, mask: Tensor | None = None, agg: EntropyAgg = "token-mean"
) -> Tensor:
    """H_T of the module docstring: entropy of ``softmax(logits / T)`` aggregated over response tokens.

    Args:
        logits: ``[B, L, V]`` (or ``[N, V]``) logits predicting each response token.
        temperature: the rollout temperature ``T`` (> 0).
        mask: ``[B, L]`` 1 for response tokens to count, 0 for prompt / padding; None counts all.
        agg: ``"token-mean"`` (verl, every token weighs the same), ``"seq-mean"`` (mean over sequences
            of each sequence's token mean; sequences without tokens are skipped) or ``"none"`` (the
            per-token ``[B, L]`` entropies, masked positions set to 0).
    """
    h = token_entropy(logits, temperature)
    if mask is None:
        mask = torch.ones_like(h)
    if mask.shape != h.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match logits' leading shape {tuple(h.shape)}")
    keep = mask.bool()
    h = torch.where(keep, h, torch.zeros_like(h))
    if agg == "none":
        return h
    m = keep.to(h.dtype)
    if agg == "token-mean":
        return h.sum() / m.sum().clamp_min(1.0)
    if agg == "seq-mean":
        if h.ndim < 2:
            raise ValueError("seq-mean needs [B, L] logits")
        lengths = m.sum(-1)
        per_seq = h.sum(-1) / lengths.clamp_min(1.0)
        nonempty = lengths > 0
        return per_seq[nonempty].mean() if nonempty.any() else h.sum() * 0.0
    raise ValueError(f"agg must be 'token-mean', 'seq-mean' or 'none', got {agg!r}")


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate_temperature`.

    temperature: the chosen T. entropy: H_T measured at it. history: every (T, H_T) evaluated, in order.
    clamped: "low" / "high" when the target lies outside [H(T_min), H(T_max)] and T sits at that end.
    """

    temperature: float
    entropy: float
    history: list[tuple[float, float]] = field(default_factory=list)
    clamped: str | None = None


def calibrate_temperature(
    entropy_at: Callable[[float], float],
    target: float = 0.3,
    t_range: tuple[float, float] = (0.3, 1.5),
    tol: float = 0.02,
    max_iter: int = 20,
) -> CalibrationResult:
    """Bisection on T for ``H_T(T) = target`` (the paper's rule: H_T ≈ 0.3 at the start of an RL stage).

    ``entropy_at(T)`` samples rollouts from the current policy at temperature T and returns their
    H_T (:func:`temperature_adjusted_entropy`). On fixed logits H_T is strictly increasing in T; with
    re-sampled rollouts it is approximately so (use common random numbers: the same sampling seed at
    every T). Stops when ``|H_T - target| <= tol`` or after ``max_iter`` evaluations; returns the best
    T seen. Targets below ``H(T_min)`` / above ``H(T_max)`` return ``T_min`` / ``T_max`` (``clamped``).
    """
    lo, hi = float(t_range[0]), float(t_range[1])
    if not 0 < lo < hi:
        raise ValueError(f"t_range must satisfy 0 < T_min < T_max, got {t_range}")
    if tol <= 0 or max_iter < 2:
        raise ValueError(f"need tol > 0 and max_iter >= 2, got tol={tol}, max_iter={max_iter}")
    history: list[tuple[float, float]] = []

    def measure(t: float) -> float:
        h = float(entropy_at(t))
        if not math.isfinite(h):
            raise ValueError(f"entropy_at({t}) returned {h}")
        history.append((t, h))
        return h

    h_lo = measure(lo)
    if h_lo >= target - tol:
        return CalibrationResult(lo, h_lo, history, "low" if h_lo > target + tol else None)
    h_hi = measure(hi)
    if h_hi <= target + tol:
        return CalibrationResult(hi, h_hi, history, "high" if h_hi < target - tol else None)
    for _ in range(max_iter - 2):
        mid = 0.5 * (lo + hi)
        h = measure(mid)
        if abs(h - target) <= tol:
            break
        if h < target:  # H_T increases with T: the solution lies above mid
            lo = mid
        else:
            hi = mid
    best_t, best_h = min(history, key=lambda th: abs(th[1] - target))
    return CalibrationResult(best_t, best_h, history)


def select_from_grid(
    trajectories: dict[float, Sequence[float]], target: float = 0.3, band: tuple[float, float] = (0.25, 0.4)
) -> float:
    """The paper's practice (Fig. 5): among tried temperatures, the one whose H_T trajectory stays nearest
    ``target``: the largest share of steps inside ``band``, ties broken by the mean |H_T - target|."""
    if not trajectories:
        raise ValueError("no trajectories given")

    def score(t: float) -> tuple[float, float]:
        h = torch.as_tensor(list(trajectories[t]), dtype=torch.float64)
        if h.numel() == 0:
            raise ValueError(f"empty trajectory at T={t}")
        inside = ((h >= band[0]) & (h <= band[1])).double().mean()
        return (-float(inside), float((h - target).abs().mean()))

    return min(trajectories, key=score)
