"""``ScriptedOfflineBackend``: a deterministic stand-in for the paper's GPT-4o / o1-mini calls.

It answers every role from the tagged fields of the prompt (see :mod:`.prompts`) with explicit
algorithms, so the pipeline runs offline and every number is reproducible. What it shows and what it
does not: it tests the pipeline's plumbing and the mechanisms that act on real code (sandboxed smoke
test, error-line extraction, fix loop, merging, staging in RL); its language understanding is ours and
only as good as these rules, so arm differences that come from reference resolution hold by
construction.

* caption / describe_action: read the numeric state string; say what is held, what is in which bin,
  whether the gripper is home; describe the change between two captions.
* ground: resolve the preference against the *demo* (what moved where, in which order), with synonyms
  ("block", "ball"), relative references ("the other one", "the other bin", "reverse the order") and
  paraphrases of speed and return-home requests; write a canonical directive.
* plan / code: resolve the request *literally* (official names only, context from the task text);
  with the stage rules in the prompt write "Stage k:" lines and staged code, otherwise an unstaged sum.
* Bugs: each draft gets a runtime bug with probability ``runtime_rate`` and each applicable semantic bug
  with its rate; a review fixes its own class (probability ``review_fix_prob``); ``fix_error`` repairs a
  runtime bug only when the quoted error line contains the failing statement.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import numpy as np

from .codegen import RUNTIME_BUGS, fix_runtime, fix_semantic, inject, render_reward
from .env import BIN_NAMES, HOME, OBJECT_NAMES
from .extract import extract_functions
from .intent import SLOW_CAP, SPOKEN, SYNONYMS, Intent
from .prompts import STAGE_RULES_MARKER, untag

__all__ = ["ScriptedOfflineBackend", "StandInConfig", "canonical_text", "resolve_request"]

REVIEW_FIXES = {"review_targets": "missing_z", "review_density": "dense_speed", "review_masking": "premature_mask"}


@dataclass(frozen=True)
class StandInConfig:
    """Bug rates of the scripted coder (our choice: the paper reports no such rates).

    runtime_rate: probability that a code draft raises at run time.
    missing_z_rate: probability that a draft's reach distance ignores z.
    dense_speed_rate: probability that a speed request becomes a dense penalty.
    premature_mask_rate: probability that a multi-stage draft enables a stage before its prerequisite is done.
    review_fix_prob: probability that a review fixes the bug class it checks.
    """

    runtime_rate: float = 0.3
    missing_z_rate: float = 0.3
    dense_speed_rate: float = 0.5
    premature_mask_rate: float = 0.5
    review_fix_prob: float = 1.0


def _rng(*parts: str) -> np.random.Generator:
    h = hashlib.sha256("|".join(parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


# ------------------------------------------------------------------------------- reference resolution
def _mentions(t: str, objects: tuple[str, ...], rich: bool) -> list[str]:
    found = []
    for o in objects:
        names = [o, SPOKEN[o]] + ([SYNONYMS[o]] if rich else [])
        pos = [t.find(n) for n in names if t.find(n) >= 0]
        if pos:
            found.append((min(pos), o))
    return [o for _, o in sorted(found)]


def _bins(t: str, rich: bool) -> list[str]:
    out = [f"bin{m}" for m in re.findall(r"bin ?([12])", t)]
    if rich:
        out += ["bin2"] * ("left bin" in t) + ["bin1"] * ("right bin" in t)
    return out


def resolve_request(
    text: str, objects: tuple[str, ...], context: list[tuple[str, str]], rich: bool, context_home: bool = False
) -> Intent:
    """The intent a reader resolves from ``text`` given ``context`` places (demo events or task text).

    rich: the grounding reader (synonyms and paraphrases); otherwise literal names and keywords only.
    """
    t = text.lower()
    pairs = [(o, b) for o, b in re.findall(r"(\w+_\w+) into (bin[12])", t) if o in objects]
    ctx = list(context) or [(objects[0], "bin1")]
    objs, bins = _mentions(t, objects, rich), _bins(t, rich)
    speed_words = ("slow", "gentl", "less aggressive", "too fast") if rich else ("slow",)
    home_words = ("home", "where you started", "back to the start") if rich else ("home",)
    cap = re.search(r"at most ([0-9.]+)", t)
    speed = float(cap.group(1)) if cap else (SLOW_CAP if any(w in t for w in speed_words) else None)
    home = any(w in t for w in home_words) or context_home
    if pairs:
        return Intent(tuple(pairs), ordered=len(pairs) > 1 and "in this order" in t, home=home, speed_cap=speed)
    if any(w in t for w in ("reverse", "swap the order", "other way round")) and len(ctx) > 1:
        return Intent(tuple(reversed(ctx)), ordered=True, home=home, speed_cap=speed)
    base_obj, base_bin = ctx[0]
    if ("first" in t or "then the" in t) and len(objs) > 1:
        b = bins[0] if bins else base_bin
        return Intent(tuple((o, b) for o in objs), ordered=True, home=home, speed_cap=speed)
    obj = objs[0] if objs else base_obj
    if not objs and any(w in t for w in ("other one", "not that one", "wrong one")):
        obj = [o for o in objects if o != base_obj][0]
    b = bins[0] if bins else ([x for x in BIN_NAMES if x != base_bin][0] if "other bin" in t else base_bin)
    return Intent(((obj, b),), home=home, speed_cap=speed)


def canonical_text(intent: Intent) -> str:
    """The directive, unambiguous form of an intent (official names only)."""
    moves = ", then ".join(f"{o} into {b}" for o, b in intent.places)
    out = f"Move {moves}" + (", in this order." if intent.ordered and len(intent.places) > 1 else ".")
    if intent.home:
        out += " Then travel to the home position."
    if intent.speed_cap is not None:
        out += f" Keep the gripper speed at most {intent.speed_cap} m per step."
    return out


def task_places(task: str) -> list[tuple[str, str]]:
    """(object, bin) pairs named in a task description."""
    inv = {v: k for k, v in SPOKEN.items()}
    t = (task or "").lower()
    out = [(inv[o], b) for o, b in re.findall(r"the (red cube|blue cube|green sphere) into (bin[12])", t)]
    return out + [(o, b) for o, b in re.findall(r"(\w+_\w+) into (bin[12])", t) if o in OBJECT_NAMES]


# ------------------------------------------------------------------------------- demo captions
def _caption(state: str) -> str:
    pos = {n: np.array(json.loads(v)) for n, v in re.findall(r"(\w+) at (\[[^\]]+\])", state)}
    held = re.findall(r"(\w+) at \[[^\]]+\] \(grasped\)", state)
    parts = []
    for o in OBJECT_NAMES:
        if o not in pos:
            continue
        where = "held by the gripper" if o in held else "on the table"
        for b in BIN_NAMES:
            if o not in held and b in pos and np.linalg.norm(pos[o][:2] - pos[b][:2]) < 0.05:
                where = f"in {b}"
        parts.append(f"the {o} is {where}")
    g = pos.get("gripper")
    if g is not None and np.linalg.norm(g - HOME) < 0.05:
        parts.append("the gripper is at home")
    return "; ".join(parts) + "."


def _describe(before: str, after: str) -> str:
    acts = []
    for o in OBJECT_NAMES:
        for b in BIN_NAMES:
            if f"the {o} is in {b}" in after and f"the {o} is in {b}" not in before:
                acts.append(f"placed the {o} into {b}")
        if f"the {o} is held" in after and f"the {o} is held" not in before:
            acts.append(f"picked up the {o}")
    if "gripper is at home" in after and "gripper is at home" not in before:
        acts.append("returned home")
    return ("The robot " + " and ".join(acts) + ".") if acts else "The robot moved."


def demo_events(video: str) -> tuple[list[tuple[str, str]], bool]:
    """Placements in order, and whether the robot ended at home, from a demo description."""
    places = re.findall(r"placed the (\w+) into (bin[12])", video or "")
    return places, "returned home" in (video or "")


# ------------------------------------------------------------------------------- the backend
def _objects_in(scene: str) -> tuple[str, ...]:
    found = tuple(o for o in OBJECT_NAMES if o in (scene or ""))
    return found or OBJECT_NAMES[:2]


def _fenced(funcs: dict[str, str]) -> str:
    return "```python\nimport numpy as np\n\n" + "\n\n\n".join(funcs.values()) + "\n```"


def _plan_intent(plan: str, objects: tuple[str, ...]) -> tuple[Intent, bool]:
    """(intent, staged) from a plan written by :meth:`ScriptedOfflineBackend._plan`."""
    staged = bool(re.search(r"^Stage \d+:", plan, re.M))
    places = [(o, b) for o, b in re.findall(r"(?:get|Objective:) (\w+_\w+) (?:to|into) (bin[12])", plan)]
    cap = re.search(r"at most ([0-9.]+)", plan)
    return Intent(
        tuple(places) or ((objects[0], "bin1"),),
        ordered=staged and len(places) > 1,
        home="home position" in plan,
        speed_cap=float(cap.group(1)) if cap else None,
    ), staged


class ScriptedOfflineBackend:
    """Deterministic answers per role (see the module docstring); ``complete(role, messages) -> str``."""

    name = "scripted-offline"

    def __init__(self, cfg: StandInConfig = StandInConfig(), seed: int = 0) -> None:
        self.cfg, self.seed = cfg, seed

    def complete(self, role: str, messages: list[dict]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
        handler = getattr(self, f"_{role}", None)
        if handler is None:
            raise ValueError(f"ScriptedOfflineBackend has no role {role!r}")
        if role.startswith("review_") and untag(text, "code") is None:
            # a review inside the coder's conversation: the code is what the assistant turns wrote, merged
            funcs: dict[str, str] = {}
            for m in messages:
                if m.get("role") == "assistant":
                    funcs.update(extract_functions(str(m.get("content", ""))))
            text += "\n<code>" + _fenced(funcs) + "</code>"
        return handler(text)

    # grounding -----------------------------------------------------------------------------------
    def _caption(self, text: str) -> str:
        return _caption(untag(text, "state") or "")

    def _describe_action(self, text: str) -> str:
        return _describe(untag(text, "before") or "", untag(text, "after") or "")

    def _ground(self, text: str) -> str:
        video, pref = untag(text, "video") or "", untag(text, "preference") or ""
        places, home = demo_events(video)
        objects = _objects_in(video + " " + (untag(text, "task") or ""))
        intent = resolve_request(
            pref, objects, places or task_places(untag(text, "task") or ""), rich=True, context_home=home
        )
        summary = (
            "; ".join(f"the robot placed the {o} into {b}" for o, b in places) or "the robot did not place anything"
        )
        return json.dumps(
            {"summary": summary + (", then returned home" if home else ""), "preference": canonical_text(intent)}
        )

    def _new_description(self, text: str) -> str:
        task, pref = untag(text, "task") or "", untag(text, "preference") or ""
        new = resolve_request(pref, OBJECT_NAMES, task_places(task), rich=False)
        old = task_places(task)
        changed = list(new.places) != old or new.home or new.ordered
        desc = canonical_text(Intent(new.places, new.ordered, new.home)) if changed else ""
        return json.dumps({"description": desc})

    # planning and coding -------------------------------------------------------------------------
    def _plan(self, text: str) -> str:
        objects = _objects_in(untag(text, "scene") or "")
        intent = resolve_request(
            untag(text, "preference") or "", objects, task_places(untag(text, "task") or ""), rich=False
        )
        staged = STAGE_RULES_MARKER in text
        lines = []
        for k, (o, b) in enumerate(intent.places, 1):
            lines.append(
                f"Stage {k}: get {o} to {b} (x, y, z: bin centre, resting at z = 0.02)."
                if staged
                else f"Objective: {o} into {b}."
            )
        if intent.home:
            lines.append(
                f"Stage {len(lines) + 1}: travel to the home position."
                if staged
                else "Objective: travel to the home position."
            )
        if intent.speed_cap is not None:
            lines.append(f"Constraint: keep the gripper speed at most {intent.speed_cap} per step.")
        return "\n".join(lines)

    def _code(self, text: str) -> str:
        objects = _objects_in(untag(text, "scene") or "")
        plan = untag(text, "plan") or ""
        if plan.strip():
            intent, staged = _plan_intent(plan, objects)
        else:  # one-shot from the raw request (Eureka-like): literal reading, unstaged sum
            intent = resolve_request(
                untag(text, "preference") or "", objects, task_places(untag(text, "task") or ""), rich=False
            )
            intent, staged = Intent(intent.places, False, intent.home, intent.speed_cap), False
        return _fenced(render_reward(intent, staged, self._draft_bugs(text, intent, staged)))

    def _draft_bugs(self, text: str, intent: Intent, staged: bool) -> tuple[str, ...]:
        c, rng = self.cfg, _rng(str(self.seed), "draft", text)
        u = rng.random(5)
        bugs = []
        if u[0] < c.missing_z_rate:
            bugs.append("missing_z")
        if intent.speed_cap is not None and u[1] < c.dense_speed_rate:
            bugs.append("dense_speed")
        if staged and intent.multi_stage and u[2] < c.premature_mask_rate:
            bugs.append("premature_mask")
        if u[3] < c.runtime_rate:
            options = [b for b in RUNTIME_BUGS if b != "key" or intent.speed_cap is not None]
            bugs.append(options[int(u[4] * len(options))])
        return tuple(bugs)

    def _review(self, role: str, text: str) -> str:
        funcs = extract_functions(untag(text, "code") or "")
        bug = REVIEW_FIXES.get(role)
        cap = re.search(r"at most ([0-9.]+)", (untag(text, "plan") or "") + (untag(text, "preference") or ""))
        if bug is None or _rng(str(self.seed), role, text).random() >= self.cfg.review_fix_prob:
            return "Checked; no edits are needed."
        edited = {n: fix_semantic(s, bug, float(cap.group(1)) if cap else None) for n, s in funcs.items()}
        edited = {n: s for n, s in edited.items() if s != funcs[n]}
        return _fenced(edited) if edited else "Checked; no edits are needed."

    def _review_geometry(self, text: str) -> str:
        return self._review("review_geometry", text)

    def _review_targets(self, text: str) -> str:
        return self._review("review_targets", text)

    def _review_density(self, text: str) -> str:
        return self._review("review_density", text)

    def _review_masking(self, text: str) -> str:
        return self._review("review_masking", text)

    def _fix_error(self, text: str) -> str:
        funcs = extract_functions(untag(text, "code") or "")
        line = untag(text, "error_line") or ""
        edited = {n: fix_runtime(s, line) for n, s in funcs.items()}
        edited = {n: s for n, s in edited.items() if s != funcs[n]}
        return _fenced(edited) if edited else "I could not find the problem."


def oracle_functions(intent: Intent) -> dict[str, str]:
    """The oracle reward: the staged template of the true intent, without bugs."""
    return render_reward(intent, staged=True, bugs=())


__all__ += ["demo_events", "oracle_functions", "task_places", "inject"]
