"""DualDiff: Global and Local Topology-Aware Graph Generation via Dual Conditioning Diffusion
(ICLR 2026, OpenReview IZV9k5BGxi).

A two-stage latent diffusion model for graphs: a graph autoencoder maps nodes to latents Z_l and
spectral clusters to pooled latents Z_g; two EDM denoisers, one per level, are trained jointly and
exchange information through dual conditioning (FiLM global→local, message passing + pooling
local→global), alternated asymmetrically (m : 1) at sampling time. No paper body and no official
code were available: the architecture around the paper's quoted equations is a reconstruction whose
every choice is a named option (see README).

Implemented: autoencoder (:mod:`.autoencoder`), clustering (:mod:`.clustering`), EDM pieces
(:mod:`.edm`), denoisers (:mod:`.denoiser`), the two-branch model with modes none / self / g2l /
l2g / dual / node (:mod:`.dualdiff`), the pipeline (:mod:`.pipeline`), GRAN/DiGress metrics and
orbit counts (:mod:`.metrics`, :mod:`.orbits`), synthetic data (:mod:`.data`) and SPECTRE / GDSS
file loaders (:mod:`.paper_data`).
"""

from .autoencoder import GraphAE, edge_accuracy
from .config import AEConfig, DataConfig, MethodConfig, RunConfig, config_for
from .dualdiff import MODES, DualDiff, global_local_mismatch, process_at
from .metrics import graph_features, mmd2, mmd_all, vun
from .orbits import orbit_counts
from .pipeline import encode_latents, fit_autoencoder, fit_diffusion, generate_graphs, prepare_graphs

__all__ = [
    "AEConfig",
    "DataConfig",
    "DualDiff",
    "GraphAE",
    "MODES",
    "MethodConfig",
    "RunConfig",
    "config_for",
    "edge_accuracy",
    "encode_latents",
    "fit_autoencoder",
    "fit_diffusion",
    "generate_graphs",
    "global_local_mismatch",
    "graph_features",
    "mmd2",
    "mmd_all",
    "orbit_counts",
    "prepare_graphs",
    "process_at",
    "vun",
]
