"""Paper scale: the same training and diagnostics on a local dataset with a larger backbone.

Data (``--set data.path=PATH``, nothing is downloaded):

* CIFAR-10 / CIFAR-100 as distributed (``PATH/cifar-100-python/{train,test}`` or
  ``PATH/cifar-10-batches-py/data_batch_1..5, test_batch``), read through torchvision's dataset
  classes with download off (or the same pickle files directly when torchvision is not importable),
  split into ``data.n_tasks=10`` tasks with the class order permuted by the seed, trained with the
  package's CIFAR ResNet-18 and random-crop + flip augmentation of stream and replay;
* an image folder ``PATH/{train,test}/<class>/*.png``, handled the same way;
* a ``.npz`` file (``x_train, y_train, x_test, y_test``; split into ``data.n_tasks``) or a folder of
  ``task*.npz`` files (one per task), e.g. pre-extracted features, trained with the MLP.

Defaults (``config_for("paper")``) are the official code's Seq-CIFAR-100 ER run: 10 tasks, 50
epochs/task, batch 32 + replay 32, SGD lr 0.1, momentum 0, weight decay 0, class-balanced buffer;
buffers 0, 1, 5, 10% of the training set (500, 2500, 5000 samples on CIFAR-100).

One process: ``iclr26 run forgetting --scale paper --set data.path=/data/cifar100 --set device=cuda``.
Several GPUs (DDP through ``core.train.fit``; every rank plans identical batches, takes its share of
each global batch, rank 0 evaluates and writes the run folder)::

    torchrun --nproc_per_node=4 -m iclr26.forgetting.paper --set data.path=/data/cifar100 --set device=cuda
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from iclr26.core.config import config_to_dict
from iclr26.core.experiment import ExperimentError, RunContext, RunOutput, distributed_main

from .config import RunConfig
from .data import ContinualData, find_cifar, load_cifar, load_image_folder, load_npz_tasks
from .models import MLPFeatures, ResNet18Features
from .study import aggregate, measure_claims, one_run, plot_forgetting, tables_for


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """CIFAR augmentation on a batch, every image with its own draw (Mammoth: RandomCrop(32, padding=4)
    + RandomHorizontalFlip): zero-pad by ``pad``, crop back to HxW at a random offset, flip with p = 1/2.

    One gather for the whole batch: out[n, c, i, j] = xp[n, c, dy_n + i, dx_n + (W-1-j if flip_n else j)].
    """
    n, c, h, w = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    rows = dy[:, None] + torch.arange(h)[None, :]  # (n, h)
    j = torch.arange(w)[None, :]
    cols = dx[:, None] + torch.where(flip[:, None], w - 1 - j, j)  # (n, w)
    return xp[
        torch.arange(n)[:, None, None, None],
        torch.arange(c)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]


def load_paper_data(cfg: RunConfig, path: Path, seed: int) -> tuple[ContinualData, bool]:
    """(data, is_images) from ``cfg.data`` (format "auto": CIFAR layout, image folder, else .npz)."""
    d = cfg.data
    fmt = d.format
    if fmt == "auto":
        fmt = "cifar" if find_cifar(path) else "image_folder" if (path / "train").is_dir() else "npz"
    try:
        if fmt == "cifar":
            return load_cifar(path, d.n_tasks, seed=seed, trust_pickles=d.trust_pickles), True
        if fmt == "image_folder":
            return load_image_folder(path, d.n_tasks, seed=seed, image_size=d.image_size), True
        return load_npz_tasks(path, n_tasks=d.n_tasks, seed=seed, permute_classes=True), False
    except ValueError as exc:
        raise ExperimentError(f"--set data.path={path}: {exc}") from None


def _device(ctx: RunContext) -> str:
    dev = ctx.device
    if dev.startswith("cuda") and "LOCAL_RANK" in os.environ:
        dev = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(dev)
    return dev


def run_paper(ctx: RunContext, cfg: RunConfig) -> RunOutput:
    path = ctx.require_path("data.path")
    device = _device(ctx)
    results, data_name = {}, None
    for seed in ctx.seeds:
        data, images = load_paper_data(cfg, path, seed)
        data_name = data.name
        bb = cfg.model.backbone if cfg.model.backbone != "auto" else ("resnet18" if images else "mlp")
        if bb == "resnet18" and data.x_train.ndim != 4:
            raise ExperimentError("model.backbone=resnet18 needs images (N, C, H, W)")
        in_ch, in_dim = int(data.x_train.shape[1]), int(np.prod(data.x_train.shape[1:]))
        if bb == "resnet18":

            def make(nf=cfg.model.nf, in_ch=in_ch):
                return ResNet18Features(in_ch, nf)
        else:

            def make(in_dim=in_dim, m=cfg.model):
                return MLPFeatures(in_dim, m.hidden, m.d_feat)

        augment = random_crop_flip if (images and cfg.data.augment) else None
        cells = [("cil", f) for f in cfg.grid.buffer_fracs] + [("til", f) for f in cfg.grid.til_fracs]
        for setting, f in cells:
            series = f"{data.name}/{setting}/{100 * f:g}%/seed{seed}"
            results[(data.name, setting, f, seed)] = one_run(
                data,
                setting,
                f,
                seed,
                cfg,
                device,
                make_features=make,
                augment=augment,
                progress=ctx.show_progress,
                log=ctx.logger(series),
            )
    if any("F_sh" not in r for r in results.values()):  # non-zero torchrun rank
        return RunOutput(metrics={}, measured={})
    grid = replace(cfg.grid, datasets=(data_name,))
    agg = aggregate(results, grid, ctx.seeds, datasets=(data_name,))
    measured = measure_claims(agg, grid)
    plot_forgetting(ctx.figure_path("forgetting_vs_buffer"), agg)
    per_seed = {f"{d}/{st}/{r['buffer_size']}/seed{s}": r for (d, st, f, s), r in results.items()}
    return RunOutput(
        metrics={
            "config": config_to_dict(cfg),
            "runs": per_seed,
            "aggregate": {st: {str(r["buffer_size"]): r for r in rows.values()} for st, rows in agg[data_name].items()},
        },
        measured=measured,
        tables=tables_for(agg),
        notes=[f"paper scale on {path} ({data_name})"],
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m iclr26.forgetting.paper --set key=value ... [--seeds 0,1] [--out runs]`` (also under torchrun)."""
    return distributed_main("forgetting", argv)


if __name__ == "__main__":
    raise SystemExit(main())
