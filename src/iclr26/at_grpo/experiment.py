"""AT-GRPO reproduction: Plan-Path with a tool + planner MAS vs a single agent, under one sample budget.

Arms (each trained until the same number of sampled responses, ``schedule.budget``, is spent; ``small``
trains sa_grpo, mas_grpo, at_grpo, at_grpo_shared and filter_mean, the others via ``--set schedule.arms=...``):

* ``sa_grpo``: single agent (the planner without a tool) + standard (trajectory-grouped) GRPO;
* ``mas_grpo``: tool + planner, per-role policies, standard GRPO (the code's ``no_tree``);
* ``at_grpo``: tool + planner, per-role policies, AT-GRPO (tree sampling, key (env, agent, turn)) -- main;
* ``at_grpo_shared``: the same with one shared role-conditioned policy;
* ``key_env`` / ``key_env_agent`` / ``key_env_turn``: AT-GRPO tree sampling with coarser group keys;
* ``filter_mean``: AT-GRPO + the official code's group filter (mean, 0.5);
* ``at_grpo_nostd``: diagnostic: AT-GRPO without the std division of the advantage;
* evaluation only: ``mas_untrained`` (the main arm at initialisation) and ``swapped`` (the main arm's two
  trained role policies exchanged).

Claims (mean over seeds of held-out greedy success, in %): C1 at_grpo >= mas_grpo + 10; C2 at_grpo >=
sa_grpo + 20; C3 at_grpo - swapped >= 50; C4 chain-MDP gradient cosine, AT > trajectory grouping.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from iclr26.at_grpo.at_grpo import ATGRPOConfig, ATGRPOTrainer, shard
from iclr26.at_grpo.chain_mdp import ChainMDPConfig, gradient_alignment
from iclr26.at_grpo.config import ARMS, RunConfig, config_for
from iclr26.at_grpo.plan_path import PlanPathBatch, env_seeds
from iclr26.at_grpo.policy import HFPolicy, TinyPolicy
from iclr26.at_grpo.rollout import Workflow, evaluate
from iclr26.core.config import config_to_dict
from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput, mean_std
from iclr26.core.parallel import torch_threads
from iclr26.core.report import markdown_table, plot_bars, plot_curves
from iclr26.core.train import rank_device, setup_distributed

ARM_LABEL = {
    "sa_grpo": "Single agent + GRPO",
    "mas_untrained": "MAS (untrained)",
    "mas_grpo": "MAS + GRPO (no_tree)",
    "at_grpo": "MAS + AT-GRPO (per-role)",
    "at_grpo_shared": "MAS + AT-GRPO (shared)",
    "key_env": "AT tree, key (env)",
    "key_env_agent": "AT tree, key (env, agent)",
    "key_env_turn": "AT tree, key (env, turn)",
    "filter_mean": "AT-GRPO + filter mean 0.5",
    "swapped": "AT-GRPO per-role, policies swapped",
    "at_grpo_nostd": "AT-GRPO, mean-only advantage (diagnostic)",
}


def arm_setup(arm: str, base: ATGRPOConfig) -> tuple[tuple[str, ...], ATGRPOConfig, dict[str, str]]:
    """Agents, AT-GRPO config (``base`` with the arm's changes) and agent -> policy map (sigma) of an arm."""
    per_role = {"tool": "tool", "plan": "plan"}
    table = {
        "sa_grpo": (("plan",), replace(base, rollout_mode="no_tree"), {"plan": "single"}),
        "mas_grpo": (("tool", "plan"), replace(base, rollout_mode="no_tree"), per_role),
        "at_grpo": (("tool", "plan"), base, per_role),
        "at_grpo_shared": (("tool", "plan"), base, {"tool": "shared", "plan": "shared"}),
        "key_env": (("tool", "plan"), replace(base, group_key=("env",)), per_role),
        "key_env_agent": (("tool", "plan"), replace(base, group_key=("env", "agent")), per_role),
        "key_env_turn": (("tool", "plan"), replace(base, group_key=("env", "turn")), per_role),
        "filter_mean": (("tool", "plan"), replace(base, filter_method="mean", filter_ratio=0.5), per_role),
        "at_grpo_nostd": (("tool", "plan"), replace(base, normalize="mean"), per_role),
    }
    if arm not in table:
        raise ExperimentError(f"unknown arm {arm!r}; valid: {', '.join(ARMS)}")
    return table[arm]


def load_policy_model(llm: Any, device: str = "cpu") -> tuple[Any, Any]:
    """One trainable Hugging Face role policy, ``(model, tokenizer)``, in train mode.

    Every weight the optimiser updates is float32: with LoRA (the default, official L2) the frozen base is in
    ``llm.dtype`` and the adapters are float32; full fine-tuning (``lora_rank=0``, official L3) keeps the whole
    model in float32 (master weights). A bf16 weight does not move under the paper's lr 1e-6: near 0.02 its
    spacing is ~1e-4, so Adam's ~lr-sized first steps round away. On CPU everything is float32.
    """
    from iclr26.core.hf import load_local

    full = llm.lora_rank <= 0
    dtype = None if device == "cpu" or full else llm.dtype
    model, tok = load_local(llm.model_path, dtype=dtype, device=device)
    if llm.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable()
        model.config.use_cache = True  # generation keeps its KV cache; the update recomputes activations
    if not full:  # official L2: one LoRA adapter per role policy
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=llm.lora_rank, lora_alpha=llm.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"),
        )
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    model.train()
    return model, tok


def policy_factory(cfg: RunConfig, scale: str, device: str = "cpu"):
    """Tiny from-scratch policies (smoke/small) or Hugging Face causal LMs from a local path (paper)."""
    if scale != "paper":
        obs_dim = PlanPathBatch.obs_dim(cfg.env.size, cfg.schedule.max_turns, cfg.env.show_position)
        return lambda name: TinyPolicy(obs_dim, hidden=cfg.schedule.hidden, constrained=cfg.env.constrained_decoding)
    llm = cfg.llm

    def make(name: str) -> Any:
        model, tok = load_policy_model(llm, device)
        return HFPolicy(
            model,
            tok,
            max_new_tokens=llm.max_new_tokens,
            temperature=llm.temperature,
            micro_batch_size=llm.micro_batch_size,
        )

    return make


def train_arm(
    arm: str, seed: int, cfg: RunConfig, make_policy, rank: int = 0, world: int = 1, log=None
) -> dict[str, Any]:
    """Train one arm with one seed until the sample budget is spent; held-out success curve in %.

    ``log(step, **scalars)`` (e.g. ``ctx.logger("seed0/at_grpo")``) receives per-update loss, clip fraction,
    KL, gradient norm, mean reward and training success, and the held-out success at each evaluation.
    """
    sc, pcfg = cfg.schedule, cfg.env
    agents, mcfg, sigma = arm_setup(arm, cfg.method)
    wf = Workflow(agents, sc.max_turns, intra_turn_visibility=mcfg.intra_turn_visibility)
    torch.manual_seed(seed)
    policies = {n: make_policy(n) for n in sorted(set(sigma.values()))}

    def make_env(seeds, _seed=seed):
        return PlanPathBatch(pcfg, seeds, sc.max_turns, rng_seed=_seed)

    trainer = ATGRPOTrainer(mcfg, wf, policies, sigma, make_env)
    test = shard(env_seeds(pcfg, "test", range(sc.n_test)), rank, world)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed * 1000 + rank)

    def held_out() -> float:
        succ = evaluate(make_env, test, wf, policies, sigma, mcfg.alpha) * len(test)
        return 100 * _global_sum(succ, len(test))

    xs, ys = [0], [held_out()]
    next_eval, steps = sc.eval_every, 0
    while trainer.samples_seen < sc.budget:
        seeds = env_seeds(pcfg, "train", rng.integers(0, 10**6, sc.envs_per_step))
        st = trainer.step(shard(seeds, rank, world), gen)
        steps += 1
        if log is not None:
            log(trainer.samples_seen, **_step_scalars(st))
        if trainer.samples_seen >= next_eval or trainer.samples_seen >= sc.budget:
            xs.append(trainer.samples_seen)
            ys.append(held_out())
            if log is not None:
                log(trainer.samples_seen, heldout_success=ys[-1])
            while next_eval <= trainer.samples_seen:
                next_eval += sc.eval_every
    out = {"samples": xs, "success": ys, "final": ys[-1], "initial": ys[0], "steps": steps}
    if arm == "at_grpo":  # swap the two trained role policies
        swapped = swap_roles(sigma)
        out["swapped"] = 100 * _global_sum(
            evaluate(make_env, test, wf, policies, swapped, mcfg.alpha) * len(test), len(test)
        )
    return out


def swap_roles(sigma: dict[str, str]) -> dict[str, str]:
    """The ablation of paper Table 3: the tool agent is played by the planner's policy and vice versa."""
    return {"tool": sigma["plan"], "plan": sigma["tool"]}


def _step_scalars(st: dict[str, Any]) -> dict[str, float]:
    """Per-update scalars, averaged over the policies that were updated."""
    pol = list(st["policy"].values())

    def avg(key: str) -> float:
        vals = [p[key] for p in pol if key in p]
        return float(np.mean(vals)) if vals else float("nan")

    return {
        "loss": avg("policy_loss"),
        "clip_frac": avg("clip_frac"),
        "approx_kl": avg("approx_kl"),
        "grad_norm": avg("grad_norm"),
        "reward": st["reward_mean"],
        "train_success": st["train_success"],
        "kept_fraction": st["n_kept"] / max(1, st["n_samples"]),
    }


def _global_sum(value: float, count: int) -> float:
    """sum(value) / sum(count) over torchrun processes (each evaluates its shard of the test grids)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return value / max(1, count)
    dev = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.distributed.get_backend() == "nccl"
        else torch.device("cpu")
    )
    t = torch.tensor([value, float(count)], dtype=torch.float64, device=dev)
    torch.distributed.all_reduce(t)
    return float(t[0] / t[1].clamp_min(1))


def dist_setup(device: str) -> tuple[int, int, str]:
    """(rank, world, device) under torchrun: one process group (NCCL on CUDA, gloo on CPU) and one device per
    rank (``cuda:LOCAL_RANK``, bound before the group exists); (0, 1, device) otherwise."""
    rank, world = setup_distributed(device)
    return rank, world, rank_device(device)


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    bad = [a for a in cfg.schedule.arms if a not in ARMS]
    if bad:
        raise ExperimentError(f"unknown arms {bad}; valid: {', '.join(ARMS)}")
    device = ctx.device
    if ctx.scale == "paper":
        ctx.require_path("llm.model_path")
    # tiny policies: one thread is faster (no intra-op sync on batches of ~100 rows)
    with torch_threads(1 if ctx.scale != "paper" else None):
        # a process group this call starts (torchrun) is torn down here, also on an exception
        owns_group = ctx.scale == "paper" and not (
            torch.distributed.is_available() and torch.distributed.is_initialized()
        )
        rank, world, device = dist_setup(device) if ctx.scale == "paper" else (0, 1, device)
        try:
            out = _run(ctx, cfg, policy_factory(cfg, ctx.scale, device), rank, world)
            if world > 1 and owns_group:  # every rank leaves together
                torch.distributed.barrier()
            return out
        finally:
            if world > 1 and owns_group and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()


def _measured(summary: dict[str, dict], chain: dict[int, dict]) -> dict[str, Any]:
    """Claim inputs from the per-arm summaries (mean over seeds) and the chain-MDP check."""

    def m(a: str) -> float:
        return summary[a]["mean"] if a in summary else float("nan")

    measured: dict[str, Any] = {}
    if "at_grpo" in summary and "mas_grpo" in summary:
        measured["C1"] = {"at_grpo": m("at_grpo"), "mas_grpo": m("mas_grpo"), "gap": m("at_grpo") - m("mas_grpo")}
    if "at_grpo" in summary and "sa_grpo" in summary:
        measured["C2"] = {"at_grpo": m("at_grpo"), "sa_grpo": m("sa_grpo"), "gap": m("at_grpo") - m("sa_grpo")}
    if "at_grpo" in summary:
        measured["C3"] = {"at_grpo": m("at_grpo"), "swapped": m("swapped"), "drop": m("at_grpo") - m("swapped")}
    cos_at = float(np.mean([c["cos_at"] for c in chain.values()]))
    cos_tr = float(np.mean([c["cos_traj"] for c in chain.values()]))
    measured["C4"] = {
        "cos_at": cos_at,
        "cos_traj": cos_tr,
        "err_at": float(np.mean([c["err_at"] for c in chain.values()])),
        "err_traj": float(np.mean([c["err_traj"] for c in chain.values()])),
    }

    return measured


def _figures(ctx: RunContext, sc, results: dict, final: dict) -> None:
    """Success vs samples (mean +- std over seeds, on the common eval grid) and final-success bars."""
    curves = {}
    for arm in sc.arms:
        grid = np.array([0, *range(sc.eval_every, sc.budget + 1, sc.eval_every)], dtype=float)
        ys = [np.interp(grid, results[arm][s]["samples"], results[arm][s]["success"]) for s in ctx.seeds]
        curves[ARM_LABEL[arm]] = (grid, np.mean(ys, 0), np.std(ys, 0))
    plot_curves(
        ctx.figure_path("success_vs_samples"),
        curves,
        "sampled responses",
        "held-out success (%)",
        "Plan-Path, same sample budget",
    )
    plot_bars(
        ctx.figure_path("final_success"),
        {ARM_LABEL[a]: v for a, v in final.items() if v},
        "held-out success (%)",
        "final success per arm (mean +- std over seeds)",
    )


def _run(ctx: RunContext, cfg: RunConfig, make_policy, rank: int, world: int) -> RunOutput:
    sc = cfg.schedule
    results: dict[str, dict[int, dict]] = {a: {} for a in sc.arms}
    times: dict[str, float] = {}
    bar = ctx.progress(total=len(sc.arms) * len(ctx.seeds), desc="arms x seeds")
    for arm in sc.arms:
        t0 = time.perf_counter()
        for seed in ctx.seeds:
            results[arm][seed] = train_arm(
                arm, seed, cfg, make_policy, rank, world, log=ctx.logger(f"seed{seed}/{arm}")
            )
            bar.update(1)
        times[arm] = time.perf_counter() - t0
    bar.close()
    chain = {s: gradient_alignment(ChainMDPConfig(trials=sc.chain_trials), seed=s) for s in ctx.seeds}

    def per_seed(arm: str, key: str = "final") -> list[float]:
        return [results[arm][s][key] for s in ctx.seeds] if arm in results else []

    final = {a: per_seed(a) for a in sc.arms}
    if "at_grpo" in results:
        final["mas_untrained"] = per_seed("at_grpo", "initial")
        final["swapped"] = per_seed("at_grpo", "swapped")
    summary = {a: mean_std(v) for a, v in final.items() if v}
    measured = _measured(summary, chain)
    _figures(ctx, sc, results, final)

    rows = [
        [ARM_LABEL[a], f"{summary[a]['mean']:.1f} ± {summary[a]['std']:.1f}", ", ".join(f"{x:.1f}" for x in final[a])]
        for a in final
        if final[a]
    ]
    abl = [
        a for a in ("at_grpo", "key_env_turn", "key_env_agent", "key_env", "mas_grpo", "at_grpo_nostd") if a in summary
    ]
    abl_rows = [[ARM_LABEL[a], f"{summary[a]['mean']:.1f} ± {summary[a]['std']:.1f}"] for a in abl]
    chain_rows = [[s, c["cos_at"], c["cos_traj"], c["err_at"], c["err_traj"]] for s, c in chain.items()]
    tables = {
        "Held-out success (%) per arm (seeds " + ", ".join(map(str, ctx.seeds)) + ")": markdown_table(
            ["arm", "mean ± std", "per seed"], rows
        ),
        "Grouping ablation (tree sampling, per-role policies)": markdown_table(["grouping", "success (%)"], abl_rows),
        "Chain MDP: cosine to the exact gradient (C4)": markdown_table(
            ["seed", "cos AT", "cos trajectory", "err AT", "err trajectory"], chain_rows
        ),
    }
    metrics = {
        "config": config_to_dict(cfg),
        "final_success": final,
        "summary": summary,
        "curves": {
            a: {str(s): {"samples": results[a][s]["samples"], "success": results[a][s]["success"]} for s in ctx.seeds}
            for a in sc.arms
        },
        "steps": {a: per_seed(a, "steps") for a in sc.arms},
        "arm_seconds": times,
        "chain_mdp": chain,
    }
    notes = [
        f"Budget per arm: {sc.budget} sampled responses (the last step may overshoot by < one step).",
        f"Grid {cfg.env.size}x{cfg.env.size}, T={sc.max_turns}, K={cfg.method.K}, {sc.envs_per_step} envs "
        "per step, "
        f"{sc.n_test} held-out grids (greedy decoding).",
    ]
    return RunOutput(metrics=metrics, measured=measured, tables=tables, notes=notes)


EXPERIMENT = Experiment(
    slug="at_grpo",
    title="Stronger Together: On-Policy Reinforcement Learning for Collaborative LLMs (AT-GRPO)",
    arxiv="2510.11062",
    claims=(
        Claim(
            "C1",
            "MAS + AT-GRPO beats MAS + standard (trajectory-grouped) GRPO by >= 10 points of held-out "
            "success at the same sample budget",
            {"Plan-Path (Qwen3-1.7B)": "96-97 vs no_tree (not tabled)"},
            "mean(at_grpo) - mean(mas_grpo) >= 10 (success in %)",
            lambda m: m["gap"] >= 10.0,
        ),
        Claim(
            "C2",
            "MAS + AT-GRPO beats a single agent + GRPO by >= 20 points",
            {"Plan-Path 1.7B": "97.0 vs 11.0", "Plan-Path 8B": "96.0 vs 47.0"},
            "mean(at_grpo) - mean(sa_grpo) >= 20",
            lambda m: m["gap"] >= 20.0,
        ),
        Claim(
            "C3",
            "swapping the two trained role policies drops success by >= 50 points",
            {"Plan-Path 1.7B": "96.0 -> 6.0"},
            "mean(at_grpo) - mean(swapped) >= 50",
            lambda m: m["drop"] >= 50.0,
        ),
        Claim(
            "C4",
            "chain MDP: the AT-grouped gradient estimate is better aligned with the exact gradient than the "
            "trajectory-grouped one at the same sample count (100 trials)",
            "mechanism (not in the paper)",
            "mean cos(AT) > mean cos(trajectory)",
            lambda m: m["cos_at"] > m["cos_traj"],
        ),
    ),
    run=run,
    config=config_for,
)
