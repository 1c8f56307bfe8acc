"""DualDiff end to end for one seed: cluster, fit the autoencoder, encode, fit each diffusion
variant, sample, decode. The library entry points used by ``experiment.py`` and by users.

    prepared = prepare_graphs(train_graphs, ae_cfg)                  # dense + S_g labels
    ae = fit_autoencoder(prepared, ae_cfg, train_cfg, batch_size, seed)
    lat = encode_latents(ae, prepared, seed)                          # standardised Z_l, Z_g
    model = fit_diffusion(lat, ae, method_cfg, "dual", train_cfg, batch_size, seed)
    graphs, c = generate_graphs(model, ae, lat, n=256, seed=seed)
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch

from iclr26.core.train import TrainConfig, fit

from .autoencoder import GraphAE, masked_cluster_mean
from .clustering import cluster_graph
from .config import AEConfig, MethodConfig
from .data import DenseGraphs, to_dense, to_networkx
from .dualdiff import DualDiff, global_local_mismatch, posthoc_global


@dataclass
class Prepared:
    """Padded graphs and their GlobalExtraction labels S_g (labels -1 on padding)."""

    graphs: DenseGraphs
    labels: torch.Tensor


@dataclass
class Latents:
    """Encoded training set: noise-free Z (AE space), Z_g, masks, and the standardisation μ, s.

    node_counts: training node counts (the sampler draws N from them).
    """

    z: torch.Tensor
    zg: torch.Tensor
    mask: torch.Tensor
    gmask: torch.Tensor
    mu: torch.Tensor
    sd: torch.Tensor
    sigma0: float
    node_counts: np.ndarray


def prepare_graphs(graphs: list[nx.Graph], cfg: AEConfig, n_max: int | None = None, seed: int = 0) -> Prepared:
    """Dense padded batch and per-graph cluster labels (``cfg.clustering``, ``cfg.K``)."""
    dense = to_dense(graphs, n_max)
    labels = torch.full(dense.mask.shape, -1, dtype=torch.long)
    for b in range(len(graphs)):
        n = int(dense.mask[b].sum())
        labels[b, :n] = torch.from_numpy(cluster_graph(dense.adj[b, :n, :n].numpy(), cfg.K, cfg.clustering, seed))
    return Prepared(dense, labels)


def _batch_indices(n: int, batch: int, seed: int, step: int) -> torch.Tensor:
    """The batch at ``step`` depends only on (seed, step): exact resume, same seed same batches."""
    return torch.randint(0, n, (batch,), generator=torch.Generator().manual_seed(seed * 1_000_003 + step))


def fit_autoencoder(
    data: Prepared, cfg: AEConfig, train: TrainConfig, batch_size: int, seed: int, log=None
) -> tuple[GraphAE, list[float]]:
    """Stage 1: train E_φ / D_ψ on the prepared graphs; returns the frozen AE and the loss curve."""
    torch.manual_seed(seed)
    ae = GraphAE(cfg)

    def get_batch(step, rank, world):
        idx = _batch_indices(len(data.graphs), batch_size, seed, step)
        return data.graphs.adj[idx], data.graphs.mask[idx], data.labels[idx]

    res = fit(ae, lambda m, b: m.loss(*b), get_batch, train, log=log)
    ae.eval()
    for p in ae.parameters():
        p.requires_grad_(False)
    return ae, res.losses


@torch.no_grad()
def encode_latents(ae: GraphAE, data: Prepared, seed: int = 0) -> Latents:
    """Z = E_φ(G), Z_g = cluster means of Z, and the per-dimension mean / std over real nodes."""
    gen = torch.Generator().manual_seed(seed + 777)
    z = ae.encode(data.graphs.adj, data.graphs.mask, generator=gen)
    zg, gmask = masked_cluster_mean(z, data.labels, ae.cfg.K)
    flat = z[data.graphs.mask]
    mu, sd = flat.mean(0), flat.std(0).clamp(min=1e-6)
    counts = data.graphs.mask.sum(1).numpy()
    return Latents(z, zg, data.graphs.mask, gmask, mu, sd, ae.cfg.sigma0, counts)


def fit_diffusion(
    lat: Latents, ae: GraphAE, cfg: MethodConfig, mode: str, train: TrainConfig, batch_size: int, seed: int, log=None
) -> tuple[DualDiff, list[float]]:
    """Stage 2 for one variant on standardised latents (targets Z + σ0 ε when ``cfg.latent_noise``)."""
    torch.manual_seed(seed)
    model = DualDiff(lat.z.shape[-1], lat.zg.shape[1], cfg, mode, ae, lat.mu, lat.sd)

    def get_batch(step, rank, world):
        idx = _batch_indices(len(lat.z), batch_size, seed + 1, step)
        z, mask, zg, gmask = lat.z[idx], lat.mask[idx], lat.zg[idx], lat.gmask[idx]
        if cfg.latent_noise:
            g = torch.Generator().manual_seed(seed * 7_919 + step)
            z = z + lat.sigma0 * torch.randn(z.shape, generator=g)
        zl0 = (z - lat.mu) / lat.sd * mask.unsqueeze(-1).float()
        zg0 = (zg - lat.mu) / lat.sd * gmask.unsqueeze(-1).float()
        return zl0, zg0, mask, gmask

    res = fit(model, lambda m, b: m.loss(*b), get_batch, train, log=log)
    model.eval()
    return model, res.losses


@torch.no_grad()
def generate_graphs(
    model: DualDiff, ae: GraphAE, lat: Latents, n: int, seed: int, steps: int | None = None, schedule: str = "asym"
) -> tuple[list[nx.Graph], np.ndarray]:
    """Sample n graphs (N from the training histogram), decode with D_ψ; also the mismatch c per graph."""
    gen = torch.Generator().manual_seed(seed + 4242)
    counts = torch.from_numpy(lat.node_counts)
    n_nodes = counts[torch.randint(0, len(counts), (n,), generator=gen)]
    n_max = int(lat.mask.shape[1])
    zl, zg, mask, gmask = model.sample(n_nodes, n_max, steps, schedule, gen)
    zl = model.destandardise(zl, mask)
    if zg is None:  # node-level LDM: Z_g post hoc from the generated node latents
        zg, gmask = posthoc_global(zl, mask, model.K, seed)
    else:
        zg = model.destandardise(zg, gmask)
    adj = ae.decode(zl, zg, mask, gmask)
    return to_networkx(adj, mask), global_local_mismatch(zl, zg, mask, gmask)
