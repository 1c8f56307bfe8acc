"""The AceReason-Nemotron 1.1 stage-wise RL curriculum as data, and verl Hydra overrides per stage.

Stage table (1.1 Fig. 1 pipeline and Sec. 3.5; group sizes, learning rates and the code stages'
settings from the 1.0 paper, whose RL recipe 1.1 reuses):

=========  ======  ============  ==  =================  =====================================
stage      domain  max response  G   overlong filter    prompts
=========  ======  ============  ==  =================  =====================================
math-8k    math     8,192         8  on                 easier prompts (R1 responses 2K-4K)
math-16k   math    16,384        16  on                 more hard prompts
math-24k   math    24,576        16  on                 hard only: pass rate > 6/16 dropped
code-24k   code    24,576         8  on (assumed)       code RL set
code-32k   code    32,768        16  on (assumed)       epoch-wise: drop solved-by-all
math-32k   math    32,768        16  off                hard only: drop solved-by-all
=========  ======  ============  ==  =================  =====================================

Learning rate 1e-6 (math) / 5e-6 (code), AdamW, 128 prompts per batch, one update per batch,
no KL, entropy coefficient 0, token-mean loss, evaluation at T = 0.6, top-p 0.95. The RL sampling
temperature of each stage is set by the entropy rule (:mod:`.entropy`), so it is an argument of
:func:`to_verl_overrides`, not a constant of the table.

The override keys follow verl's ``verl/trainer/config/ppo_trainer.yaml``; :data:`VERL_KEYS` is the
list of keys recorded from it (commit 008db456), checked by the tests. The overlong filter is not a
verl option (verl's DAPO ``overlong_buffer`` is a soft length penalty, a different mechanism): it is a
hook on ``response_mask`` (:func:`iclr26.acereason.rl.overlong_filter_mask`), switched per stage
through the environment variable named in :data:`OVERLONG_ENV`, read by the reward hook module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["OVERLONG_ENV", "VERL_KEYS", "AceReasonRecipe", "Stage", "to_verl_overrides"]

Domain = Literal["math", "code"]

#: verl config keys this module emits (recorded from verl/trainer/config/ppo_trainer.yaml).
VERL_KEYS: tuple[str, ...] = (
    "algorithm.adv_estimator",
    "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.use_kl_in_reward",
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.optim.weight_decay",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_p",
    "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "data.train_files",
    "data.train_batch_size",
    "data.max_response_length",
    "custom_reward_function.path",
    "custom_reward_function.name",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
)

#: environment variable the reward / mask hook reads to switch overlong filtering ("1" on, "0" off).
OVERLONG_ENV = "ACEREASON_OVERLONG_FILTER"


@dataclass(frozen=True)
class Stage:
    """One RL stage.

    name: stage id. domain: "math" or "code". max_response_length: token budget.
    group_size (G): rollouts per prompt. overlong_filter: truncated responses masked out of the loss.
    lr: AdamW learning rate. prompt_filter: which prompt filter precedes the stage ("none",
    "pass_rate<=6/16", "solved_by_all").
    """

    name: str
    domain: Domain
    max_response_length: int
    group_size: int
    overlong_filter: bool
    lr: float
    prompt_filter: str = "none"


def _default_stages() -> tuple[Stage, ...]:
    return (
        Stage("math-8k", "math", 8192, 8, True, 1e-6),
        Stage("math-16k", "math", 16384, 16, True, 1e-6),
        Stage("math-24k", "math", 24576, 16, True, 1e-6, "pass_rate<=6/16"),
        Stage("code-24k", "code", 24576, 8, True, 5e-6),
        Stage("code-32k", "code", 32768, 16, True, 5e-6, "solved_by_all"),
        Stage("math-32k", "math", 32768, 16, False, 1e-6, "solved_by_all"),
    )


@dataclass(frozen=True)
class AceReasonRecipe:
    """The RL recipe (see the module table).

    batch_prompts: prompts per rollout batch (128). ppo_epochs: updates per batch (1: strict on-policy).
    eval_temperature: inference temperature (0.6). eval_top_p: inference top-p (0.95).
    entropy_target: H_T the sampling temperature is calibrated to (0.3). weight_decay: AdamW decay
    (not reported; 0 is our choice). stages: the curriculum.
    """

    batch_prompts: int = 128
    ppo_epochs: int = 1
    eval_temperature: float = 0.6
    eval_top_p: float = 0.95
    entropy_target: float = 0.3
    weight_decay: float = 0.0
    stages: tuple[Stage, ...] = field(default_factory=_default_stages)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"unknown stage {name!r}; stages: {[s.name for s in self.stages]}")


def to_verl_overrides(
    recipe: AceReasonRecipe,
    stage: Stage | str,
    temperature: float,
    *,
    model_path: str = "",
    train_files: str = "",
    reward_path: str = "",
    nnodes: int = 1,
    gpus_per_node: int = 8,
) -> list[str]:
    """Hydra ``key=value`` overrides for ``python -m verl.trainer.main_ppo`` running one stage.

    ``temperature`` is the calibrated sampling temperature of that stage (entropy rule); the
    evaluation temperature is the recipe's 0.6. Empty paths are left out (keep verl's values).
    """
    st = recipe.stage(stage) if isinstance(stage, str) else stage
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    kv: dict[str, object] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
        "data.train_batch_size": recipe.batch_prompts,
        # mini-batch = whole batch and one epoch: exactly one update per rollout batch
        "actor_rollout_ref.actor.ppo_mini_batch_size": recipe.batch_prompts,
        "actor_rollout_ref.actor.ppo_epochs": recipe.ppo_epochs,
        "actor_rollout_ref.actor.optim.lr": st.lr,
        "actor_rollout_ref.actor.optim.weight_decay": recipe.weight_decay,
        "actor_rollout_ref.rollout.n": st.group_size,
        "actor_rollout_ref.rollout.temperature": round(float(temperature), 4),
        "actor_rollout_ref.rollout.top_p": 1.0,
        "actor_rollout_ref.rollout.val_kwargs.temperature": recipe.eval_temperature,
        "actor_rollout_ref.rollout.val_kwargs.top_p": recipe.eval_top_p,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "data.max_response_length": st.max_response_length,
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": gpus_per_node,
    }
    if model_path:
        kv["actor_rollout_ref.model.path"] = model_path
    if train_files:
        kv["data.train_files"] = train_files
    if reward_path:
        kv["custom_reward_function.path"] = reward_path
        kv["custom_reward_function.name"] = "compute_score"
    return [f"{k}={_fmt(v)}" for k, v in kv.items()]


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)
