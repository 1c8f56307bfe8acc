"""Paper-scale generic graphs from local files in their released formats (nothing downloads).

- SPECTRE / DiGress ``*.pt`` (``planar_64_200.pt``, ``sbm_200.pt``): ``torch.save`` of the 8-tuple
  (adjs, eigvals, eigvecs, n_nodes, max_eigval, min_eigval, same_sample, n_max) with ``adjs`` a list
  of dense [n, n] tensors. Split as DiGress ``spectre_dataset.py``: ``torch.randperm`` with generator
  seed 0, test = round(0.2 n), train = round(0.8 (n - test)), val = the rest (200 -> 128 / 32 / 40).
- GDSS ``*.pkl`` (community_small, ego_small, grid, ENZYMES): a pickled list of ``networkx.Graph``.
  Split as GDSS ``utils/data_loader.py``: test = the first int(0.2 n) graphs, train = the rest
  (validation = the test split, as GDSS evaluates on it).

Both formats are pickles, which can run code when loaded: they are loaded only with
``trust_pickle=True`` (``--set trust_pickle=true``); a ``.pt`` file is first tried with
``torch.load(weights_only=True)``, which cannot run code. A graph with self-loops, direction, edge
weights other than 1 or more nodes than ``max_nodes`` is rejected with an error naming it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import networkx as nx
import numpy as np
import torch


class UntrustedFileError(ValueError):
    """A pickle-based file that the user has not marked as trusted."""


def _check_graph(g: nx.Graph, i: int, max_nodes: int) -> nx.Graph:
    if g.is_directed():
        raise ValueError(f"graph {i} is directed; DualDiff models undirected graphs")
    if g.is_multigraph():
        raise ValueError(f"graph {i} is a multigraph; DualDiff models simple graphs")
    loops = nx.number_of_selfloops(g)
    if loops:
        raise ValueError(f"graph {i} has {loops} self-loop(s); remove them before training")
    weights = {d.get("weight", 1) for _, _, d in g.edges(data=True)}
    if weights - {1}:
        raise ValueError(f"graph {i} has edge weights {sorted(weights)[:5]}; only unweighted graphs are supported")
    if g.number_of_nodes() > max_nodes:
        raise ValueError(
            f"graph {i} has {g.number_of_nodes()} nodes, more than max_nodes={max_nodes} "
            "(raise --set max_nodes=... if memory allows)"
        )
    if g.number_of_nodes() == 0:
        raise ValueError(f"graph {i} has no nodes")
    return nx.convert_node_labels_to_integers(nx.Graph(g), ordering="sorted")


def _from_adjacency(a, i: int, max_nodes: int) -> nx.Graph:
    arr = np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a, dtype=float)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"graph {i}: adjacency of shape {arr.shape} is not square")
    if not np.allclose(arr, arr.T):
        raise ValueError(f"graph {i} is directed (asymmetric adjacency)")
    if np.any(np.diag(arr) != 0):
        raise ValueError(f"graph {i} has self-loops (non-zero diagonal)")
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError(f"graph {i} has weighted edges (entries other than 0/1)")
    if arr.shape[0] > max_nodes:
        raise ValueError(f"graph {i} has {arr.shape[0]} nodes, more than max_nodes={max_nodes}")
    return nx.from_numpy_array(arr.astype(np.int64))


def load_graphs(path: Path, trust_pickle: bool = False, max_nodes: int = 64) -> list[nx.Graph]:
    """All graphs of a SPECTRE ``.pt`` or GDSS ``.pkl`` file, validated."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (nothing is downloaded)")
    if path.suffix == ".pt":
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            if not trust_pickle:
                raise UntrustedFileError(
                    f"{path.name} needs full unpickling ({type(exc).__name__}); pickles can run "
                    "code: pass --set trust_pickle=true only for a file you trust"
                ) from exc
            obj = torch.load(path, map_location="cpu", weights_only=False)
        if not (isinstance(obj, tuple | list) and len(obj) == 8):
            raise ValueError(f"{path.name}: expected the SPECTRE 8-tuple (adjs, eigvals, eigvecs, n_nodes, ...)")
        return [_from_adjacency(a, i, max_nodes) for i, a in enumerate(obj[0])]
    if path.suffix == ".pkl":
        if not trust_pickle:
            raise UntrustedFileError(
                f"{path.name} is a pickle, which can run code when loaded: pass "
                "--set trust_pickle=true only for a file you trust"
            )
        with path.open("rb") as f:
            obj = pickle.load(f)  # noqa: S301 - only with trust_pickle
        if not isinstance(obj, list) or not all(isinstance(g, nx.Graph) for g in obj):
            raise ValueError(f"{path.name}: expected a pickled list of networkx graphs (GDSS format)")
        return [_check_graph(g, i, max_nodes) for i, g in enumerate(obj)]
    raise ValueError(f"{path.name}: unknown format (SPECTRE .pt or GDSS .pkl)")


def split_graphs(graphs: list[nx.Graph], file_name: str) -> tuple[list, list, list]:
    """(train, val, test) with the split of the file's origin (SPECTRE .pt: DiGress; .pkl: GDSS)."""
    n = len(graphs)
    if n < 3:
        raise ValueError(f"{file_name}: {n} graphs are too few to split")
    if str(file_name).endswith(".pt"):
        test_len = int(round(n * 0.2))
        train_len = int(round((n - test_len) * 0.8))
        idx = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
        train = [graphs[i] for i in idx[:train_len]]
        val = [graphs[i] for i in idx[train_len : n - test_len]]
        test = [graphs[i] for i in idx[n - test_len :]]
        return train, val, test
    test_size = int(0.2 * n)
    return graphs[test_size:], graphs[:test_size], graphs[:test_size]
