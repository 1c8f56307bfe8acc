"""Typed run configuration of the ROSETTA reproduction: one frozen dataclass tree, ``config_for(scale)``.

``iclr26 run rosetta --show-config`` prints every field with its documentation line; any leaf can be
changed with ``--set``, e.g. ``--set ppo.total_steps=400000`` or ``--set standin.runtime_rate=0.5``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .env import EnvConfig
from .ppo import PPOConfig
from .standin import StandInConfig

__all__ = ["BackendConfig", "PipelineSettings", "RunConfig", "config_for"]


@dataclass(frozen=True)
class PipelineSettings:
    """The reward-generation pipeline and its evaluation.

    n_preferences: preferences per seed sent through every arm (the first n of the seed's generated set).
    n_chains: two-round scenarios per seed (round 2 edits round 1's reward).
    rl_preferences: indices (into the seed's preferences) trained with PPO: 2 pick-and-place, 2 return-home
        (ordered pairs are left out: the oracle reward does not learn them at 2e5 steps).
    rl_arms: arms trained with PPO (oracle: the bug-free staged reward of the hidden intent).
    error_tries: fix attempts of the error loop (official NUM_ERROR_CORR_TRIES = 10).
    demo_stride: a demo frame is captioned every this many steps (official: 5).
    score_envs: scene draws per scripted behaviour when scoring rewards against intents (AUROC).
    eval_envs: environments of the deterministic evaluation rollout after PPO.
    isolation: sandbox isolation, "" = ICLR26_SANDBOX_ISOLATION or kernel; or kernel / python-only.
    workers: processes for the per-seed pipelines and the PPO jobs.
    draft_from: what a round's code draft is merged into: "empty" (official ``latest_funcs = {}``: the draft
        must hold every required function; the previous round's functions are only shown) or "previous".
    review_context: "fresh" (each review question in a new chat with the code, plan and request) or
        "conversation" (official rosetta_sh.py: appended to the coder's chat); paper scale: conversation.
    no_staging_plan: the no_staging arm makes a plan call without the stage rules (True) or none at all and
        codes from the grounded request (False: official ablations/no_staging.py).
    """

    n_preferences: int = 16
    n_chains: int = 4
    rl_preferences: tuple[int, ...] = (0, 1, 4, 12)
    rl_arms: tuple[str, ...] = ("rosetta", "no_staging", "eureka", "oracle")
    error_tries: int = 10
    demo_stride: int = 5
    score_envs: int = 4
    eval_envs: int = 256
    isolation: str = ""
    workers: int = 2
    draft_from: Literal["empty", "previous"] = "empty"
    review_context: Literal["fresh", "conversation"] = "fresh"
    no_staging_plan: bool = True


@dataclass(frozen=True)
class BackendConfig:
    """Which LLM answers each role (paper: GPT-4o for grounding/planning, o1-mini for code/reviews/fixes).

    kind: scripted (deterministic stand-in) | openai (OpenAI-compatible endpoint) | hf (local checkpoint).
    base_url: endpoint for kind=openai, e.g. http://127.0.0.1:8000/v1.
    model: served model name for grounding and planning roles (kind=openai).
    code_model: served model name for code, review and fix roles ("" = model).
    api_key_env: environment variable holding the API key ("" = none).
    hf_path: local Hugging Face checkpoint folder for kind=hf (nothing downloads).
    max_new_tokens: generation budget of kind=hf.
    deadline_s: total time budget of one HTTP request.
    """

    kind: Literal["scripted", "openai", "hf"] = "scripted"
    base_url: str = ""
    model: str = "default"
    code_model: str = ""
    api_key_env: str = ""
    hf_path: str = ""
    max_new_tokens: int = 512
    deadline_s: float = 120.0


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    env: TabletopLite geometry and dynamics.
    standin: bug rates of the scripted stand-in coder.
    ppo: PPO settings of the RL check.
    pipeline: the pipeline, its arms and its evaluation.
    backend: the LLM backend per role.
    feedback_csv: paper scale: annotator CSV in the official column format (Timestamp, Score, name, video,
        description, feedback).
    demo_dir: paper scale: optional folder of <video id>.txt demo state strings, one captioned frame per line.
    """

    env: EnvConfig = EnvConfig()
    standin: StandInConfig = StandInConfig()
    ppo: PPOConfig = PPOConfig()
    pipeline: PipelineSettings = PipelineSettings()
    backend: BackendConfig = BackendConfig()
    feedback_csv: str = ""
    demo_dir: str = ""


def config_for(scale: str) -> RunConfig:
    """smoke: 2 preferences, a 10k-step PPO on one of them, 2 arms; small: the claim run; paper: real backends + CSV."""
    base = RunConfig()
    if scale == "smoke":
        pipe = replace(
            base.pipeline,
            n_preferences=2,
            n_chains=1,
            rl_preferences=(1,),
            rl_arms=("rosetta", "oracle"),
            score_envs=1,
            eval_envs=16,
            workers=1,
        )
        return replace(base, ppo=replace(base.ppo, total_steps=10_240, num_envs=32), pipeline=pipe)
    if scale == "paper":  # the official rosetta_sh protocol: reviews in the coder's conversation
        return replace(
            base,
            backend=replace(base.backend, kind="openai"),
            pipeline=replace(base.pipeline, review_context="conversation"),
        )
    return base
