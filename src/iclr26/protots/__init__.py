"""ProtoTS: Learning Hierarchical Prototypes for Explainable Time Series Forecasting (Peng, Ren et al.,
ICLR 2026, arXiv 2509.23159).

Implemented: the multi-channel embedding (Eq. 2), the bottleneck MLP-Mixer with learned time pooling
(Eq. 3), prototypes (mu_k, p_k) weighted by a softmax over negative distances (Eq. 4), the hierarchical
mixture of child prototypes (Eq. 5), the L1 + lambda * entropy loss (Eq. 6), two-stage training with
function-preserving splits (Sec. 3.5), explanations and expert steering (split, inject, edit); a seeded
LOF-like synthetic benchmark, baselines, and a local CSV/Parquet reader for the paper's data.
"""

from iclr26.protots.config import DataConfig, ProtoTSConfig, RunConfig, StageConfig, SynthConfig, config_for
from iclr26.protots.data import (
    DataError,
    ExogenousWindowDataset,
    Series,
    Windows,
    load_local_series,
    make_synthetic_load,
    make_windows,
    split_windows,
)
from iclr26.protots.model import Explanation, ProtoTS, assignment_entropy, protots_loss, prototype_weights, select_split
from iclr26.protots.training import fit_children, fit_root

__all__ = [
    "DataConfig",
    "DataError",
    "Explanation",
    "ExogenousWindowDataset",
    "ProtoTS",
    "ProtoTSConfig",
    "RunConfig",
    "Series",
    "StageConfig",
    "SynthConfig",
    "Windows",
    "assignment_entropy",
    "config_for",
    "fit_children",
    "fit_root",
    "load_local_series",
    "make_synthetic_load",
    "make_windows",
    "prototype_weights",
    "protots_loss",
    "select_split",
    "split_windows",
]
