"""Reproduction of Flow Expander's claims: 2-D tasks T1 / T2 (claims C1, C2) and conformers T3 (C3).

Scales (``config.config_for``):
  smoke  tiny MLP, few FE iterations, T1 + T2 only (pipeline check, seconds);
  small  T1 + T2 + T3, seeds (0, 1, 2); claims C1, C2, C3 (T3 needs RDKit: ``pip install 'iclr26[chem]'``);
  paper  the conformer path from a LOCAL file (``--set t3.conformers=PATH.npy --set t3.smiles=...``).
Every setting is a field of :class:`~iclr26.flow_expander.config.RunConfig` (``--show-config``, ``--set``).

A run is a list of independent jobs, one per (task, seed): each builds its data, pre-trains its flow and runs
every method of its task from its own seeds, so ``workers`` processes (``core.parallel.seed_map``) give the
same numbers as one; per-step curves are recorded in the job and written to ``metrics.jsonl`` by the parent.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, replace
from functools import partial

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput, mean_std
from iclr26.core.parallel import seed_map, torch_threads
from iclr26.core.report import markdown_table, save_fig

from .config import MethodSettings, RunConfig, T1Methods, T2Methods, ToyConfig, config_for
from .expander import FEConfig, flow_expansion, method_config
from .flow import VelocityMLP, pretrain_flow_matching, sample_ode
from .metrics import grid_coverage, histogram_entropy, kl_entropy
from .tasks import Task, make_t1, make_t2, t2_fixed_point_kl

T1_NAMES = {"constr": "CONSTR", "s_meme": "S-MEME", "nse": "NSE", "g_fe": "G-FE"}
T2_NAMES = {"fdc": "FDC", "nse": "NSE", "l_fe": "L-FE"}


def toy_methods(methods: T1Methods | T2Methods, names: dict[str, str], toy: ToyConfig) -> dict[str, FEConfig]:
    """FEConfig per method: its preset, its :class:`MethodSettings`, the shared sizes and flags."""
    out = {}
    for field_name, label in names.items():
        ms: MethodSettings = getattr(methods, field_name)
        out[label] = method_config(
            label,
            K=toy.K,
            expand_am=toy.expand_am,
            project_am=toy.project_am,
            projection_anchor=toy.projection_anchor,
            projection_grad=toy.projection_grad,
            **asdict(ms),
        )
    return out


def evaluate(model, task: Task, n: int, steps: int, seed: int, lfe: FEConfig | None = None) -> tuple[dict, np.ndarray]:
    """Entropy (KL and histogram), true/weak validity, coverage (T1), left-mode mass (T2)."""
    x = sample_ode(model, n, 2, steps, torch.Generator().manual_seed(10_000 + seed)).cpu()
    if not torch.isfinite(x).all():
        raise ExperimentError(f"{task.name}: non-finite samples from a fine-tuned model")
    xn = x.numpy().astype(float)
    out = {
        "H_kl": kl_entropy(xn),
        "H_hist": histogram_entropy(xn),
        "validity": float(task.truth.hard(x).float().mean()),
        "weak_validity": float(task.verifier.hard(x).float().mean()),
    }
    if task.name == "T1":
        out["coverage"] = grid_coverage(xn, lambda z: task.truth.hard(torch.tensor(z, dtype=torch.float32)).numpy())
    else:
        out["H_x1_kl"] = kl_entropy(xn[:, 0])
        out["left_mass"] = float((xn[:, 0] < -1.2).mean())
        if lfe is not None and lfe.gamma > 0:
            out["kl_to_lfe_fixed_point"] = t2_fixed_point_kl(xn, lfe.beta, lfe.eta / lfe.gamma)
    return out, xn


def run_task(task: Task, methods: dict[str, FEConfig], toy: ToyConfig, seed: int, ctx: RunContext) -> tuple[dict, dict]:
    """Pre-train on ``task.data``, run every method from the same pre-trained model, evaluate all."""
    torch.manual_seed(seed)
    model = VelocityMLP(2, toy.hidden, toy.depth).to(ctx.device)
    t0 = time.perf_counter()
    pretrain_flow_matching(model, task.data, toy.fm, seed=seed, log=ctx.logger(f"seed{seed}/{task.name}_fm"))
    lfe = methods.get("L-FE")
    metrics, samples = {}, {}
    m, samples["PRE"] = evaluate(model, task, toy.n_eval, toy.ode_steps, seed, lfe)
    metrics["PRE"] = {**m, "seconds": time.perf_counter() - t0}
    for name, cfg in methods.items():
        t0 = time.perf_counter()
        curve = []

        def track(k, pi, curve=curve, name=name):  # entropy / validity after each iteration (own RNG stream)
            xk = sample_ode(pi, toy.curve_n, 2, toy.ode_steps, torch.Generator().manual_seed(20_000 + seed)).cpu()
            curve.append((kl_entropy(xk.numpy().astype(float)), float(task.truth.hard(xk).float().mean())))
            ctx.log(k, series=f"seed{seed}/{task.name}_{name}_eval", H_kl=curve[-1][0], validity=curve[-1][1])

        res = flow_expansion(
            model, task.verifier, cfg, seed=seed, callback=track, log=ctx.logger(f"seed{seed}/{task.name}_{name}")
        )
        m, samples[name] = evaluate(res.model, task, toy.n_eval, toy.ode_steps, seed, lfe)
        metrics[name] = {
            **m,
            "seconds": time.perf_counter() - t0,
            "curve_H_kl": [c[0] for c in curve],
            "curve_validity": [c[1] for c in curve],
        }
    return metrics, samples


def plot_samples(path, task: Task, samples: dict, n_plot: int = 1500):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle, Ellipse

    names = list(samples)
    fig, axes = plt.subplots(1, len(names), figsize=(3.0 * len(names), 3.0), squeeze=False)
    for ax, name in zip(axes[0], names):
        x = samples[name][:n_plot]
        ax.scatter(x[:, 0], x[:, 1], s=2, alpha=0.5)
        if task.name == "T1":
            ax.add_patch(Ellipse((0, 0), 6.0, 3.0, fill=False, color="k", lw=1))
        else:
            ax.axvline(-1.2, color="k", lw=1, ls="--")
            ax.add_patch(Circle((-2.0, 0.0), 0.8, fill=False, color="r", lw=1))
        ax.set_xlim(*task.box)
        ax.set_ylim(-2.5, 2.5)
        ax.set_title(f"{task.name} {name}", fontsize=9)
        ax.set_aspect("equal")
    save_fig(fig, path)


def plot_iteration_curves(path, per_seed: dict):
    """KL entropy and true validity after each FE iteration (2000 samples; mean over seeds)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9, 6), squeeze=False)
    for col, (tname, runs) in enumerate(per_seed.items()):
        for meth in runs[0]:
            if "curve_H_kl" not in runs[0][meth]:
                continue
            for row, key in enumerate(("curve_H_kl", "curve_validity")):
                arr = np.array([r[meth][key] for r in runs])
                axes[row][col].plot(np.arange(1, arr.shape[1] + 1), arr.mean(0), marker="o", label=meth)
        for row, lab in enumerate(("entropy (KL, nats)", "validity (true)")):
            pre = np.mean([r["PRE"]["H_kl" if row == 0 else "validity"] for r in runs])
            axes[row][col].axhline(pre, color="k", ls=":", label="PRE")
            axes[row][col].set_xlabel("FE iteration k")
            axes[row][col].set_ylabel(lab)
            axes[row][col].set_title(tname)
        axes[0][col].legend(fontsize=7)
    save_fig(fig, path)


def _means(per_seed: list[dict], method: str, key: str) -> float:
    return float(np.mean([s[method][key] for s in per_seed]))


def _summarise(per_seed: dict, seeds) -> tuple[dict, dict]:
    metrics, tables = {}, {}
    for tname, runs in per_seed.items():
        methods = list(runs[0])
        keys = [k for k in runs[0]["PRE"] if k != "seconds"]
        metrics[tname] = {meth: {k: [r[meth][k] for r in runs] for k in runs[0][meth]} for meth in methods}
        metrics[tname + "_summary"] = {meth: {k: mean_std(metrics[tname][meth][k]) for k in keys} for meth in methods}
        rows = [
            [meth]
            + [
                f"{metrics[tname + '_summary'][meth][k]['mean']:.3f} ± "
                f"{metrics[tname + '_summary'][meth][k]['std']:.3f}"
                for k in keys
            ]
            for meth in methods
        ]
        tables[f"{tname}: mean ± std over seeds {list(seeds)} (entropies in nats)"] = markdown_table(
            ["method", *keys], rows
        )
    return metrics, tables


class JobRecorder:
    """The part of :class:`RunContext` a job uses (``device``, ``log``, ``logger``), recording the rows so a
    worker process can hand them back; the parent replays them into ``metrics.jsonl`` (:func:`replay`)."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.rows: list[tuple[int, str, dict]] = []

    def log(self, step: int, *, series: str = "train", **scalars) -> None:
        self.rows.append((int(step), str(series), scalars))

    def logger(self, series: str):
        def log(step: int, **scalars) -> None:
            self.log(step, series=series, **scalars)

        return log


def replay(ctx: RunContext, rows: list[tuple[int, str, dict]]) -> None:
    """Write a job's recorded rows to the run's ``metrics.jsonl`` in their original order."""
    for step, series, scalars in rows:
        ctx.log(step, series=series, **scalars)


TOY_TASKS = {"T1": (make_t1, "t1", T1_NAMES), "T2": (make_t2, "t2", T2_NAMES)}


def run_job(job: tuple[str, int], cfg: RunConfig, device: str = "cpu") -> tuple[tuple, list]:
    """One (task, seed) job: T1 / T2 give (metrics, samples), T3 gives (metrics, data source); with the
    recorded log rows. Module level, so jobs can run in worker processes."""
    tname, seed = job
    rec = JobRecorder(device)
    if tname == "T3":
        from .conformer import run_conformer_seed

        with torch_threads(cfg.t3.threads):
            return run_conformer_seed(cfg.t3, seed, device, rec), rec.rows
    maker, field_name, names = TOY_TASKS[tname]
    # tiny 2-D MLPs: one thread is as fast as two under contention (the count is restored afterwards)
    with torch_threads(cfg.toy.threads):
        task = maker(cfg.toy.n_data, seed)
        return run_task(task, toy_methods(getattr(cfg, field_name), names, cfg.toy), cfg.toy, seed, rec), rec.rows


def run_jobs(ctx: RunContext, cfg: RunConfig, tasks: list[str]) -> dict[str, list[tuple]]:
    """Every (task, seed) job of ``tasks``, T3 first (the longest), over ``cfg.workers`` processes; returns
    {task: [job output per seed, in the order of ctx.seeds]} and writes each job's log rows to the run."""
    jobs = [(t, seed) for t in ("T3", "T1", "T2") if t in tasks for seed in ctx.seeds]
    try:
        outs = seed_map(
            partial(run_job, cfg=cfg, device=str(ctx.device)),
            jobs,
            workers=cfg.workers,
            threads_per_worker=1,
            progress=ctx.progress,
            desc="FE jobs (task, seed)",
        )
    except RuntimeError as exc:  # a worker's ExperimentError keeps its one-line CLI form
        if isinstance(exc.__cause__, ExperimentError):
            raise ExperimentError(str(exc)) from exc
        raise
    by_job = dict(zip(jobs, outs, strict=True))
    for seed in ctx.seeds:  # metrics.jsonl rows in the order of the sequential run
        for t in ("T1", "T2"):
            if t in tasks:
                replay(ctx, by_job[(t, seed)][1])
    for seed in ctx.seeds if "T3" in tasks else ():
        replay(ctx, by_job[("T3", seed)][1])
    return {t: [by_job[(t, seed)][0] for seed in ctx.seeds] for t in tasks}


def summarise_toys(ctx: RunContext, cfg: RunConfig, outs: dict[str, list[tuple]]) -> tuple[dict, dict, dict, list[str]]:
    """T1 and T2 job outputs (per seed) to (metrics, measured {"C1", "C2"}, tables, notes)."""
    per_seed: dict = {tname: [m for m, _ in outs[tname]] for tname in ("T1", "T2")}
    for tname in ("T1", "T2"):
        task = TOY_TASKS[tname][0](cfg.toy.n_data, ctx.seeds[0])  # the first seed's task, for the figure's frame
        plot_samples(ctx.figure_path(f"samples_{tname}"), task, outs[tname][0][1])
    plot_iteration_curves(ctx.figure_path("entropy_validity_vs_iteration"), per_seed)
    metrics, tables = _summarise(per_seed, ctx.seeds)
    t1, t2 = per_seed["T1"], per_seed["T2"]
    c1 = {
        "H_PRE": _means(t1, "PRE", "H_kl"),
        "H_GFE": _means(t1, "G-FE", "H_kl"),
        "H_SMEME": _means(t1, "S-MEME", "H_kl"),
        "valid_GFE": _means(t1, "G-FE", "validity"),
        "valid_SMEME": _means(t1, "S-MEME", "validity"),
    }
    c1["gain_ratio"] = (c1["H_GFE"] - c1["H_PRE"]) / max(c1["H_SMEME"] - c1["H_PRE"], 1e-9)
    c2 = {
        "H_PRE": _means(t2, "PRE", "H_kl"),
        "H_LFE": _means(t2, "L-FE", "H_kl"),
        "valid_LFE": _means(t2, "L-FE", "validity"),
        "valid_FDC": _means(t2, "FDC", "validity"),
        "valid_PRE": _means(t2, "PRE", "validity"),
    }
    metrics["toy_competence_gate"] = {
        "rule": "validity(PRE) >= 0.95 on T1 and >= 0.85 on T2 (the pre-trained flows fit their data)",
        "value": {"T1": _means(t1, "PRE", "validity"), "T2": c2["valid_PRE"]},
        "passed": _means(t1, "PRE", "validity") >= 0.95 and c2["valid_PRE"] >= 0.85,
    }
    notes = [
        "Entropy: Kozachenko-Leonenko (k=3) on 2-D samples drives the claims; histogram (bin 0.125, Grassberger) "
        "is reported alongside. Validity is w.r.t. the TRUE valid set (T2: x1 > -1.2), not the weak verifier.",
        f"T1 upper bound log|Omega| = {math.log(4.5 * math.pi):.3f} nats.",
        f"S-MEME / FDC evaluate the terminal score at 1 - eps with eps = {cfg.t1.s_meme.eps} / {cfg.t2.fdc.eps} "
        "(paper: 0.02); see README.",
        "kl_to_lfe_fixed_point: histogram KL of the x1-marginal to the exact-step L-FE fixed point "
        "p_data^beta v_s^(eta/gamma) (sanity check, not a claim).",
    ]
    return metrics, {"C1": c1, "C2": c2}, tables, notes


def run(ctx: RunContext) -> RunOutput:
    """Run the tasks of ``ctx.cfg.task``; the competence gate combines the gates of the tasks run."""
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "paper" and cfg.task != "t3":
        raise ExperimentError("the 2-D tasks have no paper scale; use --scale small, or --set task=t3 at paper scale")
    if ctx.scale == "paper" and not cfg.t3.conformers:
        raise ExperimentError("scale 'paper' needs --set t3.conformers=PATH.npy (and t3.smiles=...; see the README)")
    try:
        torch.empty(0, device=ctx.device)
    except (RuntimeError, AssertionError) as exc:  # e.g. --set device=cuda on a machine without CUDA
        raise ExperimentError(f"--set device={ctx.device}: this torch cannot use that device ({exc})") from exc
    metrics: dict = {"seeds": list(ctx.seeds), "device": str(ctx.device)}
    measured, tables, notes, gates = {}, {}, [], []
    tasks = (["T1", "T2"] if cfg.task in ("toys", "all") else []) + (["T3"] if cfg.task in ("t3", "all") else [])
    if "T3" in tasks:
        from .conformer import require_rdkit

        if cfg.t3.validity == "rdkit" or not cfg.t3.conformers:
            try:
                require_rdkit()
            except ImportError as exc:  # RDKit missing: a one-line CLI error with the install hint
                raise ExperimentError(str(exc)) from exc
        if cfg.t3.conformers:  # resolved here: jobs may run in worker processes without the context
            cfg = replace(cfg, t3=replace(cfg.t3, conformers=str(ctx.require_path("t3.conformers"))))
    outs = run_jobs(ctx, cfg, tasks)
    if "T1" in tasks:
        m, c, t, n = summarise_toys(ctx, cfg, outs)
        metrics.update(m), measured.update(c), tables.update(t), notes.extend(n)
        gates.append(m["toy_competence_gate"])
    if "T3" in tasks:
        from .conformer import summarise_conformers

        m, c, t, n = summarise_conformers(ctx, cfg.t3, [m for m, _ in outs["T3"]], outs["T3"][-1][1])
        metrics.update(m), measured.update(c), tables.update(t), notes.extend(n)
        gates.append(m["T3_competence_gate"])
    metrics["competence_gate"] = {
        "rule": " and ".join(g["rule"] for g in gates),
        "passed": all(g["passed"] for g in gates),
    }
    return RunOutput(metrics=metrics, measured=measured, tables=tables, notes=notes)


def _c1(m) -> bool:
    return (
        m["H_GFE"] - m["H_PRE"] >= 0.5 * (m["H_SMEME"] - m["H_PRE"])
        and m["valid_GFE"] >= 0.95
        and m["valid_SMEME"] <= m["valid_GFE"] - 0.10
    )


def _c2(m) -> bool:
    return m["H_LFE"] >= m["H_PRE"] + 0.1 and m["valid_LFE"] >= m["valid_FDC"] + 0.05


def _c3(m) -> bool:
    return m["vendi_LFE"] >= 1.05 * m["vendi_PRE"] and m["valid_LFE"] >= max(m["valid_FDC"], m["valid_NSE"])


EXPERIMENT = Experiment(
    slug="flow_expander",
    title="Verifier-Constrained Flow Expansion for Discovery Beyond the Data",
    arxiv="2602.15984",
    claims=(
        Claim(
            "C1",
            "T1 (ellipse, strong verifier): G-FE expands entropy by at least half of unconstrained "
            "S-MEME's gain while staying valid (>= 0.95), and S-MEME loses >= 0.10 validity relative to G-FE",
            {"G-FE": "H 1.97, validity 0.99", "S-MEME": "H 2.17, validity 0.73"},
            "H(G-FE)-H(PRE) >= 0.5*(H(S-MEME)-H(PRE)) and valid(G-FE) >= 0.95 and "
            "valid(S-MEME) <= valid(G-FE) - 0.10 (KL entropy, seed means)",
            _c1,
        ),
        Claim(
            "C2",
            "T2 (trimodal, weak disc verifier): L-FE raises entropy over the pre-trained model by "
            ">= 0.1 nats and is >= 0.05 more valid than FDC",
            {"L-FE": "H 1.67, validity 0.89", "FDC": "H 1.58, validity 0.74", "PRE": "H 1.17, validity 0.90"},
            "H(L-FE) >= H(PRE) + 0.1 and valid(L-FE) >= valid(FDC) + 0.05 (KL entropy, seed means)",
            _c2,
        ),
        Claim(
            "C3",
            "T3 (ethylene glycol conformers, min-distance weak verifier, RDKit validity): L-FE raises "
            "conformer Vendi over the pre-trained flow by >= 5% and is at least as valid as FDC and NSE",
            {"QM9 L-FE": "Vendi 100, validity 81%", "QM9 FDC": "Vendi 103, validity 69%", "QM9 PRE": "Vendi 89"},
            "Vendi(L-FE) >= 1.05 Vendi(PRE) and valid(L-FE) >= max(valid(FDC), valid(NSE)) (seed means)",
            _c3,
        ),
    ),
    run=run,
    config=config_for,
)
