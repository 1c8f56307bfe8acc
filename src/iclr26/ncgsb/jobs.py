"""One fit of the reproduction per job (picklable; run in worker processes). Each job regenerates its data
from the seed, so results do not depend on how jobs are spread over workers."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from iclr26.ncgsb.baselines import calibrate_push, sampler_push
from iclr26.ncgsb.bridge import CWGBridge, displacement_fraction, kinetic_per_block
from iclr26.ncgsb.config import RunConfig
from iclr26.ncgsb.ot import exact_w2
from iclr26.ncgsb.tasks import task_a_snapshots, task_b_samplers, task_c_potential, task_c_samplers

EVAL_OFFSET = 10_000  # seed offset of the evaluation particles (never seen in training)
FLOOR_OFFSET = 20_000  # seed offset of the independent snapshots that measure the sampling floor
N_PLOT = 150  # particles kept per path for figures


def jobs_for_seed(cfg: RunConfig) -> list[tuple]:
    """The fits of one seed: closed form, Task A (damped + control) per γ, Task B, Task C."""
    jobs: list[tuple] = [("cf", float(g)) for g in cfg.closed_form_gammas]
    procs = ("damped", "control") if cfg.task_a.control else ("damped",)
    jobs += [("A", p, float(g)) for p in procs for g in cfg.task_a.gammas]
    jobs.append(("B",))
    jobs += [("C", float(g), float(cfg.task_c.cost)) for g in cfg.task_c.gammas] + [("C", 0.0, 0.0)]
    return jobs


def run_job(cfg: RunConfig, seed: int, job: tuple) -> dict:
    kind = job[0]
    torch.manual_seed(seed)
    t0 = time.process_time()
    if kind == "cf":
        out = _closed_form(cfg, seed, job[1])
    elif kind == "A":
        out = _task_a(cfg, seed, job[1], job[2])
    elif kind == "B":
        out = _task_b(cfg, seed)
    elif kind == "C":
        out = _task_c(cfg, seed, job[1], job[2])
    else:
        raise ValueError(f"unknown job {job}")
    out["cpu_seconds"] = time.process_time() - t0
    return out


def _logger(rows: list):
    return lambda step, **kw: rows.append((step, kw))


def _bridge(cfg: RunConfig, gamma: float, potential=None) -> CWGBridge:
    return CWGBridge(2, replace(cfg.method, gamma=gamma), potential)


def _closed_form(cfg: RunConfig, seed: int, gamma: float) -> dict:
    """U = 0, N(0, s²I) → N(shift, s²I): displacement shares and kinetic energy per block."""
    shift = torch.tensor(cfg.closed_form_shift)
    std = cfg.task_b.std
    src = lambda n, g: std * torch.randn(n, 2, generator=g)
    tgt = lambda n, g: shift + std * torch.randn(n, 2, generator=g)
    rows: list = []
    bridge = _bridge(cfg, gamma)
    bridge.fit(src, tgt, fit=cfg.fit, seed=seed, log=_logger(rows))
    x0 = src(cfg.n_eval, torch.Generator().manual_seed(seed + EVAL_OFFSET))
    path = bridge.path(x0)
    cov0, cov1 = np.cov(path[0].numpy().T), np.cov(path[-1].numpy().T)
    return {
        "share": displacement_fraction(path),
        "kinetic": kinetic_per_block(path),
        "cov_change": float(np.abs(cov1 - cov0).max()),
        "log": rows,
    }


def _task_a(cfg: RunConfig, seed: int, process: str, gamma: float) -> dict:
    """Fit on the training snapshots; W2 at every observed time from fresh source particles."""
    ta = cfg.task_a
    g_true = ta.gamma_true if process == "damped" else 0.0
    snaps = task_a_snapshots(ta, seed, g_true)
    src, tgt = snaps[0.0], snaps[1.0]
    inner = {t: snaps[t] for t in ta.train_times if 0.0 < t < 1.0}
    rows: list = []
    bridge = _bridge(cfg, gamma)
    bridge.fit(src, tgt, inner, fit=cfg.fit, seed=seed, log=_logger(rows))
    x0 = task_a_snapshots(
        replace(ta, n_per_snapshot=cfg.n_eval, train_times=(0.0,), heldout_times=()), seed + EVAL_OFFSET, g_true
    )[0.0]
    path = bridge.path(torch.as_tensor(x0))
    times = sorted(t for t in snaps if t > 0)
    w2 = {t: exact_w2(path[bridge.block_index(t)], snaps[t]) for t in times}
    out = {"w2": w2, "kinetic": kinetic_per_block(path), "log": rows}
    if process == "damped":
        out["path"] = path[:, :N_PLOT].numpy()
    return out


def _task_b(cfg: RunConfig, seed: int) -> dict:
    """Unguided fit, guided fine-tuning per λ_G (from copies of the unguided bridge), sampler-side push."""
    import copy

    tb = cfg.task_b
    src, tgt = task_b_samplers(tb)
    y = torch.tensor(tb.waypoint)
    rows: list = []
    base = _bridge(cfg, cfg.method.gamma)
    base.fit(src, tgt, fit=cfg.fit, seed=seed, log=_logger(rows))
    gen = torch.Generator().manual_seed(seed + EVAL_OFFSET)
    x0, xb = src(tb.n_eval, gen), tgt(tb.n_eval, gen)
    s = base.block_index(tb.t_s)

    def measure(path: torch.Tensor) -> dict:
        return {
            "err": float((path[s] - y).norm(dim=-1).mean()),
            "terminal_w2": exact_w2(path[-1], xb),
            "energy": float(kinetic_per_block(path).mean()),
        }

    p_un = base.path(x0)
    out = {"unguided": measure(p_un), "guided": {}, "paths": {"unguided": p_un[:, :N_PLOT].numpy()}, "log": rows}
    for lam in tb.lambdas:
        guided = copy.deepcopy(base)
        guided.finetune_guided(lambda z: z, tb.waypoint, tb.t_s, lam, src, tgt, fit=cfg.fit, seed=seed + 1)
        p_g = guided.path(x0)
        out["guided"][float(lam)] = measure(p_g)
        out["paths"][f"guided λ={lam:g}"] = p_g[:, :N_PLOT].numpy()
    best = min(out["guided"], key=lambda k: out["guided"][k]["err"])
    alpha = calibrate_push(out["guided"][best]["err"], out["unguided"]["err"])
    p_push = sampler_push(base, x0, s, tb.waypoint, alpha)
    out.update(best_lambda=best, alpha=alpha, push=measure(p_push))
    out["paths"]["sampler push"] = p_push[:, :N_PLOT].numpy()
    return out


def _task_c(cfg: RunConfig, seed: int, gamma: float, cost: float) -> dict:
    """CWG with (cost > 0) or without (cost = 0) the obstacle potential: feasibility and path length."""
    tc = cfg.task_c
    src, tgt = task_c_samplers(tc)
    pot = task_c_potential(tc, cost)
    rows: list = []
    bridge = _bridge(cfg, gamma, pot if cost > 0 else None)
    t0 = time.process_time()
    bridge.fit(src, tgt, fit=cfg.fit, seed=seed, log=_logger(rows))
    fit_s = time.process_time() - t0
    gen = torch.Generator().manual_seed(seed + EVAL_OFFSET)
    x0, xb = src(tc.n_eval, gen), tgt(tc.n_eval, gen)
    path = bridge.path(x0)
    return {
        "feasibility": float(pot.inside(path.numpy()).mean()),
        "length": path_length(path.numpy()),
        "terminal_w2": exact_w2(path[-1], xb),
        "fit_cpu_seconds": fit_s,
        "path": path[:, :N_PLOT].numpy(),
        "log": rows,
    }


def path_length(path: np.ndarray) -> float:
    """Mean per-particle path length ``Σ_k |X^k − X^{k−1}|`` of a (K+1, N, D) path."""
    return float(np.linalg.norm(np.diff(path, axis=0), axis=-1).sum(0).mean())
