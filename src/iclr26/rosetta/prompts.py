"""Our own prompts, one per role (the official prompt texts are not licensed for reuse; these are
written from the method description, Sec. 3 of the paper / ``rosetta/prompts/prompt_content``).

Every dynamic field is wrapped in an XML-like tag (``<preference>...</preference>``) so that any
backend, the scripted stand-in included, receives the same information. Roles mirror the official
call sites: ``caption`` and ``describe_action`` (demo to language), ``ground``, ``new_description``,
``plan``, ``code``, the four short-horizon reviews and ``fix_error``.
"""

from __future__ import annotations

__all__ = ["REVIEW_QUESTIONS", "REVIEW_ROLES", "ROLES", "STAGE_RULES_MARKER", "build", "tag", "untag"]

import re

STAGE_RULES_MARKER = "STAGE RULES"
REVIEW_ROLES = ("review_geometry", "review_targets", "review_density", "review_masking")
ROLES = ("caption", "describe_action", "ground", "new_description", "plan", "code", *REVIEW_ROLES, "fix_error")

SYSTEM = {
    "caption": "You describe robot scenes. Objects never float: anything above the table is held or stacked.",
    "describe_action": "You describe what a robot did between two scene descriptions, in one sentence.",
    "ground": "You turn spontaneous feedback about a robot video into one clear, directive request.",
    "new_description": "You maintain the task description of a robot.",
    "plan": "You are a reward engineer. You break a request into stages of outcomes.",
    "code": "You are a reward engineer writing Python reward code for a simulated robot.",
}

# The four short-horizon review questions. ``review_context="fresh"``: each is asked in a new chat after the
# current code, the plan and the request (_REVIEW_HEAD); ``"conversation"``: it is appended, alone, to the
# coder's running chat (official rosetta_sh.py), where the code and the plan already are.
REVIEW_QUESTIONS = {
    "review_geometry": "Check geometry: centre offsets and object sizes, the x/y convention, thresholds rather than "
    "penalising any motion. Make minimal edits and output only the edited full functions.",
    "review_targets": "Check every target position: all three coordinates set, always a specific point, never only "
    "a direction. Output only edited full functions.",
    "review_density": "Check density: approaching is rewarded densely; penalties are NOT dense (a speed request is a "
    "constant penalty above a threshold); the target must actually be reached. Output only edited full functions.",
    "review_masking": "Check the stage masks: the total never decreases; a stage is enabled only by genuinely "
    "completed prerequisites, never prematurely. Output only edited full functions.",
}
_REVIEW_HEAD = (
    "Current code:\n<code>{code}</code>\nPlan:\n<plan>{plan}</plan>\nRequest:\n<preference>{preference}</preference>\n"
)

_TEMPLATES = {
    "caption": "Scene setup:\n<scene>{scene}</scene>\nState:\n<state>{state}</state>\n"
    "Describe the scene in one sentence: where the gripper is and where each object is (on the table, held, "
    "or in a bin).",
    "describe_action": "Before:\n<before>{before}</before>\nAfter:\n<after>{after}</after>\n"
    "Say in one sentence what the robot did in between (picked up, placed into a bin, moved, returned home).",
    "ground": "Task given to the robot:\n<task>{task}</task>\nVideo, frame by frame:\n<video>{video}</video>\n"
    "The person said:\n<preference>{preference}</preference>\n"
    "Answer in JSON with keys 'summary' (what happened in the video) and 'preference' (the request rewritten "
    "as a direct, unambiguous instruction). Checklist: the request may be unordered; drop compliments about the "
    "past; the person only refers to things visible in the video, so map every word to the scene's official "
    "object and bin names; never ask for a bare 'release', say where things go. Examples of the rewrite: "
    "'not that one' becomes 'move the other object instead'; 'the other one' names the unused bin; 'further' "
    "names a concrete direction.",
    "new_description": "Old task description:\n<task>{task}</task>\nRequest:\n<preference>{preference}</preference>\n"
    'If the request changes or extends the task, answer JSON {{"description": <new task description>}}; if it '
    'only comments on how the task was executed, answer {{"description": ""}}.',
    "plan": "Environment:\n<scene>{scene}</scene>\nPrevious reward code:\n<previous_code>{previous}</previous_code>\n"
    "Task description:\n<task>{task}</task>\nWhat the robot did:\n<summary>{summary}</summary>\n"
    "Request:\n<preference>{preference}</preference>\n{stage_rules}"
    "Incorporate the request exactly; invent nothing; say 'I cannot do X' for impossible parts.",
    "code": "Plan:\n<plan>{plan}</plan>\nRequest:\n<preference>{preference}</preference>\n"
    "Task description:\n<task>{task}</task>\nEnvironment:\n<scene>{scene}</scene>\n"
    "Previous reward code (edit it, do not start over):\n<previous_code>{previous}</previous_code>\n"
    "Write `evaluate(state)` (returns a dict of bool arrays with key 'success') and "
    "`compute_dense_reward(state, action, info)` (returns one float per env). State keys: {state_keys}. "
    "Checklist: dense 1 - tanh(5 d) shaping; set all of x, y, z of every target; objects rest at z = 0.02; "
    "enable a stage only when its prerequisite stages are complete and keep completed stages at their maximum "
    "so the total never decreases; equal maxima per stage; a success bonus of about a quarter of the total; "
    "numpy only. Output only the functions, in one ```python block.",
    **{role: _REVIEW_HEAD + q for role, q in REVIEW_QUESTIONS.items()},
    "fix_error": "Code:\n<code>{code}</code>\nRunning it failed:\n<error>{error}</error>\nThe failing statement:\n"
    "<error_line>{error_line}</error_line>\nFix it; output only the edited full functions in one ```python block.",
}

STAGE_RULES = (
    f"{STAGE_RULES_MARKER}: write the plan as numbered lines 'Stage k: <outcome>'. Each stage is ONE atomic "
    "outcome (a change of the scene, not an action), from the templates 'travel to <position>', 'get <object> "
    "to <position>', '<other single outcome>'. Consider dependencies; never plan a bare release or 'move above "
    "then lower'. Constraints such as speed go on a line 'Constraint: ...'.\n"
)


def tag(name: str, text: str) -> str:
    return f"<{name}>{text}</{name}>"


def untag(text: str, name: str) -> str | None:
    """The content of the last ``<name>...</name>`` in ``text`` (None if absent)."""
    found = re.findall(rf"<{name}>(.*?)</{name}>", text or "", re.DOTALL)
    return found[-1] if found else None


def build(role: str, **fields: str) -> list[dict]:
    """Chat messages for ``role`` with its fields filled in (missing fields become empty)."""
    if role not in _TEMPLATES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    names = set(re.findall(r"{(\w+)}", _TEMPLATES[role]))
    values = {k: fields.get(k, "") for k in names}
    if "stage_rules" in names:
        values["stage_rules"] = fields.get("stage_rules", STAGE_RULES)
    system = SYSTEM.get(role, SYSTEM["code"])
    return [{"role": "system", "content": system}, {"role": "user", "content": _TEMPLATES[role].format(**values)}]
