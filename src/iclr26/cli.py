"""The ``iclr26`` command line: ``list``, ``run SLUG``, ``report``, ``models``.

Exit codes: 0 when a run completed (whatever its claims' verdicts), 2 for bad arguments (with a
one-line message naming the valid choices; also a ``--set`` value out of its field's range, or a paper
that runs model-written code where only python-only sandbox isolation is possible and
``--set sandbox.allow_python_only=true`` was not given), 1 for a run that failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from iclr26.core.experiment import SCALE_HELP, SCALES, ExperimentError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        self.exit(2, f"iclr26: error: {message}\n")


MAX_SEED = 2**32 - 1
"""Largest accepted seed: numpy's legacy seeding (used by scikit-learn and several papers) takes 32 bits."""


def _parse_seeds(text: str) -> tuple[int, ...]:
    short = text if len(text) <= 60 else text[:57] + "..."
    if len(text) > 10_000:
        raise ValueError(f"malformed --seeds '{short}': too long")
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ValueError(f"malformed --seeds '{short}': expected comma-separated integers, e.g. 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise ValueError(f"malformed --seeds '{short}': seeds must be non-negative integers")
    if any(s > MAX_SEED for s in seeds):
        raise ValueError(f"malformed --seeds '{short}': seeds must be at most 2**32-1 = {MAX_SEED}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"malformed --seeds '{short}': repeated seed")
    return seeds


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"malformed --set '{item}': expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _check_writable(out: Path, slug: str) -> None:
    """Refuse, before anything runs, an --out whose run folder cannot be created."""
    try:
        probe = out.resolve()
        for path in (out / slug, out):
            if path.exists() and not path.is_dir():
                raise ValueError(f"output path '{path}' exists and is not a directory")
        while not probe.exists():
            probe = probe.parent
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"output directory '{out}' is not usable: {exc}") from None
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"output directory '{out}' is not writable")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="iclr26",
        description="ICLR 2026 papers as tested, reproducible code. "
        "`iclr26 list` shows the papers; `iclr26 run SLUG --scale small` reproduces one.",
    )
    sub = p.add_subparsers(dest="command", metavar="{list,run,report,models}", parser_class=_Parser)
    sub.required = True
    sub.add_parser(
        "list",
        help="one line per registered paper: slug, title, claims",
        description="List every registered paper: slug, title, arXiv id and claim names.",
    )
    r = sub.add_parser(
        "run",
        help="run one paper's reproduction",
        description="Run a paper's reproduction, print the claims table and write "
        "DIR/SLUG/<timestamp>/{config.json,results.json,report.md,*.png}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scales:\n" + "\n".join(f"  {k:6s} {v}" for k, v in SCALE_HELP.items()),
    )
    r.add_argument("slug", help="paper slug (see `iclr26 list`)")
    r.add_argument("--scale", default="small", help=f"one of {', '.join(SCALES)} (default: small)")
    r.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 0,1,2 (default: per scale)")
    r.add_argument("--out", default="runs", help="output root directory (default: runs/)")
    r.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="experiment option, e.g. --set model_path=/models/llada (repeatable)",
    )
    r.add_argument("--no-progress", action="store_true", help="do not draw progress bars")
    r.add_argument(
        "--show-config",
        action="store_true",
        help="print the resolved config of this scale (with --set applied) and exit",
    )
    r.add_argument("--debug", action="store_true", help="show the full traceback when the run fails")
    rep = sub.add_parser(
        "report",
        help="overview of the latest run of every paper",
        description="Overview of the latest run of every paper under DIR: paper, "
        "scale, seeds, claims passed/total, wall time, date. Writes DIR/overview.md.",
    )
    rep.add_argument("--runs", default="runs", help="runs directory (default: runs/)")
    rep.add_argument(
        "--html",
        default=None,
        metavar="DIR",
        help="also write a static results site to DIR: an index over papers and scales, one page per run",
    )
    m = sub.add_parser(
        "models",
        help="real pretrained checkpoints that install offline: installed? built?",
        description="List the real checkpoints iclr26 can provide offline (iclr26.core.checkpoints): whether "
        "each package is installed and whether its Hugging Face folder is built, with its path; --build NAME "
        "builds one now.",
    )
    m.add_argument("--build", default=None, metavar="NAME", help="build (convert) this checkpoint's folder now")
    return p


def _cmd_models(args: argparse.Namespace) -> int:
    from iclr26.core.checkpoints import CHECKPOINTS, CheckpointError, cache_root, checkpoint_status, local_checkpoint

    if args.build is not None:
        if args.build not in CHECKPOINTS:
            print(f"iclr26: error: unknown checkpoint '{args.build}'; valid: {', '.join(CHECKPOINTS)}", file=sys.stderr)
            return 2
        try:
            print(local_checkpoint(args.build))
        except (CheckpointError, ImportError, OSError) as exc:
            print(f"iclr26: error: {exc}", file=sys.stderr)
            return 1
    print(f"cache: {cache_root() / 'checkpoints'}")
    for row in checkpoint_status():
        state = "ready" if row["cached"] else ("installed, not built" if row["installed"] else "not installed")
        print(f"{row['name']:24s} {row['kind']:17s} {state:21s} {row['description']}")
        if row["cached"]:
            print(f"{'':24s} path: {row['path']}")
        elif not row["installed"]:
            print(f"{'':24s} install: {row['install']}")
        else:
            print(f"{'':24s} build: iclr26 models --build {row['name']} (or any use of the name)")
    return 0


def _cmd_list() -> int:
    """One line per paper, read without importing the papers (fast), with its latest verdicts."""
    from iclr26.core.registry import static_index
    from iclr26.core.report import latest_verdicts

    entries, warnings = static_index()
    if not entries:
        print("no papers registered yet")
    verdicts = latest_verdicts(Path("runs"))
    for e in entries:
        claims = ", ".join(e.claims)
        latest = verdicts.get(e.slug)
        tail = f"  latest: {latest}" if latest else ""
        print(f"{e.slug:14s} {e.title}  [arXiv {e.arxiv}]  claims: {claims}{tail}")
    for w in warnings:
        print(f"iclr26: warning: {w}", file=sys.stderr)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from iclr26.core.config import ConfigError, format_config
    from iclr26.core.experiment import LOAD_ERRORS, discover, model_code_mode, resolve_config, run_experiment
    from iclr26.core.report import print_claims
    from iclr26.core.sandbox import PYTHON_ONLY_WARNING, IsolationRefused

    exps = discover()
    if args.slug in LOAD_ERRORS:
        print(f"iclr26: error: paper '{args.slug}' failed to load: {LOAD_ERRORS[args.slug]}", file=sys.stderr)
        return 1
    if args.slug not in exps:
        valid = ", ".join(exps) or "(none registered)"
        print(f"iclr26: error: unknown paper '{args.slug}'; valid: {valid}", file=sys.stderr)
        return 2
    exp = exps[args.slug]
    if args.scale not in exp.scales:
        print(
            f"iclr26: error: invalid scale '{args.scale}' for {args.slug}; valid: {', '.join(exp.scales)}",
            file=sys.stderr,
        )
        return 2
    try:
        seeds = _parse_seeds(args.seeds) if args.seeds is not None else None
        options = _parse_sets(args.sets)
        cfg = resolve_config(exp, args.scale, options)
        if args.show_config:
            if cfg is None:
                print(f"{args.slug} has no typed config yet; options given: {options}")
            else:
                print(f"# {args.slug} · scale {args.scale}\n" + format_config(cfg))
            return 0
        out = Path(args.out)
        _check_writable(out, args.slug)
        if model_code_mode(exp, cfg, options) == "python-only":
            print(f"iclr26: warning: {PYTHON_ONLY_WARNING}", file=sys.stderr)
    except (ValueError, ConfigError, IsolationRefused) as exc:
        print(f"iclr26: error: {exc}", file=sys.stderr)
        return 2
    try:
        record = run_experiment(
            exp,
            args.scale,
            seeds,
            out,
            options,
            show_progress=not args.no_progress and sys.stderr.isatty(),
            argv=["iclr26", *sys.argv[1:]],
        )
    except (ExperimentError, ConfigError) as exc:
        print(f"iclr26: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("iclr26: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a failed run: one line (the traceback with --debug)
        if args.debug:
            raise
        msg = str(exc).splitlines()[0][:300] if str(exc) else ""
        print(
            f"iclr26: error: run failed: {type(exc).__name__}: {msg} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1
    print_claims(record.results, record.out_dir)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from iclr26.core.report import latest_runs, overview_markdown

    runs_dir = Path(args.runs)
    if not runs_dir.is_dir():
        print(
            f"iclr26: error: runs directory '{runs_dir}' does not exist; run `iclr26 run SLUG` first", file=sys.stderr
        )
        return 2
    skipped: list[str] = []
    runs = latest_runs(runs_dir, skipped=skipped)
    for warning in skipped:
        print(f"iclr26: warning: skipped {warning}", file=sys.stderr)
    text = overview_markdown(runs)
    print(text)
    try:
        (runs_dir / "overview.md").write_text("# iclr26: latest run of every paper\n\n" + text + "\n")
    except OSError as exc:
        print(f"iclr26: warning: could not write {runs_dir / 'overview.md'}: {exc}", file=sys.stderr)
    if args.html:
        from iclr26.core.html import write_site

        try:
            index = write_site(runs_dir, Path(args.html))
        except OSError as exc:
            print(f"iclr26: error: cannot write the HTML site to '{args.html}': {exc}", file=sys.stderr)
            return 2
        print(f"HTML: {index}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        return _cmd_list()
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "models":
        return _cmd_models(args)
    return _cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
