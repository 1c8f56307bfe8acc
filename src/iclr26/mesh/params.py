"""Exact parameter counts of any configuration, in closed form (the paper's Table 5).

One GPT-NeoX layer of width D and MLP width F (all linears with bias, two LayerNorms)::

    layer(D, F) = 2*2D (LN1, LN2) + (3D^2 + 3D) (QKV) + (D^2 + D) (dense) + (DF + F) + (FD + D) (MLP)

Non-embedding parameters of ``P+CRK+S`` (weight-tied core counted once; ``K`` cores if untied)::

    N_nonemb = (P + C*n_cores + S) * layer(D, F) + 2D (final LN) + [mesh] (K+1) * B * 2 * (D+1)

Pythia-1.4B shape (D=2048, F=8192): layer = 50,358,272; vanilla 24 layers = 1,208,602,624;
``4+8R2+4`` = 805,736,448; +mesh (B=5) adds 61,470 routers. Embeddings: ``V*D`` in, ``V*D`` out (untied).
"""

from __future__ import annotations

import torch

from iclr26.mesh.model import MeshConfig, RecursiveNeoX, parameter_groups


def layer_parameters(d_model: int, d_ff: int) -> int:
    """Parameters of one GPT-NeoX layer (see module docstring)."""
    D, F = d_model, d_ff
    return 4 * D + (3 * D * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D)


def router_parameters(d_model: int, slots: int, n_loop: int) -> int:
    """``(K+1) * B * 2 * (D+1)``: K+1 (write, read) pairs of ``Linear(D, B, bias=True)``."""
    return (n_loop + 1) * slots * 2 * (d_model + 1)


def count_parameters(cfg: MeshConfig) -> dict[str, int]:
    """Closed-form counts: ``non_embedding``, ``routers``, ``embedding``, ``total``, ``unique_layers``."""
    lay = cfg.parsed_layout
    n_cores = (1 if cfg.share_core else lay.n_loop) if lay.recursive else 0
    unique = lay.prelude + lay.core * n_cores + lay.coda
    routers = router_parameters(cfg.d_model, cfg.slots, lay.n_loop) if cfg.scheme == "mesh" else 0
    non_emb = unique * layer_parameters(cfg.d_model, cfg.ff) + 2 * cfg.d_model + routers
    emb = cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2)
    return {
        "non_embedding": non_emb,
        "routers": routers,
        "embedding": emb,
        "total": non_emb + emb,
        "unique_layers": unique,
    }


def count_built_parameters(cfg: MeshConfig) -> dict[str, int]:
    """Build the model on the meta device (no memory) and count its parameters by part."""
    with torch.device("meta"):
        model = RecursiveNeoX(cfg)
    return parameter_groups(model)
