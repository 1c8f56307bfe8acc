"""Synthetic graph generators (networkx, offline) and dense padded batches.

community-small follows the GDSS generator (``data/data_generators.py``, ``n_community``): two
ER(0.7) communities of N/2 nodes, each cross pair bridged with probability 2 p_inter / ((M - 1) n),
at least one bridge. sbm-small is a scaled-down SPECTRE SBM. ego / grid / planar are smoke-only
stand-ins for the real datasets (planar: Delaunay triangulation of 64 uniform points, SPECTRE).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch


def community_small(
    n_graphs: int,
    seed: int,
    p_intra: float = 0.7,
    p_inter: float = 0.05,
    sizes: tuple[int, int] = (12, 20),
    gdss_seed_quirk: bool = False,
) -> list[nx.Graph]:
    """Two-community graphs, N uniform in {12, 14, ..., 20}; ``gdss_seed_quirk`` reuses seed = community index."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(n_graphs):
        n_total = int(rng.integers(sizes[0] // 2, sizes[1] // 2 + 1)) * 2
        half = n_total // 2
        parts = [
            nx.gnp_random_graph(half, p_intra, seed=(i if gdss_seed_quirk else int(rng.integers(2**31))))
            for i in range(2)
        ]
        g = nx.disjoint_union_all(parts)
        p_bridge = p_inter * 2 / ((2 - 1) * half)  # GDSS: p_inter * 2 / ((M - 1) * community size)
        bridged = False
        for a in range(half):
            for b in range(half, n_total):
                if rng.random() < p_bridge:
                    g.add_edge(a, b)
                    bridged = True
        if not bridged:  # GDSS adds one random bridge when none was drawn
            g.add_edge(int(rng.integers(half)), int(rng.integers(half, n_total)))
        graphs.append(g)
    return graphs


def sbm_small(
    n_graphs: int,
    seed: int,
    blocks: tuple[int, int] = (2, 3),
    block_size: tuple[int, int] = (6, 10),
    p_in: float = 0.5,
    p_out: float = 0.03,
) -> list[nx.Graph]:
    """Stochastic block model graphs: 2-3 blocks of 6-10 nodes (SPECTRE SBM scaled down)."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(n_graphs):
        k = int(rng.integers(blocks[0], blocks[1] + 1))
        sizes = [int(rng.integers(block_size[0], block_size[1] + 1)) for _ in range(k)]
        probs = [[p_in if i == j else p_out for j in range(k)] for i in range(k)]
        g = nx.stochastic_block_model(sizes, probs, seed=int(rng.integers(2**31)))
        graphs.append(nx.Graph(nx.convert_node_labels_to_integers(g)))
    return graphs


def erdos_renyi_like(node_counts: np.ndarray, density: float, n_graphs: int, seed: int) -> list[nx.Graph]:
    """ER graphs whose sizes are drawn from ``node_counts`` and whose edge probability is ``density``."""
    rng = np.random.default_rng(seed)
    ns = rng.choice(node_counts, size=n_graphs)
    return [nx.gnp_random_graph(int(n), density, seed=int(rng.integers(2**31))) for n in ns]


def planar_graphs(n_graphs: int, seed: int, n_nodes: int = 64) -> list[nx.Graph]:
    """Delaunay triangulations of uniform points in the unit square (SPECTRE planar)."""
    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_graphs):
        tri = Delaunay(rng.random((n_nodes, 2)))
        g = nx.Graph()
        g.add_nodes_from(range(n_nodes))
        for s in tri.simplices:
            g.add_edges_from([(int(s[0]), int(s[1])), (int(s[1]), int(s[2])), (int(s[0]), int(s[2]))])
        out.append(g)
    return out


def grid_small(n_graphs: int, seed: int) -> list[nx.Graph]:
    """2-D grids with sides in [3, 6] (real Grid: 10-20 x 10-20)."""
    rng = np.random.default_rng(seed)
    return [
        nx.convert_node_labels_to_integers(nx.grid_2d_graph(int(rng.integers(3, 7)), int(rng.integers(3, 7))))
        for _ in range(n_graphs)
    ]


def ego_small(n_graphs: int, seed: int) -> list[nx.Graph]:
    """Radius-1 ego nets with 4-18 nodes of a power-law cluster graph (real Ego-small comes from Citeseer)."""
    rng = np.random.default_rng(seed)
    big = nx.powerlaw_cluster_graph(2000, 2, 0.3, seed=int(rng.integers(2**31)))
    out = []
    for v in rng.permutation(big.number_of_nodes()):
        ego = nx.ego_graph(big, int(v), radius=1)
        if 4 <= ego.number_of_nodes() <= 18:
            out.append(nx.convert_node_labels_to_integers(ego))
        if len(out) == n_graphs:
            break
    return out


def generate(dataset: str, n_graphs: int, seed: int, gdss_seed_quirk: bool = False) -> list[nx.Graph]:
    """The named synthetic dataset."""
    if dataset == "community":
        return community_small(n_graphs, seed, gdss_seed_quirk=gdss_seed_quirk)
    if dataset == "sbm":
        return sbm_small(n_graphs, seed)
    raise ValueError(f"unknown synthetic dataset {dataset!r} (community | sbm)")


@dataclass
class DenseGraphs:
    """Padded dense graphs.

    adj: [B, N, N] float 0/1, symmetric, zero diagonal, zero on padding.
    mask: [B, N] bool, True for real nodes.
    """

    adj: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.adj.shape[0]

    def index(self, idx: torch.Tensor) -> DenseGraphs:
        return DenseGraphs(self.adj[idx], self.mask[idx])


def to_dense(graphs: list[nx.Graph], n_max: int | None = None) -> DenseGraphs:
    """Stack graphs into a padded batch (node order = sorted node labels)."""
    sizes = [g.number_of_nodes() for g in graphs]
    n_max = n_max or max(sizes)
    if max(sizes) > n_max:
        raise ValueError(f"graph with {max(sizes)} nodes exceeds the model's limit of {n_max}")
    adj = torch.zeros(len(graphs), n_max, n_max)
    mask = torch.zeros(len(graphs), n_max, dtype=torch.bool)
    for b, g in enumerate(graphs):
        a = nx.to_numpy_array(g, nodelist=sorted(g.nodes()))
        n = a.shape[0]
        adj[b, :n, :n] = torch.from_numpy((a > 0).astype(np.float32))
        mask[b, :n] = True
    adj.diagonal(dim1=1, dim2=2).zero_()
    return DenseGraphs(adj, mask)


def to_networkx(adj: torch.Tensor, mask: torch.Tensor) -> list[nx.Graph]:
    """Padded dense adjacencies back to networkx graphs (padding nodes dropped)."""
    out = []
    for a, m in zip(adj.cpu().numpy(), mask.cpu().numpy()):
        n = int(m.sum())
        out.append(nx.from_numpy_array((a[:n, :n] > 0.5).astype(np.int64)))
    return out


def spectral_pe(adj: torch.Tensor, k: int) -> torch.Tensor:
    """Adjacency eigen-coordinates u_ik √|λ_k| of the k/2 largest and k/2 most negative eigenvalues.

    A = Σ_k λ_k u_k u_kᵀ, so a pairwise decoder can rebuild A_ij from products of these coordinates;
    products u_ik u_jk do not depend on eigenvector signs, which are fixed (largest |entry| positive)
    only for determinism. Padding rows are zero (their eigenvalues are 0). Returns [B, N, k].
    """
    lam, vec = torch.linalg.eigh(adj.double())  # ascending
    half = k // 2
    n = adj.shape[-1]
    idx = torch.cat([torch.arange(n - 1, max(n - 1 - half, -1), -1), torch.arange(0, min(k - half, n))])
    lam, vec = lam[:, idx], vec[:, :, idx]
    pivot = vec.abs().argmax(1, keepdim=True)
    vec = vec * torch.gather(vec, 1, pivot).sign().clamp(min=0).mul(2).sub(1)
    out = (vec * lam.abs().sqrt().unsqueeze(1)).float()
    return torch.nn.functional.pad(out, (0, k - out.shape[-1]))


def node_features(
    adj: torch.Tensor, mask: torch.Tensor, max_degree: int, rw_steps: int, n_spectral: int = 0
) -> torch.Tensor:
    """Featureless graphs' node inputs: one-hot(min(deg, max_degree)) ⊕ [diag((D^-1 A)^k)]_{k=1..rw_steps}
    (⊕ ``n_spectral`` adjacency eigen-coordinates, :func:`spectral_pe`)."""
    deg = adj.sum(-1)
    onehot = torch.nn.functional.one_hot(deg.clamp(max=max_degree).long(), max_degree + 1).float()
    walk = adj / deg.clamp(min=1).unsqueeze(-1)  # D^-1 A (isolated / padding rows stay 0)
    pe, power = [], walk
    for _ in range(rw_steps):
        pe.append(power.diagonal(dim1=1, dim2=2))
        power = power @ walk
    parts = [onehot] + [p.unsqueeze(-1) for p in pe]
    if n_spectral:
        parts.append(spectral_pe(adj, n_spectral))
    feats = torch.cat(parts, dim=-1)
    return feats * mask.unsqueeze(-1).float()
