"""A static index of the registered papers, read from source without importing them.

``iclr26 list`` must answer in well under a second, and importing every paper pulls in torch,
scipy and the rest. Each ``iclr26/<slug>/experiment.py`` declares its :class:`Experiment` with
literal ``slug``, ``title`` and ``arxiv`` strings and a literal tuple of ``Claim("C1", ...)`` calls
(or a module-level ``CLAIMS = (...)``), so the abstract syntax tree holds everything the listing
shows. A module this reader cannot parse is imported instead (slow path, still correct); the test
suite checks that the static index equals :func:`iclr26.core.experiment.discover`.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path

_NOT_PAPERS = {"core", "cli"}


@dataclass(frozen=True)
class IndexEntry:
    """What ``iclr26 list`` shows for one paper."""

    slug: str
    title: str
    arxiv: str
    claims: tuple[str, ...]


def _claim_names(node: ast.AST, assigns: dict[str, ast.AST]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name) and node.id in assigns:
        node = assigns[node.id]
    if not isinstance(node, ast.Tuple | ast.List):
        return None
    names = []
    for elt in node.elts:
        if not (isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "Claim"):
            return None
        first = elt.args[0] if elt.args else next((k.value for k in elt.keywords if k.arg == "name"), None)
        if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            return None
        names.append(first.value)
    return tuple(names)


def parse_experiment_source(source: str) -> IndexEntry | None:
    """The entry declared by ``EXPERIMENT = Experiment(...)`` (possibly inside ``register(...)``), or None."""
    tree = ast.parse(source)
    assigns: dict[str, ast.AST] = {}
    call = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            assigns[stmt.targets[0].id] = stmt.value
            if stmt.targets[0].id == "EXPERIMENT":
                call = stmt.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "register" and call.args:
        call = call.args[0]
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Experiment"):
        return None
    kw = {k.arg: k.value for k in call.keywords}
    fields = {}
    for key in ("slug", "title", "arxiv"):
        node = kw.get(key)
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            return None
        fields[key] = node.value
    claims = _claim_names(kw.get("claims", ast.Tuple(elts=[])), assigns)
    if claims is None:
        return None
    return IndexEntry(fields["slug"], fields["title"], fields["arxiv"], claims)


def static_index() -> tuple[list[IndexEntry], list[str]]:
    """Every paper's entry, sorted by slug, plus warnings for papers that could not be read.

    Papers whose source the static reader cannot interpret, and extra experiments named in
    ``ICLR26_EXTRA_EXPERIMENTS``, are imported (the slow, always-correct path).
    """
    import iclr26

    entries: dict[str, IndexEntry] = {}
    warnings: list[str] = []
    for info in pkgutil.iter_modules(iclr26.__path__):
        if not info.ispkg or info.name in _NOT_PAPERS or info.name.startswith("_"):
            continue
        path = Path(iclr26.__path__[0]) / info.name / "experiment.py"
        if not path.is_file():
            continue
        try:
            entry = parse_experiment_source(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError) as exc:
            warnings.append(f"paper '{info.name}' failed to load: {type(exc).__name__}: {exc}")
            continue
        if entry is None:
            entry = _imported_entry(f"iclr26.{info.name}.experiment", warnings, info.name)
        if entry is not None:
            entries[entry.slug] = entry
    for mod in filter(None, os.environ.get("ICLR26_EXTRA_EXPERIMENTS", "").split(",")):
        before = set(_extra_slugs())
        _imported_entry(mod.strip(), warnings, mod.strip())
        from iclr26.core.experiment import _EXTRA

        for slug in set(_extra_slugs()) - before or set(_extra_slugs()):
            e = _EXTRA[slug]
            entries[slug] = IndexEntry(e.slug, e.title, e.arxiv, tuple(c.name for c in e.claims))
    return [entries[k] for k in sorted(entries)], warnings


def _extra_slugs() -> list[str]:
    from iclr26.core.experiment import _EXTRA

    return list(_EXTRA)


def _imported_entry(module: str, warnings: list[str], name: str) -> IndexEntry | None:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        warnings.append(f"paper '{name}' failed to load: {type(exc).__name__}: {exc}")
        return None
    exp = getattr(mod, "EXPERIMENT", None)
    if exp is None:
        return None
    return IndexEntry(exp.slug, exp.title, exp.arxiv, tuple(c.name for c in exp.claims))
