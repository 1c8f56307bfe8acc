"""One training loop for every paper: :func:`fit`.

AdamW, linear warmup then cosine decay to ``min_lr_ratio * lr``, gradient clipping, an eval
callback, a progress bar, a checkpoint every N steps and exact resume, and DistributedDataParallel
when started under ``torchrun`` (gloo on CPU, nccl on GPU), unchanged from one process.

Data is a function of the step, ``get_batch(step, rank, world_size) -> batch``. That one choice
makes resume exact (the batch at step ``t`` does not depend on how we got there) and makes the
global batch under DDP the concatenation of the ranks' local batches.

Learning rate at step t (0-based), with warmup W and total S::

    lr_t = lr * (t + 1) / W                                         for t < W
    lr_t = lr * (r + (1 - r) * (1 + cos(pi * (t - W) / (S - W))) / 2) otherwise, r = min_lr_ratio
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from iclr26.core.progress import progress_disabled
from iclr26.core.serialize import to_jsonable


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of :func:`fit`.

    steps: total optimiser steps.
    lr: peak learning rate.
    weight_decay: AdamW decoupled weight decay (applied to weights with >= 2 dims only).
    betas: AdamW betas.
    warmup_steps: linear warmup length.
    min_lr_ratio: final lr as a fraction of ``lr`` at the end of the cosine.
    grad_clip: max global grad norm (0 disables).
    eval_every: call ``eval_fn`` every N steps (0: only at the end).
    ckpt_every: write a checkpoint every N steps (0: never).
    log_every: refresh the progress-bar loss every N steps.
    progress: draw a progress bar.
    desc: progress-bar label.
    grad_accum: micro-batches per optimiser step; step t uses ``get_batch(t * grad_accum + i)`` for
        i < grad_accum and the mean of their losses (equal to one step on the concatenated batch when
        micro-batches have equal size and the loss is a mean).
    """

    steps: int = 1000
    lr: float = 3e-4
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 0
    ckpt_every: int = 0
    log_every: int = 10
    progress: bool = True
    desc: str = "train"
    grad_accum: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1 or self.lr <= 0 or self.warmup_steps < 0 or self.grad_accum < 1:
            raise ValueError(
                f"bad TrainConfig: steps={self.steps}, lr={self.lr}, warmup={self.warmup_steps}, "
                f"grad_accum={self.grad_accum}"
            )


def warmup_cosine(step: int, total: int, peak: float, warmup: int = 0, min_ratio: float = 0.0) -> float:
    r"""The one learning-rate schedule of the project: linear warmup, then cosine decay.

    .. math::

        \eta_t = \eta\,\frac{t+1}{W} \;(t < W), \qquad
        \eta_t = \eta\,\Big(r + (1-r)\,\tfrac12\big(1+\cos(\pi\,\min(1, \tfrac{t-W}{\max(1, N-W)}))\big)\Big)

    with ``W`` = ``warmup``, ``N`` = ``total`` steps, ``r`` = ``min_ratio`` (the final fraction of the peak).
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def lr_at(step: int, cfg: TrainConfig) -> float:
    """:func:`warmup_cosine` with ``cfg``'s peak, warmup, total steps and final ratio."""
    return warmup_cosine(step, cfg.steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, norms, or 1-d parameters)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


# --------------------------------------------------------------------------------------------------
# Distributed helpers
# --------------------------------------------------------------------------------------------------


def setup_distributed(device: str | torch.device | None = None) -> tuple[int, int]:
    """Initialise torch.distributed when started by torchrun (WORLD_SIZE > 1). Returns (rank, world).

    NCCL when CUDA is available and ``device`` is CUDA (or not given), gloo otherwise. On CUDA each rank is
    bound to ``cuda:LOCAL_RANK`` *before* the process group exists, so no collective runs on the wrong GPU;
    put the model on :func:`rank_device` ``(device)``.
    """
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        cuda = torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_device(device: str | torch.device) -> str:
    """This rank's device: ``cuda:LOCAL_RANK`` for a CUDA ``device`` under torchrun, ``device`` otherwise."""
    device = str(device)
    if device.startswith("cuda") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _mean_across_ranks(value: torch.Tensor, world: int) -> float:
    if world > 1:
        import torch.distributed as dist

        value = value.detach().clone()
        dist.all_reduce(value)
        value /= world
    return float(value.detach())


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


@dataclass
class FitResult:
    """losses: training loss per step (mean over ranks); evals: (step, metrics) pairs."""

    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    steps: int = 0
    resumed_from: int | None = None


CKPT_NAME = "checkpoint.pt"


def save_checkpoint(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, result: FitResult, cfg: TrainConfig
) -> None:
    """Atomic write of everything resume needs: weights, optimiser moments, step, RNG state, history."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "torch_rng": torch.get_rng_state(),
        "losses": list(result.losses),
        "evals": [(int(step), to_jsonable(metrics)) for step, metrics in result.evals],  # plain types only
        "config": asdict(cfg),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _is_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, torch.Tensor) and value.numel() == 1


def load_checkpoint(path: Path, cfg: TrainConfig | None = None) -> dict[str, Any]:
    """Read a :func:`save_checkpoint` file without running code from it (``weights_only=True``).

    With ``cfg``, the checkpoint's recorded config must equal it except for the fields that do not
    change the optimisation (progress bar, logging, eval and checkpoint cadence); otherwise a
    ValueError names the differing fields, so a resumed run is the run that was started.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle payloads beyond tensors/containers, truncated files...
        raise ValueError(f"{path}: not a checkpoint this library wrote ({type(exc).__name__}: {exc})") from None
    keys = ("model", "optimizer", "step", "torch_rng", "losses", "evals", "config")
    if not isinstance(state, dict) or any(k not in state for k in keys):
        lacking = [k for k in keys if not isinstance(state, dict) or k not in state]
        raise ValueError(f"{path}: checkpoint lacks {lacking}")
    if cfg is not None:
        saved, now = state["config"], _jsonish(asdict(cfg))
        ignore = {"progress", "desc", "log_every", "eval_every", "ckpt_every"}
        diff = sorted(k for k in set(saved) | set(now) if k not in ignore and _jsonish(saved.get(k)) != now.get(k))
        if diff:
            detail = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {now.get(k)!r}" for k in diff)
            raise ValueError(
                f"{path}: refusing to resume with a different config ({detail}); use another ckpt_dir or resume=False"
            )
    return state


def _jsonish(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonish(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonish(v) for v in value]
    return value


def fit(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], Any],
    get_batch: Callable[[int, int, int], Any],
    cfg: TrainConfig,
    *,
    eval_fn: Callable[[nn.Module, int], dict[str, Any]] | None = None,
    ckpt_dir: str | Path | None = None,
    resume: bool = True,
    optimizer: torch.optim.Optimizer | None = None,
    log: Callable[..., None] | None = None,
) -> FitResult:
    """Train ``model`` for ``cfg.steps`` steps.

    loss_fn(model, batch) -> scalar loss tensor, or (loss, metrics dict).
    get_batch(step, rank, world_size) -> this rank's part of the global batch at ``step``.
    eval_fn(model, step) -> metrics dict; runs under ``torch.no_grad`` in eval mode.
    ckpt_dir: where ``checkpoint.pt`` is written every ``cfg.ckpt_every`` steps and at the end; with
        ``resume=True`` an existing checkpoint there is loaded and training continues from it.
    log: ``log(step, **scalars)`` (e.g. ``RunContext.logger("seed0")``), called on rank 0 every
        ``cfg.log_every`` steps with ``loss``, ``lr``, ``grad_norm`` (before clipping) and the
        scalars ``loss_fn`` returned, averaged over the step's micro-batches, and with each eval's
        metrics (prefixed ``eval_``).
    Under torchrun the model is wrapped in DistributedDataParallel (gradients averaged over ranks);
    only rank 0 writes checkpoints, logs and draws the progress bar.

    Checkpoints are loaded with ``weights_only=True`` (no code runs from the file), and resuming
    with a config that differs from the checkpoint's raises ValueError naming the fields.
    """
    from tqdm.auto import tqdm

    rank, world = setup_distributed()
    optimizer = optimizer or make_optimizer(model, cfg)
    result = FitResult()
    start = 0
    ckpt_path = Path(ckpt_dir) / CKPT_NAME if ckpt_dir is not None else None
    if ckpt_path is not None and resume and ckpt_path.exists():
        state = load_checkpoint(ckpt_path, cfg)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        start = int(state["step"])
        result.losses, result.evals = list(state["losses"]), list(state["evals"])
        result.resumed_from = start

    train_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model)

    def run_eval(step: int) -> None:
        if eval_fn is None:
            return
        model.eval()
        with torch.no_grad():
            metrics = eval_fn(model, step)
        model.train()
        result.evals.append((step, dict(metrics)))
        if log is not None and rank == 0:
            log(step, **{f"eval_{k}": v for k, v in metrics.items() if _is_scalar(v)})

    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        desc=cfg.desc,
        disable=not cfg.progress or rank != 0 or progress_disabled(),
        leave=False,
        dynamic_ncols=True,
    )
    model.train()
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        k = cfg.grad_accum
        loss = torch.zeros(())
        extras: dict[str, float] = {}
        for micro in range(k):
            # DDP all-reduces gradients only on the last micro-batch of the step
            sync = nullcontext() if world == 1 or micro == k - 1 else train_model.no_sync()
            with sync:
                out = loss_fn(train_model, get_batch(step * k + micro, rank, world))
                micro_loss = (out[0] if isinstance(out, tuple) else out) / k
                if not torch.isfinite(micro_loss):
                    raise FloatingPointError(f"non-finite loss {float(micro_loss.detach())} at step {step}")
                micro_loss.backward()
            loss = loss + micro_loss.detach()
            if isinstance(out, tuple) and len(out) > 1 and isinstance(out[1], dict):
                for key, value in out[1].items():
                    if _is_scalar(value):
                        extras[key] = extras.get(key, 0.0) + float(value) / k
        params = [p for p in model.parameters() if p.grad is not None]
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = float(nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0
        optimizer.step()
        result.losses.append(_mean_across_ranks(loss, world))
        done = step + 1
        if cfg.log_every and done % cfg.log_every == 0:
            bar.set_postfix(loss=f"{result.losses[-1]:.4f}", lr=f"{lr:.2e}")
            if log is not None and rank == 0:
                log(done, loss=result.losses[-1], lr=lr, grad_norm=grad_norm, **extras)
        if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
            run_eval(done)
        if ckpt_path is not None and cfg.ckpt_every and done % cfg.ckpt_every == 0 and rank == 0:
            save_checkpoint(ckpt_path, model, optimizer, done, result, cfg)
    bar.close()
    if not result.evals or result.evals[-1][0] != cfg.steps:
        run_eval(cfg.steps)
    if ckpt_path is not None and rank == 0:
        save_checkpoint(ckpt_path, model, optimizer, cfg.steps, result, cfg)
    result.steps = cfg.steps
    return result
