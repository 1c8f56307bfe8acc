"""GlobalExtraction's cluster assignment S_g = Clustering(G) ∈ {0,1}^{N×K} (Sec. 3.1).

Generic graphs: spectral clustering, K-means (scikit-learn, n_init = 10) on the row-normalised
eigenvectors of the K smallest eigenvalues of L_sym = I - D^{-1/2} A D^{-1/2} (Ng-Jordan-Weiss).
Molecules: K-means on atom coordinates. Louvain: ablation (paper Table 13). Labels are returned as a
length-N integer vector, relabelled in order of first appearance so that equal partitions give equal
labels. A graph with fewer than K nodes gets one cluster per node (the remaining clusters are empty
and masked downstream).
"""

from __future__ import annotations

import networkx as nx
import numpy as np


def canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Relabel clusters 0, 1, ... in order of first appearance."""
    mapping: dict[int, int] = {}
    return np.array([mapping.setdefault(int(c), len(mapping)) for c in labels], dtype=np.int64)


def _kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x).labels_


def spectral_clusters(adj: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """K-means on rows of the first K eigenvectors of L_sym, each row normalised to unit length."""
    n = adj.shape[0]
    if n <= k:
        return np.arange(n, dtype=np.int64)
    deg = adj.sum(1)
    inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-12)), 0.0)
    lap = np.eye(n) - inv_sqrt[:, None] * adj * inv_sqrt[None, :]  # L_sym = I - D^-1/2 A D^-1/2
    _, vecs = np.linalg.eigh(lap)
    u = vecs[:, :k]
    u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
    u = np.round(u, 8)  # identical rows stay identical across BLAS back-ends
    return canonical_labels(_kmeans(u, k, seed))


def kmeans_coords(coords: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """K-means on node coordinates (molecules: atom positions)."""
    n = coords.shape[0]
    if n <= k:
        return np.arange(n, dtype=np.int64)
    return canonical_labels(_kmeans(np.asarray(coords, dtype=float), k, seed))


def louvain_clusters(adj: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Louvain communities; beyond K, the smallest communities are merged into the K-th."""
    n = adj.shape[0]
    if n <= k:
        return np.arange(n, dtype=np.int64)
    comms = sorted(nx.community.louvain_communities(nx.from_numpy_array(adj), seed=seed), key=len, reverse=True)
    labels = np.zeros(n, dtype=np.int64)
    for c, members in enumerate(comms):
        labels[list(members)] = min(c, k - 1)
    return canonical_labels(labels)


def cluster_graph(
    adj: np.ndarray, k: int, method: str = "spectral", seed: int = 0, coords: np.ndarray | None = None
) -> np.ndarray:
    """S_g as labels for one graph's [N, N] adjacency (no padding)."""
    if method == "spectral":
        return spectral_clusters(adj, k, seed)
    if method == "louvain":
        return louvain_clusters(adj, k, seed)
    if method == "kmeans_coords":
        if coords is None:
            raise ValueError("clustering='kmeans_coords' needs node coordinates (molecules); use 'spectral'")
        return kmeans_coords(coords, k, seed)
    raise ValueError(f"unknown clustering {method!r} (spectral | kmeans_coords | louvain)")
