"""Scene-graph metrics (PredCls, Sec. 4) and the representation diagnostics (Table 1, IB table).

Graph-constrained recall (Scene-Graph-Benchmark ``SGRecall``): every ordered pair keeps ONE predicate, its
highest-scoring non-background class, ranked by that score; R@K is the share of ground-truth triplets
(s, o, p) among an image's top K, averaged over images with ground truth. Without the graph constraint
every (pair, predicate) is a candidate. Background (column 0) is never ranked.

mR@K (``SGMeanRecall``): for each predicate p, its recall in each image whose ground truth contains p,
averaged over those images; then the mean over predicates. F@K = 2·R·mR/(R + mR), the true harmonic mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ImageGraph",
    "f_at_k",
    "linear_cka",
    "mean_recall_at_k",
    "mi_proxy",
    "pca_dims",
    "per_predicate_recall",
    "recall_at_k",
    "sgg_report",
    "silhouette",
]


@dataclass(frozen=True)
class ImageGraph:
    """One image's prediction and ground truth.

    pairs: [P, 2] ordered (subject, object) object indices scored by the model.
    scores: [P, 1 + R] class probabilities per pair; column 0 is background.
    gt: [G, 3] ground-truth triplets (subject, object, predicate in 1..R).
    """

    pairs: np.ndarray
    scores: np.ndarray
    gt: np.ndarray

    def __post_init__(self) -> None:
        pairs, scores, gt = np.asarray(self.pairs), np.asarray(self.scores), np.asarray(self.gt)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError(f"pairs must have shape (P, 2), got {pairs.shape}")
        if scores.ndim != 2 or scores.shape[0] != pairs.shape[0] or scores.shape[1] < 2:
            raise ValueError(f"scores must have shape ({pairs.shape[0]}, 1 + R), got {scores.shape}")
        if gt.size and (gt.ndim != 2 or gt.shape[1] != 3):
            raise ValueError(f"gt must have shape (G, 3), got {gt.shape}")
        if gt.size and (gt[:, 2].min() < 1 or gt[:, 2].max() >= scores.shape[1]):
            raise ValueError(f"gt predicates must lie in 1..{scores.shape[1] - 1}")


def _hits(img: ImageGraph, k: int, graph_constraint: bool) -> np.ndarray:
    """Boolean [G]: whether each ground-truth triplet is among the image's top-k predictions."""
    scores = np.asarray(img.scores, dtype=float)[:, 1:]  # background never ranked
    pairs = np.asarray(img.pairs)
    if graph_constraint:
        label = scores.argmax(1) + 1
        order = np.argsort(-scores.max(1), kind="stable")[:k]
        top = {(int(pairs[i, 0]), int(pairs[i, 1]), int(label[i])) for i in order}
    else:
        flat = np.argsort(-scores.ravel(), kind="stable")[:k]
        rows, cols = np.divmod(flat, scores.shape[1])
        top = {(int(pairs[r, 0]), int(pairs[r, 1]), int(c) + 1) for r, c in zip(rows, cols, strict=True)}
    gt = np.asarray(img.gt).reshape(-1, 3)
    return np.array([(int(s), int(o), int(p)) in top for s, o, p in gt], dtype=bool)


def recall_at_k(images: Sequence[ImageGraph], k: int, graph_constraint: bool = True) -> float:
    """R@K in percent: mean over images with ground truth of (GT triplets in the top K) / (GT triplets)."""
    per = [_hits(img, k, graph_constraint).mean() for img in images if np.asarray(img.gt).size]
    if not per:
        raise ValueError("recall_at_k: no image has ground truth")
    return 100.0 * float(np.mean(per))


def per_predicate_recall(images: Sequence[ImageGraph], k: int, graph_constraint: bool = True) -> dict[int, float]:
    """Predicate -> recall (percent) averaged over the images whose ground truth contains it."""
    collect: dict[int, list[float]] = {}
    for img in images:
        gt = np.asarray(img.gt).reshape(-1, 3)
        if not gt.size:
            continue
        hits = _hits(img, k, graph_constraint)
        for p in np.unique(gt[:, 2]):
            mask = gt[:, 2] == p
            collect.setdefault(int(p), []).append(float(hits[mask].mean()))
    return {p: 100.0 * float(np.mean(v)) for p, v in sorted(collect.items())}


def mean_recall_at_k(
    images: Sequence[ImageGraph], k: int, graph_constraint: bool = True, classes: Sequence[int] | None = None
) -> float:
    """mR@K in percent over the predicates present in the ground truth (or over ``classes``; absent ones count 0)."""
    per = per_predicate_recall(images, k, graph_constraint)
    keys = list(per) if classes is None else [int(c) for c in classes]
    if not keys:
        raise ValueError("mean_recall_at_k: no predicate to average")
    return float(np.mean([per.get(c, 0.0) for c in keys]))


def f_at_k(recall: float, mean_recall: float) -> float:
    """F@K = 2·R·mR/(R + mR) (0 when both are 0)."""
    if recall < 0 or mean_recall < 0:
        raise ValueError("recalls must be >= 0")
    return 0.0 if recall + mean_recall == 0 else 2.0 * recall * mean_recall / (recall + mean_recall)


def sgg_report(
    images: Sequence[ImageGraph], ks: Sequence[int] = (10, 20, 50), classes: Sequence[int] | None = None
) -> dict[str, float]:
    """R@K, mR@K, F@K for every K (graph-constrained); mR over ``classes`` when given."""
    out: dict[str, float] = {}
    for k in ks:
        r, mr = recall_at_k(images, k), mean_recall_at_k(images, k, classes=classes)
        out[f"R@{k}"], out[f"mR@{k}"], out[f"F@{k}"] = r, mr, f_at_k(r, mr)
    return out


# ---------------------------------------------------------------------------------------------- diagnostics
def mi_proxy(x: np.ndarray, labels: np.ndarray, n_clusters: int, seed: int = 0) -> float:
    """Discretised MI proxy (IB table): I(k-means cluster of x ; label) in bits, k-means with ``n_clusters``."""
    from sklearn.cluster import KMeans

    x, labels = np.asarray(x, dtype=float), np.asarray(labels)
    if x.ndim != 2 or len(x) != len(labels):
        raise ValueError(f"x must be (n, d) with n = len(labels), got {x.shape} and {labels.shape}")
    n_distinct = len(np.unique(x.round(6), axis=0))
    km = KMeans(n_clusters=min(n_clusters, n_distinct), n_init=4, random_state=seed).fit(x)
    return discrete_mi(km.labels_, labels)


def discrete_mi(a: np.ndarray, b: np.ndarray) -> float:
    """I(a; b) in bits from the joint histogram of two discrete label arrays."""
    _, ai = np.unique(np.asarray(a), return_inverse=True)
    _, bi = np.unique(np.asarray(b), return_inverse=True)
    joint = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(joint, (ai, bi), 1.0)
    joint /= joint.sum()
    pa, pb = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log2(joint[nz] / (pa @ pb)[nz])).sum())


def silhouette(x: np.ndarray, labels: np.ndarray) -> float:
    """Silhouette (Euclidean) of ``x`` grouped by ``labels``; needs >= 2 labels with > 1 sample overall.

    Points that all coincide (a frozen table gives one point per class) score 0: every a(i) = b(i) = 0. sklearn's
    distances (‖x‖² + ‖y‖² − 2x·y) would turn that into float noise of either sign.
    """
    from sklearn.metrics import silhouette_score

    labels, x = np.asarray(labels), np.asarray(x, dtype=float)
    if len(np.unique(labels)) < 2:
        raise ValueError("silhouette needs at least two distinct labels")
    if np.abs(x - x.mean(0)).max() <= 1e-6 * max(1.0, float(np.abs(x).max())):
        return 0.0
    return float(silhouette_score(x, labels))


def pca_dims(x: np.ndarray, frac: float) -> int:
    """Components needed to explain ``frac`` of the variance (PCA@90% / @95%)."""
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1], got {frac}")
    xc = np.asarray(x, dtype=float) - np.asarray(x, dtype=float).mean(0)
    var = np.linalg.svd(xc, compute_uv=False) ** 2
    if var.sum() == 0:
        return 0
    return int(np.searchsorted(np.cumsum(var) / var.sum(), frac - 1e-12) + 1)


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA = ‖YᵀX‖_F² / (‖XᵀX‖_F ‖YᵀY‖_F) on column-centred X [n, p], Y [n, q]."""
    x = np.asarray(x, dtype=float) - np.asarray(x, dtype=float).mean(0)
    y = np.asarray(y, dtype=float) - np.asarray(y, dtype=float).mean(0)
    if len(x) != len(y):
        raise ValueError("x and y need the same number of rows")
    den = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return 0.0 if den == 0 else float(np.linalg.norm(y.T @ x) ** 2 / den)
