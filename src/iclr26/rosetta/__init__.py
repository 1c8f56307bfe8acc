"""ROSETTA: code-based, multi-stage rewards from unconstrained language preferences (ICLR 2026, OpenReview
Ig6goVdtjb; official code StanfordVL/rosetta).

Implemented: the per-preference round (demo to language, grounding, new task description, stage plan,
code, error loop with AST error lines and at most 10 fixes, the four short-horizon reviews, merging,
round chaining), the long-horizon stage machine, LLM backends per role (OpenAI-compatible endpoint, local
Hugging Face model, a deterministic scripted stand-in), sandboxed execution of every generated function
(``iclr26.core.sandbox``), ``TabletopLite`` (a vectorised numpy table-top with ManiSkill-style method
names) with a primitive variant, ~100 synthetic preferences with hidden-intent checkers, and PPO with GAE.

>>> from iclr26.rosetta import ARMS, RoleRouter, ScriptedOfflineBackend, make_preferences, rosetta_round
>>> pref = make_preferences(8, seed=0)[1]
>>> router = RoleRouter(ScriptedOfflineBackend())
>>> res = rosetta_round(router, pref, ARMS["rosetta"], task=pref.task, video="")  # doctest: +SKIP
>>> sorted(res.funcs)  # doctest: +SKIP
['compute_dense_reward', 'evaluate']
"""

from .backends import BackendError, HFBackend, OpenAICompatBackend, RoleRouter
from .codegen import render_reward
from .env import EnvConfig, TabletopLite, TabletopPrimitives, sphere_and_bins_reward
from .extract import error_line, extract_functions, merge_functions
from .intent import Intent, Preference, check_intent, make_preferences
from .pipeline import ARMS, ArmConfig, RoundResult, demo_to_language, error_loop, rosetta_round
from .ppo import PPOConfig, train_ppo
from .smoke import SandboxedReward, SmokeResult, SmokeRunner, smoke_test
from .stage_machine import build_stage_machine, extract_target_actions
from .standin import ScriptedOfflineBackend, StandInConfig

__all__ = [
    "ARMS",
    "ArmConfig",
    "BackendError",
    "EnvConfig",
    "HFBackend",
    "Intent",
    "OpenAICompatBackend",
    "PPOConfig",
    "Preference",
    "RoleRouter",
    "RoundResult",
    "SandboxedReward",
    "ScriptedOfflineBackend",
    "SmokeResult",
    "SmokeRunner",
    "StandInConfig",
    "TabletopLite",
    "TabletopPrimitives",
    "build_stage_machine",
    "check_intent",
    "demo_to_language",
    "error_line",
    "error_loop",
    "extract_functions",
    "extract_target_actions",
    "make_preferences",
    "merge_functions",
    "render_reward",
    "rosetta_round",
    "smoke_test",
    "sphere_and_bins_reward",
    "train_ppo",
]
