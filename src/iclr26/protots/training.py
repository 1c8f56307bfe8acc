"""Two-stage training of ProtoTS (Sec. 3.5) on :class:`~iclr26.protots.data.Windows`, through core.train.fit.

Stage 1 (:func:`fit_root`) trains the encoder and the root prototypes; :meth:`ProtoTS.split` adds children;
stage 2 (:func:`fit_children`) continues training (everything at a lower lr, or only the new children).
Early stopping keeps the weights of the epoch with the lowest validation MAE. Under ``torchrun`` each rank
takes every world-th window of the global batch (core.train wraps the model in DistributedDataParallel).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from iclr26.core.train import TrainConfig, fit
from iclr26.protots.config import StageConfig
from iclr26.protots.data import Windows
from iclr26.protots.model import ProtoTS, assignment_entropy, protots_loss


def _to(w: Windows, device: str) -> Windows:
    return (
        w
        if device == "cpu"
        else Windows(*(t.to(device) for t in (w.y_hist, w.x_dis, w.x_con, w.y, w.start, w.regime, w.festival)))
    )


def evaluate(predict: Callable[[Windows], torch.Tensor], w: Windows) -> dict[str, float]:
    """MAE and MSE of a predictor on windows (in the units of ``w.y``)."""
    with torch.no_grad():
        err = predict(w) - w.y
    return {"mae": float(err.abs().mean()), "mse": float(err.pow(2).mean())}


def fit_windows(
    model: nn.Module,
    train: Windows,
    val: Windows,
    stage: StageConfig,
    loss_fn: Callable[[nn.Module, Windows], Any],
    predict: Callable[[nn.Module, Windows], torch.Tensor],
    seed: int = 0,
    log: Callable[..., None] | None = None,
    progress: bool = False,
    desc: str = "train",
    device: str = "cpu",
) -> dict[str, Any]:
    """Train ``model`` for ``stage.epochs`` passes with Adam (core.train.fit, no weight decay, warmup then
    cosine), evaluate validation MAE after every epoch and restore the best epoch's weights."""
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"  # one GPU per torchrun rank
    model.to(device)
    train, val = _to(train, device), _to(val, device)
    n = len(train)
    if n == 0 or len(val) == 0:
        raise ValueError(f"need training and validation windows, got {n} and {len(val)}")
    bs = min(stage.batch_size, n)
    per_epoch = math.ceil(n / bs)
    steps = max(1, stage.epochs * per_epoch)
    tc = TrainConfig(
        steps=steps,
        lr=stage.lr,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        warmup_steps=int(stage.warmup_frac * steps),
        min_lr_ratio=0.1,
        grad_clip=stage.grad_clip,
        eval_every=per_epoch,
        log_every=per_epoch,
        progress=progress,
        desc=desc,
    )
    gen = torch.Generator().manual_seed(seed)
    perms: dict[int, torch.Tensor] = {}

    def get_batch(step: int, rank: int, world: int) -> Windows:
        epoch, i = divmod(step, per_epoch)
        while epoch not in perms:  # epochs are drawn in order, so the batches depend only on the seed
            perms[len(perms)] = torch.randperm(n, generator=gen)
        idx = perms[epoch][i * bs : (i + 1) * bs][rank::world]
        return train.subset(idx.to(train.y.device))

    best: dict[str, Any] = {"mae": math.inf, "state": None, "epoch": 0}

    def eval_fn(m: nn.Module, step: int) -> dict[str, float]:
        mae = float((predict(m, val) - val.y).abs().mean())
        if mae < best["mae"]:
            best.update(mae=mae, state=copy.deepcopy(m.state_dict()), epoch=step // per_epoch)
        return {"val_mae": mae}

    torch.manual_seed(seed)
    fit(model, loss_fn, get_batch, tc, eval_fn=eval_fn, log=log)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return {"best_val_mae": best["mae"], "best_epoch": best["epoch"], "steps": steps}


# --------------------------------------------------------------------------------------------------
# ProtoTS stages
# --------------------------------------------------------------------------------------------------


def _protots_loss_fn(lam: float, l1_reduction: str) -> Callable[[nn.Module, Windows], Any]:
    def loss_fn(m: nn.Module, b: Windows):
        y_hat, f = m(b.y_hist, b.x_dis, b.x_con)
        loss = protots_loss(y_hat, b.y, f, lam, l1_reduction)
        with torch.no_grad():
            extras = {"mae": float((y_hat - b.y).abs().mean()), "entropy": float(assignment_entropy(f).mean())}
        return loss, extras

    return loss_fn


def _protots_predict(m: nn.Module, w: Windows) -> torch.Tensor:
    return m.predict(w.y_hist, w.x_dis, w.x_con)


def set_trainable(model: ProtoTS, which: str) -> None:
    """``"all"``: every parameter except the unused curves of split prototypes; ``"children"``: only the
    prototypes created by the last split (mu and p), so roots and encoder stay as they are."""
    if which not in ("all", "children"):
        raise ValueError(f"trainable must be 'all' or 'children', got {which!r}")
    for prm in model.parameters():
        prm.requires_grad_(which == "all")
    if which == "children":
        if not model.last_split:
            raise ValueError("trainable='children' needs a split first")
        for pid in model.last_split:
            node = model.node(pid)
            node.mu.requires_grad_(True)
            node.p.requires_grad_(len(node.kids) == 0)
    for _, node in _internal_nodes(model):
        node.p.requires_grad_(False)


def _internal_nodes(model: ProtoTS):
    stack = [(str(i), r) for i, r in enumerate(model.roots)]
    while stack:
        pid, node = stack.pop()
        if len(node.kids):
            yield pid, node
            stack += [(f"{pid}.{j}", c) for j, c in enumerate(node.kids)]


def _fit_protots(model: ProtoTS, train: Windows, val: Windows, stage: StageConfig, **kw) -> dict[str, Any]:
    set_trainable(model, stage.trainable)
    try:
        return fit_windows(
            model, train, val, stage, _protots_loss_fn(model.cfg.lam, model.cfg.l1_reduction), _protots_predict, **kw
        )
    finally:
        set_trainable(model, "all")


def fit_root(model: ProtoTS, train: Windows, val: Windows, stage: StageConfig | None = None, **kw) -> dict:
    """Stage 1: encoder + root prototypes, loss Eq. 6, early stopping on validation MAE (roots first
    initialised from the data when ``model.cfg.proto_init == "kmeans"``)."""
    stage = stage or StageConfig()
    if model.cfg.proto_init == "kmeans":
        model.init_prototypes(train.y_hist, train.x_dis, train.x_con, train.y, seed=kw.get("seed", 0))
    return _fit_protots(model, train, val, stage, **kw)


def fit_children(model: ProtoTS, train: Windows, val: Windows, stage: StageConfig | None = None, **kw) -> dict:
    """Stage 2 after :meth:`ProtoTS.split` (or an expert's :meth:`ProtoTS.split_prototype`); default
    stage: 10 epochs at lr 3e-4."""
    stage = stage or StageConfig(epochs=10, lr=3e-4)
    return _fit_protots(model, train, val, stage, **kw)
