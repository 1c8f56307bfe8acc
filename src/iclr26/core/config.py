"""Typed run configuration: one frozen dataclass tree per paper and scale.

Every setting that changes a result lives in exactly one place: a frozen dataclass field with the
paper's default and a docstring line ``name: what it is``. A paper's experiment builds the tree for a
scale (``Experiment.config(scale)``), the user overrides any leaf from the command line with
``--set a.b=value`` (parsed and type-checked against the field's annotation), and the run reads the
resolved tree from ``ctx.cfg``. The resolved tree is written to ``config.json`` with the run.

    >>> @dataclass(frozen=True)
    ... class Opt:
    ...     '''lr: peak learning rate.'''
    ...     lr: float = 3e-4
    >>> @dataclass(frozen=True)
    ... class Root:
    ...     '''opt: optimiser settings.'''
    ...     opt: Opt = Opt()
    >>> override(Root(), {"opt.lr": "1e-3"}).opt.lr
    0.001

Supported leaf types: ``bool`` (true/false/1/0/yes/no), ``int``, ``float``, ``str``, ``Path``,
``Literal[...]``, ``X | None`` (``none``/``null`` gives None), and ``tuple``/``list`` of those
(comma-separated, or a JSON list). An unknown key is a :class:`ConfigError` naming the closest fields.

Ranges: a value set with ``--set`` is also checked against its field's range (:func:`field_range`), the
same way for every paper. A field may state its range as ``field(default=..., metadata={"range": (lo,
hi)})`` (None: unbounded on that side; ``metadata={"range": None}``: no check); otherwise the range
follows from the field's name: integer counts (``n_*``, ``num_*``, ``max_*``, ``*_steps``, ``epochs``,
``*_size``, ``workers``, ``*_every``, ``limit``, ...) are >= 0, batch sizes, group sizes, head counts,
threads and widths are >= 1, and probabilities and fractions (``p``, ``p_*``, ``*_prob``, ``*_frac``,
``*_fraction``, ``*_share``, ``*_rate``, ``*dropout_p``, ``top_p``) lie in [0, 1]. Tuples are checked
element by element. A value out of range is a :class:`ConfigError` (``iclr26 run`` exits with code 2).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from iclr26.core.serialize import to_jsonable

__all__ = [
    "ConfigError",
    "config_docs",
    "config_to_dict",
    "field_range",
    "flatten",
    "format_config",
    "override",
    "parse_value",
]


class ConfigError(ValueError):
    """A bad ``--set`` key or value; the message names the field and, for typos, the closest keys."""


def _is_config(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be resolved: fall back to the raw strings
        return {f.name: f.type for f in dataclasses.fields(cls)}


def flatten(cfg: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every leaf of a config tree as ``(dotted key, annotation, value)``, in field order."""
    hints = _hints(type(cfg))
    for f in dataclasses.fields(cfg):
        key = f"{prefix}{f.name}"
        value = getattr(cfg, f.name)
        if _is_config(value):
            yield from flatten(value, key + ".")
        else:
            yield key, hints.get(f.name, Any), value


_DOC_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def config_docs(cls: type) -> dict[str, str]:
    """Field -> first docstring line, from ``name: text`` (or ``name (symbol): text``) lines."""
    docs: dict[str, str] = {}
    for line in (cls.__doc__ or "").splitlines():
        m = _DOC_LINE.match(line)
        if m and m.group(1) not in docs:
            docs[m.group(1)] = m.group(2).strip()
    return docs


def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in {"1", "true", "yes", "on"}:
        return True
    if t in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected a boolean (true/false), got '{text}'")


def _split_seq(text: str) -> list[Any]:
    t = text.strip()
    if t.startswith("["):
        items = json.loads(t)
        if not isinstance(items, list):
            raise ValueError(f"expected a JSON list, got '{text}'")
        return items
    t = t.strip("()")
    return [s.strip() for s in t.split(",") if s.strip()] if t else []


def parse_value(text: Any, tp: Any) -> Any:
    """Parse command-line text into a value of annotation ``tp``; ValueError when it does not fit."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return text
    if origin in (typing.Union, types.UnionType):
        if isinstance(text, str) and text.strip().lower() in {"none", "null"} and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return parse_value(text, arg)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors) or f"cannot parse '{text}'")
    if origin is Literal:
        for choice in args:
            if str(choice) == str(text).strip():
                return choice
        raise ValueError(f"expected one of {', '.join(map(str, args))}, got '{text}'")
    if origin in (tuple, list):
        items = _split_seq(text) if isinstance(text, str) else list(text)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            parsed = [parse_value(v, args[0]) for v in items]
        elif origin is tuple and args:
            if len(items) != len(args):
                raise ValueError(f"expected {len(args)} comma-separated values, got {len(items)}")
            parsed = [parse_value(v, a) for v, a in zip(items, args, strict=True)]
        else:
            parsed = [parse_value(v, args[0] if args else Any) for v in items]
        return tuple(parsed) if origin is tuple else parsed
    if tp is bool:
        return text if isinstance(text, bool) else _parse_bool(str(text))
    if tp is int:
        if isinstance(text, bool):
            raise ValueError("expected an integer, got a boolean")
        if isinstance(text, int):
            return text
        try:
            return int(str(text).strip())
        except ValueError:
            raise ValueError(f"expected an integer, got '{text}'") from None
    if tp is float:
        if isinstance(text, bool):
            raise ValueError("expected a number, got a boolean")
        try:
            return float(text)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got '{text}'") from None
    if tp is str:
        return str(text)
    if tp is Path:
        return Path(str(text)).expanduser()
    if isinstance(tp, type) and isinstance(text, tp):
        return text
    raise ValueError(f"fields of type {getattr(tp, '__name__', tp)} cannot be set from the command line")


# integer counts: >= 1 (a batch, a group, a width that cannot be empty) or >= 0 (steps, sizes, limits; 0 often
# means "off" or "all"); probabilities and fractions in [0, 1]. Names, not values: see field_range.
_AT_LEAST_ONE = re.compile(
    r"^(batch|batch_size|group_size|minibatches|threads|grad_accum|d_model|d_ff|dim|heads)$"
    r"|(?<!micro)_batch_size$|_batch$|_minibatches$|_heads?$|^num_minibatches$"
)
_COUNT = re.compile(
    r"^(n|num|max|min)_|(^|_)(steps|substeps|epochs|iters|iterations|batches|size|workers|threads|tries|samples"
    r"|every|envs|layers|len|length|rounds|turns|episodes|prompts|queries|rows|pairs|windows|tokens|hidden|rank"
    r"|count|bins|days|frames|trials|chains|preferences|slots|particles|conformers|cells|lights|agents|segments"
    r"|shapes|msgs|objects|relations|items|tasks|classes|nodes|degree|basis|clusters|seed|limit|stride|warmup"
    r"|horizon|width|depth)$"
)
_PROBABILITY = re.compile(r"(^|_)(prob|probs|frac|fracs|fraction|share|rate)$|^p$|^p_(?!mean$|std$)|dropout_p$|^top_p$")
_NO_PROBABILITY = frozenset({"learning_rate", "sample_rate", "frame_rate"})


def _scalar_types(tp: Any) -> set[type]:
    """The scalar types a leaf annotation holds (through ``X | None`` and tuples/lists)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType, tuple, list):
        return set().union(*(_scalar_types(a) for a in args if a is not Ellipsis)) if args else set()
    return {tp} if isinstance(tp, type) else set()


def field_range(f: dataclasses.Field, tp: Any) -> tuple[float | None, float | None, str] | None:
    """``(low, high, what)`` that ``--set`` values of field ``f`` (annotation ``tp``) must lie in, or None.

    ``f.metadata["range"]`` wins when present (``(low, high)`` with None for an open side, or None for no
    check). Otherwise the name decides, for numeric fields only: see the module docstring."""
    if "range" in f.metadata:
        rng = f.metadata["range"]
        return None if rng is None else (rng[0], rng[1], "the field's range")
    scalars = _scalar_types(tp)
    name = f.name
    if int in scalars and float not in scalars:
        if _AT_LEAST_ONE.search(name):
            return 1, None, "a count that must be at least 1"
        if _COUNT.search(name):
            return 0, None, "a count"
    if float in scalars and _PROBABILITY.search(name) and name not in _NO_PROBABILITY:
        return 0.0, 1.0, "a probability or fraction"
    return None


def _check_range(key: str, text: Any, value: Any, rng: tuple[float | None, float | None, str]) -> None:
    low, high, what = rng
    for v in value if isinstance(value, tuple | list) else (value,):
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if v != v or (low is not None and v < low) or (high is not None and v > high):
            if high is None:
                bound = f">= {low}"
            elif low is None:
                bound = f"<= {high}"
            else:
                bound = f"in [{low}, {high}]"
            raise ConfigError(f"--set {key}={text}: must be {bound} ({what}), got {v}")


def _field(cfg: Any, path: list[str]) -> dataclasses.Field:
    node = cfg
    for part in path[:-1]:
        node = getattr(node, part)
    return {f.name: f for f in dataclasses.fields(node)}[path[-1]]


def override(cfg: Any, sets: Mapping[str, Any]) -> Any:
    """A copy of ``cfg`` with dotted keys replaced; values are parsed against each field's annotation.

    Raises :class:`ConfigError` for an unknown key (naming the closest valid keys), a key that names
    a sub-config instead of a leaf, a value that does not parse, lies outside the field's range
    (:func:`field_range`) or that the dataclass rejects.
    """
    if not sets:
        return cfg
    leaves = {k: tp for k, tp, _ in flatten(cfg)}
    for key, text in sets.items():
        if key not in leaves:
            close = difflib.get_close_matches(key, list(leaves), n=3, cutoff=0.5)
            if not close:
                tail = key.rsplit(".", 1)[-1]
                close = [k for k in leaves if k.rsplit(".", 1)[-1] == tail][:3]
            hint = f"; did you mean {', '.join(close)}?" if close else "; see --show-config for the valid keys"
            raise ConfigError(f"unknown config key '{key}'{hint}")
        try:
            value = parse_value(text, leaves[key])
        except (ValueError, TypeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"--set {key}={text}: {exc}") from None
        rng = field_range(_field(cfg, key.split(".")), leaves[key])
        if rng is not None:
            _check_range(key, text, value, rng)
        try:
            cfg = _replace_path(cfg, key.split("."), value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"--set {key}={text}: {exc}") from None
    return cfg


def _replace_path(cfg: Any, path: list[str], value: Any) -> Any:
    head = path[0]
    if len(path) == 1:
        return dataclasses.replace(cfg, **{head: value})
    return dataclasses.replace(cfg, **{head: _replace_path(getattr(cfg, head), path[1:], value)})


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The nested tree as JSON-able dicts (tuples as lists, paths as strings)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        out[f.name] = config_to_dict(value) if _is_config(value) else to_jsonable(value)
    return out


def format_config(cfg: Any) -> str:
    """One line per leaf: ``key = value  # doc line``, the way ``--show-config`` prints it."""
    rows = []

    def walk(node: Any, prefix: str) -> None:
        docs = config_docs(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if _is_config(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                rows.append((f"{prefix}{f.name}", json.dumps(to_jsonable(value)), docs.get(f.name, "")))

    walk(cfg, "")
    width = max((len(k) + len(v) for k, v, _ in rows), default=0) + 3
    return "\n".join(f"{k} = {v}".ljust(width) + (f"  # {d}" if d else "") for k, v, d in rows)
