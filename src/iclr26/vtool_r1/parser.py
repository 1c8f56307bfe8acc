"""Taking the tool call out of a round-1 response y' (paper section 3.1, step 2).

* no fenced python block -> ``notool`` (a direct answer);
* a fenced block that does not compile -> ``failed`` (a failed tool step);
* (v2 only) a block that does not look like tool code (none of ``focus_on_``, ``display(``,
  ``image_1``, ``columns_bbox``, ``rows_bbox``) -> ``notool``;
* otherwise -> ``tool`` with the code; v2 appends ``display(var)`` when the code never calls display
  (:func:`ensure_display_call`).

Model output is untrusted: :func:`parse_action` never raises on any string and runs in linear time. Code
longer than ``MAX_CODE_CHARS`` or nested too deeply for the compiler (``RecursionError``, e.g.
``'-' * 3000 + '1'``) is a ``failed`` tool step, like a syntax error.

:func:`trim_to_action_end` cuts y' after its last closing fence (what v1 puts into the round-2 prompt).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_CODE_CHARS", "ParsedAction", "ensure_display_call", "parse_action", "trim_to_action_end"]

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_OPEN = re.compile(r"```(?:python|py)[ \t]*\n(.*)\Z", re.DOTALL)
TOOL_MARKERS = ("focus_on_", "display(", "image_1", "columns_bbox", "rows_bbox")
MAX_CODE_CHARS = 65_536
"""Longer tool code is a failed step (a real round-1 response is at most a few thousand characters)."""
_COMPILE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


@dataclass(frozen=True)
class ParsedAction:
    """What round 1 asked for."""

    kind: Literal["notool", "tool", "failed"]
    """``notool``: answer directly; ``tool``: run ``code``; ``failed``: the tool step fails (``error``)."""
    code: str = ""
    """The python source to run (after ``ensure_display_call`` in v2)."""
    error: str = ""
    """Why parsing failed (``failed`` only)."""


def _blocks(text: str) -> list[str]:
    blocks = [m.group(1) for m in _FENCE.finditer(text)]
    if not blocks:  # an opened but never closed ```python fence still counts as (broken) tool code
        m = _OPEN.search(text)
        if m:
            blocks = [m.group(1)]
    return blocks


def ensure_display_call(code: str) -> str:
    """v2: if ``code`` never calls ``display(...)``, append ``display(<last assigned name>)``."""
    try:
        tree = ast.parse(code)
    except _COMPILE_ERRORS:
        return code
    calls_display = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "display" for n in ast.walk(tree)
    )
    if calls_display:
        return code
    last = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets and isinstance(node.targets[-1], ast.Name):
            last = node.targets[-1].id
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            last = node.target.id
    if last is None:
        return code
    return code.rstrip("\n") + f"\ndisplay({last})\n"


def parse_action(text: str, version: str = "v2") -> ParsedAction:
    """Classify a round-1 response and extract its code (see the module docstring)."""
    if version not in ("v1", "v2"):
        raise ValueError(f"version must be 'v1' or 'v2', got {version!r}")
    if not isinstance(text, str):
        return ParsedAction("failed", error=f"response is not text ({type(text).__name__})")
    blocks = _blocks(text)
    if not blocks:
        return ParsedAction("notool")
    code = "\n".join(b.strip("\n") for b in blocks) + "\n"
    if version == "v2" and not any(m in code for m in TOOL_MARKERS):
        return ParsedAction("notool")
    if len(code) > MAX_CODE_CHARS:
        return ParsedAction("failed", code=code[:MAX_CODE_CHARS], error=f"tool code longer than {MAX_CODE_CHARS} chars")
    try:
        compile(code, "<tool-call>", "exec", dont_inherit=True)
    except _COMPILE_ERRORS as e:
        kind = "SyntaxError" if isinstance(e, SyntaxError | ValueError) else type(e).__name__
        return ParsedAction("failed", code=code, error=f"{kind}: {getattr(e, 'msg', e)}")
    if version == "v2":
        code = ensure_display_call(code)
    return ParsedAction("tool", code=code)


def trim_to_action_end(text: str) -> str:
    """Cut ``text`` right after its last closing code fence (unchanged if there is no complete fence)."""
    if not isinstance(text, str):
        return ""
    ends = [m.end() for m in _FENCE.finditer(text)]
    return text[: ends[-1]] if ends else text
