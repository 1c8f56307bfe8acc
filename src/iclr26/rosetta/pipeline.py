"""One ROSETTA round per preference: grounding, staging (plan), coding, error loop, reviews, error loop.

Reconstructed from the official code (``rosetta/prompts/prompt_designs/rosetta_sh/rosetta_sh.py``,
``rosetta/prompts/grounding.py``, ``rosetta/prompts/iterative_error_correction.py``; pseudocode):

    g      = ground(pref, demo_to_text(demo), task)            # {summary, preference}; next description
    plan   = llm.plan(env, prev_funcs, task, g.summary, g.preference)    # atomic stages
    funcs  = {} ⊕ extract(llm.code(plan))                      # ⊕: dict-update merge; prev_funcs are shown
    if a required function is missing: return {}               # incomplete draft
    funcs  = error_loop(funcs, tries=10)                       # {} when every try fails
    for q in the 4 short-horizon reviews: funcs = funcs ⊕ extract(llm.review_q(funcs))
    funcs  = error_loop(funcs, tries=10)

Protocol options (official value first where it differs):

* ``draft_from``: "empty" (official: ``latest_funcs = {}`` before the code draft, so a later round's draft
  must hold every required function; the previous functions are only shown) or "previous" (the draft is
  merged into the previous round's functions, so a draft that rewrites one function keeps the other).
* ``review_context``: "conversation" (official ``rosetta_sh.py``: each review question is appended, alone,
  to the coder's chat [code request, the code after the first error loop, earlier questions and replies])
  or "fresh" (each question in a new chat with the current code, the plan and the request; close to the
  official ``rosetta_sh_nohistory.py`` variant, whose review prompts carry the code and the env code).

Arms (official ``prompt_designs``): ``rosetta``; ``no_grounding`` (raw preference to the planner);
``no_staging`` (no stage templates/rules; :func:`arm_config` with ``no_staging_plan=False`` skips the plan
call as the official ``ablations/no_staging.py`` does, coding straight from the grounded request);
``no_follow_up`` (no reviews); ``eureka`` (raw preference, one-shot code without a plan, no reviews, with
the error loop).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .backends import BackendError, RoleRouter
from .env import EnvConfig, TabletopLite, state_text
from .extract import extract_functions, merge_functions
from .intent import Preference, rollout_states
from .prompts import REVIEW_QUESTIONS, REVIEW_ROLES, STAGE_RULES, build
from .smoke import REQUIRED, SmokeResult, SmokeRunner

__all__ = [
    "ARMS",
    "DRAFT_FROM",
    "REVIEW_CONTEXTS",
    "ArmConfig",
    "RoundResult",
    "arm_config",
    "demo_to_language",
    "error_loop",
    "record_demo",
    "rosetta_round",
]

DRAFT_FROM = ("empty", "previous")
REVIEW_CONTEXTS = ("fresh", "conversation")


@dataclass(frozen=True)
class ArmConfig:
    """Which pipeline parts an arm uses.

    grounding: ground the preference against the demo description (Phase 1).
    staging: the plan request carries the stage templates and rules (Phase 2).
    plan: there is a planning call at all (Eureka-like: no).
    follow_up: the four review questions (Phase 5).
    """

    grounding: bool = True
    staging: bool = True
    plan: bool = True
    follow_up: bool = True


ARMS = {
    "rosetta": ArmConfig(),
    "no_grounding": ArmConfig(grounding=False),
    "no_staging": ArmConfig(staging=False),
    "no_follow_up": ArmConfig(follow_up=False),
    "eureka": ArmConfig(grounding=False, staging=False, plan=False, follow_up=False),
}


def arm_config(name: str, no_staging_plan: bool = True) -> ArmConfig:
    """The arm ``name``; ``no_staging_plan=False`` gives ``no_staging`` no plan call (official ablation)."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; arms: {', '.join(ARMS)}")
    arm = ARMS[name]
    return replace(arm, plan=False) if name == "no_staging" and not no_staging_plan else arm


@dataclass
class RoundResult:
    """Outcome of one round: the final functions (``{}`` = unusable, ``failure`` says why) and its record."""

    funcs: dict[str, str]
    grounded: str = ""
    summary: str = ""
    next_description: str = ""
    plan: str = ""
    draft_ok: bool = False
    fix_calls: int = 0
    failure: str = ""
    steps: list[str] = field(default_factory=list)


def fenced(funcs: dict[str, str]) -> str:
    return "```python\n" + "\n\n\n".join(funcs.values()) + "\n```"


def demo_to_language(router: RoleRouter, demo_states: list[dict], scene: str, stride: int = 5) -> str:
    """Captions of every ``stride``-th state and descriptions of each transition: ``state_0: ...``."""
    keep = list(range(0, len(demo_states), stride))
    if keep[-1] != len(demo_states) - 1:
        keep.append(len(demo_states) - 1)
    captions = [
        router.complete("caption", build("caption", scene=scene, state=state_text(demo_states[t]))) for t in keep
    ]
    lines = [f"state_0: {captions[0]}"]
    for i in range(1, len(captions)):
        act = router.complete("describe_action", build("describe_action", before=captions[i - 1], after=captions[i]))
        lines += [f"action_{i - 1}: {act}", f"state_{i}: {captions[i]}"]
    return "\n".join(lines)


def error_loop(
    router: RoleRouter, funcs: dict[str, str], test: Callable[[dict[str, str]], SmokeResult], tries: int = 10
) -> tuple[dict[str, str], int, SmokeResult]:
    """Test, and on failure ask for a fix with the error line, at most ``tries`` times.

    Returns (functions or ``{}``, fix calls, last smoke result). As in the official loop (a Python
    ``for ... else``), the reply to the last fix request is not tested: ``tries`` failures give ``{}``.
    """
    calls, res = 0, SmokeResult(False, "NotRun")
    for _ in range(tries):
        res = test(funcs)
        if res.ok:
            return funcs, calls, res
        msgs = build(
            "fix_error", code=fenced(funcs), error=f"{res.kind}: {res.message}", error_line=res.error_line or ""
        )
        calls += 1
        try:
            funcs = merge_functions(funcs, extract_functions(router.complete("fix_error", msgs)))
        except BackendError:
            continue
    return {}, calls, res


def _ground(router: RoleRouter, pref: Preference, task: str, video: str, arm: ArmConfig) -> tuple[str, str, str, list]:
    """(preference for the planner, summary, next description, notes)."""
    if not arm.grounding:
        return pref.text, "", "", []
    notes = []
    try:
        g = json.loads(router.complete("ground", build("ground", task=task, video=video, preference=pref.text)))
        grounded, summary = str(g["preference"]), str(g.get("summary", ""))
    except (BackendError, ValueError, KeyError, TypeError) as e:
        notes.append(f"grounding failed ({type(e).__name__}: {str(e)[:120]}); the raw preference is used")
        grounded, summary = pref.text, ""
    try:
        d = json.loads(router.complete("new_description", build("new_description", task=task, preference=grounded)))
        nxt = str(d.get("description", "")) if isinstance(d, dict) else ""
    except (BackendError, ValueError, TypeError) as e:
        notes.append(f"new description failed ({type(e).__name__}); the task is kept")
        nxt = ""
    return grounded, summary, nxt, notes


def _draft(
    router: RoleRouter, out: RoundResult, arm: ArmConfig, task: str, scene: str, previous: str, keys: str
) -> tuple[str, list[dict]]:
    """Phases 2-3: the stage plan (if the arm plans) and the code draft; returns (code reply, code request)."""
    if arm.plan:
        rules = STAGE_RULES if arm.staging else "Write the plan as lines 'Objective: ...' and 'Constraint: ...'.\n"
        msgs = build(
            "plan",
            scene=scene,
            previous=previous,
            task=task,
            summary=out.summary,
            preference=out.grounded,
            stage_rules=rules,
        )
        out.plan = router.complete("plan", msgs)
    msgs = build(
        "code", plan=out.plan, preference=out.grounded, task=task, scene=scene, previous=previous, state_keys=keys
    )
    return router.complete("code", msgs), msgs


def rosetta_round(
    router: RoleRouter,
    pref: Preference,
    arm: ArmConfig,
    *,
    task: str,
    video: str,
    prev_funcs: dict[str, str] | None = None,
    tries: int = 10,
    seed: int = 0,
    isolation: str | None = None,
    runner: SmokeRunner | None = None,
    draft_from: str = "empty",
    review_context: str = "fresh",
) -> RoundResult:
    """One round for one preference (see the module docstring); ``runner``: the sandbox child to test in."""
    if draft_from not in DRAFT_FROM:
        raise ValueError(f"draft_from must be one of {DRAFT_FROM}, got {draft_from!r}")
    if review_context not in REVIEW_CONTEXTS:
        raise ValueError(f"review_context must be one of {REVIEW_CONTEXTS}, got {review_context!r}")
    env_cfg = EnvConfig(n_objects=pref.n_objects)
    scene = TabletopLite(1, env_cfg, 0).setup_description()
    prev = dict(prev_funcs or {})
    grounded, summary, nxt, notes = _ground(router, pref, task, video, arm)
    out = RoundResult({}, grounded=grounded, summary=summary, next_description=nxt, steps=list(notes))
    try:
        reply, request = _draft(router, out, arm, task, scene, fenced(prev) if prev else "(none)", _state_keys(env_cfg))
    except BackendError as e:
        out.failure = f"backend failed while planning/coding: {e}"
        return out
    funcs = merge_functions(prev if draft_from == "previous" else {}, extract_functions(reply))
    missing = [f for f in REQUIRED if f not in funcs]
    if missing:
        out.failure = f"incomplete draft: missing {', '.join(missing)}"
        return out
    chat = request if review_context == "conversation" else None
    if runner is not None:
        return _test_and_review(router, out, funcs, arm, runner.test, tries, chat)
    with SmokeRunner(seed=seed, env_cfg=env_cfg, isolation=isolation) as own:
        return _test_and_review(router, out, funcs, arm, own.test, tries, chat)


def _test_and_review(
    router: RoleRouter,
    out: RoundResult,
    funcs: dict[str, str],
    arm: ArmConfig,
    test: Callable[[dict[str, str]], SmokeResult],
    tries: int,
    chat: list[dict] | None = None,
) -> RoundResult:
    """Phases 4-5: error loop, reviews (follow-up questions), error loop.

    ``chat``: the code request; given, the reviews continue that conversation (``review_context="conversation"``):
    after it come the code as it stands after the first error loop (official: the draft reply with the corrected
    functions put in), then each question alone and its reply. Without it each review is a fresh chat.
    """
    out.draft_ok = test(funcs).ok
    funcs, calls, res = error_loop(router, funcs, test, tries)
    out.fix_calls += calls
    if not funcs:
        out.failure = f"error loop exhausted after {calls} fixes: {res.kind}: {res.message}"
        return out
    if arm.follow_up:
        conv = None if chat is None else [*chat, {"role": "assistant", "content": fenced(funcs)}]
        for role in REVIEW_ROLES:
            if conv is None:
                msgs = build(role, code=fenced(funcs), plan=out.plan, preference=out.grounded)
            else:
                msgs = [*conv, {"role": "user", "content": REVIEW_QUESTIONS[role]}]
            try:
                reply = router.complete(role, msgs)
            except BackendError as e:
                out.steps.append(f"{role} failed: {e}")
                continue
            if conv is not None:
                conv = [*msgs, {"role": "assistant", "content": reply}]
            funcs = merge_functions(funcs, extract_functions(reply))
        funcs, calls, res = error_loop(router, funcs, test, tries)
        out.fix_calls += calls
        if not funcs:
            out.failure = f"error loop after reviews exhausted after {calls} fixes: {res.kind}: {res.message}"
            return out
    out.funcs = funcs
    return out


def _state_keys(cfg: EnvConfig) -> str:
    keys = sorted(TabletopLite(1, cfg, 0).state())
    return ", ".join(keys)


def record_demo(pref: Preference, seed: int, n_envs: int = 1) -> list[dict]:
    """The previous round's behaviour as a scripted rollout (what the annotator watched)."""
    states, _ = rollout_states(pref.demo, pref.n_objects, n_envs, seed)
    return states
