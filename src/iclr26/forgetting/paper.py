"""Paper scale: the same training and diagnostics on a local dataset with a larger backbone.

Data (``--set data=PATH``, nothing is downloaded):

* an image folder ``PATH/{train,test}/<class>/*.png`` (e.g. CIFAR-100 exported to PNG: 100 class
  folders, split into ``n_tasks=10`` tasks of 10 classes, class order permuted by the seed), trained
  with the package's CIFAR ResNet-18 and random-crop + flip augmentation of stream and replay;
* a ``.npz`` file (``x_train, y_train, x_test, y_test``; split into ``n_tasks``) or a folder of
  ``task*.npz`` files (one per task), e.g. pre-extracted features, trained with the MLP.

Defaults are the official code's Seq-CIFAR-100 ER run: 10 tasks, 50 epochs/task, batch 32 +
replay 32, SGD lr 0.1, momentum 0, weight decay 0, class-balanced buffer.

One process: ``iclr26 run forgetting --scale paper --set data=/data/cifar100_png --set device=cuda``.
Several GPUs (DDP through ``core.train.fit``; every rank plans identical batches, takes its share of
each global batch, rank 0 evaluates and writes the run folder)::

    torchrun --nproc_per_node=4 -m iclr26.forgetting.paper --set data=/data/cifar100_png --set device=cuda
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput

from .data import ContinualData, load_image_folder, load_npz_tasks
from .models import MLPFeatures, ResNet18Features


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4) -> torch.Tensor:
    """CIFAR augmentation: zero-pad by ``pad``, random crop back to HxW, random horizontal flip."""
    n, _, h, w = x.shape
    xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        crop = xp[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def _int(ctx: RunContext, key: str, default: int) -> int:
    try:
        return int(ctx.option(key, str(default)))
    except ValueError:
        raise ExperimentError(f"--set {key}={ctx.option(key)}: expected an integer") from None


def _float(ctx: RunContext, key: str, default: float) -> float:
    try:
        return float(ctx.option(key, str(default)))
    except ValueError:
        raise ExperimentError(f"--set {key}={ctx.option(key)}: expected a number") from None


def load_paper_data(ctx: RunContext, seed: int) -> tuple[ContinualData, bool]:
    """(data, is_images) from ``--set data=PATH``."""
    path = ctx.local_path("data")
    n_tasks = _int(ctx, "n_tasks", 10)
    try:
        if path.is_dir() and (path / "train").is_dir():
            size = ctx.option("image_size")
            return load_image_folder(path, n_tasks, seed=seed, image_size=int(size) if size else None), True
        return load_npz_tasks(path, n_tasks=n_tasks, seed=seed, permute_classes=True), False
    except ValueError as exc:
        raise ExperimentError(f"--set data={path}: {exc}") from None


def _device(ctx: RunContext) -> str:
    dev = ctx.device
    if dev.startswith("cuda") and "LOCAL_RANK" in os.environ:
        dev = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(dev)
    return dev


def run_paper(ctx: RunContext) -> RunOutput:
    from .experiment import GridConfig, aggregate, measure_claims, one_run, plot_forgetting, tables_for

    buffers = [int(b) for b in str(ctx.option("buffers", "0,500,2500,5000")).split(",")]
    settings = [s.strip() for s in str(ctx.option("settings", "cil")).split(",")]
    if any(s not in ("cil", "til") for s in settings):
        raise ExperimentError(f"--set settings={ctx.option('settings')}: use cil and/or til")
    if 0 not in buffers or any(b < 0 for b in buffers):
        raise ExperimentError("--set buffers=...: non-negative sizes including 0 (the no-replay run)")
    backbone = ctx.option("backbone")
    device = _device(ctx)
    er = dict(batch_size=_int(ctx, "batch_size", 32), minibatch_size=_int(ctx, "minibatch_size", 32))
    results, grid, data_name = {}, None, None
    for seed in ctx.seeds:
        data, images = load_paper_data(ctx, seed)
        data_name = data.name
        bb = backbone or ("resnet18" if images else "mlp")
        if bb not in ("resnet18", "mlp"):
            raise ExperimentError(f"--set backbone={bb}: use resnet18 or mlp")
        if bb == "resnet18" and data.x_train.ndim != 4:
            raise ExperimentError("backbone resnet18 needs images (N, C, H, W)")
        n_train = len(data.y_train)
        fracs = tuple(sorted({b / n_train for b in buffers if b <= n_train} | {0.0}))
        grid = GridConfig(datasets=(data.name,), buffer_fracs=fracs,
                          til_fracs=fracs if "til" in settings else (), epochs=_int(ctx, "epochs", 50),
                          d_feat=_int(ctx, "d_feat", 32), lr=_float(ctx, "lr", 0.1),
                          momentum=_float(ctx, "momentum", 0.0), weight_decay=_float(ctx, "weight_decay", 0.0),
                          probe_C=_float(ctx, "probe_C", 10.0))
        nf = _int(ctx, "nf", 64)
        in_ch = int(data.x_train.shape[1])
        in_dim = int(np.prod(data.x_train.shape[1:]))
        if bb == "resnet18":
            def make(nf=nf, in_ch=in_ch):
                return ResNet18Features(in_ch, nf)
        else:
            def make(in_dim=in_dim, g=grid):
                return MLPFeatures(in_dim, g.hidden, g.d_feat)
        augment = random_crop_flip if (images and ctx.option("augment", "1") == "1") else None
        for setting in settings:
            for f in fracs:
                results[(data.name, setting, f, seed)] = one_run(
                    data, setting, f, seed, grid, device, make_features=make, er_overrides=er, augment=augment,
                    probe_backend=str(ctx.option("probe", "sklearn")), progress=ctx.show_progress)
    if any("F_sh" not in r for r in results.values()):  # non-zero torchrun rank
        return RunOutput(metrics={}, measured={})
    if "til" not in settings:
        grid = replace(grid, til_fracs=())
    agg = aggregate(results, grid, ctx.seeds, datasets=(data_name,))
    measured = measure_claims(agg, grid)
    plot_forgetting(ctx.figure_path("forgetting_vs_buffer"), agg)
    per_seed = {f"{d}/{st}/{r['buffer_size']}/seed{s}": r for (d, st, f, s), r in results.items()}
    return RunOutput(metrics={"grid": asdict(grid), "options": dict(ctx.options), "runs": per_seed,
                              "aggregate": {st: {str(r["buffer_size"]): r for r in rows.values()}
                                            for st, rows in agg[data_name].items()}},
                     measured=measured, tables=tables_for(agg),
                     notes=[f"paper scale on {ctx.option('data')}", f"grid: {asdict(grid)}", f"ER overrides: {er}"])


def main(argv: list[str] | None = None) -> int:
    """``python -m iclr26.forgetting.paper --set key=value ...`` (also under torchrun)."""
    import argparse
    import tempfile

    import torch.distributed as dist

    from iclr26.core.experiment import run_experiment
    from iclr26.core.train import setup_distributed

    from .experiment import EXPERIMENT

    p = argparse.ArgumentParser(description="forgetting at paper scale (torchrun-able)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seeds", default="0")
    p.add_argument("--out", default="runs")
    args = p.parse_args(argv)
    options = dict(kv.split("=", 1) for kv in args.sets)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    rank, _ = setup_distributed()
    if rank == 0:
        rec = run_experiment(EXPERIMENT, "paper", seeds, out_root=args.out, options=options, show_progress=True)
        print(rec.out_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            ctx = RunContext("paper", seeds, Path(tmp), options, options.get("device", "cpu"), False)
            EXPERIMENT.run(ctx)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
