"""House style checked on the source tree: no import cycles, short method functions, no Agg at import.

``KNOWN`` lists violations that exist today and are scheduled to be fixed; the test fails both on a
new violation and on a listed one that no longer exists (so the list only shrinks).
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FUNCTION_LINES = 80

KNOWN_CYCLES: set[frozenset[str]] = set()  # none left
KNOWN_LONG: set[str] = set()  # none left


def _modules():
    for path in sorted((SRC / "iclr26").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), is_pkg, ast.parse(path.read_text(encoding="utf-8"))


def _runtime_nodes(tree):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _imports(mod, is_pkg, tree):
    out = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _cycles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return set(out)


def test_no_import_cycles_between_modules():
    mods = {m: (p, t) for m, p, t in _modules()}
    graph = {}
    for m, (is_pkg, tree) in mods.items():
        # a module importing one of its parent packages is not a cycle: Python loads parents first
        parents = {".".join(m.split(".")[:k]) for k in range(1, len(m.split(".")))}
        graph[m] = {d for d in _imports(m, is_pkg, tree) if d in mods and d != m and d not in parents}
    graph = {m: {d for d in ds if not (mods[d][0] and m.startswith(d + "."))} for m, ds in graph.items()}
    cycles = _cycles(graph)
    assert cycles - KNOWN_CYCLES == set(), f"new import cycles: {cycles - KNOWN_CYCLES}"
    assert KNOWN_CYCLES - cycles == set(), f"fixed, remove from KNOWN_CYCLES: {KNOWN_CYCLES - cycles}"


def _body_lines(fn):
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return body[-1].end_lineno - body[0].lineno + 1


def test_method_functions_are_short():
    """No function in paper code over ~80 lines (docstring excluded): split it into named steps."""
    long = set()
    for mod, _, tree in _modules():
        if mod.startswith("iclr26.core") or mod == "iclr26.cli":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _body_lines(node) > MAX_FUNCTION_LINES:
                long.add(f"{mod}.{node.name}")
    assert long - KNOWN_LONG == set(), f"functions over {MAX_FUNCTION_LINES} lines: {sorted(long - KNOWN_LONG)}"
    assert KNOWN_LONG - long == set(), f"fixed, remove from KNOWN_LONG: {KNOWN_LONG - long}"


def test_no_matplotlib_backend_switch_at_import_time():
    for mod, _, tree in _modules():
        for node in tree.body:  # statements run at import (function and class bodies excluded)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            src = ast.unparse(node)
            assert "matplotlib.use(" not in src, f"{mod}: matplotlib.use at import time"
