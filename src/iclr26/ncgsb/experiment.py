"""Reproduction in miniature: contact (non-conservative) vs conservative Wasserstein geodesics on 2-D tasks.

Per seed (jobs spread over ``workers`` processes):

* closed form (C1): U = 0, Gaussian to shifted Gaussian, γ ∈ {−2, 0, 2}; the learned displacement share per
  block vs ``(1 − e^{−γt})/(1 − e^{−γ})`` and the kinetic energy per block;
* Task A (C2): a damped process (γ* = 4) observed at t = 0, .2, .4, .6, .8, 1; fits use 0, .6, .8, 1 for
  each γ of the grid; .2 and .4 are held out, each in turn choosing γ while the other is scored; the
  same on an undamped control (γ* = 0); baselines: CWG-C (γ = 0), piecewise OT, piecewise entropic SB;
* Task B (C3): unguided CWG, guided fine-tuning through a waypoint, and a sampler-side push;
* Task C (reported): obstacles; CWG with the potential vs without it vs entropic SB.
"""

from __future__ import annotations

import time

from iclr26.core.experiment import Claim, Experiment, RunContext, RunOutput
from iclr26.core.parallel import seed_map
from iclr26.ncgsb.config import RunConfig, config_for


def _c1(m) -> bool:
    return (
        m["max_share_error"] <= 0.03
        and m["kinetic_falls_gamma_pos"]
        and m["kinetic_rises_gamma_neg"]
        and m["kinetic_flat_dev_gamma0"] <= 0.10
    )


def _c2(m) -> bool:
    if not m["competence_gate"]:
        raise ValueError("untestable at this budget: CWG-C misses the training marginals (competence gate)")
    return (
        m["nc_w2"] <= 0.7 * m["c_w2"]
        and m["nc_w2"] <= 0.7 * m["sb_w2"]
        and 2.0 <= m["chosen_gamma_mean"] <= 6.0
        and m["control_nc_w2"] <= m["control_c_w2"] + 0.05
    )


def _c3(m) -> bool:
    return (
        m["guided_err"] <= 0.5
        and m["guided_terminal_w2"] <= 1.5 * m["unguided_terminal_w2"] + 0.05
        and m["push_terminal_w2"] >= m["guided_terminal_w2"] + 0.5
    )


CLAIMS = (
    Claim(
        "C1",
        "Closed-form contact geodesic (U = 0, Gaussian to shifted Gaussian): the learned displacement share "
        "per block follows (1 - e^{-γt})/(1 - e^{-γ}) for γ in {-2, 0, 2}; kinetic energy per block falls "
        "for γ > 0, rises for γ < 0, is flat for γ = 0.",
        "energy-decreasing / conserving / increasing bridges (Fig. 1)",
        "max_{γ,k} |share_k - φ_γ(t_k)| <= 0.03 and KE strictly falls (γ=2), strictly rises (γ=-2), "
        "max_k |KE_k/mean KE - 1| <= 0.10 (γ=0) (seed-mean paths)",
        _c1,
    ),
    Claim(
        "C2",
        "Task A (damped process, snapshots at 0, .6, .8, 1): CWG-NC with γ chosen on the other held-out "
        "time reconstructs the held-out snapshot better than the conservative bridge and piecewise SB; "
        "the chosen γ is near the true friction; on an undamped control CWG-NC loses nothing.",
        "single-cell held-out W2: CWG 0.33 vs SBIRR 1.64 / DM-SB 1.86",
        "competence gate; nc_w2 <= 0.7 c_w2 and nc_w2 <= 0.7 sb_w2 and 2 <= mean chosen γ <= 6 and "
        "control_nc_w2 <= control_c_w2 + 0.05 (held-out W2, mean over folds and seeds)",
        _c2,
    ),
    Claim(
        "C3",
        "Task B: guided CWG (metric modulation, fine-tuned) passes the waypoint while keeping the terminal "
        "marginal; a sampler-side push to the same guidance error breaks the terminal marginal.",
        "FFHQ guided feasibility: CWG 4.33 vs GSBM 6.84 / DSBM 7.78",
        "guided_err <= 0.5 and guided_terminal_w2 <= 1.5 unguided_terminal_w2 + 0.05 and "
        "push_terminal_w2 >= guided_terminal_w2 + 0.5 (seed means)",
        _c3,
    ),
)


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "paper":
        from iclr26.ncgsb.paper_run import run_paper

        return run_paper(ctx)
    from iclr26.ncgsb.jobs import jobs_for_seed

    jobs = [(seed, job) for seed in ctx.seeds for job in jobs_for_seed(cfg)]
    start = time.perf_counter()
    # one worker process per job (one torch thread each) when workers > 0; in-process otherwise
    fitted = seed_map(
        _run_item,
        [(cfg, seed, job) for seed, job in jobs],
        workers=cfg.workers,
        threads_per_worker=1 if cfg.workers > 0 else None,
        progress=ctx.progress,
        desc="ncgsb fits",
    )
    results = dict(zip(jobs, fitted))
    for (seed, job), res in sorted(results.items(), key=lambda kv: str(kv[0])):
        for step, row in res.get("log", []):
            ctx.log(step, series=f"seed{seed}/{'_'.join(map(str, job))}", **row)
    from iclr26.ncgsb.summary import summarise

    out = summarise(ctx, cfg, results)
    out.metrics["fits_wall_seconds"] = time.perf_counter() - start
    return out


def _run_item(item: tuple) -> dict:
    """One (config, seed, job) fit; module-level so worker processes can run it."""
    from iclr26.ncgsb.jobs import run_job

    cfg, seed, job = item
    return run_job(cfg, seed, job)


EXPERIMENT = Experiment(
    slug="ncgsb",
    title="Contact Wasserstein Geodesics for Non-Conservative Schrödinger Bridges",
    arxiv="2511.06856",
    claims=CLAIMS,
    run=run,
    config=config_for,
)
