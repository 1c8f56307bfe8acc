"""Phase 1 of RGSD (Sec. 3.2): a vMF skill encoder grounded in reference motions by contrastive learning.

μ_φ(s) = MLP(s) / ‖MLP(s)‖ ∈ S^{k−1}; q_φ(z|s) = C_k(κ) exp(κ μ_φ(s)ᵀz). Positives are two states of the
same reference, negatives states of other references, and the InfoNCE loss with temperature T = 1/κ

    L = −log exp(κ z_aᵀz₊) / (exp(κ z_aᵀz₊) + Σ_j exp(κ z_aᵀz_j⁻))

is the vMF log-likelihood of the positive's direction among the candidates. At its optimum every state
of a motion maps to one direction (within-motion alignment, App. B/C); the motion embedding is
z_m = normalize(mean_{s∈m} μ_φ(s)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from iclr26.core.ppo import mlp

from .vmf import check_kappa

__all__ = [
    "RGSDEncoder",
    "alignment_stats",
    "contrastive_pretrain",
    "info_nce",
    "motion_embeddings",
    "reward_auc",
    "validate_motions",
]


class RGSDEncoder(nn.Module):
    """μ_φ: observation → unit vector in R^k (an MLP followed by L2 normalisation)."""

    def __init__(self, obs_dim: int, k: int = 16, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        if k < 2:
            raise ValueError(f"latent dimension k must be >= 2, got {k}")
        self.obs_dim, self.k = int(obs_dim), int(k)
        self.net = mlp([obs_dim, *hidden, k])

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        if s.shape[-1] != self.obs_dim:
            raise ValueError(f"encoder expects {self.obs_dim} features, got {s.shape[-1]}")
        return F.normalize(self.net(s), dim=-1)


def validate_motions(motions: Sequence[torch.Tensor], obs_dim: int | None = None) -> list[torch.Tensor]:
    """Reference clips as float tensors [T_i, D]; a one-line ValueError for unusable input."""
    if len(motions) < 2:
        raise ValueError(
            f"RGSD needs at least two reference motions (negatives come from other motions), got {len(motions)}"
        )
    out = []
    for i, m in enumerate(motions):
        m = torch.as_tensor(m, dtype=torch.float32)
        if m.dim() != 2:
            raise ValueError(f"motion {i}: expected a [frames, features] array, got shape {tuple(m.shape)}")
        if m.shape[0] < 2:
            raise ValueError(f"motion {i}: a clip needs at least two frames, got {m.shape[0]}")
        if not torch.isfinite(m).all():
            raise ValueError(f"motion {i}: contains NaN or infinite values")
        width = obs_dim if obs_dim is not None else out[0].shape[1] if out else m.shape[1]
        if m.shape[1] != width:
            raise ValueError(f"motion {i}: {m.shape[1]} features, but the observation has {width}")
        out.append(m)
    return out


def info_nce(
    z_a: torch.Tensor, z_p: torch.Tensor, labels: torch.Tensor, kappa: float, mask_same_motion: bool = True
) -> torch.Tensor:
    """InfoNCE with cosine similarity and T = 1/κ, as a cross-entropy over the logits κ z_aᵀz_p.

    Row i's positive is column i (a second state of the same motion); columns j ≠ i of the same
    motion are removed from the denominator when ``mask_same_motion`` (SupCon-style: no false negatives).
    """
    logits = kappa * z_a @ z_p.T
    if mask_same_motion:
        same = labels[:, None] == labels[None, :]
        eye = torch.eye(len(labels), dtype=torch.bool)
        logits = logits.masked_fill(same & ~eye, float("-inf"))
    return F.cross_entropy(logits, torch.arange(len(labels)))


def _pair_batch(
    motions: list[torch.Tensor], n_motions: int, n_pairs: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """P distinct motions × Q (anchor, positive) frame pairs, frames uniform within each motion."""
    ids = torch.randperm(len(motions), generator=gen)[:n_motions]
    anchors, positives, labels = [], [], []
    for m in ids.tolist():
        clip = motions[m]
        ia = torch.randint(len(clip), (n_pairs,), generator=gen)
        ip = torch.randint(len(clip), (n_pairs,), generator=gen)
        anchors.append(clip[ia])
        positives.append(clip[ip])
        labels.append(torch.full((n_pairs,), m))
    return torch.cat(anchors), torch.cat(positives), torch.cat(labels)


def contrastive_pretrain(
    encoder: RGSDEncoder,
    motions: Sequence[torch.Tensor],
    kappa: float,
    steps: int = 1000,
    motions_per_batch: int = 8,
    pairs_per_motion: int = 32,
    lr: float = 3e-4,
    seed: int = 0,
    target_intra_cos: float = 0.95,
    check_every: int = 50,
    mask_same_motion: bool = True,
    log: Callable[..., None] | None = None,
) -> dict[str, float]:
    """Phase 1: minimise InfoNCE (T = 1/κ) until ``steps`` or the intra-motion cosine exceeds the target.

    Returns the final :func:`alignment_stats` plus ``steps`` run. The encoder is left in eval mode; the
    caller freezes it (RGSD keeps q_φ fixed in phase 2).
    """
    kappa = check_kappa(kappa)
    motions = validate_motions(motions, encoder.obs_dim)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(encoder.parameters(), lr=lr)
    p = min(motions_per_batch, len(motions))
    encoder.train()
    done = 0
    for step in range(1, steps + 1):
        za, zp, labels = _pair_batch(motions, p, pairs_per_motion, gen)
        loss = info_nce(encoder(za), encoder(zp), labels, kappa, mask_same_motion)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step
        if step % check_every == 0 or step == steps:
            stats = alignment_stats(encoder, motions)
            if log is not None:
                log(step, loss=float(loss.detach()), **stats)
            if stats["intra_cos"] >= target_intra_cos:
                break
    encoder.eval()
    return {**alignment_stats(encoder, motions), "steps": float(done)}


@torch.no_grad()
def motion_embeddings(encoder: RGSDEncoder, motions: Sequence[torch.Tensor]) -> torch.Tensor:
    """z_m = normalize((1/l) Σ_{s∈m} μ_φ(s)) for every motion: [K, k] unit rows."""
    return F.normalize(torch.stack([encoder(torch.as_tensor(m, dtype=torch.float32)).mean(0) for m in motions]), dim=-1)


@torch.no_grad()
def alignment_stats(encoder: RGSDEncoder, motions: Sequence[torch.Tensor]) -> dict[str, float]:
    """Mean intra-motion cosine (over distinct state pairs of one motion) and inter-motion cosine.

    intra(m) = (‖Σ_s μ(s)‖² − l) / (l (l − 1)); inter(m, m') = μ̄_mᵀ μ̄_m' (the mean over all cross pairs).
    """
    was = encoder.training
    encoder.eval()
    sums, means, intra = [], [], []
    for m in motions:
        mu = encoder(torch.as_tensor(m, dtype=torch.float32))
        s = mu.sum(0)
        n = mu.shape[0]
        intra.append(float(((s @ s) - n) / (n * (n - 1))))
        sums.append(s)
        means.append(s / n)
    mb = torch.stack(means)
    gram = mb @ mb.T
    k = len(motions)
    inter = float((gram.sum() - gram.diag().sum()) / (k * (k - 1)))
    encoder.train(was)
    return {"intra_cos": float(np.mean(intra)), "inter_cos": inter}


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ½ P(tie) (Mann–Whitney)."""
    allv = np.concatenate([pos, neg])
    order = allv.argsort(kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    # average ranks for ties
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    r_pos = ranks[: len(pos)].sum()
    return float((r_pos - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))


@torch.no_grad()
def reward_auc(
    reward_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    motions: Sequence[torch.Tensor],
    z_refs: torch.Tensor,
) -> float:
    """Mean over motions m of the AUC of r(s, z_m) separating m's states from the other motions' states."""
    aucs = []
    for i, m in enumerate(motions):
        z = z_refs[i]
        pos = reward_fn(torch.as_tensor(m, dtype=torch.float32), z.expand(len(m), -1)).numpy()
        others = torch.cat([torch.as_tensor(o, dtype=torch.float32) for j, o in enumerate(motions) if j != i])
        neg = reward_fn(others, z.expand(len(others), -1)).numpy()
        aucs.append(_auc(pos, neg))
    return float(np.mean(aucs)) if aucs else math.nan
