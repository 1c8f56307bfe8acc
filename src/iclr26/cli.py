"""The ``iclr26`` command line: ``list``, ``run SLUG``, ``report``.

Exit codes: 0 when a run completed (whatever its claims' verdicts), 2 for bad arguments (with a
one-line message naming the valid choices), 1 for a run that failed.
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


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ValueError(f"malformed --seeds '{text}': expected comma-separated integers, e.g. 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise ValueError(f"malformed --seeds '{text}': seeds must be non-negative integers")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"malformed --seeds '{text}': repeated seed")
    return seeds


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"malformed --set '{item}': expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _check_writable(out: Path) -> None:
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"output directory '{out}' is not writable")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="iclr26", description="ICLR 2026 papers as tested, reproducible code. "
                "`iclr26 list` shows the papers; `iclr26 run SLUG --scale small` reproduces one.")
    sub = p.add_subparsers(dest="command", metavar="{list,run,report}", parser_class=_Parser)
    sub.required = True
    sub.add_parser("list", help="one line per registered paper: slug, title, claims",
                   description="List every registered paper: slug, title, arXiv id and claim names.")
    r = sub.add_parser("run", help="run one paper's reproduction",
                       description="Run a paper's reproduction, print the claims table and write "
                       "DIR/SLUG/<timestamp>/{config.json,results.json,report.md,*.png}.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="scales:\n" + "\n".join(f"  {k:6s} {v}" for k, v in SCALE_HELP.items()))
    r.add_argument("slug", help="paper slug (see `iclr26 list`)")
    r.add_argument("--scale", default="small", help=f"one of {', '.join(SCALES)} (default: small)")
    r.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 0,1,2 (default: per scale)")
    r.add_argument("--out", default="runs", help="output root directory (default: runs/)")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="experiment option, e.g. --set model_path=/models/llada (repeatable)")
    r.add_argument("--no-progress", action="store_true", help="do not draw progress bars")
    rep = sub.add_parser("report", help="overview of the latest run of every paper",
                         description="Overview of the latest run of every paper under DIR: paper, "
                         "scale, seeds, claims passed/total, wall time, date. Writes DIR/overview.md.")
    rep.add_argument("--runs", default="runs", help="runs directory (default: runs/)")
    return p


def _cmd_list() -> int:
    from iclr26.core.experiment import LOAD_ERRORS, discover

    exps = discover()
    if not exps:
        print("no papers registered yet")
    for slug, exp in exps.items():
        claims = ", ".join(c.name for c in exp.claims)
        print(f"{slug:14s} {exp.title}  [arXiv {exp.arxiv}]  claims: {claims}")
    for slug, err in LOAD_ERRORS.items():
        print(f"iclr26: warning: paper '{slug}' failed to load: {err}", file=sys.stderr)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from iclr26.core.experiment import LOAD_ERRORS, discover, run_experiment
    from iclr26.core.report import print_claims

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
        print(f"iclr26: error: invalid scale '{args.scale}' for {args.slug}; valid: {', '.join(exp.scales)}",
              file=sys.stderr)
        return 2
    try:
        seeds = _parse_seeds(args.seeds) if args.seeds is not None else None
        options = _parse_sets(args.sets)
        out = Path(args.out)
        _check_writable(out)
    except ValueError as exc:
        print(f"iclr26: error: {exc}", file=sys.stderr)
        return 2
    try:
        record = run_experiment(exp, args.scale, seeds, out, options,
                                show_progress=not args.no_progress and sys.stderr.isatty())
    except ExperimentError as exc:
        print(f"iclr26: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("iclr26: interrupted", file=sys.stderr)
        return 130
    print_claims(record.results, record.out_dir)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from iclr26.core.report import latest_runs, overview_markdown

    runs_dir = Path(args.runs)
    if not runs_dir.is_dir():
        print(f"iclr26: error: runs directory '{runs_dir}' does not exist; run `iclr26 run SLUG` first",
              file=sys.stderr)
        return 2
    runs = latest_runs(runs_dir)
    text = overview_markdown(runs)
    print(text)
    try:
        (runs_dir / "overview.md").write_text("# iclr26: latest run of every paper\n\n" + text + "\n")
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        return _cmd_list()
    if args.command == "run":
        return _cmd_run(args)
    return _cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
