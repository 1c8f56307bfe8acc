"""Reproduction of ROSETTA's claims with the offline stand-in LLM on TabletopLite.

Per seed: the seed's first ``n_preferences`` generated preferences go through every arm (rosetta,
no_grounding, no_staging, no_follow_up, eureka) plus two-round scenarios; every final reward is scored
against the hidden intent (reward-intent AUROC over scripted behaviours). Then PPO trains on
``rl_preferences`` with the rewards of ``rl_arms`` (every reward call goes through the sandbox) and a
deterministic rollout is judged by the intent checker.

Scales (``config.config_for``): smoke (2 preferences, 10k PPO steps, CI), small (the claim run),
paper (the pipeline on an annotator CSV with real backends; see the README).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput, mean_std
from iclr26.core.parallel import seed_map
from iclr26.core.report import markdown_table, plot_bars

from .config import RunConfig, config_for

ARM_NAMES = ("rosetta", "no_grounding", "no_staging", "no_follow_up", "eureka")
MULTI_KINDS = ("return_home", "ordered", "reverse")


def _c1(m: dict) -> bool:
    return m["final_share"] >= 0.95 and m["final_share"] >= m["draft_share"] + 0.2 and m["monotone_share"] >= 0.95


def _c2(m: dict) -> bool:
    return bool(m["gate"]) and m["rosetta"] >= m["no_staging"] + 0.25


def _c3(m: dict) -> bool:
    return bool(m["gate"]) and m["rosetta"] >= m["eureka"] + 0.20


CLAIMS = (
    Claim(
        "C1",
        "Mechanism: the error loop makes ROSETTA's rewards executable, and its staged rewards never drop at a "
        "stage completion",
        "official pipeline: <= 10 fix tries, '{}' on failure; staging rule 'the total never decreases'",
        "final_share >= 0.95 and final_share >= draft_share + 0.2 and monotone_share >= 0.95 (seed means)",
        _c1,
    ),
    Claim(
        "C2",
        "Finding: on multi-stage RL preferences (place then return home), PPO on ROSETTA's staged rewards "
        "reaches the intent far more often than on the unstaged (no_staging) rewards",
        "staging ablation: the paper reports ROSETTA above no_staging (numbers not available to us)",
        "competence gate passed and success(rosetta) >= success(no_staging) + 0.25 on multi-stage RL preferences "
        "(seed means)",
        _c2,
    ),
    Claim(
        "C3",
        "Headline in miniature (partly by construction): over the RL preferences ROSETTA beats a Eureka-like "
        "one-shot reward",
        "87% success over 116 preferences; above Eureka/Text2Reward baselines",
        "competence gate passed and success(rosetta) >= success(eureka) + 0.20 over the RL preferences (seed means)",
        _c3,
    ),
)


def _isolation(cfg: RunConfig) -> str | None:
    return cfg.pipeline.isolation or None


def _backend(cfg: RunConfig, seed: int):
    from .backends import RoleRouter
    from .paper import make_router

    if cfg.backend.kind == "scripted":
        from .standin import ScriptedOfflineBackend

        return RoleRouter(ScriptedOfflineBackend(cfg.standin, seed))
    return make_router(cfg.backend)


def _pref_rows(router, pref, cfg: RunConfig, seed: int, scored) -> tuple[list[dict], dict]:
    """Every arm on one preference: round outcome, AUROC, monotonicity (rosetta); the final functions per arm."""
    from .env import EnvConfig, TabletopLite
    from .intent import rollout_states
    from .pipeline import arm_config, demo_to_language, record_demo, rosetta_round
    from .scoring import completion_steps, monotone_at_completions, reward_auroc
    from .smoke import SmokeResult, SmokeRunner
    from .standin import oracle_functions

    env_cfg = replace(cfg.env, n_objects=pref.n_objects)
    scene = TabletopLite(1, env_cfg, 0).setup_description()
    router.context = {"seed": seed, "pid": pref.pid}
    video = demo_to_language(router, record_demo(pref, seed), scene, cfg.pipeline.demo_stride)
    rows, funcs = [], {}
    for arm in (*ARM_NAMES, "oracle"):
        router.context = {"seed": seed, "pid": pref.pid, "arm": arm}
        with SmokeRunner(seed=seed, env_cfg=env_cfg, isolation=_isolation(cfg)) as runner:
            if arm == "oracle":
                res = None
                f = oracle_functions(pref.intent)
            else:
                res = rosetta_round(
                    router,
                    pref,
                    arm_config(arm, cfg.pipeline.no_staging_plan),
                    task=pref.task,
                    video=video,
                    seed=seed,
                    tries=cfg.pipeline.error_tries,
                    runner=runner,
                    draft_from=cfg.pipeline.draft_from,
                    review_context=cfg.pipeline.review_context,
                )
                f = res.funcs
            row = {
                "seed": seed,
                "pid": pref.pid,
                "kind": pref.kind,
                "arm": arm,
                "usable": bool(f),
                "auroc": reward_auroc(runner, f, pref.intent, *scored),
            }
            if res is not None:
                row.update(draft_ok=res.draft_ok, fix_calls=res.fix_calls, failure=res.failure, grounded=res.grounded)
            if pref.intent.multi_stage:
                speed = 0.5 if pref.intent.speed_cap is not None else 1.0
                st, ac = rollout_states(pref.intent, pref.n_objects, 4, seed + 17, speed)
                out = runner.rewards(f, st[1:], ac) if f else SmokeResult(False, "Unusable")
                row["monotone"] = (not isinstance(out, SmokeResult)) and monotone_at_completions(
                    out[0], completion_steps(pref.intent, st)
                )
        router.log({"event": "verdict", **row, "code": f})
        rows.append(row)
        funcs[arm] = f
    del EnvConfig
    return rows, funcs


def _chain_rows(router, r1, r2, cfg: RunConfig, seed: int, scored) -> list[dict]:
    """Two rounds (rosetta and eureka): round 2 starts from round 1's functions and next description."""
    from .env import TabletopLite
    from .intent import rollout_states
    from .pipeline import arm_config, demo_to_language, record_demo, rosetta_round
    from .scoring import reward_auroc
    from .smoke import SmokeRunner

    scene = TabletopLite(1, cfg.env, 0).setup_description()
    rows = []
    for arm in ("rosetta", "eureka"):
        router.context = {"seed": seed, "pid": r2.pid, "arm": arm}
        with SmokeRunner(seed=seed, env_cfg=cfg.env, isolation=_isolation(cfg)) as runner:
            v1 = demo_to_language(router, record_demo(r1, seed), scene, cfg.pipeline.demo_stride)
            opts = {"draft_from": cfg.pipeline.draft_from, "review_context": cfg.pipeline.review_context}
            one = rosetta_round(
                router,
                r1,
                arm_config(arm),
                task=r1.task,
                video=v1,
                seed=seed,
                runner=runner,
                tries=cfg.pipeline.error_tries,
                **opts,
            )
            st, _ = rollout_states(r2.demo, r2.n_objects, 1, seed)
            v2 = demo_to_language(router, st, scene, cfg.pipeline.demo_stride)
            task2 = one.next_description or r1.task
            two = rosetta_round(
                router,
                r2,
                arm_config(arm),
                task=task2,
                video=v2,
                prev_funcs=one.funcs,
                seed=seed,
                runner=runner,
                tries=cfg.pipeline.error_tries,
                **opts,
            )
            rows.append(
                {
                    "seed": seed,
                    "pid": r2.pid,
                    "kind": r2.kind,
                    "arm": arm,
                    "round1_usable": bool(one.funcs),
                    "usable": bool(two.funcs),
                    "draft_ok": two.draft_ok,
                    "round1_draft_ok": one.draft_ok,
                    "auroc_round1": reward_auroc(runner, one.funcs, r1.intent, *scored),
                    "auroc": reward_auroc(runner, two.funcs, r2.intent, *scored),
                }
            )
        router.log({"event": "verdict", **rows[-1], "code": two.funcs})
    return rows


def seed_pipeline(job: tuple[int, RunConfig, str]) -> dict:
    """All pipeline work of one seed (runs in a worker process)."""
    from .intent import make_preferences
    from .scoring import stacked_rollouts

    seed, cfg, out_dir = job
    p = cfg.pipeline
    router = _backend(cfg, seed)
    router.path = Path(out_dir) / f"transcript_seed{seed}.jsonl"
    prefs = make_preferences(max(p.n_preferences, 16), seed, n_chains=p.n_chains)
    singles = [x for x in prefs if x.chain is None][: p.n_preferences]
    chains = [x for x in prefs if x.chain is not None]
    scored = stacked_rollouts(2, p.score_envs, seed + 101)
    rows, rl = [], {}
    for i, pref in enumerate(singles):
        r, funcs = _pref_rows(router, pref, cfg, seed, scored)
        rows += r
        if i in p.rl_preferences:
            rl[pref.pid] = {"pref": pref, "funcs": {a: funcs[a] for a in p.rl_arms}}
    chain_rows = []
    for c in range(p.n_chains):
        r1, r2 = [x for x in chains if x.chain[0] == c]
        chain_rows += _chain_rows(router, r1, r2, cfg, seed, scored)
    return {"seed": seed, "rows": rows, "chains": chain_rows, "rl": rl}


def rl_job(job: tuple) -> dict:
    """PPO on one (seed, preference, arm) reward; the reward runs in a sandbox child for every step."""
    from .env import TabletopLite
    from .intent import check_intent
    from .ppo import rollout_policy, train_ppo
    from .smoke import RewardError, SandboxedReward

    seed, pref, arm, funcs, cfg = job
    env_cfg = replace(cfg.env, n_objects=pref.n_objects)
    out = {
        "seed": seed,
        "pid": pref.pid,
        "kind": pref.kind,
        "arm": arm,
        "success": 0.0,
        "satisfaction": 0.0,
        "error": "",
        "curve": [],
    }
    if not funcs:
        out["error"] = "unusable reward ({})"
        return out
    salt = int(pref.pid[1:]) if pref.pid[1:].isdigit() else 0
    try:
        with SandboxedReward(funcs, isolation=_isolation(cfg)) as reward:
            ac = train_ppo(
                lambda n: TabletopLite(n, env_cfg, 1000 * seed + salt),
                reward,
                cfg.ppo,
                seed,
                env_cfg.episode_len,
                log=lambda it, **k: out["curve"].append(k["reward"]),
            )
    except (RewardError, ValueError) as e:
        out["error"] = str(e)[:300]
        return out
    states, _ = rollout_policy(
        ac, TabletopLite(cfg.pipeline.eval_envs, env_cfg, 10_000 + 1000 * seed + salt), env_cfg.episode_len
    )
    res = check_intent(pref.intent, states, env_cfg.bin_radius)
    out.update(success=float(res["success"].mean()), satisfaction=float(res["satisfaction"].mean()))
    return out


def _summaries(seeds, rows, chains, rl) -> tuple[dict, dict]:
    """Metrics per seed and the claims' measured values (seed means)."""

    def by(seed, arm, key, data=rows, filt=lambda r: True):
        vals = [float(r[key]) for r in data if r["seed"] == seed and r["arm"] == arm and key in r and filt(r)]
        return float(np.mean(vals)) if vals else float("nan")

    arms = (*ARM_NAMES, "oracle")
    m: dict[str, Any] = {
        "auroc": {a: mean_std([by(s, a, "auroc") for s in seeds]) for a in arms},
        "usable_share": {a: mean_std([by(s, a, "usable") for s in seeds]) for a in ARM_NAMES},
        "draft_share": {a: mean_std([by(s, a, "draft_ok") for s in seeds]) for a in ARM_NAMES},
        "fix_calls_mean": {a: mean_std([by(s, a, "fix_calls") for s in seeds]) for a in ARM_NAMES},
    }
    allrounds = rows + chains
    final = [by(s, "rosetta", "usable", allrounds) for s in seeds]
    draft = [by(s, "rosetta", "draft_ok", allrounds) for s in seeds]
    mono = [by(s, "rosetta", "monotone") for s in seeds]
    m["round2_auroc"] = {a: mean_std([by(s, a, "auroc", chains) for s in seeds]) for a in ("rosetta", "eureka")}
    m["round2_usable"] = {a: mean_std([by(s, a, "usable", chains) for s in seeds]) for a in ("rosetta", "eureka")}
    rl_arms = sorted({r["arm"] for r in rl})
    multi = lambda r: r["kind"] in MULTI_KINDS  # noqa: E731
    plain = lambda r: r["kind"] not in MULTI_KINDS  # noqa: E731
    succ = {a: [by(s, a, "success", rl) for s in seeds] for a in rl_arms}
    succ_multi = {a: [by(s, a, "success", rl, multi) for s in seeds] for a in rl_arms}
    succ_plain = {a: [by(s, a, "success", rl, plain) for s in seeds] for a in rl_arms}
    m["rl_success"] = {a: mean_std(v) for a, v in succ.items()}
    m["rl_success_multi_stage"] = {a: mean_std(v) for a, v in succ_multi.items()}
    m["rl_success_pick_place"] = {a: mean_std(v) for a, v in succ_plain.items()}
    m["rl_satisfaction"] = {a: mean_std([by(s, a, "satisfaction", rl) for s in seeds]) for a in rl_arms}
    gate_val = float(np.mean(succ_plain["oracle"])) if "oracle" in succ_plain else float("nan")
    gate = bool(gate_val >= 0.8)
    m["competence_gate"] = {
        "rule": "oracle intent success on plain pick-and-place RL preferences >= 0.80",
        "oracle_success": gate_val,
        "passed": gate,
    }
    measured = {
        "C1": {
            "final_share": float(np.mean(final)),
            "draft_share": float(np.mean(draft)),
            "monotone_share": float(np.nanmean(mono)) if np.isfinite(mono).any() else float("nan"),
            "per_seed_final": final,
            "per_seed_draft": draft,
            "per_seed_monotone": mono,
        }
    }
    if "rosetta" in succ_multi and "no_staging" in succ_multi:
        measured["C2"] = {
            "gate": gate,
            "rosetta": float(np.mean(succ_multi["rosetta"])),
            "no_staging": float(np.mean(succ_multi["no_staging"])),
            "per_seed_rosetta": succ_multi["rosetta"],
            "per_seed_no_staging": succ_multi["no_staging"],
        }
    if "rosetta" in succ and "eureka" in succ:
        measured["C3"] = {
            "gate": gate,
            "rosetta": float(np.mean(succ["rosetta"])),
            "eureka": float(np.mean(succ["eureka"])),
            "per_seed_rosetta": succ["rosetta"],
            "per_seed_eureka": succ["eureka"],
        }
    return m, measured


def _tables(rows, chains, rl) -> dict[str, str]:
    kinds = sorted({r["kind"] for r in rows})
    arms = (*ARM_NAMES, "oracle")
    auc = [
        [k] + [f"{np.mean([r['auroc'] for r in rows if r['kind'] == k and r['arm'] == a]):.2f}" for a in arms]
        for k in kinds
    ]
    rl_arms = sorted({r["arm"] for r in rl})
    rl_kinds = sorted({r["kind"] for r in rl})
    succ = [
        [k] + [f"{np.mean([r['success'] for r in rl if r['kind'] == k and r['arm'] == a]):.2f}" for a in rl_arms]
        for k in rl_kinds
    ]
    r2 = (
        [
            [
                a,
                f"{np.mean([r['auroc_round1'] for r in chains if r['arm'] == a]):.2f}",
                f"{np.mean([r['auroc'] for r in chains if r['arm'] == a]):.2f}",
                f"{np.mean([r['usable'] for r in chains if r['arm'] == a]):.2f}",
            ]
            for a in ("rosetta", "eureka")
        ]
        if chains
        else []
    )
    out = {
        "Reward-intent AUROC per preference type and arm (no RL)": markdown_table(["type", *arms], auc),
        "PPO intent success per preference type and arm": markdown_table(["type", *rl_arms], succ),
    }
    if r2:
        out["Two-round scenarios (round 2 edits round 1)"] = markdown_table(
            ["arm", "AUROC round 1", "AUROC round 2", "round 2 usable"], r2
        )
    return out


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "paper" or cfg.feedback_csv:
        from .paper import run_paper

        return run_paper(ctx, cfg)
    p = cfg.pipeline
    bad = [a for a in p.rl_arms if a not in (*ARM_NAMES, "oracle")]
    if bad:
        raise ExperimentError(f"pipeline.rl_arms: unknown arms {bad}")
    seeds = list(ctx.seeds)
    results = seed_map(
        seed_pipeline,
        [(s, cfg, str(ctx.out_dir)) for s in seeds],
        workers=p.workers,
        progress=ctx.progress,
        desc="pipeline (seeds)",
    )
    rows = [r for res in results for r in res["rows"]]
    chains = [r for res in results for r in res["chains"]]
    jobs = [
        (res["seed"], v["pref"], arm, v["funcs"][arm], cfg)
        for res in results
        for v in res["rl"].values()
        for arm in p.rl_arms
    ]
    rl = seed_map(rl_job, jobs, workers=p.workers, progress=ctx.progress, desc="PPO runs")
    for r in rl:
        for it, val in enumerate(r.pop("curve")):
            ctx.log(it, series=f"seed{r['seed']}/{r['pid']}/{r['arm']}", episode_reward=val)
    metrics, measured = _summaries(seeds, rows, chains, rl)
    metrics["rows"], metrics["chains"], metrics["rl"] = rows, chains, rl
    (Path(ctx.out_dir) / "config_tree.json").write_text(json.dumps(asdict(cfg), default=str, indent=1))
    plot_bars(
        ctx.figure_path("rl_success"),
        {a: v["mean"] for a, v in metrics["rl_success"].items()},
        ylabel="intent success",
        title="PPO intent success per arm",
    )
    gate = metrics["competence_gate"]
    notes = [
        f"competence gate: {'PASSED' if gate['passed'] else 'FAILED'} (oracle {gate['oracle_success']:.2f} "
        f"on plain pick-and-place)" + ("" if gate["passed"] else "; C2 and C3 are untestable at this budget."),
        "Language understanding comes from the scripted stand-in: arm differences due to reference "
        "resolution hold by construction; staging in RL and the error loop on real broken code are findings.",
    ]
    return RunOutput(metrics=metrics, measured=measured, tables=_tables(rows, chains, rl), notes=notes)


EXPERIMENT = Experiment(
    slug="rosetta",
    title="ROSETTA: Constructing Code-Based Reward from Unconstrained Language Preference",
    arxiv="openreview:Ig6goVdtjb",
    claims=CLAIMS,
    run=run,
    config=config_for,
    runs_model_code=True,  # generated reward code, in the sandbox
)
