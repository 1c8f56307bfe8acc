"""Generic-graph metrics in GRAN / DiGress conventions (networkx + numpy).

Per-graph statistics: degree histogram (``nx.degree_histogram``), clustering-coefficient histogram
(100 bins on [0, 1]), ORCA 4-node orbit counts summed over nodes / N (15-dim, raw), and the
normalised-Laplacian eigenvalue histogram (200 bins on [-1e-5, 2]). Histograms are normalised to pmfs.
Kernels (Gaussian of a distance; GRAN ``gaussian_tv``, GraphRNN ``gaussian_emd``):

    k_TV(x, y)  = exp(-(½ ‖x - y‖₁)² / (2 σ²))
    k_EMD(x, y) = exp(-W₁(x, y)² / (2 σ²)),  W₁ on support points i / scaling = Σ_i |F_x(i) - F_y(i)| / scaling

MMD² (biased, diagonals included): mean k(X, X) + mean k(Y, Y) - 2 mean k(X, Y).
σ: degree 1, clustering 0.1 (EMD scaling 100), orbit 30 (Gaussian-TV on raw vectors), spectral 1.
V.U.N.: valid (planar: connected and planar), unique (WL hash, then exact isomorphism), novel
(not isomorphic to a training graph).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import networkx as nx
import numpy as np

from .orbits import graph_orbit_vector

STATS = ("degree", "clustering", "orbit", "spectral")
SIGMA = {"degree": 1.0, "clustering": 0.1, "orbit": 30.0, "spectral": 1.0}
IS_HIST = {"degree": True, "clustering": True, "orbit": False, "spectral": True}
EMD_SCALING = {"degree": 1.0, "clustering": 100.0, "spectral": 1.0}


def degree_hist(g: nx.Graph) -> np.ndarray:
    return np.asarray(nx.degree_histogram(g), dtype=float)


def clustering_hist(g: nx.Graph, bins: int = 100) -> np.ndarray:
    vals = list(nx.clustering(g).values())
    return np.histogram(vals, bins=bins, range=(0.0, 1.0), density=False)[0].astype(float)


def spectral_hist(g: nx.Graph, bins: int = 200) -> np.ndarray:
    if g.number_of_nodes() == 0:
        return np.zeros(bins)
    lap = nx.normalized_laplacian_matrix(g, nodelist=sorted(g.nodes())).toarray()
    eig = np.linalg.eigvalsh(lap)
    hist = np.histogram(eig, bins=bins, range=(-1e-5, 2), density=False)[0].astype(float)
    return hist / max(hist.sum(), 1e-12)


def graph_features(graphs: Sequence[nx.Graph]) -> dict[str, list[np.ndarray]]:
    """Every statistic of every graph, computed once (reuse for a fixed reference set)."""
    return {
        "degree": [degree_hist(g) for g in graphs],
        "clustering": [clustering_hist(g) for g in graphs],
        "orbit": [graph_orbit_vector(g) for g in graphs],
        "spectral": [spectral_hist(g) for g in graphs],
    }


def _stack(xs: Sequence[np.ndarray], length: int, normalise: bool) -> np.ndarray:
    out = np.zeros((len(xs), length))
    for i, x in enumerate(xs):
        out[i, : len(x)] = x
    if normalise:  # GRAN compute_mmd(is_hist=True): s / (sum(s) + 1e-6)
        out = out / (out.sum(1, keepdims=True) + 1e-6)
    return out


def _kernel_mean(x: np.ndarray, y: np.ndarray, sigma: float, kind: str, scaling: float, chunk: int = 128) -> float:
    """Mean of k(x_a, y_b) over all pairs, chunked to bound memory."""
    total = 0.0
    for s in range(0, len(x), chunk):
        xa = x[s : s + chunk, None, :]
        if kind == "tv":
            dist = np.abs(xa - y[None]).sum(-1) / 2.0
        else:
            dist = np.abs(np.cumsum(xa, -1) - np.cumsum(y, -1)[None]).sum(-1) / scaling
        total += np.exp(-(dist**2) / (2 * sigma**2)).sum()
    return float(total / (len(x) * len(y)))


def mmd2(
    x: Sequence[np.ndarray],
    y: Sequence[np.ndarray],
    sigma: float,
    is_hist: bool = True,
    kernel: str = "gaussian_tv",
    scaling: float = 1.0,
) -> float:
    """Biased MMD² between two sets of (variable-length, zero-padded) vectors."""
    if len(x) == 0 or len(y) == 0:
        raise ValueError("MMD of an empty sample")
    length = max(max(len(v) for v in x), max(len(v) for v in y))
    xs, ys = _stack(x, length, is_hist), _stack(y, length, is_hist)
    kind = "tv" if kernel == "gaussian_tv" else "emd"
    return (
        _kernel_mean(xs, xs, sigma, kind, scaling)
        + _kernel_mean(ys, ys, sigma, kind, scaling)
        - 2 * _kernel_mean(xs, ys, sigma, kind, scaling)
    )


def mmd_all(gen: dict[str, list[np.ndarray]], ref: dict[str, list[np.ndarray]], kernel: str = "gaussian_tv") -> dict:
    """Degree, clustering, orbit and spectral MMD² and their average ``avg``."""
    out = {}
    for stat in STATS:
        kern = kernel if IS_HIST[stat] else "gaussian_tv"  # orbit: Gaussian-TV on raw vectors
        out[stat] = mmd2(gen[stat], ref[stat], SIGMA[stat], IS_HIST[stat], kern, EMD_SCALING.get(stat, 1.0))
    out["avg"] = float(np.mean([out[s] for s in STATS]))
    return out


def planar_valid(g: nx.Graph) -> bool:
    """SPECTRE planar validity: connected and planar."""
    return g.number_of_nodes() > 0 and nx.is_connected(g) and nx.check_planarity(g)[0]


def _wl_hash(g: nx.Graph) -> str:
    """Weisfeiler-Lehman hash (a bucket key only; equality is decided by exact isomorphism)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # networkx 3.5 notice about changed hash values
        return nx.weisfeiler_lehman_graph_hash(g)


def _iso_classes(graphs: Sequence[nx.Graph]) -> tuple[list[int], dict[str, list[int]]]:
    """Index of each graph's isomorphism class representative; WL hash buckets of representatives."""
    reps: dict[str, list[int]] = {}
    cls = []
    for i, g in enumerate(graphs):
        h = _wl_hash(g)
        match = next((r for r in reps.get(h, []) if nx.is_isomorphic(graphs[r], g)), None)
        if match is None:
            reps.setdefault(h, []).append(i)
            match = i
        cls.append(match)
    return cls, reps


def vun(generated: Sequence[nx.Graph], train: Sequence[nx.Graph], validity=None) -> dict[str, float | None]:
    """Fractions valid, unique (first copy of each isomorphism class), novel, and V.U.N. together."""
    n = len(generated)
    if n == 0:
        raise ValueError("V.U.N. of an empty sample")
    cls, _ = _iso_classes(generated)
    unique = [cls[i] == i for i in range(n)]
    train_hash: dict[str, list[nx.Graph]] = {}
    for g in train:
        train_hash.setdefault(_wl_hash(g), []).append(g)
    novel = [not any(nx.is_isomorphic(g, t) for t in train_hash.get(_wl_hash(g), [])) for g in generated]
    valid = [validity(g) for g in generated] if validity is not None else None
    out: dict[str, float | None] = {"unique": float(np.mean(unique)), "novel": float(np.mean(novel))}
    out["valid"] = float(np.mean(valid)) if valid is not None else None
    both = [u and v for u, v in zip(unique, novel)]
    out["vun"] = float(np.mean([b and ok for b, ok in zip(both, valid)])) if valid is not None else None
    out["un"] = float(np.mean(both))
    return out
