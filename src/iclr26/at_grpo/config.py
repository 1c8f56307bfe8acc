"""Typed configuration of the AT-GRPO reproduction: one frozen dataclass tree per scale (:func:`config_for`).

The method settings (:class:`~iclr26.at_grpo.at_grpo.ATGRPOConfig`) default to the paper / official code
(verl actor defaults: PPO clip 0.2, dual clip 3, token mean, no KL, no entropy, grad clip 1); the
environment (:class:`~iclr26.at_grpo.plan_path.PlanPathConfig`) to the official Plan-Path reward constants.
Where the CPU scale departs (a tiny network trained from scratch: lr 1e-3, 2 PPO epochs; grid 6x6), the
field's docstring and the README say so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.at_grpo.at_grpo import ATGRPOConfig
from iclr26.at_grpo.plan_path import PlanPathConfig

ARMS = (
    "sa_grpo",
    "mas_grpo",
    "at_grpo",
    "at_grpo_shared",
    "key_env",
    "key_env_agent",
    "key_env_turn",
    "filter_mean",
    "at_grpo_nostd",
)


@dataclass(frozen=True)
class ScheduleConfig:
    """Which arms are trained, for how long, and how they are evaluated.

    max_turns (T): turn budget of an episode (official scripts: 4).
    envs_per_step (B): environments per training step (official scripts: 32).
    budget: sampled responses per arm, the same for every arm (a step's samples count whatever grouping uses).
    eval_every: evaluate held-out success every this many sampled responses.
    n_test: held-out test grids (greedy decoding, one rollout each, disjoint seed range).
    hidden: width of the tiny policies (smoke / small).
    chain_trials: trials of the chain-MDP gradient-alignment check (C4).
    arms: trained arms (names in config.ARMS; the key ablations and at_grpo_nostd are opt-in via --set).
    """

    max_turns: int = 4
    envs_per_step: int = 32
    budget: int = 240_000
    eval_every: int = 20_000
    n_test: int = 200
    hidden: int = 64
    chain_trials: int = 100
    arms: tuple[str, ...] = ("sa_grpo", "mas_grpo", "at_grpo", "at_grpo_shared", "filter_mean")


@dataclass(frozen=True)
class LLMConfig:
    """Paper scale: Hugging Face causal LMs from a local folder as the agents (nothing downloads).

    model_path: local checkpoint folder (e.g. a saved Qwen3-1.7B); required at paper scale.
    dtype: weight dtype of the frozen base under LoRA on the device ("bfloat16" as the official FSDP actor);
        trained weights are always float32 (LoRA adapters; full fine-tuning keeps float32 master weights), and
        everything is float32 on CPU.
    max_new_tokens: response budget per agent turn (tool program / plan list).
    temperature: sampling temperature of training rollouts (official train config: 1.0).
    micro_batch_size: responses per forward/backward (gradient accumulation); 0 = the whole batch at once.
    lora_rank: LoRA rank per role policy via peft (default: official L2, 16); 0 = full fine-tuning (official L3,
        in float32).
    lora_alpha: LoRA alpha (official L2: 32).
    gradient_checkpointing: recompute activations in the backward pass (memory of the first update).
    """

    model_path: str = ""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    max_new_tokens: int = 24
    temperature: float = 1.0
    micro_batch_size: int = 8
    lora_rank: int = 16
    lora_alpha: int = 32
    gradient_checkpointing: bool = True


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    method: AT-GRPO (paper / official-code defaults; per arm, experiment.arm_setup changes a few fields).
    env: the Plan-Path environment (official reward constants).
    schedule: arms, sample budget, evaluation.
    llm: paper scale only: the Hugging Face agents.
    """

    method: ATGRPOConfig = ATGRPOConfig(K=4, lr=1e-3, ppo_epochs=2)
    env: PlanPathConfig = PlanPathConfig(size=6)
    schedule: ScheduleConfig = ScheduleConfig()
    llm: LLMConfig = LLMConfig()


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only in what this function changes (sizes, budget, arms, lr)."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            method=replace(base.method, K=2),
            env=replace(base.env, size=5),
            schedule=replace(
                base.schedule,
                max_turns=2,
                envs_per_step=4,
                budget=240,
                eval_every=120,
                n_test=16,
                hidden=32,
                chain_trials=20,
                arms=("sa_grpo", "mas_grpo", "at_grpo", "filter_mean"),
            ),
        )
    if scale == "small":
        return base
    if scale == "paper":  # Qwen3 agents: the official lr 1e-6, one PPO epoch, 200 steps of 32 envs
        steps, per_step = 200, 32 * 4 * 2 * 4
        return replace(
            base,
            method=replace(base.method, K=4, lr=1e-6, ppo_epochs=1),
            env=replace(base.env, size=8),
            schedule=replace(
                base.schedule,
                budget=steps * per_step,
                eval_every=10 * per_step,
                n_test=100,
                arms=("sa_grpo", "mas_grpo", "at_grpo"),
            ),
        )
    raise ValueError(f"unknown scale {scale!r}")
