"""Per-node graphlet orbit counts for graphlets of 2-4 nodes (the 15 orbits counted by ORCA).

Every connected induced subgraph on 2, 3 or 4 nodes is enumerated (vectorised over node subsets with
numpy; fine up to ~40 nodes). Inside a 4-node graphlet a node's orbit is fixed by the graphlet (edge
count and degree sequence) and its degree in it:

    2 nodes: edge                     orbit 0 (= degree)
    3 nodes: path (ends 1, middle 2), triangle 3
    4 nodes: path (ends 4, middle 5), star (leaves 6, centre 7), cycle 8,
             paw (tail 9, triangle degree-2 nodes 10, degree-3 node 11),
             diamond (degree-2 nodes 12, degree-3 nodes 13), clique 14
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

import networkx as nx
import numpy as np

N_ORBITS = 15


def _orbit_table_4() -> np.ndarray:
    """[64 edge patterns, 4 positions] -> orbit id or -1 (disconnected induced subgraph)."""
    pairs = list(combinations(range(4), 2))
    table = -np.ones((64, 4), dtype=np.int64)
    for code in range(64):
        adj = np.zeros((4, 4), dtype=int)
        for bit, (i, j) in enumerate(pairs):
            if code >> bit & 1:
                adj[i, j] = adj[j, i] = 1
        if not nx.is_connected(nx.from_numpy_array(adj)):
            continue
        deg = adj.sum(1)
        edges = int(deg.sum()) // 2
        srt = tuple(sorted(deg))
        for v in range(4):
            dv = int(deg[v])
            if edges == 3 and srt == (1, 1, 2, 2):
                table[code, v] = 4 if dv == 1 else 5
            elif edges == 3:
                table[code, v] = 6 if dv == 1 else 7
            elif edges == 4 and srt == (2, 2, 2, 2):
                table[code, v] = 8
            elif edges == 4:
                table[code, v] = {1: 9, 2: 10, 3: 11}[dv]
            elif edges == 5:
                table[code, v] = 12 if dv == 2 else 13
            else:
                table[code, v] = 14
    return table


_TABLE4 = _orbit_table_4()


@lru_cache(maxsize=128)
def _subsets(n: int, k: int) -> np.ndarray:
    """All k-node subsets of range(n) as an [C, k] array (cached per n)."""
    return np.array(list(combinations(range(n), k)), dtype=np.int64).reshape(-1, k)


def orbit_counts(adj: np.ndarray) -> np.ndarray:
    """[N, 15] orbit counts of every node of an undirected simple graph given as a 0/1 adjacency."""
    a = (np.asarray(adj) > 0).astype(np.int64)
    n = a.shape[0]
    out = np.zeros((n, N_ORBITS), dtype=np.int64)
    out[:, 0] = a.sum(1)
    if n >= 3:
        c3 = _subsets(n, 3)
        e = np.stack([a[c3[:, 0], c3[:, 1]], a[c3[:, 0], c3[:, 2]], a[c3[:, 1], c3[:, 2]]], 1)
        deg = np.stack([e[:, 0] + e[:, 1], e[:, 0] + e[:, 2], e[:, 1] + e[:, 2]], 1)  # degree inside the triple
        n_edges = e.sum(1)
        orbit = np.where(n_edges[:, None] == 3, 3, np.where(deg == 1, 1, 2))
        keep = np.broadcast_to((n_edges >= 2)[:, None], orbit.shape)
        out += np.bincount(c3[keep] * N_ORBITS + orbit[keep], minlength=n * N_ORBITS).reshape(n, N_ORBITS)
    if n >= 4:
        c4 = _subsets(n, 4)
        code = np.zeros(len(c4), dtype=np.int64)
        for bit, (i, j) in enumerate(combinations(range(4), 2)):
            code |= a[c4[:, i], c4[:, j]] << bit
        orbit = _TABLE4[code]
        keep = orbit >= 0
        out += np.bincount(c4[keep] * N_ORBITS + orbit[keep], minlength=n * N_ORBITS).reshape(n, N_ORBITS)
    return out


def graph_orbit_vector(g: nx.Graph) -> np.ndarray:
    """GRAN / DiGress orbit statistic of one graph: orbit counts summed over nodes / N (15-dim)."""
    if g.number_of_nodes() == 0:
        return np.zeros(N_ORBITS)
    a = nx.to_numpy_array(g, nodelist=sorted(g.nodes()))
    return orbit_counts(a).sum(0) / g.number_of_nodes()
