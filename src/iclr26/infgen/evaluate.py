"""Measuring rollouts and summarising a run (shared by the TinyTown and paper scales).

Per method: statistics over steps [eval_from, horizon) pooled over seed windows, compared with ground truth:
count ratio = mean agent count / ground-truth mean count; W1 of speed, acceleration and headway; collision and
off-road rates per agent-step.

Acceleration is compared with the *tokenized* ground truth (the log replayed through the motion tokenizer's
closed-loop labels): the action grid quantizes acceleration, so this is the floor any tokenized model has
(issue decision for C2). ``w1_accel_raw_*`` (against the raw log) and ``w1_accel_tokenized_gt`` (tokenized
vs raw log) stay in the results.
"""

from __future__ import annotations

import numpy as np

from iclr26.core.experiment import RunContext, RunOutput, mean_std
from iclr26.core.report import markdown_table, plot_curves, save_fig
from iclr26.infgen.config import RunConfig
from iclr26.infgen.metrics import scene_stats, speeds_accels, wasserstein1
from iclr26.infgen.tokenizer import MotionTokenizer
from iclr26.infgen.world import Scene

METHODS = ("insertion", "no_insertion", "log_replay", "learned_eos")
LABELS = {
    "insertion": "InfGen (insertion, released count)",
    "no_insertion": "no insertion (static init)",
    "log_replay": "log-replay",
    "learned_eos": "InfGen (learned EOS, ours)",
    "ground_truth": "ground truth",
}


DT = 0.5
"""Seconds per logged step (2 Hz)."""


def summarise(ctx: RunContext, per_seed: dict, curves: dict, frames_scene: Scene | None) -> RunOutput:
    """Seed means, claims' measured values, figures and the table."""
    keys = [k for k in per_seed[ctx.seeds[0]] if isinstance(per_seed[ctx.seeds[0]][k], float | int)]
    summary = {k: mean_std([per_seed[s][k] for s in ctx.seeds]) for k in keys}
    mean = {k: v["mean"] for k, v in summary.items()}
    plot_run(ctx, per_seed, curves, frames_scene)
    metrics = {
        "per_seed": {str(s): {k: v for k, v in r.items()} for s, r in per_seed.items()},
        "summary": summary,
    }
    return RunOutput(
        metrics=metrics,
        measured=claim_values(mean),
        tables={"60-120 s statistics (mean ± std over seeds)": method_table(summary)},
        notes=run_notes(ctx),
    )


def claim_values(mean: dict) -> dict:
    """The seed means each claim's rule reads."""
    ratios = ("count_ratio_insertion", "count_ratio_no_insertion", "count_ratio_log_replay", "count_ratio_learned_eos")
    return {
        "C1": {k: mean[k] for k in ratios},
        "C2": {
            f"w1_{x}_{m}": mean[f"w1_{x}_{m}"]
            for x in ("speed", "accel", "headway", "accel_raw")
            for m in ("insertion", "no_insertion")
        }
        | {"w1_accel_tokenized_gt": mean["w1_accel_tokenized_gt"]},
        "C3": {f"{r}_{m}": mean[f"{r}_{m}"] for r in ("collision", "offroad") for m in ("insertion", "ground_truth")},
    }


def plot_run(ctx: RunContext, per_seed: dict, curves: dict, frames_scene: Scene | None) -> None:
    """agent_count.png (count over time per method), frames_strip.png, train_loss.png."""
    fig_curves = {}
    for m in METHODS:
        if m not in curves:
            continue
        arr = np.asarray(curves[m], dtype=float)
        fig_curves[LABELS[m]] = (np.arange(arr.shape[1]) * DT, arr.mean(0), arr.std(0))
    gt = np.asarray(curves["ground_truth_mean"], dtype=float)
    horizon = len(fig_curves[LABELS["insertion"]][0])
    fig_curves[LABELS["ground_truth"] + " (mean)"] = (np.arange(horizon) * DT, np.full(horizon, gt.mean()))
    plot_curves(
        ctx.figure_path("agent_count"),
        fig_curves,
        "time (s)",
        "agents in the scene",
        "Agent count over a rollout (mean over seeds and seed windows)",
    )
    if frames_scene is not None:
        render_strip(frames_scene, ctx.figure_path("frames_strip"))
    plot_curves(
        ctx.figure_path("train_loss"),
        {f"seed {s}": (np.arange(len(per_seed[s]["losses"])), per_seed[s]["losses"]) for s in ctx.seeds},
        "step",
        "loss (sum of 5 CE)",
        "Training loss",
    )


def method_table(summary: dict) -> str:
    """One row per method (ground truth first): mean ± std over seeds of every statistic."""
    columns = ("count_ratio", "w1_speed", "w1_accel", "w1_accel_raw", "w1_headway", "collision", "offroad")

    def cell(key: str) -> str:
        return f"{summary[key]['mean']:.3f} ± {summary[key]['std']:.3f}" if key in summary else "-"

    rows = [
        [LABELS[m]] + [cell(f"{c}_{m}") for c in columns]
        for m in ("ground_truth",) + METHODS
        if f"count_ratio_{m}" in summary
    ]
    return markdown_table(
        [
            "method",
            "count ratio",
            "W1 speed",
            "W1 accel (tokenized GT)",
            "W1 accel (raw GT)",
            "W1 headway",
            "collision",
            "off-road",
        ],
        rows,
    )


def run_notes(ctx: RunContext) -> list[str]:
    cfg: RunConfig = ctx.cfg
    ev = cfg.eval
    seed_windows = (
        f"{cfg.paper.n_eval} held-out scenarios at most"
        if ctx.scale == "paper"
        else f"{ev.n_scenes} seed windows per seed ({ev.n_learned} for learned EOS)"
    )
    return [
        f"window {ev.eval_from * DT:.0f}-{ev.horizon * DT:.0f} s of {ev.horizon * DT:.0f} s rollouts; "
        f"{seed_windows}; {cfg.train.steps} training steps of batch {cfg.batch}",
        "with insertion = the released caller-count mode (density target from the training distribution); "
        "learned EOS = our extension",
    ]


def tokenized_accels(scene: Scene, motion: MotionTokenizer) -> np.ndarray:
    """Accelerations of ``scene`` replayed through the motion tokenizer (closed-loop labels, reconstructed
    states): what a perfect tokenized model would produce."""
    _, recon = motion.tokenize(scene)
    replay = Scene(recon, scene.valid, scene.size, scene.types, scene.uid, scene.tl, scene.map, scene.dt)
    return speeds_accels(replay)[1]


def measure(rollouts: dict[str, list[Scene]], gt_stats: dict, t_from: int, H: int) -> tuple[dict, dict]:
    """Per-method statistics over steps [t_from, H), pooled over seed windows, against ground truth
    (``gt_stats`` from ``scene_stats`` plus ``accel_tokenized`` from :func:`tokenized_accels`)."""
    gt_count = gt_stats["count"]
    res: dict = {
        "gt_mean_count": gt_count,
        "w1_accel_tokenized_gt": wasserstein1(gt_stats["accel_tokenized"], gt_stats["accel"]),
        "count_ratio_ground_truth": 1.0,
        "collision_ground_truth": gt_stats["collisions"] / max(1, gt_stats["agent_steps"]),
        "offroad_ground_truth": gt_stats["offroad"] / max(1, gt_stats["agent_steps"]),
    }
    curves = {"ground_truth_mean": gt_count}
    for m, scenes in rollouts.items():
        if not scenes:
            continue
        pooled = [scene_stats(s, t_from, H) for s in scenes]
        cat = {k: np.concatenate([p[k] for p in pooled]) for k in ("speed", "accel", "headway")}
        n = sum(p["agent_steps"] for p in pooled)
        res[f"count_ratio_{m}"] = float(np.mean([p["count"] for p in pooled]) / gt_count)
        for k in ("speed", "headway"):
            res[f"w1_{k}_{m}"] = wasserstein1(cat[k], gt_stats[k])
        res[f"w1_accel_{m}"] = wasserstein1(cat["accel"], gt_stats["accel_tokenized"])
        res[f"w1_accel_raw_{m}"] = wasserstein1(cat["accel"], gt_stats["accel"])
        res[f"collision_{m}"] = sum(p["collisions"] for p in pooled) / n if n else 0.0
        res[f"offroad_{m}"] = sum(p["offroad"] for p in pooled) / n if n else 0.0
        res[f"agent_steps_{m}"] = n
        curve = np.zeros(H)
        for s in scenes:
            c = s.counts()
            curve[: len(c)] += c
        curves[m] = curve / max(1, len(scenes))
    return res, curves


def render_strip(scene: Scene, path, times_s=(0, 20, 40, 60, 90, 120)) -> None:
    """A strip of rendered frames of one generated scene: lanes, lights at the stop lines, agent boxes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon

    from iclr26.infgen.metrics import box_corners

    steps = [min(scene.T - 1, int(t / scene.dt)) for t in times_s]
    fig, axes = plt.subplots(1, len(steps), figsize=(2.6 * len(steps), 2.8))
    m = scene.map
    colours = {0: "tab:green", 1: "gold", 2: "tab:red", 3: "grey"}
    for ax, t in zip(np.atleast_1d(axes), steps, strict=True):
        ax.scatter(m.dense_xy[:, 0], m.dense_xy[:, 1], s=0.2, c="lightgrey")
        for k, seg in enumerate(m.light_seg):
            p = m.seg_points[seg, -1]
            ax.scatter([p[0]], [p[1]], s=14, c=colours[int(scene.tl[t, k])], zorder=3)
        for a in np.flatnonzero(scene.valid[t]):
            x, y, psi, _ = scene.states[t, a]
            c = box_corners(x, y, psi, scene.size[a, 0], scene.size[a, 1])
            ax.add_patch(Polygon(c, closed=True, color="tab:blue" if scene.types[a] == 0 else "tab:purple"))
        lim = (m.bound or float(np.abs(m.dense_xy).max())) + 3
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"t = {t * scene.dt:.0f} s, {int(scene.valid[t].sum())} agents", fontsize=8)
    save_fig(fig, path)
