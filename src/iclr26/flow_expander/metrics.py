"""Metrics: differential entropy (histogram and Kozachenko-Leonenko), validity, coverage, Vendi.

Entropies are in nats. Compare methods only under one estimator: they differ in absolute value.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.distance import pdist, squareform
from scipy.special import digamma, gammaln


def kl_entropy(x: np.ndarray, k: int = 3) -> float:
    """Kozachenko-Leonenko k-NN estimator of differential entropy (nats).

    H = psi(n) - psi(k) + log V_d + (d / n) sum_i log r_i,
    with r_i the distance from x_i to its k-th nearest neighbour and V_d = pi^{d/2} / Gamma(d/2 + 1).
    Duplicate points (r_i = 0) are ignored with a tiny floor.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    n, d = x.shape
    if n <= k:
        raise ValueError(f"need more than k={k} samples, got {n}")
    if not np.isfinite(x).all():
        raise ValueError("samples contain non-finite values")
    r = cKDTree(x).query(x, k=k + 1)[0][:, k]
    r = np.maximum(r, 1e-12)
    log_vd = (d / 2) * math.log(math.pi) - gammaln(d / 2 + 1)
    return float(digamma(n) - digamma(k) + log_vd + d * np.mean(np.log(r)))


def histogram_entropy(
    x: np.ndarray, bin_width: float = 0.125, box: tuple[float, float] = (-8.0, 8.0), correction: str = "grassberger"
) -> float:
    """Entropy of a fixed-box histogram with cubic bins of side ``bin_width`` (bin volume Delta).

    plug-in:  H = -sum_i p_i log(p_i / Delta), p_i = n_i / n;
    ``correction="miller_madow"`` adds (B - 1) / (2 n) (B = occupied bins);
    ``correction="grassberger"`` (default) replaces -sum p_i log p_i by
    log n - (1/n) sum_i n_i G(n_i), G(m) = psi(m) + (-1)^m / 2 (psi((m+1)/2) - psi(m/2)),
    which corrects the under-sampling bias of sparse bins. Samples outside ``box`` are clipped
    into the border bins. At n = 5000 in 2-D the default is within ~0.03 nats on a Gaussian and a
    uniform ellipse (the residual bias is of opposite sign: sparse tails vs boundary cells).
    """
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    n, d = x.shape
    if bin_width <= 0:
        raise ValueError("bin_width must be > 0")
    if not np.isfinite(x).all():
        raise ValueError("samples contain non-finite values")
    lo, hi = box
    nb = int(math.ceil((hi - lo) / bin_width))
    idx = np.clip(np.floor((x - lo) / bin_width).astype(np.int64), 0, nb - 1)
    flat = np.ravel_multi_index(idx.T, (nb,) * d)
    counts = np.bincount(flat)
    counts = counts[counts > 0].astype(float)
    if correction == "grassberger":
        g = digamma(counts) + 0.5 * (-1.0) ** counts * (digamma((counts + 1) / 2) - digamma(counts / 2))
        h_disc = math.log(n) - float((counts * g).sum()) / n
    elif correction in ("miller_madow", "none"):
        p = counts / n
        h_disc = float(-(p * np.log(p)).sum())
        if correction == "miller_madow":
            h_disc += (len(counts) - 1) / (2 * n)
    else:
        raise ValueError(f"unknown correction {correction!r}")
    return h_disc + d * math.log(bin_width)


def validity_rate(valid: np.ndarray) -> float:
    """Fraction of samples the (true) validity check accepts."""
    return float(np.mean(np.asarray(valid, dtype=float)))


def grid_coverage(x: np.ndarray, inside, cell: float = 0.25, box: tuple[float, float] = (-4.0, 4.0)) -> float:
    """Fraction of grid cells (side ``cell``) whose centre is inside Omega that contain a sample."""
    x = np.asarray(x, dtype=float)
    centres = np.arange(box[0] + cell / 2, box[1], cell)
    gx, gy = np.meshgrid(centres, centres, indexing="ij")
    grid = np.stack([gx.ravel(), gy.ravel()], 1)
    in_omega = np.asarray(inside(grid), dtype=bool)
    nb = len(centres)
    idx = np.floor((x - box[0]) / cell).astype(np.int64)
    ok = ((idx >= 0) & (idx < nb)).all(1)
    hit = np.zeros(nb * nb, dtype=bool)
    hit[idx[ok, 0] * nb + idx[ok, 1]] = True
    return float(hit[in_omega].mean()) if in_omega.any() else 0.0


def vendi_score(kernel: np.ndarray) -> float:
    """Vendi = exp(-sum_i lambda_i log lambda_i), lambda = eigenvalues of K / n (K PSD, K_ii = 1)."""
    k = np.asarray(kernel, dtype=float)
    n = k.shape[0]
    lam = np.linalg.eigvalsh(k / n)
    lam = lam[lam > 1e-12]
    return float(np.exp(-(lam * np.log(lam)).sum()))


def rbf_kernel_median(feats: np.ndarray) -> np.ndarray:
    """RBF kernel K_ij = exp(-d_ij^2 / (2 b^2)) with the median pairwise distance as bandwidth b.

    Distances come from ``scipy.spatial.distance.pdist`` (n (n - 1) / 2 floats), so memory is O(n^2),
    never O(n^2 d); K has a unit diagonal.
    """
    f = np.asarray(feats, dtype=float)
    if f.ndim != 2:
        raise ValueError(f"features must be (n, d), got shape {f.shape}")
    if len(f) < 2:
        return np.ones((len(f), len(f)))
    d = pdist(f)
    med = float(np.median(d))
    b = med if med > 0 else 1.0
    k = squareform(np.exp(-(d**2) / (2 * b * b)))
    np.fill_diagonal(k, 1.0)
    return k
