"""Reproduction: shallow vs deep forgetting under replay, with Neural Collapse diagnostics.

Grid: dataset x setting (CIL, TIL) x buffer fraction x seed. One run trains a fresh network on the
tasks with class-balanced ER (buffer M = round(f * N_train)) and records A, A*, F_sh, F_dp and the
end-of-training diagnostics (buffer vs population statistics, NC metrics, LDA counterfactual).
Runs are independent and are spread over worker processes (``--set grid.workers=N``); each result
depends only on its (dataset, setting, buffer, seed), never on the worker layout.

Every setting lives in :mod:`.config` (``config_for(scale)``); ``--show-config`` lists them:

* smoke: 1 seed, buffers {0, 4%, 100%} (TIL {4%}), 10 epochs/task;
* small: seeds 0,1,2, buffers {0, .8, 1.6, 4, 8, 16, 32, 64, 100}% (TIL {0, 1.6, 8, 32}%),
  100 epochs/task, MLP d_feat 64, official SGD (lr 0.1, momentum 0, batch 32 + 32) with weight decay 5e-4;
* paper: the same code on local CIFAR-10/100 files, an image folder or .npz features, see :mod:`.paper`.
"""

from __future__ import annotations

from iclr26.core.config import config_to_dict
from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput

from .config import RunConfig, config_for
from .study import (
    DATASETS,
    aggregate,
    competence_gate,
    measure_claims,
    plot_buffer_stats,
    plot_forgetting,
    run_grid,
    tables_for,
)


def _check_c1(m: dict) -> bool:
    if not m:
        return False
    for d, v in m.items():
        if v["buffer_frac"] is None or v["F_sh"] < 20.0:
            return False
        if d == "orthogonal-subspaces" and (v["F_dp_no_replay"] is None or v["F_dp_no_replay"] < 10.0):
            return False
    return True


def _check_c2(m: dict) -> bool:
    return bool(m) and all(
        v["all_ranks_deficient"] and v["norm_ratio"] > 1.05 and v["var_ratio"] < 1.0
        for per_buf in m.values()
        for v in per_buf.values()
    )


def _check_c3(m: dict) -> bool:
    return bool(m) and all(
        abs(v["lda_pop"] - v["probe"]) <= 2.0 and v["lda_pop"] - v["lda_buffer"] >= 5.0 for v in m.values()
    )


def _check_c4(m: dict) -> bool:
    return bool(m) and all(v["gap_til"] <= 0.5 * v["gap_cil"] for v in m.values())


CLAIMS = (
    Claim(
        "C1",
        "Replay gap (CIL): deep forgetting is ~eliminated by a small buffer while shallow forgetting "
        "stays large; deep forgetting exists without replay on the synthetic tasks",
        "F_dp ~0 at ~1-4% replay, F_sh closes only near 100% replay (Fig. 1)",
        "on each dataset, at the smallest buffer with mean F_dp <= 5 points, mean F_sh >= 20 points; "
        "on orthogonal-subspaces mean F_dp(buffer 0) >= 10 points",
        _check_c1,
    ),
    Claim(
        "C2",
        "Buffer statistics (CIL, buffers <= 8%): rank-deficient buffer covariances, inflated buffer "
        "class means, smaller buffer within-class variance",
        "rank Sigma^_c << rank Sigma_c; ||mu^_c|| > ||mu_c|| (Sec. 5, strong collapse)",
        "for every dataset and every buffer 0 < M <= 8%: seed-mean buffer covariance rank < population rank "
        "for every old class, mean(||mu^_c|| / ||mu_c||) > 1.05, mean(sigma^2_buf / sigma^2_pop) < 1",
        _check_c2,
    ),
    Claim(
        "C3",
        "LDA counterfactual: population statistics recover the probe, buffer statistics do not",
        "pop/pop ~ probe > buffer mu^ > buffer/buffer (Fig. 6)",
        "on each dataset, mean over buffers 0 < M <= 8% (old-task test accuracy, points): "
        "|LDA(pop mu, pop Sigma) - probe| <= 2 and LDA(pop) - LDA(buffer mu, buffer Sigma) >= 5",
        _check_c3,
    ),
    Claim(
        "C4",
        "The shallow-minus-deep gap is much smaller with multi-head (TIL) than single-head (CIL) training",
        "gap large for CIL, much smaller for TIL",
        "on each dataset, mean over the TIL buffer grid of (F_sh - F_dp) in TIL <= 0.5 x the same in CIL",
        _check_c4,
    ),
)


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg if ctx.cfg is not None else config_for(ctx.scale)
    if cfg.train.buffer_size != 0 or cfg.train.setting != "cil":
        raise ExperimentError(
            "train.setting and train.buffer_size are set per grid cell; use grid.buffer_fracs / grid.til_fracs"
        )
    if ctx.scale == "paper":
        from .paper import run_paper

        return run_paper(ctx, cfg)
    unknown = [d for d in cfg.grid.datasets if d not in DATASETS]
    if unknown or not cfg.grid.datasets:
        raise ExperimentError(f"grid.datasets: unknown {unknown}; valid: {', '.join(DATASETS)}")
    grid = cfg.grid
    results = run_grid(ctx, cfg)
    agg = aggregate(results, grid, ctx.seeds)
    measured = measure_claims(agg, grid)
    plot_forgetting(ctx.figure_path("forgetting_vs_buffer"), agg)
    plot_buffer_stats(ctx.figure_path("buffer_statistics"), agg)
    per_seed = {f"{d}/{st}/{100 * f:g}%/seed{s}": r for (d, st, f, s), r in results.items()}
    gate = competence_gate(results)
    notes = [
        f"forgetting reference: {cfg.eval.forgetting_ref} (F_sh_max / F_dp_max per run: Mammoth's max_k A_kj)",
        "forgetting in points (accuracy x 100); A*: LogisticRegression(C=10) probe on clean train features",
        "M=round(f*N_train); balanced buffer (official er_balanced); TIL uses one head per task",
    ]
    return RunOutput(
        metrics={
            "config": config_to_dict(cfg),
            "competence_gate": gate,
            "aggregate": {
                d: {st: {f"{100 * f:g}%": r for f, r in rows.items()} for st, rows in a.items()} for d, a in agg.items()
            },
            "runs": per_seed,
        },
        measured=measured,
        tables=tables_for(agg),
        notes=notes,
    )


EXPERIMENT = Experiment(
    slug="forgetting",
    title="Heads collapse, features stay: Why Replay needs big buffers "
    "(v1: Asymptotic analysis of shallow and deep forgetting in replay with Neural Collapse)",
    arxiv="2512.07400",
    claims=CLAIMS,
    run=run,
    config=config_for,
)
