"""The typed run configuration of the reproduction: one frozen dataclass tree, defined once.

``iclr26 run forgetting --scale small --show-config`` prints every leaf with its docstring line;
``--set train.lr=0.05`` (any dotted leaf) overrides it. ``config_for(scale)`` is the only place
where the scales differ. Training defaults are the official code's ER run (``models/er_balanced.py``
with the Mammoth CLI defaults: SGD lr 0.1, momentum 0, batch 32 + replay 32); the CPU scales add
the CPU design's weight decay 5e-4 (the theory's shrinkage υ = 1 − ηλ needs λ > 0; the official CLI
default is 0, the paper-scale default here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .replay import ERConfig


@dataclass(frozen=True)
class GridConfig:
    """Which runs make up the reproduction.

    datasets: CPU-scale datasets ("split-digits", "orthogonal-subspaces"); paper scale reads data.path.
    buffer_fracs: CIL buffer sizes as fractions of the training set, M = round(f * N_train); must include 0.
    til_fracs: TIL (multi-head) buffer fractions, a subset of buffer_fracs (C4 compares the gaps there).
    workers: worker processes for the CPU grid (results do not depend on it).
    """

    datasets: tuple[str, ...] = ("split-digits", "orthogonal-subspaces")
    buffer_fracs: tuple[float, ...] = (0.0, 0.008, 0.016, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0)
    til_fracs: tuple[float, ...] = (0.0, 0.016, 0.08, 0.32)
    workers: int = 2

    def __post_init__(self) -> None:
        if any(not 0 <= f <= 1 for f in self.buffer_fracs + self.til_fracs):
            raise ValueError("buffer fractions must lie in [0, 1]")
        if not set(self.til_fracs) <= set(self.buffer_fracs):
            raise ValueError("til_fracs must be a subset of buffer_fracs")
        if 0.0 not in self.buffer_fracs:
            raise ValueError("buffer_fracs must include 0 (the no-replay run)")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")


@dataclass(frozen=True)
class ModelConfig:
    """The network phi (features) + linear head.

    backbone: "mlp" (CPU scale, arrays) or "resnet18" (CIFAR ResNet-18 of the paper, images); "auto" = by data.
    hidden: hidden widths of the MLP.
    d_feat: MLP feature width (32-64 keeps the population covariance rank above the class count).
    nf: ResNet-18 base width (Mammoth: 64, feature dim 8 * nf).
    """

    backbone: Literal["auto", "mlp", "resnet18"] = "auto"
    hidden: tuple[int, ...] = (256, 256)
    d_feat: int = 64
    nf: int = 64


@dataclass(frozen=True)
class EvalConfig:
    """Probes, forgetting and the LDA counterfactual.

    probe_C: inverse L2 strength of the logistic-regression probe (official: 10).
    probe_backend: "sklearn" (official LogisticRegression, lbfgs) or "torch" (same objective, L-BFGS on device).
    forgetting_ref: "diagonal": F = A_jj - A_Tj (paper); "max": max_k A_kj - A_Tj (Mammoth's logger).
    lda_ridge: relative ridge of the LDA covariance inverse, Sigma + eps tr(Sigma)/d I.
    """

    probe_C: float = 10.0
    probe_backend: Literal["sklearn", "torch"] = "sklearn"
    forgetting_ref: Literal["diagonal", "max"] = "diagonal"
    lda_ridge: float = 1e-2


@dataclass(frozen=True)
class DataConfig:
    """Paper-scale data from local disk (nothing is downloaded).

    path: CIFAR-10/100 root (python pickle batches), an image folder root/{train,test}/<class>/, or .npz.
    format: "auto" (by what path holds), "cifar", "image_folder" or "npz".
    n_tasks: number of tasks the classes are split into (official Seq-CIFAR-100: 10).
    image_size: resize image-folder images to this side (None: keep).
    augment: random crop (pad 4) + horizontal flip of stream and replayed images (Mammoth's CIFAR transform).
    trust_pickles: opt in to reading CIFAR's python batches, which are pickles (a pickle can run code when loaded).
    """

    path: str = ""
    format: Literal["auto", "cifar", "image_folder", "npz"] = "auto"
    n_tasks: int = 10
    image_size: int | None = None
    augment: bool = True
    trust_pickles: bool = False


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of the forgetting reproduction.

    grid: datasets, buffer sizes, settings.
    model: the network.
    train: ER training (official defaults; setting and buffer_size are set per grid cell).
    eval: probes and forgetting measures.
    data: paper-scale data path.
    log_every: per-step training loss logged every this many steps (metrics.jsonl).
    """

    grid: GridConfig = GridConfig()
    model: ModelConfig = ModelConfig()
    train: ERConfig = ERConfig()
    eval: EvalConfig = EvalConfig()
    data: DataConfig = DataConfig()
    log_every: int = 100


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only here.

    small: spec CPU design, 100 epochs per task (terminal phase), weight decay 5e-4, d_feat 64.
    smoke: 1 seed-sized grid {0, 4%, 100%} (TIL {4%}), 10 epochs, one worker.
    paper: official Seq-CIFAR-100 ER (50 epochs, weight decay 0), buffers 0, 1, 5, 10% of 50k.
    """
    base = RunConfig()
    small = replace(base, train=replace(base.train, epochs=100, weight_decay=5e-4))
    if scale == "small":
        return small
    if scale == "smoke":
        return replace(
            small,
            grid=replace(small.grid, buffer_fracs=(0.0, 0.04, 1.0), til_fracs=(0.04,), workers=1),
            train=replace(small.train, epochs=10),
        )
    if scale == "paper":
        return replace(
            base,
            grid=replace(base.grid, datasets=(), buffer_fracs=(0.0, 0.01, 0.05, 0.1), til_fracs=(), workers=1),
            log_every=50,
        )
    raise ValueError(f"unknown scale '{scale}'")
