"""The SFT scaling regression of AceReason-Nemotron 1.1 (Sec. 3, Fig. 2): prompts versus responses.

Over the SFT datasets ``v_j`` with ``N_j`` unique prompts and ``R_j`` responses per prompt, fit by
least squares

.. math::

    z_j = a\\,\\tilde x_j + b\\,\\tilde y_j + c, \\qquad
    \\tilde x = \\mathrm{std}(\\log_2 N), \\quad \\tilde y = \\mathrm{std}(\\log_2 R)

where ``std`` standardises over the datasets (zero mean, unit population std) and ``z`` is the
average accuracy. The paper reports a = 4.831, b = 2.635, R² = 0.989: both help, prompts more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ScalingFit", "sft_scaling_regression"]


@dataclass(frozen=True)
class ScalingFit:
    """a: coefficient of standardised log2(#prompts). b: of standardised log2(#responses per prompt).
    c: intercept. r2: coefficient of determination."""

    a: float
    b: float
    c: float
    r2: float


def _standardise(v: np.ndarray) -> np.ndarray:
    sd = v.std()
    if sd == 0:
        raise ValueError("a regressor is constant over the datasets: cannot standardise")
    return (v - v.mean()) / sd


def sft_scaling_regression(points: Sequence[tuple[float, float, float]]) -> ScalingFit:
    """Fit ``z = a·x̃ + b·ỹ + c`` on ``(n_prompts, responses_per_prompt, accuracy)`` points (>= 4)."""
    arr = np.asarray(points, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.shape[0] < 4:
        raise ValueError(f"need >= 4 points of (N, R, z), got shape {arr.shape}")
    if (arr[:, :2] <= 0).any():
        raise ValueError("N and R must be positive")
    x = _standardise(np.log2(arr[:, 0]))
    y = _standardise(np.log2(arr[:, 1]))
    z = arr[:, 2]
    design = np.stack([x, y, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(design, z, rcond=None)
    resid = z - design @ coef
    ss_tot = float(((z - z.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return ScalingFit(float(coef[0]), float(coef[1]), float(coef[2]), r2)
