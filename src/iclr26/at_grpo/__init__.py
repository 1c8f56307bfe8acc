"""AT-GRPO: agent- and turn-wise grouped RL for multi-agent LLM systems, with shared or per-role policies.

Paper: "Stronger Together: On-Policy Reinforcement Learning for Collaborative LLMs" (later titled
"Stronger-MAS: Multi-Agent Reinforcement Learning for Collaborative LLMs"), Zhao, Hu, Wang, Hou, Zhang,
Ding, Zhao, arXiv:2510.11062 (ICLR 2026). Official code: pettingllms-ai/PettingLLMs (MIT).

Implemented:

* :mod:`~iclr26.at_grpo.rollout`: the multi-agent rollout engine (workflow of roles in turn order, turns,
  environment steps), tree-structured sampling with ``K`` branches per agent turn continuing from the
  best branch, independent (``no_tree``) rollouts, greedy evaluation; the mixed reward
  ``r = alpha * r_team + r_loc``; code-compat flags ``intra_turn_visibility="parallel"`` and
  ``code_env_copy``.
* :mod:`~iclr26.at_grpo.at_grpo`: grouping by ``(env, agent, turn)`` (and the ablation keys, and the
  official ``(env // K, turn, agent)`` key as a flag), the GRPO advantage (``iclr26.core.grpo``), the
  trajectory-grouped standard-GRPO baseline, the official group filter (mean / std / dapo / uid), the
  per-policy PPO-clip update (shared role-conditioned policy or one policy per role), torchrun sharding.
* :mod:`~iclr26.at_grpo.plan_path`: the Plan-Path grid environment with the official reward constants,
  seeded train/test grids from disjoint seed ranges, the tool DSL (BFS / GREEDY / WALLFOLLOW / RANDOM)
  executed on a copy of the state, the planner, text parsing for LLM agents.
* :mod:`~iclr26.at_grpo.policy`: a tiny from-scratch MLP + GRU policy and a Hugging Face causal-LM policy
  (local path only) behind the same ``act`` / ``logprobs`` interface.
* :mod:`~iclr26.at_grpo.chain_mdp`: the chain-MDP gradient-alignment mechanism test.

* :mod:`~iclr26.at_grpo.config`: the typed configuration (one frozen dataclass tree per scale);
  :mod:`~iclr26.at_grpo.paper_run`: the paper-scale torchrun entry point (one device per rank, bf16,
  micro-batched updates, optional per-role LoRA via peft).

Not implemented: the Sokoban / Sudoku games, the code and math workflows (and their sandboxed execution),
vLLM rollout servers and the Ray resource pools of the official system.
"""

from iclr26.at_grpo.at_grpo import (
    ATGRPOConfig,
    ATGRPOTrainer,
    compute_advantages,
    group_filter,
    group_keys,
    shard,
    update_policies,
)
from iclr26.at_grpo.chain_mdp import ChainMDPConfig, gradient_alignment
from iclr26.at_grpo.plan_path import (
    VOCAB,
    PlanPathBatch,
    PlanPathConfig,
    env_seeds,
    grid_from_layout,
    make_grid,
    parse_text_response,
)
from iclr26.at_grpo.policy import Act, HFPolicy, TinyPolicy
from iclr26.at_grpo.rollout import Rollout, SampleChunk, Workflow, best_branch, evaluate, mixed_reward, rollout

__all__ = [
    "VOCAB",
    "ATGRPOConfig",
    "ATGRPOTrainer",
    "Act",
    "ChainMDPConfig",
    "HFPolicy",
    "PlanPathBatch",
    "PlanPathConfig",
    "Rollout",
    "SampleChunk",
    "TinyPolicy",
    "Workflow",
    "best_branch",
    "compute_advantages",
    "env_seeds",
    "evaluate",
    "gradient_alignment",
    "grid_from_layout",
    "group_filter",
    "group_keys",
    "make_grid",
    "mixed_reward",
    "parse_text_response",
    "rollout",
    "shard",
    "update_policies",
]
