"""Experiments, claims, scales and the registry the CLI reads.

A paper registers exactly one :class:`Experiment` in ``iclr26/<slug>/experiment.py`` as a module
attribute named ``EXPERIMENT``. The experiment's ``run`` function receives a :class:`RunContext`
(scale, seeds, output folder, progress bars, user options) and returns a :class:`RunOutput`: every
metric per seed, and one *measured* value per claim.

A :class:`Claim` is written before any result exists: a statement, the paper's number, a
human-readable rule and the same rule as code (``check``). The verdict is computed by
:func:`evaluate_claims` from the measured value alone, so a claim cannot be tuned after the fact
without changing the code that states it.

Scales:

* ``smoke``: seconds; CI runs it for every paper; checks the pipeline, not the claim.
* ``small``: at most 10 minutes on 2 CPU cores; shows the paper's claim on several seeds.
* ``paper``: the paper's real setting (local checkpoints and data, GPUs).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import pkgutil
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from iclr26.core.progress import progress_env
from iclr26.core.report import METRICS_FILE
from iclr26.core.serialize import to_jsonable

__all__ = [
    "METRICS_FILE",
    "SCALES",
    "Claim",
    "ClaimResult",
    "Experiment",
    "ExperimentError",
    "RunContext",
    "RunOutput",
    "RunRecord",
    "discover",
    "evaluate_claims",
    "mean_std",
    "register",
    "run_experiment",
    "to_jsonable",
]

SCALES: tuple[str, ...] = ("smoke", "small", "real", "paper")
SCALE_HELP = {
    "smoke": "seconds; pipeline check run in CI, not the claim",
    "small": "<= 10 minutes on 2 CPU cores; shows the paper's claim over several seeds",
    "real": "the claims on a real pretrained checkpoint, offline on CPU (<= 30 min, 3 seeds); papers about "
    "what pretrained models do",
    "paper": "the paper's real setting: local checkpoints/data given with --set, GPUs",
}
#: the scales an experiment has unless it says otherwise (``real`` only where a paper registers it)
DEFAULT_EXPERIMENT_SCALES: tuple[str, ...] = ("smoke", "small", "paper")
DEFAULT_SEEDS: Mapping[str, tuple[int, ...]] = {"smoke": (0,), "small": (0, 1, 2), "real": (0, 1, 2), "paper": (0,)}


class ExperimentError(RuntimeError):
    """A run that cannot proceed (missing local file, bad option...). The CLI prints it in one line."""


@dataclass(frozen=True)
class Claim:
    """A falsifiable statement from the paper, with its pass rule fixed in code.

    name: short id, e.g. ``"C1"``.
    statement: the claim in words, as in the issue/spec.
    paper_value: what the paper reports (number, string or dict).
    rule: the pass rule in words, e.g. ``"daedal_acc >= best_fixed_acc - 3"``.
    check: the same rule in code: ``check(measured) -> bool``; ``measured`` is whatever the run
        function returned for this claim (usually a dict of seed-averaged numbers).
    """

    name: str
    statement: str
    paper_value: Any
    rule: str
    check: Callable[[Any], bool]


@dataclass(frozen=True)
class ClaimResult:
    """A claim after evaluation on one run's measured value."""

    name: str
    statement: str
    paper_value: Any
    measured: Any
    rule: str
    passed: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "statement": self.statement,
            "paper_value": to_jsonable(self.paper_value),
            "measured": to_jsonable(self.measured),
            "rule": self.rule,
            "passed": bool(self.passed),
        }
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class RunContext:
    """Everything a run function needs from the outside world.

    scale: one of :data:`SCALES`.
    seeds: the seeds to run; claims must be evaluated from these, whichever they are.
    out_dir: the run's folder (figures go here, see :meth:`figure_path`).
    options: ``--set key=value`` pairs as given (strings); for experiments with a typed config they
        are already applied to ``cfg``, so read ``cfg``, not ``options``.
    device: ``"cpu"`` unless the user asked for another torch device with ``--set device=cuda``.
    show_progress: whether progress bars are drawn (off in tests).
    cfg: the resolved config tree of this run (``Experiment.config(scale)`` with ``--set`` applied),
        or None for an experiment without a typed config.
    """

    scale: str
    seeds: tuple[int, ...]
    out_dir: Path
    options: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"
    show_progress: bool = True
    figures: list[Path] = field(default_factory=list)
    cfg: Any = None
    _tb: Any = field(default=None, repr=False)

    def log(self, step: int, *, series: str = "train", **scalars: Any) -> None:
        """Append one line ``{"series", "step", **scalars}`` to ``metrics.jsonl`` in the run folder.

        ``series`` names the curve (e.g. ``"seed0/daedal"``); non-finite numbers are written as
        strings. The report draws one figure per scalar name with one line per series. When the
        ``tensorboard`` package is installed and ``ICLR26_TENSORBOARD=1``, the scalars also go to
        ``tb/`` in the run folder.
        """
        import json

        row = {"series": str(series), "step": int(step)}
        for key, value in scalars.items():
            row[str(key)] = to_jsonable(
                float(value) if hasattr(value, "item") and not isinstance(value, str) else value
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / METRICS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        self._tensorboard(row)

    def logger(self, series: str) -> Callable[..., None]:
        """``log(step, **scalars)`` bound to one series, to hand to a training loop (``fit(log=...)``)."""

        def log(step: int, **scalars: Any) -> None:
            self.log(step, series=series, **scalars)

        return log

    def _tensorboard(self, row: Mapping[str, Any]) -> None:
        if os.environ.get("ICLR26_TENSORBOARD") != "1":
            return
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except Exception:  # tensorboard not installed: the jsonl file is the log
                self._tb = False
                return
            self._tb = SummaryWriter(str(self.out_dir / "tb"))
        if self._tb:
            for key, value in row.items():
                if key not in ("series", "step") and isinstance(value, int | float):
                    self._tb.add_scalar(f"{row['series']}/{key}", value, row["step"])

    def progress(self, iterable: Iterable | None = None, total: int | None = None, desc: str = ""):
        """A tqdm progress bar (disabled when ``show_progress`` is False)."""
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, disable=not self.show_progress, leave=False, dynamic_ncols=True)

    def figure_path(self, name: str) -> Path:
        """Path for a PNG figure in the run folder; registered so the report links it."""
        if not name.endswith(".png"):
            name = name + ".png"
        path = self.out_dir / name
        self.figures.append(path)
        return path

    def option(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        """A ``--set key=value`` option; ``required=True`` raises a one-line ExperimentError."""
        if key in self.options:
            return self.options[key]
        if required:
            raise ExperimentError(f"scale '{self.scale}' needs --set {key}=... (see the paper's README)")
        return default

    def local_path(self, key: str) -> Path:
        """A required ``--set key=PATH`` option that must exist on disk (nothing is downloaded)."""
        value = self.option(key, required=True)
        path = Path(str(value)).expanduser()
        if not path.exists():
            raise ExperimentError(f"--set {key}={value}: no such file or directory (nothing is downloaded)")
        return path

    def require_path(self, key: str) -> Path:
        """The path in config field ``key`` (dotted), which must exist on disk (nothing is downloaded). A
        registered real checkpoint name (``iclr26 models``, e.g. ``smollm2-135m-instruct``) gives its local
        folder, built on first use."""
        from iclr26.core.checkpoints import CheckpointError, resolve_model_dir

        value: Any = self.cfg
        for part in key.split("."):
            value = getattr(value, part)
        if value in (None, ""):
            raise ExperimentError(f"scale '{self.scale}' needs --set {key}=PATH (see the paper's README)")
        try:
            value = resolve_model_dir(str(value))
        except (CheckpointError, ImportError) as exc:
            raise ExperimentError(f"--set {key}={value}: {exc}") from None
        path = Path(str(value)).expanduser()
        if not path.exists():
            raise ExperimentError(f"--set {key}={value}: no such file or directory (nothing is downloaded)")
        return path


@dataclass
class RunOutput:
    """What a run function returns.

    metrics: every number the report shows, per seed (JSON-serialisable after :func:`to_jsonable`).
    measured: claim name -> measured value handed to that claim's ``check``.
    tables: optional markdown tables (title -> markdown) added to report.md.
    notes: optional free text lines added to report.md.
    """

    metrics: dict[str, Any]
    measured: dict[str, Any]
    tables: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    """One paper's registered reproduction.

    slug: folder name (``iclr26.<slug>``).
    title: the paper's title.
    arxiv: arXiv id.
    claims: the claims evaluated at the end of every run.
    run: ``run(ctx: RunContext) -> RunOutput``.
    scales: the scales this experiment supports.
    default_seeds: seeds per scale when ``--seeds`` is not given.
    config: ``config(scale)`` -> the frozen dataclass tree of every setting that changes a result at
        that scale (see :mod:`iclr26.core.config`); ``--set a.b=v`` overrides its leaves. None only
        for experiments not yet moved to a typed config (their ``--set`` options stay strings).
    runs_model_code: the run executes model-written code in :mod:`iclr26.core.sandbox`; the runner then
        refuses, before anything runs, to use python-only isolation unless ``--set
        sandbox.allow_python_only=true`` (see :func:`model_code_mode`).
    """

    slug: str
    title: str
    arxiv: str
    claims: tuple[Claim, ...]
    run: Callable[[RunContext], RunOutput]
    scales: tuple[str, ...] = DEFAULT_EXPERIMENT_SCALES
    default_seeds: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: dict(DEFAULT_SEEDS))
    config: Callable[[str], Any] | None = None
    runs_model_code: bool = False

    def __post_init__(self) -> None:
        names = [c.name for c in self.claims]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.slug}: duplicate claim names {names}")
        bad = [s for s in self.scales if s not in SCALES]
        if bad:
            raise ValueError(f"{self.slug}: unknown scales {bad}; valid: {', '.join(SCALES)}")

    def seeds_for(self, scale: str) -> tuple[int, ...]:
        return tuple(self.default_seeds.get(scale, DEFAULT_SEEDS[scale]))


def evaluate_claims(claims: Sequence[Claim], measured: Mapping[str, Any]) -> list[ClaimResult]:
    """Apply each claim's fixed rule to its measured value.

    A claim with no measured value, a non-finite measured number, or a check that raises is
    reported as failed with the reason in ``error``: never silently passed.
    """
    results = []
    for claim in claims:
        if claim.name not in measured:
            results.append(
                ClaimResult(
                    claim.name, claim.statement, claim.paper_value, None, claim.rule, False, "not measured by this run"
                )
            )
            continue
        value = measured[claim.name]
        try:
            if _has_nan(value):
                raise ValueError("measured value contains NaN")
            passed = bool(claim.check(value))
            err = None
        except Exception as exc:  # a broken check is a failed claim, reported
            passed, err = False, f"{type(exc).__name__}: {exc}"
        results.append(ClaimResult(claim.name, claim.statement, claim.paper_value, value, claim.rule, passed, err))
    return results


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, Mapping):
        return any(_has_nan(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nan(v) for v in value)
    if isinstance(value, np.ndarray | np.floating):
        return bool(np.isnan(np.asarray(value, dtype=float)).any())
    return False


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample std (0 for one value), min and max of per-seed numbers."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        raise ValueError("mean_std of no values")
    return {
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "n": int(arr.size),
    }


# --------------------------------------------------------------------------------------------------
# Registry: every sub-package of iclr26 with an ``experiment`` module defining EXPERIMENT.
# --------------------------------------------------------------------------------------------------

_EXTRA: dict[str, Experiment] = {}
_NOT_PAPERS = {"core", "cli"}


def register(experiment: Experiment) -> Experiment:
    """Register an experiment that does not live in an ``iclr26.<slug>`` package (tests, plugins)."""
    _EXTRA[experiment.slug] = experiment
    return experiment


def _load_extra_modules() -> None:
    # ICLR26_EXTRA_EXPERIMENTS="pkg.mod1,pkg.mod2": modules that call register() on import.
    for mod in filter(None, os.environ.get("ICLR26_EXTRA_EXPERIMENTS", "").split(",")):
        importlib.import_module(mod.strip())


LOAD_ERRORS: dict[str, str] = {}
"""Papers whose experiment module failed to import in the last :func:`discover` (slug -> error)."""


def discover(strict: bool = False) -> dict[str, Experiment]:
    """All registered experiments, by slug, sorted.

    A paper whose experiment module fails to import is left out and its error recorded in
    :data:`LOAD_ERRORS` (one broken paper must not take the CLI down for the others); with
    ``strict=True`` the error is raised instead.
    """
    import iclr26

    found: dict[str, Experiment] = {}
    LOAD_ERRORS.clear()
    for info in sorted(pkgutil.iter_modules(iclr26.__path__), key=lambda m: m.name):
        if not info.ispkg or info.name in _NOT_PAPERS or info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"iclr26.{info.name}.experiment")
            exp = getattr(module, "EXPERIMENT", None)
            if not isinstance(exp, Experiment):
                raise TypeError(f"iclr26.{info.name}.experiment must define EXPERIMENT = Experiment(...)")
        except ModuleNotFoundError as exc:
            if exc.name == f"iclr26.{info.name}.experiment":
                continue  # a package without a reproduction yet
            if strict:
                raise
            LOAD_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        except Exception as exc:
            if strict:
                raise
            LOAD_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        found[exp.slug] = exp
    _load_extra_modules()
    found.update(_EXTRA)
    return dict(sorted(found.items()))


# --------------------------------------------------------------------------------------------------
# Running one experiment end to end.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """Where a finished run wrote its files, and its evaluated claims."""

    out_dir: Path
    results: dict[str, Any]
    claims: list[ClaimResult]


def new_run_dir(out_root: Path, slug: str) -> Path:
    """``out_root/slug/<UTC timestamp>``, with a numeric suffix if that folder exists already."""
    import datetime as _dt

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    base = Path(out_root) / slug
    path = base / stamp
    k = 1
    while path.exists():
        path = base / f"{stamp}-{k}"
        k += 1
    path.mkdir(parents=True)
    return path


ALLOW_PYTHON_ONLY = "sandbox.allow_python_only"
RESERVED_OPTIONS = ("device", ALLOW_PYTHON_ONLY)
"""``--set`` keys handled by the runner itself for every paper (not config fields)."""


def model_code_mode(exp: Experiment, cfg: Any, options: Mapping[str, str] | None = None) -> str | None:
    """The sandbox isolation the run's model-written code will use (None: the experiment runs none).

    Reads ``--set sandbox.allow_python_only`` (a boolean; a bad value is a ConfigError) and the config leaf
    named ``isolation`` when the paper has one. Raises :class:`iclr26.core.sandbox.IsolationRefused` when
    that would be python-only (named, or the kernel layer unavailable here) and the user did not allow it.
    """
    from iclr26.core.config import ConfigError, flatten, parse_value

    text = (options or {}).get(ALLOW_PYTHON_ONLY)
    try:
        allowed = None if text is None else parse_value(text, bool)
    except ValueError as exc:
        raise ConfigError(f"--set {ALLOW_PYTHON_ONLY}={text}: {exc}") from None
    if not exp.runs_model_code:
        return None
    from iclr26.core.sandbox import model_code_isolation

    leaves = flatten(cfg) if cfg is not None else ()
    iso = next((v for k, _, v in leaves if k.rsplit(".", 1)[-1] == "isolation" and isinstance(v, str) and v), None)
    return model_code_isolation(iso, allowed or None)


def resolve_config(exp: Experiment, scale: str, options: Mapping[str, str] | None = None) -> Any:
    """``exp.config(scale)`` with the ``--set`` options applied (type-checked); None without a config.

    Raises :class:`iclr26.core.config.ConfigError` for an unknown key or a value of the wrong type.
    """
    from iclr26.core.config import override

    if exp.config is None:
        return None
    sets = {k: v for k, v in (options or {}).items() if k not in RESERVED_OPTIONS}
    return override(exp.config(scale), sets)


SECRET_NAME = re.compile(r"(^|[._-])(api_?key|key|token|secret|password|passwd)$", re.IGNORECASE)
"""Leaf names whose values config.json never records (``api_key``, ``hf_token``, ``paper.password``...;
``tokens`` or ``max_tokens`` are not secrets)."""
REDACTED = "<redacted>"


def redact(value: Any, name: str = "") -> Any:
    """``value`` with every secret-named leaf (:data:`SECRET_NAME`) replaced by ``<redacted>``; lists of argv
    strings have ``--set NAME=value`` / ``NAME=value`` items redacted the same way."""
    if name and SECRET_NAME.search(name.rsplit(".", 1)[-1]) and not isinstance(value, Mapping):
        return REDACTED if value not in (None, "") else value
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, name) for v in value]
    if isinstance(value, str) and "=" in value:
        key, _, rest = value.partition("=")
        if SECRET_NAME.search(key.lstrip("-").rsplit(".", 1)[-1]) and rest:
            return f"{key}={REDACTED}"
    return value


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """What produced a run: argv, git commit (when in a checkout), python/torch/numpy/package versions."""
    import platform
    import subprocess
    import sys

    import iclr26

    info: dict[str, Any] = {
        "argv": list(sys.argv if argv is None else argv),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "iclr26": iclr26.__version__,
        "platform": platform.platform(),
    }
    torch = sys.modules.get("torch")
    info["torch"] = getattr(torch, "__version__", None) if torch else _dist_version("torch")
    try:
        root = Path(__file__).resolve().parents[3]
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            info["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def run_experiment(
    exp: Experiment,
    scale: str,
    seeds: Sequence[int] | None = None,
    out_root: str | Path = "runs",
    options: Mapping[str, str] | None = None,
    show_progress: bool = True,
    argv: Sequence[str] | None = None,
) -> RunRecord:
    """Run ``exp`` at ``scale``, evaluate its claims, write config/results/report/figures.

    ``options`` are the ``--set`` pairs: applied to the experiment's typed config (a
    :class:`~iclr26.core.config.ConfigError` for an unknown key or bad value, before anything runs).
    """
    import datetime as _dt
    import json
    import time

    from iclr26.core import report
    from iclr26.core.config import config_to_dict

    if scale not in exp.scales:
        raise ExperimentError(f"{exp.slug} has no scale '{scale}'; valid: {', '.join(exp.scales)}")
    seeds = tuple(int(s) for s in (seeds if seeds is not None else exp.seeds_for(scale)))
    options = {str(k): str(v) for k, v in (options or {}).items()}
    cfg = resolve_config(exp, scale, options)
    sandbox_mode = model_code_mode(exp, cfg, options)  # refuses python-only unless allowed, before anything runs
    out_dir = new_run_dir(Path(out_root), exp.slug)
    ctx = RunContext(
        scale=scale,
        seeds=seeds,
        out_dir=out_dir,
        options=options,
        device=options.get("device", "cpu"),
        show_progress=show_progress,
        cfg=cfg,
    )
    config = {
        "slug": exp.slug,
        "title": exp.title,
        "arxiv": exp.arxiv,
        "scale": scale,
        "seeds": list(seeds),
        "options": options,
        "config": config_to_dict(cfg) if cfg is not None else None,
        "provenance": provenance(argv),
    }
    # secrets passed with --set (an API key, a token) never reach the run folder
    (out_dir / "config.json").write_text(json.dumps(redact(config), indent=2))
    start = time.perf_counter()
    with progress_env(show_progress), _python_only_allowed(options.get(ALLOW_PYTHON_ONLY)):
        output = exp.run(ctx)
    wall = time.perf_counter() - start
    if not isinstance(output, RunOutput):
        raise ExperimentError(f"{exp.slug}: run() returned {type(output).__name__}, expected RunOutput")
    warnings = []
    if sandbox_mode == "python-only":
        from iclr26.core.sandbox import PYTHON_ONLY_WARNING

        warnings.append(PYTHON_ONLY_WARNING)
        output.notes = [f"WARNING: {PYTHON_ONLY_WARNING}", *output.notes]
    claims = evaluate_claims(exp.claims, output.measured)
    results = {
        "slug": exp.slug,
        "scale": scale,
        "seeds": list(seeds),
        "wall_seconds": round(wall, 3),
        "claims": [c.to_json() for c in claims],
        "metrics": to_jsonable(output.metrics),
        "title": exp.title,
        "arxiv": exp.arxiv,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "figures": [p.name for p in ctx.figures if p.exists()],
    }
    if warnings:
        results["warnings"] = warnings
    curves = report.plot_logged_curves(out_dir)
    results["figures"] += [p.name for p in curves if p.name not in results["figures"]]
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    report.write_run_report(out_dir, results, output)
    return RunRecord(out_dir=out_dir, results=results, claims=claims)


@contextlib.contextmanager
def _python_only_allowed(text: str | None) -> Iterator[None]:
    """While the run lasts, ``--set sandbox.allow_python_only=true`` reaches every sandbox caller (worker
    processes included) as the environment variable :data:`iclr26.core.sandbox.ALLOW_PYTHON_ONLY_ENV`."""
    from iclr26.core.config import parse_value
    from iclr26.core.sandbox import ALLOW_PYTHON_ONLY_ENV

    if text is None or not parse_value(text, bool):
        yield
        return
    previous = os.environ.get(ALLOW_PYTHON_ONLY_ENV)
    os.environ[ALLOW_PYTHON_ONLY_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ALLOW_PYTHON_ONLY_ENV, None)
        else:
            os.environ[ALLOW_PYTHON_ONLY_ENV] = previous


def load_experiment(slug: str) -> Experiment:
    """The experiment of one paper, importing only that paper (``iclr26.<slug>.experiment.EXPERIMENT``).

    This is the registry's lookup by name, for entry points that live inside a paper's package (a
    ``paper.py`` run under torchrun) and must not import their own ``experiment`` module back.
    """
    if slug in _EXTRA:
        return _EXTRA[slug]
    try:
        module = importlib.import_module(f"iclr26.{slug}.experiment")
    except ModuleNotFoundError as exc:
        if exc.name in (f"iclr26.{slug}", f"iclr26.{slug}.experiment"):
            raise ExperimentError(f"no experiment named {slug!r}") from None
        raise
    exp = getattr(module, "EXPERIMENT", None)
    if not isinstance(exp, Experiment):
        raise ExperimentError(f"iclr26.{slug}.experiment must define EXPERIMENT = Experiment(...)")
    return exp


def distributed_main(slug: str, argv: Sequence[str] | None = None, scale: str = "paper") -> int:
    """``python -m iclr26.<slug>.paper --set key=value ... [--seeds 0,1] [--out runs]``, also under torchrun.

    Every rank resolves the config first, so a bad ``--set`` key fails on every rank before any training.
    Rank 0 runs through :func:`run_experiment` and writes the run folder; the other ranks run the same
    experiment in a throw-away folder (their share of the work, no files kept). The process group is set
    up by :func:`iclr26.core.train.setup_distributed` and torn down at the end.
    """
    import argparse
    import tempfile

    import torch.distributed as dist

    from iclr26.core.train import setup_distributed

    exp = load_experiment(slug)
    p = argparse.ArgumentParser(prog=f"python -m iclr26.{slug}.paper", description=f"{slug} at {scale} scale")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seeds", default="0")
    p.add_argument("--out", default="runs")
    args = p.parse_args(argv)
    bad = [kv for kv in args.sets if "=" not in kv]
    if bad:
        p.error(f"--set expects KEY=VALUE, got {bad[0]!r}")
    options = dict(kv.split("=", 1) for kv in args.sets)
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        p.error(f"--seeds expects comma-separated integers, got {args.seeds!r}")
    cfg = resolve_config(exp, scale, options)
    device = options.get("device", "cpu")
    rank, _ = setup_distributed(device)
    finished = False
    try:
        if rank == 0:
            rec = run_experiment(exp, scale, seeds, out_root=args.out, options=options, show_progress=True)
            print(rec.out_dir)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                exp.run(RunContext(scale, seeds, Path(tmp), options, device, False, cfg=cfg))
        finished = True
    finally:
        if dist.is_initialized():
            if finished:  # all ranks leave together (a rank exiting early once aborted gloo at shutdown)
                dist.barrier()
            dist.destroy_process_group()
    return 0
