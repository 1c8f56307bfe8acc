"""Reproduction: 120-second rollouts in TinyTown with and without agent insertion, vs log-replay.

Per seed: simulate TinyTown (training runs cut into 19-step windows, and a held-out long ground-truth run),
tokenize, train the model, then from 1-second seeds taken from the held-out run roll out 120 s with

* ``insertion`` - the released behaviour: a caller-given count per <AS> block towards a density target drawn
  from the training distribution of agent counts (the claims' "with insertion");
* ``no insertion`` - the same model, no new agents (static initialisation);
* ``log-replay`` - the 9.5 s window of the log, then nothing;
* ``learned EOS`` - our extension (the model decides when to stop inserting); reported, not a claim.

Statistics over 60-120 s are compared with the long ground-truth run.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput, mean_std
from iclr26.core.parallel import torch_threads
from iclr26.core.report import markdown_table, plot_curves, save_fig
from iclr26.infgen.config import RunConfig, config_for
from iclr26.infgen.generate import Generator, log_replay
from iclr26.infgen.metrics import scene_stats, wasserstein1
from iclr26.infgen.model import InfGenModel
from iclr26.infgen.tokenizer import SceneTokenizer, long_run_windows
from iclr26.infgen.training import train_infgen
from iclr26.infgen.world import Scene, TinyTown

METHODS = ("insertion", "no_insertion", "log_replay", "learned_eos")
LABELS = {
    "insertion": "InfGen (insertion, released count)",
    "no_insertion": "no insertion (static init)",
    "log_replay": "log-replay",
    "learned_eos": "InfGen (learned EOS, ours)",
    "ground_truth": "ground truth",
}


def _c1(m) -> bool:
    return (
        0.6 <= m["count_ratio_insertion"] <= 1.4
        and m["count_ratio_no_insertion"] < 0.3
        and m["count_ratio_log_replay"] < 0.3
    )


def _c2(m) -> bool:
    return all(m[f"w1_{k}_insertion"] < m[f"w1_{k}_no_insertion"] for k in ("speed", "accel", "headway"))


def _c3(m) -> bool:
    return (
        m["collision_insertion"] <= 2 * m["collision_ground_truth"] + 0.01
        and m["offroad_insertion"] <= 2 * m["offroad_ground_truth"] + 0.01
    )


CLAIMS = (
    Claim(
        "C1",
        "With insertion the agent count over 60-120 s stays within 0.6-1.4 of the ground truth's mean; "
        "without insertion and with log-replay it falls below 0.3 of it.",
        "scene keeps its density over long rollouts (qualitative, project-page videos)",
        "0.6 <= ratio_insertion <= 1.4 and ratio_no_insertion < 0.3 and ratio_log_replay < 0.3 "
        "(ratio = mean count over 60-120 s / ground-truth mean count; seed means)",
        _c1,
    ),
    Claim(
        "C2",
        "Wasserstein-1 distances of speed, acceleration and headway to ground truth over 60-120 s are "
        "lower with insertion than without.",
        "realistic long rollouts (qualitative)",
        "w1_X_insertion < w1_X_no_insertion for X in speed, accel, headway (seed means; an empty scene has "
        "no distribution and counts as W1 = inf)",
        _c2,
    ),
    Claim(
        "C3",
        "Collision and off-road rates with insertion are at most twice the ground truth's plus 1%.",
        "collision / off-road rates reported for RL traffic (values not found)",
        "rate_insertion <= 2 * rate_ground_truth + 0.01 for collision and off-road (per agent-step over "
        "60-120 s; seed means)",
        _c3,
    ),
)


def _seed_windows(long_run: Scene, n: int, length: int = 19) -> list[Scene]:
    """``n`` seed windows spread over the held-out run (t0 even)."""
    starts = np.linspace(0, long_run.T - length - 1, n + 2)[1:-1].astype(int)
    return [long_run.window(int(t0) - int(t0) % 2, length) for t0 in starts]


def run(ctx: RunContext) -> RunOutput:
    if ctx.scale == "paper":
        from iclr26.infgen.paper import run_paper

        return run_paper(ctx)
    cfg: RunConfig = ctx.cfg
    check_config(cfg)
    with torch_threads(max(1, cfg.threads)):
        return _run_tinytown(ctx, cfg)


def check_config(cfg: RunConfig) -> None:
    """Settings that must agree across the tree (a clear error instead of a shape mismatch later)."""
    if cfg.model.n_actions != cfg.motion.n_actions:
        raise ExperimentError(
            f"model.n_actions={cfg.model.n_actions} must be motion.n_bins**2 = {cfg.motion.n_actions}"
        )
    if cfg.train.warmup_steps > cfg.train.steps:
        raise ExperimentError(f"train.warmup_steps={cfg.train.warmup_steps} > train.steps={cfg.train.steps}")
    if not 0 <= cfg.eval.eval_from < cfg.eval.horizon:
        raise ExperimentError(f"need 0 <= eval.eval_from < eval.horizon, got {cfg.eval.eval_from}, {cfg.eval.horizon}")


def _run_tinytown(ctx: RunContext, cfg: RunConfig) -> RunOutput:
    per_seed, curves, frames_scene = {}, {}, None
    for seed in ctx.seeds:
        t0 = time.perf_counter()
        res, seed_curves, scene0 = run_seed(ctx, cfg, seed)
        res["wall_seconds"] = time.perf_counter() - t0
        per_seed[seed] = res
        for k, v in seed_curves.items():
            curves.setdefault(k, []).append(v)
        if frames_scene is None:
            frames_scene = scene0
    return summarise(ctx, per_seed, curves, frames_scene)


def summarise(ctx: RunContext, per_seed: dict, curves: dict, frames_scene: Scene | None) -> RunOutput:
    """Seed means, claims' measured values, figures and the table."""
    keys = [k for k in per_seed[ctx.seeds[0]] if isinstance(per_seed[ctx.seeds[0]][k], float | int)]
    summary = {k: mean_std([per_seed[s][k] for s in ctx.seeds]) for k in keys}
    mean = {k: v["mean"] for k, v in summary.items()}
    measured = {
        "C1": {
            k: mean[k]
            for k in (
                "count_ratio_insertion",
                "count_ratio_no_insertion",
                "count_ratio_log_replay",
                "count_ratio_learned_eos",
            )
        },
        "C2": {
            f"w1_{x}_{m}": mean[f"w1_{x}_{m}"]
            for x in ("speed", "accel", "headway")
            for m in ("insertion", "no_insertion")
        },
        "C3": {f"{r}_{m}": mean[f"{r}_{m}"] for r in ("collision", "offroad") for m in ("insertion", "ground_truth")},
    }
    # figures
    dt = 0.5
    fig_curves = {}
    for m in ("insertion", "no_insertion", "log_replay", "learned_eos"):
        if m not in curves:
            continue
        arr = np.asarray(curves[m], dtype=float)
        fig_curves[LABELS[m]] = (np.arange(arr.shape[1]) * dt, arr.mean(0), arr.std(0))
    gt = np.asarray(curves["ground_truth_mean"], dtype=float)
    horizon = len(fig_curves[LABELS["insertion"]][0])
    fig_curves[LABELS["ground_truth"] + " (mean)"] = (np.arange(horizon) * dt, np.full(horizon, gt.mean()))
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
    rows = []
    for m in ("ground_truth",) + METHODS:
        if f"count_ratio_{m}" not in summary:
            continue

        def cell(k, m=m):
            key = f"{k}_{m}"
            return f"{summary[key]['mean']:.3f} ± {summary[key]['std']:.3f}" if key in summary else "-"

        rows.append(
            [
                LABELS[m],
                cell("count_ratio"),
                cell("w1_speed"),
                cell("w1_accel"),
                cell("w1_headway"),
                cell("collision"),
                cell("offroad"),
            ]
        )
    table = markdown_table(
        ["method", "count ratio", "W1 speed", "W1 accel", "W1 headway", "collision", "off-road"], rows
    )
    metrics = {
        "per_seed": {str(s): {k: v for k, v in r.items()} for s, r in per_seed.items()},
        "summary": summary,
    }
    cfg: RunConfig = ctx.cfg
    ev = cfg.eval
    seed_windows = (
        f"{cfg.paper.n_eval} held-out scenarios at most"
        if ctx.scale == "paper"
        else f"{ev.n_scenes} seed windows per seed ({ev.n_learned} for learned EOS)"
    )
    notes = [
        f"window {ev.eval_from * dt:.0f}-{ev.horizon * dt:.0f} s of {ev.horizon * dt:.0f} s rollouts; "
        f"{seed_windows}; {cfg.train.steps} training steps of batch {cfg.batch}",
        "with insertion = the released caller-count mode (density target from the training distribution); "
        "learned EOS = our extension",
    ]
    return RunOutput(
        metrics=metrics, measured=measured, tables={"60-120 s statistics (mean ± std over seeds)": table}, notes=notes
    )


def build(cfg: RunConfig, seed: int) -> tuple[SceneTokenizer, InfGenModel]:
    """The tokenizer (motion grid of ``cfg.motion``, ``cfg.model.n_slots`` agent slots) and a seeded model."""
    tok = SceneTokenizer(motion=cfg.motion, n_slots=cfg.model.n_slots)
    torch.manual_seed(seed)
    return tok, InfGenModel(cfg.model)


def run_seed(ctx: RunContext, cfg: RunConfig, seed: int) -> tuple[dict, dict, Scene]:
    rng = np.random.default_rng(seed)
    world = TinyTown(cfg.world)
    tok, model = build(cfg, seed)
    d = cfg.data
    pairs = []
    for r in range(d.train_runs):
        log = world.simulate(d.run_seconds, seed=10_000 * seed + r)
        pairs += long_run_windows(tok, log, length=d.train_len, stride=d.stride, seed=seed)
    seqs = [p[1] for p in pairs]
    counts = np.concatenate([p[0].counts() for p in pairs])
    fit_res = train_infgen(
        model,
        seqs,
        replace(cfg.train, progress=ctx.show_progress, desc=f"train seed {seed}"),
        cfg.batch,
        seed,
    )
    gen = Generator(model, tok)
    gt = world.simulate(d.long_seconds, seed=10_000 * seed + 5_000)
    gt_stats = scene_stats(gt, 0, gt.T)
    H, t_from, n_learned = cfg.eval.horizon, cfg.eval.eval_from, cfg.eval.n_learned
    seeds = _seed_windows(gt, cfg.eval.n_scenes)
    rollouts = {m: [] for m in METHODS}
    bar = ctx.progress(total=len(seeds) * 3 + min(n_learned, len(seeds)), desc=f"rollouts seed {seed}")
    for i, sw in enumerate(seeds):
        target = int(rng.choice(counts))
        for m, mode in (("insertion", "released"), ("no_insertion", "off")):
            rollouts[m].append(
                gen.rollout(
                    sw,
                    H,
                    replace(cfg.rollout, insertion=mode),
                    density_target=target,
                    rng=np.random.default_rng([seed, i, len(m)]),
                )
            )
            bar.update(1)
        rollouts["log_replay"].append(log_replay(sw, H))
        bar.update(1)
        if i < n_learned:
            learned = replace(cfg.rollout, insertion="learned")
            rollouts["learned_eos"].append(gen.rollout(sw, H, learned, rng=np.random.default_rng([seed, i, 99])))
            bar.update(1)
    bar.close()
    res, curves = measure(rollouts, gt_stats, t_from, H)
    res.update(
        {
            "losses": fit_res.losses,
            "final_loss": float(np.mean(fit_res.losses[-10:])),
            "n_train_windows": len(seqs),
            "gen_calls": gen.n_calls,
        }
    )
    return res, curves, rollouts["insertion"][0]


def measure(rollouts: dict[str, list[Scene]], gt_stats: dict, t_from: int, H: int) -> tuple[dict, dict]:
    """Per-method statistics over steps [t_from, H), pooled over seed windows, against ground truth."""
    gt_count = gt_stats["count"]
    res: dict = {
        "gt_mean_count": gt_count,
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
        for k in ("speed", "accel", "headway"):
            res[f"w1_{k}_{m}"] = wasserstein1(cat[k], gt_stats[k])
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


EXPERIMENT = Experiment(
    slug="infgen",
    title="SceneStreamer (InfGen): Continuous Scenario Generation as Next Token Group Prediction",
    arxiv="2506.23316",
    claims=CLAIMS,
    run=run,
    config=config_for,
)
