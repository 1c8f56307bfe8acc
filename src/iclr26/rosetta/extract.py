"""Function extraction from LLM replies, dict-update merging, and error-line extraction.

Official code: ``rosetta/prompts/utils/extract_from_content.py`` (``extract_functions_from_content``,
``update_latest_funcs``) and ``rosetta/prompts/iterative_error_correction.py`` (``get_error_line``).

* Extraction: every fenced ``python`` block of the reply is parsed; each top-level ``def`` (and each
  ``def`` directly inside a top-level ``class``) becomes ``name -> source``; later blocks override
  earlier ones with the same name.
* Merge: ``latest = {**latest, **new}``: only functions present in the new reply replace older ones.
* Error line: the deepest traceback frame inside a generated function gives a line number; the
  snippet is the smallest AST node (fewest lines; the first such node in pre-order, i.e. the whole
  statement rather than one of its sub-expressions) whose line range contains that line.
"""

from __future__ import annotations

import ast
import re

__all__ = ["assemble", "error_line", "extract_functions", "function_at_line", "merge_functions"]

_FENCE = re.compile(r"```[ \t]*(?:python|py)[^\n]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _defs_in(code: str) -> list[tuple[str, str]]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return _defs_by_indent(code)
    lines, out = code.splitlines(), []
    for node in tree.body:
        nodes = (
            [node]
            if isinstance(node, ast.FunctionDef)
            else ([n for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else [])
        )
        for fn in nodes:
            start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
            src = "\n".join(lines[start - 1 : fn.end_lineno])
            out.append((fn.name, _dedent(src)))
    return out


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src)


def _defs_by_indent(code: str) -> list[tuple[str, str]]:
    """Fallback for unparsable code (the fix loop must see the broken function): split on ``def`` lines."""
    out, lines, i = [], code.splitlines(), 0
    while i < len(lines):
        m = re.match(r"(\s*)def\s+([A-Za-z_]\w*)", lines[i])
        if not m:
            i += 1
            continue
        indent, name, body = len(m.group(1)), m.group(2), [lines[i]]
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        out.append((name, _dedent("\n".join(body).rstrip())))
    return out


def extract_functions(reply: str) -> dict[str, str]:
    """``{name: source}`` of the functions in the reply's fenced python blocks (later blocks win)."""
    funcs: dict[str, str] = {}
    for block in _FENCE.findall(reply or ""):
        for name, src in _defs_in(block):
            funcs[name] = src
    return funcs


def merge_functions(latest: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """Dict-update merge: functions in ``new`` replace their namesakes, the rest of ``latest`` stays."""
    out = dict(latest)
    out.update(new)
    return out


def assemble(funcs: dict[str, str], header: str = "import numpy as np\n") -> tuple[str, dict[str, tuple[int, int]]]:
    """One module source from the functions, and each function's (first, last) line in it."""
    parts, spans, line = [header.rstrip("\n")], {}, header.rstrip("\n").count("\n") + 1
    for name, src in funcs.items():
        src = src.strip("\n")
        parts.append("")
        line += 1
        n = src.count("\n") + 1
        spans[name] = (line + 1, line + n)
        parts.append(src)
        line += n
    return "\n".join(parts) + "\n", spans


def function_at_line(spans: dict[str, tuple[int, int]], line: int) -> str | None:
    """The generated function whose lines contain ``line`` (None: the harness or no line)."""
    for name, (a, b) in spans.items():
        if a <= line <= b:
            return name
    return None


def _preorder(node: ast.AST):
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)


def error_line(funcs: dict[str, str], name: str | None, line_in_func: int | None) -> str | None:
    """The smallest AST node of ``funcs[name]`` whose line range contains ``line_in_func`` (1-based), as source."""
    if name is None or line_in_func is None or name not in funcs:
        return None
    src = funcs[name]
    try:
        tree = ast.parse(src)
    except SyntaxError:
        lines = src.splitlines()
        return lines[line_in_func - 1] if 0 < line_in_func <= len(lines) else None
    spanning = [
        n
        for n in _preorder(tree)
        if hasattr(n, "lineno") and n.lineno <= line_in_func <= (getattr(n, "end_lineno", None) or n.lineno)
    ]
    if not spanning:
        return None
    best = min(spanning, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)  # first minimum in pre-order
    lines = src.splitlines(keepends=True)
    return "".join(lines[best.lineno - 1 : best.end_lineno or best.lineno])
