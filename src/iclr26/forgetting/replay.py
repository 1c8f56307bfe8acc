"""Continual training with Experience Replay (ER) and evaluation after every task.

Protocol (official ``er_balanced``), with ``overall = batch_size + minibatch_size``:

* task 0 (buffer empty): plain SGD on stream batches of ``batch_size``;
* task t >= 1 (buffer non-empty, balanced policy): each step uses ``overall // (t+1)`` stream samples
  and ``overall - overall // (t+1)`` replayed samples (``min(., len(buffer))``), so every seen task
  gets about an equal share of the batch; every later task runs at most task 0's step count + 1
  steps (the official guard ``if first_task_iterations < current_task_iterations: return`` runs
  the step that makes the counts equal, so one more than task 0);
* the loss is CE over the concatenated batch. CIL: logits of all output units; TIL: each sample's
  logits restricted to its own task's head;
* ``end_task``: the balanced buffer is rebuilt (see :mod:`.buffer`).

With ``buffer_size = 0`` this is exactly fine-tuning (batch ``batch_size``, no cap). With the
reservoir policy (classic ER) the stream batch is always ``batch_size``, the replay minibatch
``minibatch_size``, the buffer is updated with every stream batch and there is no step cap.

The batches of a task are a deterministic function of (seed, task, step) and are planned before
the task starts (the plan does not depend on the model), so every step goes through
:func:`iclr26.core.train.fit` unchanged from one process to torchrun DDP: each rank takes its
contiguous share of the global batch. The optimiser is SGD, re-created at every task (Mammoth).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.core.train import TrainConfig, fit

from .buffer import ReplayBuffer, make_buffer
from .data import ContinualData
from .models import ContinualNet
from .probe import LinearProbe


@dataclass(frozen=True)
class ERConfig:
    """Experience Replay settings (defaults: the official code's CIFAR-100 ER run).

    setting: "cil" (single head over all classes) or "til" (one head per task).
    buffer_size: M, number of stored samples (0 = fine-tuning, no replay).
    buffer_policy: "balanced" (official er_balanced, paper) or "reservoir" (classic ER).
    epochs: epochs per task (official CIFAR-100: 50; CPU scale here: 100).
    batch_size: stream batch size of task 0 (official: 32).
    minibatch_size: replay minibatch size; ``batch_size + minibatch_size`` is the overall batch.
    lr: SGD learning rate (official ER: 0.1).
    momentum: SGD momentum (official default: 0).
    weight_decay: SGD L2 weight decay lambda (official CLI default: 0; the theory needs lambda > 0).
    equal_share: balanced policy: split the overall batch equally over the seen tasks (official).
    cap_steps: balanced policy: cap every later task at task 0's number of steps + 1 (official guard).
    """

    setting: Literal["cil", "til"] = "cil"
    buffer_size: int = 0
    buffer_policy: Literal["balanced", "reservoir"] = "balanced"
    epochs: int = 50
    batch_size: int = 32
    minibatch_size: int = 32
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    equal_share: bool = True
    cap_steps: bool = True

    def __post_init__(self) -> None:
        if self.setting not in ("cil", "til"):
            raise ValueError(f"setting must be 'cil' or 'til', got '{self.setting}'")
        if self.buffer_policy not in ("balanced", "reservoir"):
            raise ValueError(f"buffer_policy must be 'balanced' or 'reservoir', got '{self.buffer_policy}'")
        if self.buffer_size < 0 or self.epochs < 1 or self.batch_size < 1 or self.minibatch_size < 0:
            raise ValueError(
                f"bad ERConfig sizes: buffer={self.buffer_size}, epochs={self.epochs}, "
                f"batch={self.batch_size}, minibatch={self.minibatch_size}"
            )
        if self.lr <= 0 or self.weight_decay < 0 or not 0 <= self.momentum < 1:
            raise ValueError(f"bad ERConfig optimiser: lr={self.lr}, momentum={self.momentum}, wd={self.weight_decay}")


def batch_split(cfg: ERConfig, task: int, buffer_len: int) -> tuple[int, int]:
    """(stream, replay) sizes of one step of task ``task`` (0-based) given the buffer's length."""
    if buffer_len == 0 or cfg.buffer_size == 0:
        return cfg.batch_size, 0
    if cfg.buffer_policy == "reservoir" or not cfg.equal_share:
        return cfg.batch_size, min(cfg.minibatch_size, buffer_len)
    overall = cfg.batch_size + cfg.minibatch_size
    stream = max(1, overall // (task + 1))
    return stream, min(overall - stream, buffer_len)


def stream_batches(n: int, batch: int, epochs: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled epochs over ``n`` items chunked into batches of ``batch`` (last batch of an epoch may be short)."""
    out = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        out += [perm[k : k + batch] for k in range(0, n, batch)]
    return out


def plan_task(
    data: ContinualData,
    task: int,
    buffer: ReplayBuffer,
    cfg: ERConfig,
    rng: np.random.Generator,
    first_task_steps: int | None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (stream indices, replay indices) of every step of ``task``. Updates an online (reservoir) buffer."""
    idx = data.task_indices(task)
    stream_bs, _ = batch_split(cfg, task, len(buffer))
    if cfg.buffer_policy == "reservoir" and cfg.buffer_size > 0:
        stream_bs = cfg.batch_size
    batches = stream_batches(len(idx), stream_bs, cfg.epochs, rng)
    if (
        cfg.cap_steps
        and cfg.buffer_policy == "balanced"
        and task > 0
        and not buffer.is_empty()
        and first_task_steps is not None
    ):
        batches = batches[: first_task_steps + 1]  # official guard: one step more than task 0
    plan = []
    y_all = data.y_train.numpy()
    for b in batches:
        s = idx[b]
        _, n_rep = batch_split(cfg, task, len(buffer))
        r = buffer.sample(n_rep, rng)
        plan.append((s, r))
        buffer.observe(s, y_all[s], rng)
    return plan


def er_loss(net: ContinualNet, model: torch.nn.Module, batch, setting: str) -> torch.Tensor:
    """CE over the concatenated stream + replay batch; TIL restricts each sample to its task's head."""
    x, y, t = batch
    logits = model(x)
    if setting == "til":
        logits = net.task_logits(logits, t)
    return F.cross_entropy(logits, y)


@torch.no_grad()
def extract(
    net: ContinualNet, x: torch.Tensor, device: str = "cpu", chunk: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """(features phi(x), logits) in eval mode, as float64 numpy arrays."""
    was_training = net.training
    net.eval()
    feats, logits = [], []
    for k in range(0, len(x), chunk):
        z = net.features(x[k : k + chunk].to(device))
        feats.append(z.double().cpu())
        logits.append(net.head(z).double().cpu())
    net.train(was_training)
    return torch.cat(feats).numpy(), torch.cat(logits).numpy()


@dataclass
class SessionFeatures:
    """Clean (non-augmented) features and logits of every train/test sample after one session."""

    z_train: np.ndarray
    logits_train: np.ndarray
    z_test: np.ndarray
    logits_test: np.ndarray


def shallow_accuracy(
    net: ContinualNet, data: ContinualData, logits_test: np.ndarray, session: int, task: int, setting: str
) -> float:
    """A_ij: own-head accuracy on task j's test set after session i (CIL: over seen classes; TIL: task head)."""
    idx = data.task_indices(task, "test")
    lg = logits_test[idx].copy()
    if setting == "til":
        allowed = net.task_mask[task].cpu().numpy()
    else:
        allowed = net.task_mask[: session + 1].any(0).cpu().numpy()
    lg[:, ~allowed] = -np.inf
    return float((lg.argmax(1) == data.y_test.numpy()[idx]).mean())


def deep_accuracies(
    data: ContinualData, feats: SessionFeatures, session: int, setting: str, probe_factory: Callable[[], LinearProbe]
) -> np.ndarray:
    """A*_ij for j <= i. CIL: one probe over all seen classes fit on the train sets of tasks <= i;
    TIL: one probe per task fit on that task's train set."""
    out = np.full(data.n_tasks, np.nan)
    y_tr, y_te = data.y_train.numpy(), data.y_test.numpy()
    if setting == "cil":
        tr = data.task_indices(list(range(session + 1)))
        probe = probe_factory().fit(feats.z_train[tr], y_tr[tr])
        for j in range(session + 1):
            te = data.task_indices(j, "test")
            out[j] = probe.score(feats.z_test[te], y_te[te])
    else:
        for j in range(session + 1):
            tr, te = data.task_indices(j), data.task_indices(j, "test")
            out[j] = probe_factory().fit(feats.z_train[tr], y_tr[tr]).score(feats.z_test[te], y_te[te])
    return out


@dataclass
class ContinualResult:
    """Everything one continual run produces.

    acc_shallow, acc_deep: (T, T) matrices A and A* (NaN for j > i), fractions in [0, 1].
    buffer_last_task: (indices, labels) of the buffer replayed during the last task.
    steps: optimiser steps per task. losses: training loss per step (all tasks).
    final: the features after the last session. train_acc: own-head accuracy on the current task's
    train set at the end of each task (terminal-phase check).
    """

    acc_shallow: np.ndarray
    acc_deep: np.ndarray
    buffer_last_task: tuple[np.ndarray, np.ndarray]
    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    final: SessionFeatures | None = None
    train_acc: list[float] = field(default_factory=list)


def run_continual(
    net: ContinualNet,
    data: ContinualData,
    cfg: ERConfig,
    seed: int,
    *,
    device: str = "cpu",
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    probe_factory: Callable[[], LinearProbe] | None = None,
    evaluate: bool = True,
    progress: bool = False,
    on_session: Callable[[int, ContinualNet], None] | None = None,
    log: Callable[..., None] | None = None,
    log_every: int = 50,
) -> ContinualResult:
    """Train ``net`` on the tasks of ``data`` in sequence with ER; evaluate A and A* after every task.

    augment(x, generator) -> x: train-time augmentation of stream and replayed samples (images).
    evaluate: compute A/A* (under torchrun only rank 0 evaluates; the others skip it).
    log: ``log(step, **scalars)`` (e.g. ``RunContext.logger(...)``), handed to ``core.train.fit``
        every ``log_every`` steps; ``step`` counts over all tasks, ``task`` is added to the scalars.
    """
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    probe_factory = probe_factory or (lambda: LinearProbe())
    rng = np.random.default_rng(seed)  # stream order and replay draws
    rng_buffer = np.random.default_rng([seed, 1])  # loader order of the items added to the buffer
    gen = torch.Generator().manual_seed(seed)
    buffer = make_buffer(cfg.buffer_policy, cfg.buffer_size, data.n_classes)
    T = data.n_tasks
    res = ContinualResult(np.full((T, T), np.nan), np.full((T, T), np.nan), (np.zeros(0, int), np.zeros(0, int)))
    first_steps = None
    net.to(device)
    for t in range(T):
        plan = plan_task(data, t, buffer, cfg, rng, first_steps)
        if t == T - 1:
            res.buffer_last_task = (buffer.indices.copy(), buffer.labels.copy())
        if first_steps is None:
            first_steps = len(plan)
        res.steps.append(len(plan))

        def get_batch(step, rk, world, plan=plan):
            s, r = plan[step]
            idx = np.concatenate([s, r])
            part = torch.as_tensor(np.array_split(idx, world)[rk])
            x = data.x_train[part]
            if augment is not None:
                x = augment(x, gen)
            return x.to(device), data.y_train[part].to(device), data.t_train[part].to(device)

        opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        tc = TrainConfig(
            steps=len(plan),
            lr=cfg.lr,
            weight_decay=0.0,
            warmup_steps=0,
            min_lr_ratio=1.0,
            grad_clip=0.0,
            progress=progress,
            desc=f"task {t}",
            log_every=1 if log else 50,
        )
        task_log, offset = None, sum(res.steps[:-1])
        if log is not None:  # fit reports every step; keep every log_every-th step counted over all tasks

            def task_log(step, _offset=offset, _t=t, **scalars):
                if (_offset + step) % log_every == 0:
                    log(_offset + step, task=_t, **scalars)

        fit_res = fit(net, lambda m, b: er_loss(net, m, b, cfg.setting), get_batch, tc, optimizer=opt, log=task_log)
        res.losses += fit_res.losses
        buffer.end_task(t, {c: _loader_order(data, c, rng_buffer) for c in data.task_classes[t]})
        if evaluate and rank == 0:
            tr_logits_z, tr_logits = extract(net, data.x_train, device)
            te_z, te_logits = extract(net, data.x_test, device)
            feats = SessionFeatures(tr_logits_z, tr_logits, te_z, te_logits)
            for j in range(t + 1):
                res.acc_shallow[t, j] = shallow_accuracy(net, data, te_logits, t, j, cfg.setting)
            res.acc_deep[t] = deep_accuracies(data, feats, t, cfg.setting, probe_factory)
            cur = data.task_indices(t)
            lg = tr_logits[cur].copy()
            allowed = (net.task_mask[t] if cfg.setting == "til" else net.task_mask[: t + 1].any(0)).cpu().numpy()
            lg[:, ~allowed] = -np.inf
            res.train_acc.append(float((lg.argmax(1) == data.y_train.numpy()[cur]).mean()))
            res.final = feats
        if on_session is not None:
            on_session(t, net)
    return res


def _loader_order(data: ContinualData, c: int, rng: np.random.Generator) -> np.ndarray:
    """Class c's train indices in the order of a shuffled (non-augmented) loader pass."""
    idx = data.class_indices(c)
    return idx[rng.permutation(len(idx))]


def steps_per_task(data: ContinualData, cfg: ERConfig) -> int:
    """Task 0's step count: epochs * ceil(n_0 / batch_size)."""
    return cfg.epochs * math.ceil(len(data.task_indices(0)) / cfg.batch_size)
