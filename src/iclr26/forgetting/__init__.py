"""Deep vs shallow forgetting under replay, with Neural Collapse diagnostics.

Paper: Giulia Lanzillotta, Damiano Meier, Thomas Hofmann, *Heads collapse, features stay: Why Replay
needs big buffers* (ICLR 2026; arXiv v1 title: *Asymptotic analysis of shallow and deep forgetting
in replay with Neural Collapse*), arXiv 2512.07400.

Implemented:

* class-incremental (single head) and task-incremental (multi-head) training with Experience
  Replay: the official class-balanced buffer (``er_balanced``: rebuilt at task ends, equal batch
  share per seen task, later tasks capped at task 1's steps) and classic reservoir ER
  (:mod:`.buffer`, :mod:`.replay`); every SGD step goes through :func:`iclr26.core.train.fit`
  (torchrun DDP unchanged);
* shallow accuracy A_ij (own head) and deep accuracy A*_ij (linear probe on frozen features, fit
  on all seen-task training data), F_sh and F_dp (:mod:`.probe`);
* Neural Collapse metrics NC1-NC3, beta, rank of the centred means, SNR, class-mean norms, the
  active-subspace projector, per-class covariance numerical rank for buffer vs population
  (:mod:`.neural_collapse`); the LDA counterfactual (:mod:`.lda`); all gathered by
  :func:`final_diagnostics`;
* data: split-digits (scikit-learn ``load_digits``), the synthetic orthogonal-subspace tasks,
  CIFAR-10/100 from the distributed pickle batches, local ``.npz`` features and local image
  folders (:mod:`.data`); MLP and CIFAR ResNet-18
  (:mod:`.models`);
* the typed run configuration (:mod:`.config`), the reproduction (:mod:`.experiment`, claims
  C1-C4) and the paper-scale path (:mod:`.paper`).

Not implemented: DIL (domain-incremental) streams, DER/FDR/iCaRL, pretrained ViT/ResNet-50
backbones (any ``features`` module with ``out_dim`` plugs in), the theory's asymptotic SNR bounds
(measured, not derived).
"""

from .buffer import BalancedReplayBuffer, ReplayBuffer, ReservoirBuffer, make_buffer
from .config import RunConfig, config_for
from .data import ContinualData, load_cifar, load_image_folder, load_npz_tasks, orthogonal_subspace_tasks, split_digits
from .diagnostics import final_diagnostics
from .lda import gaussian_stats, lda_counterfactuals, lda_fit, lda_predict
from .models import ContinualNet, MLPFeatures, ResNet18Features
from .neural_collapse import (
    buffer_population_stats,
    class_covariance,
    class_means_vars,
    nc_metrics,
    numerical_rank,
    projection_norms,
    subspace_projector,
)
from .probe import LinearProbe, forgetting, forgetting_matrix
from .replay import ContinualResult, ERConfig, batch_split, plan_task, run_continual

__all__ = [
    "BalancedReplayBuffer",
    "ReplayBuffer",
    "ReservoirBuffer",
    "make_buffer",
    "RunConfig",
    "config_for",
    "ContinualData",
    "load_cifar",
    "load_image_folder",
    "load_npz_tasks",
    "orthogonal_subspace_tasks",
    "split_digits",
    "final_diagnostics",
    "gaussian_stats",
    "lda_counterfactuals",
    "lda_fit",
    "lda_predict",
    "ContinualNet",
    "MLPFeatures",
    "ResNet18Features",
    "buffer_population_stats",
    "class_covariance",
    "class_means_vars",
    "nc_metrics",
    "numerical_rank",
    "projection_norms",
    "subspace_projector",
    "LinearProbe",
    "forgetting",
    "forgetting_matrix",
    "ContinualResult",
    "ERConfig",
    "batch_split",
    "plan_task",
    "run_continual",
]
