"""The forgetting study's building blocks, shared by the small-scale experiment and the paper-scale run.

One run (:func:`one_run`) trains a fresh network on the tasks with class-balanced ER and records A, A*,
F_sh, F_dp and the end-of-training diagnostics; :func:`run_grid` spreads the (dataset, setting, buffer,
seed) cells over worker processes; :func:`aggregate` and :func:`measure_claims` turn the cells into the
claims' measurements; :func:`tables_for` and the plots build the report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from iclr26.core.experiment import RunContext, mean_std
from iclr26.core.parallel import seed_map
from iclr26.core.report import markdown_table, save_fig

from .config import GridConfig, RunConfig
from .data import ContinualData, orthogonal_subspace_tasks, split_digits
from .diagnostics import final_diagnostics
from .models import ContinualNet, MLPFeatures
from .probe import LinearProbe, forgetting
from .replay import run_continual

SMALL_BUFFER_MAX = 0.08  # "buffers <= 8% of the data" (C2, C3)

DATASETS = {"split-digits": split_digits, "orthogonal-subspaces": orthogonal_subspace_tasks}


@functools.lru_cache(maxsize=8)
def _dataset(name: str, seed: int) -> ContinualData:
    return DATASETS[name](seed)


def buffer_size(frac: float, n_train: int) -> int:
    return int(round(frac * n_train))


def one_run(
    data: ContinualData,
    setting: str,
    frac: float,
    seed: int,
    cfg: RunConfig,
    device: str = "cpu",
    make_features: Callable[[], torch.nn.Module] | None = None,
    augment: Callable | None = None,
    progress: bool = False,
    log: Callable[..., None] | None = None,
) -> dict:
    """Train and diagnose one (dataset, setting, buffer, seed) cell; returns plain numbers.

    make_features: builds the feature extractor (default: the MLP of ``cfg.model``); called after seeding.
    log: per-step ``log(step, **scalars)`` (loss, lr, grad_norm, task) every ``cfg.log_every`` steps.
    """
    torch.manual_seed(seed)
    if make_features is None:
        feats = MLPFeatures(int(np.prod(data.x_train.shape[1:])), cfg.model.hidden, cfg.model.d_feat)
    else:
        feats = make_features()
    net = ContinualNet(feats, data.n_classes, data.task_classes, multi_head=setting == "til")
    er = replace(cfg.train, setting=setting, buffer_size=buffer_size(frac, len(data.y_train)))
    ev = cfg.eval
    probe = functools.partial(LinearProbe, C=ev.probe_C, backend=ev.probe_backend, device=device)
    res = run_continual(
        net,
        data,
        er,
        seed,
        device=device,
        probe_factory=probe,
        augment=augment,
        progress=progress,
        log=log,
        log_every=cfg.log_every,
    )
    if res.final is None:  # a non-zero torchrun rank: rank 0 evaluates
        return {"buffer_size": er.buffer_size, "steps": res.steps}
    diag = final_diagnostics(net, data, res, setting, seed, probe, ridge=ev.lda_ridge)
    return {
        "buffer_size": er.buffer_size,
        "F_sh": 100 * forgetting(res.acc_shallow, reference=ev.forgetting_ref),
        "F_dp": 100 * forgetting(res.acc_deep, reference=ev.forgetting_ref),
        "F_sh_max": 100 * forgetting(res.acc_shallow, reference="max"),
        "F_dp_max": 100 * forgetting(res.acc_deep, reference="max"),
        "acc_shallow": res.acc_shallow,
        "acc_deep": res.acc_deep,
        "final_acc_shallow": 100 * float(np.nanmean(res.acc_shallow[-1])),
        "final_acc_deep": 100 * float(np.nanmean(res.acc_deep[-1])),
        "train_acc": res.train_acc,
        "steps": res.steps,
        "diag": diag,
    }


def _job(args: tuple) -> tuple[tuple, dict, list]:
    """One grid cell in a worker process; also returns its logged training curve."""
    name, setting, frac, seed, cfg = args
    curve: list = []

    def log(step, **scalars):
        curve.append((step, scalars))

    rec = one_run(_dataset(name, seed), setting, frac, seed, cfg, log=log)
    return (name, setting, frac, seed), rec, curve


def run_grid(ctx: RunContext, cfg: RunConfig) -> dict[tuple, dict]:
    """Every (dataset, setting, frac, seed) cell, in parallel worker processes when workers > 1.

    Training curves go to ``ctx.log`` (series ``dataset/setting/buffer/seedS``).
    """
    grid = cfg.grid
    jobs = [(d, "cil", f, s, cfg) for d in grid.datasets for f in grid.buffer_fracs for s in ctx.seeds]
    jobs += [(d, "til", f, s, cfg) for d in grid.datasets for f in grid.til_fracs for s in ctx.seeds]
    # longest first (large buffers, synthetic) for a better packing over the workers
    jobs.sort(key=lambda j: (j[0] != "orthogonal-subspaces", -j[2]))
    out = {}

    def collect(key, rec, curve):
        out[key] = rec
        d, st, f, s = key
        for step, scalars in curve:
            ctx.log(step, series=f"{d}/{st}/{100 * f:g}%/seed{s}", **scalars)

    # one torch thread per cell, in this process (workers <= 1) or in spawn worker processes
    for cell in seed_map(
        _job, jobs, workers=grid.workers, threads_per_worker=1, progress=ctx.progress, desc="forgetting runs"
    ):
        collect(*cell)
    return out


# --------------------------------------------------------------------------------------------------
# Aggregation into claims
# --------------------------------------------------------------------------------------------------


def _ms(vals) -> dict:
    return mean_std([float(v) for v in vals])


def _mean_ratio(pairs) -> float:
    """Mean of a/b over classes and seeds; NaN (reported, failing the claim) if some b is 0 (a dead class)."""
    num = np.concatenate([np.asarray(a, dtype=float) for a, _ in pairs])
    den = np.concatenate([np.asarray(b, dtype=float) for _, b in pairs])
    if np.any(den == 0):
        return float("nan")
    return float(np.mean(num / den))


def aggregate(results: dict[tuple, dict], grid: GridConfig, seeds: tuple[int, ...], datasets=None) -> dict:
    """Seed means of everything the claims and tables need (forgetting in points)."""
    datasets = datasets or grid.datasets
    agg: dict = {}
    for d in datasets:
        agg[d] = {}
        for setting, fracs in (("cil", grid.buffer_fracs), ("til", grid.til_fracs)):
            rows = {}
            for f in fracs:
                recs = [results[(d, setting, f, s)] for s in seeds]
                row = {
                    "buffer_size": recs[0]["buffer_size"],
                    "F_sh": _ms(r["F_sh"] for r in recs),
                    "F_dp": _ms(r["F_dp"] for r in recs),
                    "F_sh_max": _ms(r["F_sh_max"] for r in recs),
                    "F_dp_max": _ms(r["F_dp_max"] for r in recs),
                    "final_acc_shallow": _ms(r["final_acc_shallow"] for r in recs),
                    "final_acc_deep": _ms(r["final_acc_deep"] for r in recs),
                }
                if setting == "cil" and 0 < f and all("buffer_stats" in r["diag"] for r in recs):
                    st = [r["diag"]["buffer_stats"] for r in recs]
                    rank_buf = np.mean([s["rank_buf"] for s in st], axis=0)  # per old-class slot, seed mean
                    rank_pop = np.mean([s["rank_pop"] for s in st], axis=0)
                    row["rank_buf"] = rank_buf.tolist()
                    row["rank_pop"] = rank_pop.tolist()
                    row["all_ranks_deficient"] = bool(np.all(rank_buf < rank_pop))
                    row["norm_ratio"] = _mean_ratio([(s["norm_buf"], s["norm_pop"]) for s in st])
                    row["null_norm_ratio"] = _mean_ratio([(s["null_norm"], s["norm_pop"]) for s in st])
                    row["var_ratio"] = _mean_ratio([(s["var_buf"], s["var_pop"]) for s in st])
                    row["shift"] = float(np.mean([s["shift"] for s in st]))
                    keys = recs[0]["diag"]["lda"].keys()
                    row["lda"] = {k: 100 * float(np.mean([r["diag"]["lda"][k] for r in recs])) for k in keys}
                    row["lda_pinv"] = {k: 100 * float(np.mean([r["diag"]["lda_pinv"][k] for r in recs])) for k in keys}
                    for k in ("own_head_old", "probe_old", "probe_buffer_old"):
                        row[k] = 100 * float(np.mean([r["diag"][k] for r in recs]))
                    for view in ("nc_train", "nc_buffer_view"):
                        row[view] = {
                            k: float(np.mean([r["diag"][view][k] for r in recs])) for k in recs[0]["diag"][view]
                        }
                rows[f] = row
            agg[d][setting] = rows
    return agg


def measure_claims(agg: dict, grid: GridConfig | None = None) -> dict:
    """The measured value each claim's check receives (numbers fixed by the rules below)."""
    c1, c2, c3, c4 = {}, {}, {}, {}
    for d, a in agg.items():
        cil = a["cil"]
        fracs = sorted(cil)
        ok = [f for f in fracs if cil[f]["F_dp"]["mean"] <= 5.0]
        f_star = ok[0] if ok else None
        c1[d] = {
            "buffer_frac": f_star,
            "F_dp": cil[f_star]["F_dp"]["mean"] if ok else None,
            "F_sh": cil[f_star]["F_sh"]["mean"] if ok else None,
            "F_dp_no_replay": cil[0.0]["F_dp"]["mean"] if 0.0 in cil else None,
        }
        small = [f for f in fracs if 0 < f <= SMALL_BUFFER_MAX and "norm_ratio" in cil[f]]
        if small:
            c2[d] = {
                f"{100 * f:g}%": {
                    "all_ranks_deficient": cil[f]["all_ranks_deficient"],
                    "norm_ratio": cil[f]["norm_ratio"],
                    "var_ratio": cil[f]["var_ratio"],
                }
                for f in small
            }
            c3[d] = {
                "lda_pop": float(np.mean([cil[f]["lda"]["pop_mu+pop_cov"] for f in small])),
                "probe": float(np.mean([cil[f]["probe_old"] for f in small])),
                "lda_buffer": float(np.mean([cil[f]["lda"]["buf_mu+buf_cov"] for f in small])),
            }
        til = a["til"]
        common = [f for f in til if f in cil]
        if common:
            c4[d] = {
                "gap_til": float(np.mean([til[f]["F_sh"]["mean"] - til[f]["F_dp"]["mean"] for f in common])),
                "gap_cil": float(np.mean([cil[f]["F_sh"]["mean"] - cil[f]["F_dp"]["mean"] for f in common])),
            }
    return {"C1": c1, "C2": c2, "C3": c3, "C4": c4}


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _pm(s: dict) -> str:
    return f"{s['mean']:.1f} ± {s['std']:.1f}"


def _forgetting_table(a: dict) -> str:
    rows = []
    for f, r in sorted(a["cil"].items()):
        t = a["til"].get(f)
        rows.append(
            [
                f"{100 * f:g}%",
                r["buffer_size"],
                _pm(r["F_sh"]),
                _pm(r["F_dp"]),
                _pm(t["F_sh"]) if t else "-",
                _pm(t["F_dp"]) if t else "-",
            ]
        )
    return markdown_table(["buffer", "M", "CIL F_sh", "CIL F_dp", "TIL F_sh", "TIL F_dp"], rows)


def _buffer_stats_table(a: dict) -> str | None:
    rows = []
    for f, r in sorted(a["cil"].items()):
        if "norm_ratio" not in r:
            continue
        ranks = f"{np.mean(r['rank_buf']):.1f} / {np.mean(r['rank_pop']):.1f}"
        rows.append(
            [
                f"{100 * f:g}%",
                r["buffer_size"],
                ranks,
                r["all_ranks_deficient"],
                r["norm_ratio"],
                r["null_norm_ratio"],
                r["var_ratio"],
                r["shift"],
            ]
        )
    if not rows:
        return None
    header = ["buffer", "M", "rank buf / pop", "all deficient", "‖μ̂‖/‖μ‖", "random-subset ‖μ‖ ratio"]
    return markdown_table([*header, "σ²_buf/σ²_pop", "‖μ̂-μ‖"], rows)


def _lda_table(a: dict) -> str:
    rows = [
        [
            f"{100 * f:g}%",
            *[r["lda"][k] for k in r["lda"]],
            r["lda_pinv"]["buf_mu+buf_cov"],
            r["own_head_old"],
            r["probe_old"],
            r["probe_buffer_old"],
        ]
        for f, r in sorted(a["cil"].items())
        if "lda" in r
    ]
    keys = list(next(r for r in a["cil"].values() if "lda" in r)["lda"])
    return markdown_table(["buffer", *keys, "buf/buf (pinv)", "own head", "probe", "probe on buffer"], rows)


NC_COLUMNS = ("nc1", "within_var", "nc2_within_offdiag", "nc2_between_offdiag", "nc3", "beta", "rank_means", "snr")


def _nc_table(a: dict) -> str:
    rows = []
    for f, r in sorted(a["cil"].items()):
        if "nc_train" not in r:
            continue
        for view in ("nc_train", "nc_buffer_view"):
            v = r[view]
            name = "population" if view == "nc_train" else "buffer view"
            rows.append([f"{100 * f:g}%", name, *[v[k] for k in NC_COLUMNS], v["mean_norm"]])
    header = ["buffer", "features", "NC1", "mean σ²_c", "NC2 within", "NC2 between", "NC3", "β", "rank Ũ", "SNR"]
    return markdown_table([*header, "mean ‖μ_c‖"], rows)


def tables_for(agg: dict) -> dict[str, str]:
    """The report's tables per dataset: forgetting vs buffer; and, when the diagnostics ran, buffer vs
    population statistics, the LDA counterfactual and Neural Collapse."""
    tables = {}
    for d, a in agg.items():
        tables[f"{d}: forgetting vs buffer (points, mean ± std over seeds)"] = _forgetting_table(a)
        stats = _buffer_stats_table(a)
        if stats is None:
            continue
        tables[f"{d}: buffer vs population, old classes (CIL, seed means)"] = stats
        tables[f"{d}: LDA counterfactual, old-task test accuracy (CIL, %, seed means)"] = _lda_table(a)
        tables[f"{d}: Neural Collapse at the end of training (CIL, seed means)"] = _nc_table(a)
    return tables


def plot_forgetting(path, agg: dict) -> None:
    """F_sh and F_dp against buffer size (symlog x), one panel per dataset, CIL solid / TIL dashed."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(agg), figsize=(5.5 * len(agg), 4), squeeze=False)
    for ax, (d, a) in zip(axes[0], agg.items()):
        for setting, ls in (("cil", "-"), ("til", "--")):
            rows = sorted(a[setting].items())
            if not rows:
                continue
            x = np.array([100 * f for f, _ in rows])
            for key, color in (("F_sh", "tab:red"), ("F_dp", "tab:blue")):
                m = np.array([r[key]["mean"] for _, r in rows])
                s = np.array([r[key]["std"] for _, r in rows])
                ax.plot(x, m, ls, marker="o", color=color, label=f"{setting.upper()} {key}")
                ax.fill_between(x, m - s, m + s, color=color, alpha=0.12)
        ax.set_xscale("symlog", linthresh=0.5)
        ax.set_xlabel("buffer size (% of training set, symlog)")
        ax.set_ylabel("forgetting (points)")
        ax.set_title(d)
        ax.axhline(0, color="k", lw=0.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_fig(fig, path)


def plot_buffer_stats(path, agg: dict) -> None:
    """Buffer/population ratios of class-mean norm and within-class variance vs buffer size (CIL)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(agg), figsize=(5.5 * len(agg), 4), squeeze=False)
    for ax, (d, a) in zip(axes[0], agg.items()):
        rows = [(f, r) for f, r in sorted(a["cil"].items()) if "norm_ratio" in r]
        x = [100 * f for f, _ in rows]
        ax.plot(x, [r["norm_ratio"] for _, r in rows], "o-", label="‖μ̂_c‖ / ‖μ_c‖ (buffer)")
        ax.plot(x, [r["null_norm_ratio"] for _, r in rows], "o:", label="same, random subset")
        ax.plot(x, [r["var_ratio"] for _, r in rows], "s-", label="σ²_buf / σ²_pop")
        ax.set_xscale("log")
        ax.axhline(1, color="k", lw=0.5)
        ax.set_xlabel("buffer size (% of training set)")
        ax.set_title(d)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_fig(fig, path)


TERMINAL_TRAIN_ACC = 0.99


def competence_gate(results: dict[tuple, dict]) -> dict:
    """Terminal phase reached: own-head train accuracy on the current task at the end of every task
    >= 99% in every cell (the theory is about the terminal phase of training). If this fails, the
    claims are untestable at this budget."""
    worst = min(min(r["train_acc"]) for r in results.values() if r.get("train_acc"))
    return {
        "rule": f"current-task train accuracy at every task end >= {TERMINAL_TRAIN_ACC} in every cell",
        "min_train_acc": worst,
        "passed": bool(worst >= TERMINAL_TRAIN_ACC),
    }
