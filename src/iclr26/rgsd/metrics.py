"""Evaluation metrics (RGSD Sec. 5, in miniature): Cartesian error, diversity, skill realisation, Fréchet distance."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy import linalg

__all__ = ["cartesian_error", "frechet_distance", "metra_cycle_ratio", "pairwise_diversity", "skill_realisation"]


def cartesian_error(kp: torch.Tensor, ref_kp: torch.Tensor) -> torch.Tensor:
    """ERR = mean over frames and body keypoints of ‖p_j(t) − p̂_j(t)‖₂ (world frame): [B, T, P, 3] → [B]."""
    return (kp - ref_kp).norm(dim=-1).mean(dim=(-1, -2))


def pairwise_diversity(kp: torch.Tensor) -> float:
    """Mean over pairs i < j of rollouts of the mean keypoint-trajectory distance mean_{t,p} ‖p_i − p_j‖."""
    n = kp.shape[0]
    if n < 2:
        return 0.0
    flat = kp.reshape(n, -1, 3)
    d = (flat[:, None] - flat[None, :]).norm(dim=-1).mean(-1)
    iu = torch.triu_indices(n, n, 1)
    return float(d[iu[0], iu[1]].mean())


@torch.no_grad()
def skill_realisation(encoder, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """cos(normalize(mean_t μ_φ(s_t)), z) per rollout, with the frozen grounded encoder: [B, T, D], [B, k] → [B]."""
    b, t, d = obs.shape
    mu = encoder(obs.reshape(b * t, d)).reshape(b, t, -1).mean(1)
    return (F.normalize(mu, dim=-1) * z).sum(-1)


def frechet_distance(x: np.ndarray, y: np.ndarray) -> float:
    """‖m_x − m_y‖² + Tr(Σ_x + Σ_y − 2 (Σ_x Σ_y)^{1/2}) between Gaussian fits of two feature sets."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mx, my = x.mean(0), y.mean(0)
    sx = np.cov(x, rowvar=False) + 1e-6 * np.eye(x.shape[1])
    sy = np.cov(y, rowvar=False) + 1e-6 * np.eye(y.shape[1])
    covmean = linalg.sqrtm(sx @ sy)
    covmean = np.real(covmean)
    return float(((mx - my) ** 2).sum() + np.trace(sx + sy - 2.0 * covmean))


@torch.no_grad()
def metra_cycle_ratio(metra, obs: torch.Tensor, period: int, z: torch.Tensor) -> float:
    """|Σ_{t<P} r_t| / Σ_{t<P} |r_t| for METRA's reward r_t = (φ(s_{t+1}) − φ(s_t))ᵀz over one gait cycle of a
    reference (s_P ≈ s_0 in local coordinates), averaged over skills ``z`` [n, k]: ≈ 0 is the Sec. 6 argument."""
    s, s2 = obs[:period], obs[1 : period + 1]
    ratios = []
    for zi in z:
        r = metra.reward(s, s2, zi.expand(period, -1))
        ratios.append(float(r.sum().abs() / r.abs().sum().clamp_min(1e-12)))
    return float(np.mean(ratios))
