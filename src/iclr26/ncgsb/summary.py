"""Turn the per-job results into claims' measured values, metrics, tables and figures."""

from __future__ import annotations

import time

import numpy as np

from iclr26.core.experiment import RunContext, RunOutput, mean_std
from iclr26.core.report import _pyplot, markdown_table, plot_curves, save_fig
from iclr26.ncgsb.baselines import ot_interpolate, sb_interpolate, sb_paths
from iclr26.ncgsb.bridge import phi_gamma
from iclr26.ncgsb.config import RunConfig
from iclr26.ncgsb.jobs import EVAL_OFFSET, FLOOR_OFFSET, path_length
from iclr26.ncgsb.ot import exact_w2
from iclr26.ncgsb.tasks import task_a_snapshots, task_c_potential, task_c_samplers


def _ms(values) -> dict:
    return mean_std([float(v) for v in values])


def summarise(ctx: RunContext, cfg: RunConfig, res: dict) -> RunOutput:
    seeds = list(ctx.seeds)
    metrics: dict = {
        "cpu_seconds_per_job": {f"seed{s}/{'_'.join(map(str, j))}": r["cpu_seconds"] for (s, j), r in res.items()}
    }
    m1 = _closed_form(ctx, cfg, res, seeds, metrics)
    m2, tables = _task_a(ctx, cfg, res, seeds, metrics)
    m3 = _task_b(ctx, cfg, res, seeds, metrics)
    tables.update(_task_c(ctx, cfg, res, seeds, metrics))
    metrics["competence_gate"] = m2["competence_gate"]
    notes = [
        f"C2 competence gate (CWG-C within 2x sampling floor + 0.05 at every training marginal): "
        f"{'PASS' if m2['competence_gate'] else 'FAIL (C2 untestable at this budget)'}"
    ]
    return RunOutput(metrics=metrics, measured={"C1": m1, "C2": m2, "C3": m3}, tables=tables, notes=notes)


# --------------------------------------------------------------------------------------------------
# C1: closed form
# --------------------------------------------------------------------------------------------------


def _closed_form(ctx, cfg: RunConfig, res, seeds, metrics) -> dict:
    gammas = [float(g) for g in cfg.closed_form_gammas]
    out: dict = {
        "max_share_error": 0.0,
        "kinetic_falls_gamma_pos": None,
        "kinetic_rises_gamma_neg": None,
        "kinetic_flat_dev_gamma0": None,
    }
    curves = {}
    t = np.arange(cfg.method.n_blocks + 1) / cfg.method.n_blocks
    for g in gammas:
        share = np.mean([res[(s, ("cf", g))]["share"] for s in seeds], 0)
        ke = np.mean([res[(s, ("cf", g))]["kinetic"] for s in seeds], 0)
        err = float(np.abs(share - phi_gamma(g, t)).max())
        metrics[f"closed_form/gamma{g:g}"] = {
            "share": share,
            "phi": phi_gamma(g, t),
            "max_error": err,
            "kinetic": ke,
            "cov_change": _ms([res[(s, ("cf", g))]["cov_change"] for s in seeds]),
        }
        out["max_share_error"] = max(out["max_share_error"], err)
        if g > 0:
            prev = out["kinetic_falls_gamma_pos"] is not False
            out["kinetic_falls_gamma_pos"] = bool(np.all(np.diff(ke) < 0)) and prev
        elif g < 0:
            prev = out["kinetic_rises_gamma_neg"] is not False
            out["kinetic_rises_gamma_neg"] = bool(np.all(np.diff(ke) > 0)) and prev
        else:
            out["kinetic_flat_dev_gamma0"] = float(np.abs(ke / ke.mean() - 1).max())
        curves[f"γ={g:g}"] = (t[1:], ke)
    plot_curves(
        ctx.figure_path("energy_per_block"),
        curves,
        "t_k",
        "kinetic energy mean|ΔX|²/h²",
        "closed form: kinetic energy per block",
    )
    return out


# --------------------------------------------------------------------------------------------------
# C2: Task A
# --------------------------------------------------------------------------------------------------


def _select(w2: dict, gammas: list[float], heldout: list[float]) -> tuple[float, list[float]]:
    """Each held-out time in turn is scored with the γ that minimises the mean W2 at the other held-out
    times (ties: the first in grid order). Returns (mean scored W2, chosen γ per fold)."""
    scores, chosen = [], []
    for t in heldout:
        others = [u for u in heldout if u != t]
        g = min(gammas, key=lambda gg: np.mean([w2[gg][u] for u in others]))
        scores.append(w2[g][t])
        chosen.append(g)
    return float(np.mean(scores)), chosen


def _task_a_seed(cfg: RunConfig, res, seed: int) -> dict:
    ta = cfg.task_a
    gammas = [float(g) for g in ta.gammas]
    heldout = [float(t) for t in ta.heldout_times]
    out: dict = {}
    for proc in ("damped", "control") if ta.control else ("damped",):
        w2 = {g: res[(seed, ("A", proc, g))]["w2"] for g in gammas}
        nc, chosen = _select(w2, gammas, heldout)
        out[proc] = {
            "nc_w2": nc,
            "chosen": chosen,
            "c_w2": float(np.mean([w2[0.0][t] for t in heldout])),
            "curve": [float(np.mean([w2[g][t] for t in heldout])) for g in gammas],
            "w2": w2,
        }
    g_true = ta.gamma_true
    snaps = task_a_snapshots(ta, seed, g_true)
    ref = task_a_snapshots(ta, seed + FLOOR_OFFSET, g_true)
    train = {t: snaps[t] for t in ta.train_times}
    t0 = time.process_time()
    out["sb_w2"] = float(
        np.mean([exact_w2(sb_interpolate(train, t, cfg.sb_sigma, cfg.n_eval, seed), snaps[t]) for t in heldout])
    )
    out["sb_cpu_seconds"] = time.process_time() - t0
    out["ot_w2"] = float(np.mean([exact_w2(ot_interpolate(train, t, cfg.n_eval, seed), snaps[t]) for t in heldout]))
    out["floor"] = {t: exact_w2(snaps[t], ref[t]) for t in snaps}
    out["gate"] = {t: out["damped"]["w2"][0.0][t] <= 2 * out["floor"][t] + 0.05 for t in ta.train_times if t > 0}
    return out


def _task_a(ctx, cfg: RunConfig, res, seeds, metrics) -> tuple[dict, dict]:
    ta = cfg.task_a
    if 0.0 not in [float(g) for g in ta.gammas] or len(ta.heldout_times) < 2:
        raise ValueError("task_a.gammas must contain 0 (CWG-C) and task_a.heldout_times needs >= 2 times")
    per = {s: _task_a_seed(cfg, res, s) for s in seeds}
    train_t = [t for t in ta.train_times if t > 0]
    gate_means = {
        t: (np.mean([per[s]["damped"]["w2"][0.0][t] for s in seeds]), np.mean([per[s]["floor"][t] for s in seeds]))
        for t in train_t
    }
    gate = all(w <= 2 * f + 0.05 for w, f in gate_means.values())
    m = {
        "nc_w2": _ms(per[s]["damped"]["nc_w2"] for s in seeds)["mean"],
        "c_w2": _ms(per[s]["damped"]["c_w2"] for s in seeds)["mean"],
        "sb_w2": _ms(per[s]["sb_w2"] for s in seeds)["mean"],
        "ot_w2": _ms(per[s]["ot_w2"] for s in seeds)["mean"],
        "chosen_gamma_mean": float(np.mean([g for s in seeds for g in per[s]["damped"]["chosen"]])),
        "chosen_gammas": [g for s in seeds for g in per[s]["damped"]["chosen"]],
        "competence_gate": bool(gate),
    }
    if ta.control:
        m["control_nc_w2"] = _ms(per[s]["control"]["nc_w2"] for s in seeds)["mean"]
        m["control_c_w2"] = _ms(per[s]["control"]["c_w2"] for s in seeds)["mean"]
        m["control_chosen_gammas"] = [g for s in seeds for g in per[s]["control"]["chosen"]]
    metrics["task_a"] = {
        **{
            k: _ms(per[s][k] if k in ("sb_w2", "ot_w2") else per[s]["damped"][k] for s in seeds)
            for k in ("nc_w2", "c_w2", "sb_w2", "ot_w2")
        },
        "per_seed": {str(s): {k: v for k, v in per[s].items() if k not in ("damped", "control")} for s in seeds},
        "w2_by_gamma": {str(s): {p: per[s][p]["w2"] for p in ("damped", "control") if p in per[s]} for s in seeds},
        "gate_w2_vs_floor": {str(t): [float(w), float(f)] for t, (w, f) in gate_means.items()},
    }
    gammas = [float(g) for g in ta.gammas]
    curves = {}
    for p in ("damped", "control") if ta.control else ("damped",):
        c = np.array([per[s][p]["curve"] for s in seeds])
        curves[p] = (gammas, c.mean(0), c.std(0))
    plot_curves(
        ctx.figure_path("task_a_w2_vs_gamma"),
        curves,
        "γ",
        "held-out W2 (mean of t=.2, .4)",
        f"Task A: W2 vs γ (γ* = {ta.gamma_true:g} damped, 0 control)",
    )
    _plot_task_a_paths(ctx, cfg, res, seeds[0])
    rows = [
        ["CWG-NC (γ chosen)", f"{m['nc_w2']:.3f}"],
        ["CWG-C (γ = 0)", f"{m['c_w2']:.3f}"],
        ["piecewise entropic SB", f"{m['sb_w2']:.3f}"],
        ["piecewise OT", f"{m['ot_w2']:.3f}"],
    ]
    return m, {"Task A held-out W2 (seed mean)": markdown_table(["method", "W2"], rows)}


def _plot_task_a_paths(ctx, cfg: RunConfig, res, seed: int) -> None:
    plt = _pyplot()
    snaps = task_a_snapshots(cfg.task_a, seed)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    t_grid = np.arange(cfg.method.n_blocks + 1) / cfg.method.n_blocks
    for g in cfg.task_a.gammas:
        path = res[(seed, ("A", "damped", float(g)))]["path"]
        axes[1].plot(t_grid, path[..., 0].mean(1), marker=".", label=f"CWG γ={g:g}")
        if float(g) in (0.0, float(cfg.task_a.gamma_true)):
            for i in range(0, path.shape[1], 5):
                axes[0].plot(
                    path[:, i, 0], path[:, i, 1], lw=0.5, alpha=0.5, color="tab:blue" if float(g) == 0 else "tab:red"
                )
    for t, a in snaps.items():
        axes[0].scatter(a[:200, 0], a[:200, 1], s=2, alpha=0.4, color="k")
        marker = "x" if t in cfg.task_a.heldout_times else "o"
        axes[1].scatter([t], [a[:, 0].mean()], color="k", zorder=5, marker=marker)
    axes[0].set_title("paths: γ=0 (blue) vs γ=γ* (red); snapshots (black)")
    axes[1].set_title("mean x per block; snapshots (o train, x held out)")
    axes[1].set_xlabel("t")
    axes[1].legend(fontsize=7)
    save_fig(fig, ctx.figure_path("task_a_paths"))


# --------------------------------------------------------------------------------------------------
# C3: Task B; Task C (reported)
# --------------------------------------------------------------------------------------------------


def _task_b(ctx, cfg: RunConfig, res, seeds, metrics) -> dict:
    rb = {s: res[(s, ("B",))] for s in seeds}
    per = {
        s: {
            "unguided_err": r["unguided"]["err"],
            "unguided_terminal_w2": r["unguided"]["terminal_w2"],
            "guided_err": r["guided"][r["best_lambda"]]["err"],
            "guided_terminal_w2": r["guided"][r["best_lambda"]]["terminal_w2"],
            "push_err": r["push"]["err"],
            "push_terminal_w2": r["push"]["terminal_w2"],
            "guided_energy": r["guided"][r["best_lambda"]]["energy"],
            "unguided_energy": r["unguided"]["energy"],
            "best_lambda": r["best_lambda"],
            "alpha": r["alpha"],
        }
        for s, r in rb.items()
    }
    metrics["task_b"] = {k: _ms(per[s][k] for s in seeds) for k in per[seeds[0]]}
    metrics["task_b"]["per_lambda"] = {str(s): rb[s]["guided"] for s in seeds}
    _plot_paths(ctx, "task_b_paths", rb[seeds[0]]["paths"], waypoint=cfg.task_b.waypoint)
    return {k: metrics["task_b"][k]["mean"] for k in per[seeds[0]]}


TASK_C_METRICS = ("feasibility", "length", "terminal_w2", "fit_cpu_seconds")


def _task_c(ctx, cfg: RunConfig, res, seeds, metrics) -> dict:
    tc = cfg.task_c
    keys = [k for (s, k) in res if s == seeds[0] and k[0] == "C"]
    rows, paths, out = [], {}, {}
    for k in keys:
        name = f"CWG γ={k[1]:g}" + (" (no potential)" if k[2] == 0 else "")
        out[name] = {m: _ms(res[(s, k)][m] for s in seeds) for m in TASK_C_METRICS}
        paths[name] = res[(seeds[0], k)]["path"]
    src, tgt = task_c_samplers(tc)
    pot = task_c_potential(tc)
    sb_vals = {"feasibility": [], "length": [], "terminal_w2": [], "fit_cpu_seconds": []}
    import torch

    for s in seeds:
        gen = torch.Generator().manual_seed(s + EVAL_OFFSET)
        a, b = src(tc.n_eval, gen).numpy(), tgt(tc.n_eval, gen).numpy()
        t0 = time.process_time()
        p = sb_paths(a, b, cfg.sb_sigma, cfg.method.n_blocks, s)
        sb_vals["fit_cpu_seconds"].append(time.process_time() - t0)
        sb_vals["feasibility"].append(float(pot.inside(p).mean()))
        sb_vals["length"].append(path_length(p))
        sb_vals["terminal_w2"].append(exact_w2(p[-1], b))
        if s == seeds[0]:
            paths["entropic SB"] = p[:, :150]
    out["entropic SB"] = {m: _ms(v) for m, v in sb_vals.items()}
    metrics["task_c"] = out
    for name, v in out.items():
        rows.append(
            [name]
            + [
                f"{v[m]['mean']:.3f} ± {v[m]['std']:.3f}"
                for m in ("feasibility", "length", "terminal_w2", "fit_cpu_seconds")
            ]
        )
    _plot_paths(ctx, "task_c_paths", paths, obstacles=(tc.obstacles, tc.radius))
    return {
        "Task C obstacles (seed mean ± std)": markdown_table(
            ["method", "share of path points in obstacles", "path length", "terminal W2", "fit CPU s"], rows
        )
    }


def _plot_paths(ctx, name: str, paths: dict, waypoint=None, obstacles=None) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(paths), figsize=(3.6 * len(paths), 3.4), squeeze=False)
    for ax, (title, p) in zip(axes[0], paths.items()):
        for i in range(0, p.shape[1], 3):
            ax.plot(p[:, i, 0], p[:, i, 1], lw=0.4, alpha=0.6)
        ax.scatter(p[0, :, 0], p[0, :, 1], s=2, color="k")
        ax.scatter(p[-1, :, 0], p[-1, :, 1], s=2, color="k")
        if waypoint is not None:
            ax.scatter([waypoint[0]], [waypoint[1]], marker="*", s=120, color="red", zorder=5)
        if obstacles is not None:
            c = np.asarray(obstacles[0]).reshape(-1, 2)
            for o in c:
                ax.add_patch(plt.Circle(tuple(o), obstacles[1], color="gray", alpha=0.4))
        ax.set_title(title, fontsize=9)
        ax.set_aspect("equal")
    save_fig(fig, ctx.figure_path(name))
