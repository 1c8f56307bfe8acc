"""The jobs of the toy reproduction (SFT, calibration, RL), each a pure function of (config, seed, inputs),
so that :func:`iclr26.core.parallel.seed_map` can spread them over processes with identical results."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import torch

from .config import RunConfig
from .entropy import calibrate_temperature
from .task import ToyTask
from .toy import build_model, evaluate, pretrain_base, rl_train, rollout_entropy, sft_dataset, train_sft

__all__ = ["Job", "Splits", "make_task", "run_job", "splits"]


@dataclass(frozen=True)
class Splits:
    """Held-out prompts of one seed: hard (k >= hard_k_min) and easy (k <= easy_k_max) evaluation sets,
    and calibration prompts for the fresh-rollout entropy check (all disjoint from training prompts)."""

    hard: list
    easy: list
    fresh: list

    @property
    def exclude(self) -> set:
        return set(self.hard) | set(self.easy) | set(self.fresh)


def make_task(cfg: RunConfig) -> ToyTask:
    return ToyTask(cfg.task.k_min, cfg.task.k_max, cfg.task.p_leftmost, cfg.task.distinct)


def splits(cfg: RunConfig, seed: int) -> Splits:
    task, t = make_task(cfg), cfg.task
    rng = random.Random(f"eval-{seed}")
    hard = task.prompts(t.n_eval, rng, (t.hard_k_min, t.k_max))
    easy = task.prompts(t.n_eval, rng, (t.k_min, t.easy_k_max), exclude=set(hard))
    fresh = task.prompts(cfg.e2.calib_prompts, rng, (cfg.rl.k_min, t.k_max), exclude=set(hard) | set(easy))
    return Splits(hard, easy, fresh)


@dataclass(frozen=True)
class Job:
    """kind: "pretrain" | "sft" | "calibrate" | "rl". seed: run seed. key: what the job computes (dataset index,
    temperature, ...). state: the init's state dict (calibrate / rl)."""

    kind: str
    cfg: RunConfig
    seed: int
    key: tuple
    state: Any = None


def _eval(cfg: RunConfig, model, prompts: list, seed: int) -> dict[str, float]:
    task = make_task(cfg)
    return evaluate(
        model, task, prompts, cfg.task.eval_samples, cfg.task.eval_temperature, task.max_response_len, 10_000 + seed
    )


def _pretrain(job: Job) -> dict:
    """The base model of one seed (shared by every SFT run of that seed)."""
    cfg, seed = job.cfg, job.seed
    model = build_model(cfg.model, seed)
    p = cfg.pretrain
    losses = pretrain_base(model, make_task(cfg), p.steps, p.batch_size, p.lr, seed)
    return {"key": job.key, "final_loss": losses[-1], "state": {k: v.clone() for k, v in model.state_dict().items()}}


def _sft(job: Job) -> dict:
    cfg, seed, (idx,) = job.cfg, job.seed, job.key
    task, sp = make_task(cfg), splits(cfg, seed)
    n, r = cfg.e1.n_prompts[idx], cfg.e1.n_responses[idx]
    prompts, responses = sft_dataset(task, n, r, seed, sp.exclude)
    model = _load(cfg, seed, job.state) if job.state is not None else build_model(cfg.model, seed)
    losses = train_sft(model, task, prompts, responses, cfg.sft, seed)
    out = {
        "key": job.key,
        "n": n,
        "r": r,
        "final_loss": losses[-1],
        "hard": _eval(cfg, model, sp.hard, seed),
        "state": {k: v.clone() for k, v in model.state_dict().items()},
    }
    if idx == cfg.e3.strong:  # the competence gate's easy-split accuracy
        out["easy"] = _eval(cfg, model, sp.easy, seed)
    return out


def _load(cfg: RunConfig, seed: int, state: dict):
    model = build_model(cfg.model, seed)
    model.load_state_dict(state)
    return model


def _calibrate(job: Job) -> dict:
    """T* for one init (bisection, common random numbers), H_T over the grid, H at T* on fresh rollouts."""
    cfg, seed = job.cfg, job.seed
    task, sp, e2 = make_task(cfg), splits(cfg, seed), cfg.e2
    model = _load(cfg, seed, job.state)
    rng = random.Random(f"calib-{seed}")
    calib = task.prompts(e2.calib_prompts, rng, (cfg.rl.k_min, task.k_max), exclude=sp.exclude)
    calib = [p for p in calib for _ in range(cfg.rl.group_size)]
    budget = cfg.rl.budget or task.max_response_len

    def entropy_at(t: float) -> float:
        return rollout_entropy(model, task, calib, t, budget, 20_000 + seed)

    res = calibrate_temperature(entropy_at, e2.entropy_target, (e2.t_min, e2.t_max), e2.tol)
    grid = {str(t): entropy_at(t) for t in e2.temperatures}
    fresh = [p for p in sp.fresh for _ in range(cfg.rl.group_size)]
    h_fresh = rollout_entropy(model, task, fresh, res.temperature, budget, 30_000 + seed)
    return {
        "key": job.key,
        "t_star": res.temperature,
        "h_calib": res.entropy,
        "history": res.history,
        "clamped": res.clamped,
        "h_grid": grid,
        "h_fresh": h_fresh,
    }


def _rl(job: Job) -> dict:
    """RL from an init at temperature T (key: (name, init index, T, budget or 0, overlong filter))."""
    cfg, seed = job.cfg, job.seed
    name, idx, temperature, budget, flt = job.key
    task, sp = make_task(cfg), splits(cfg, seed)
    model = _load(cfg, seed, job.state)
    torch.manual_seed(seed)
    hist = rl_train(model, task, cfg.rl, temperature, seed, sp.exclude, budget=budget or None, overlong_filter=flt)
    return {"key": job.key, "history": hist, "hard": _eval(cfg, model, sp.hard, seed)}


def run_job(job: Job) -> dict:
    """Dispatch one job (module-level, picklable for process pools)."""
    fn = {"pretrain": _pretrain, "sft": _sft, "calibrate": _calibrate, "rl": _rl}.get(job.kind)
    if fn is None:
        raise ValueError(f"unknown job kind {job.kind!r}")
    out = fn(job)
    out["seed"] = job.seed
    return copy.deepcopy(out) if job.kind not in ("sft", "pretrain") else out
