"""MeSH: Memory-as-State-Highways for Recursive Transformers (Yu et al., arXiv 2510.07739, ICLR 2026).

Implemented:

* :mod:`~iclr26.mesh.model`: GPT-NeoX (Pythia) layers and recursive ``P+CRK+S`` models with the state
  schemes base, +residual, +anchor, +anchor* (``anchor_emb``) and +mesh (B-slot buffer with per-step
  write/read routers and the transitional cycle); untied-core variant (Table 6).
* :mod:`~iclr26.mesh.params`: closed-form parameter counts (Table 5) and counts of the model built on
  the meta device.
* :mod:`~iclr26.mesh.diagnostics`: relative update magnitude, RBF/linear CKA, normalized singular
  values, effective rank, and :func:`loop_diagnostics` for a model.
* :mod:`~iclr26.mesh.data`: byte-level corpus from the Python standard library (95/5 split).
* :mod:`~iclr26.mesh.pythia`: Pythia shapes and configs, Hugging Face GPT-NeoX weights mapped into
  prelude/core/coda.
* :mod:`~iclr26.mesh.train`: paper-scale training (pre-tokenized token file, torchrun DDP via core.train).
* :mod:`~iclr26.mesh.benchmark`: training-step time ratio mesh / base.
* :mod:`~iclr26.mesh.experiment`: the CPU reproduction (claims C1-C3).

Not implemented: the learnable static/dynamic combination baselines of Appendix E.2, KV-cached
generation, lm-eval-harness integration (the model is a plain ``nn.Module`` returning logits).
"""

from iclr26.mesh.data import ByteCorpus, stdlib_bytes
from iclr26.mesh.diagnostics import (
    cka_linear,
    cka_rbf,
    effective_rank,
    loop_diagnostics,
    normalized_singular_values,
    relative_update,
)
from iclr26.mesh.model import (
    SCHEMES,
    Layout,
    MeshConfig,
    MeshRouters,
    NeoXLayer,
    RecursiveNeoX,
    RouterPair,
    lm_loss,
    mesh_read,
    mesh_write,
    parameter_groups,
    parse_layout,
    passthrough_slots,
)
from iclr26.mesh.params import count_built_parameters, count_parameters, layer_parameters, router_parameters
from iclr26.mesh.pythia import PAPER_LAYOUTS, PYTHIA_SHAPES, load_pythia, map_gpt_neox_state_dict, pythia_config

__all__ = [
    "PAPER_LAYOUTS",
    "PYTHIA_SHAPES",
    "load_pythia",
    "map_gpt_neox_state_dict",
    "pythia_config",
    "SCHEMES",
    "ByteCorpus",
    "Layout",
    "MeshConfig",
    "MeshRouters",
    "NeoXLayer",
    "RecursiveNeoX",
    "RouterPair",
    "cka_linear",
    "cka_rbf",
    "count_built_parameters",
    "count_parameters",
    "effective_rank",
    "layer_parameters",
    "lm_loss",
    "loop_diagnostics",
    "mesh_read",
    "mesh_write",
    "normalized_singular_values",
    "parameter_groups",
    "parse_layout",
    "passthrough_slots",
    "relative_update",
    "router_parameters",
    "stdlib_bytes",
]
