"""Reports: the per-run ``report.md``, the claims table printed at the end of a run, shared plot
helpers, and the ``iclr26 report`` overview of the latest run of every paper."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iclr26.core.serialize import to_jsonable

if TYPE_CHECKING:
    from iclr26.core.experiment import RunOutput

METRICS_FILE = "metrics.jsonl"
"""Per-step scalars of a run, one JSON object per line (see ``RunContext.log``)."""


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend, chosen when the first figure is drawn."""
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _is_mean_std(value: Any) -> bool:
    return isinstance(value, Mapping) and {"mean", "std", "n"} <= set(value)


def fmt(value: Any, digits: int = 3) -> str:
    """Compact text for a measured value (numbers rounded, dicts as k=v).

    A :func:`~iclr26.core.experiment.mean_std` summary prints as ``mean ± std (n=N)``, or just the
    mean when it comes from one seed (no ``± 0.000``).
    """
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            f"{value:.{digits}g}" if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3) else f"{value:.{digits}f}"
        )
    if _is_mean_std(value):
        if int(value["n"]) <= 1:
            return fmt(value["mean"], digits)
        return f"{fmt(value['mean'], digits)} ± {fmt(value['std'], digits)} (n={int(value['n'])})"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={fmt(v, digits)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v, digits) for v in value) + "]"
    return str(value)


def verdict_text(claim: Mapping[str, Any], scale: str) -> str:
    """PASS / FAIL, or ``n/a`` at ``smoke`` (a pipeline check says nothing about the claim)."""
    if scale == "smoke":
        return "n/a (smoke)"
    text = "PASS" if claim.get("passed") else "FAIL"
    return text + (f" ({claim['error']})" if claim.get("error") else "")


def measured_rows(measured: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """A nested measurement as ``(sub-key, text)`` rows: one per leaf or per mean/std summary."""
    if isinstance(measured, Mapping) and not _is_mean_std(measured) and depth < 3 and measured:
        rows: list[tuple[str, str]] = []
        for k, v in measured.items():
            rows += measured_rows(v, f"{prefix}{k}.", depth + 1)
        return rows
    return [(prefix.rstrip("."), fmt(measured))]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells are formatted with :func:`fmt`."""

    def cell(v: Any) -> str:
        return (v if isinstance(v, str) else fmt(v)).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def claims_markdown(claims: Sequence[Mapping[str, Any]], scale: str = "small") -> str:
    rows = [
        [
            c["name"],
            c["statement"],
            fmt(c["paper_value"]),
            "<br>".join(f"{k}: {v}" if k else v for k, v in measured_rows(c["measured"])),
            c["rule"],
            verdict_text(c, scale),
        ]
        for c in claims
    ]
    return markdown_table(["claim", "statement", "paper", "measured", "rule", "verdict"], rows)


def write_run_report(out_dir: Path, results: Mapping[str, Any], output: RunOutput) -> Path:
    """Write ``report.md`` for one run: header, claims table, extra tables, notes, figures."""
    n_pass = sum(c["passed"] for c in results["claims"])
    lines = [
        f"# {results['slug']}: {results.get('title', '')}",
        "",
        f"arXiv {results.get('arxiv', '')} · scale `{results['scale']}` · seeds {results['seeds']} · "
        f"{results['wall_seconds']:.1f} s · {results.get('date', '')}",
        "",
        (
            f"## Claims ({len(results['claims'])}; smoke checks the pipeline, not the claims)"
            if results["scale"] == "smoke"
            else f"## Claims: {n_pass}/{len(results['claims'])} passed"
        ),
        "",
        claims_markdown(results["claims"], results["scale"]),
        "",
    ]
    for title, table in output.tables.items():
        lines += [f"## {title}", "", table, ""]
    if output.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in output.notes] + [""]
    figs = results.get("figures", [])
    if figs:
        lines += ["## Figures", ""] + [f"![{f}]({f})" for f in figs] + [""]
    path = Path(out_dir) / "report.md"
    path.write_text("\n".join(lines))
    return path


def print_claims(results: Mapping[str, Any], out_dir: Path | None = None, console: Any = None) -> None:
    """The claims table at the end of a run: fits the terminal, one sub-row per nested measurement.

    Every text cell is escaped, so keys such as ``step_reward[gold_prefix_0]`` print as written.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    scale = results["scale"]
    console = console or Console()
    table = Table(
        title=escape(f"{results['slug']} · scale {scale} · seeds {results['seeds']}"), expand=False, show_lines=True
    )
    for col, ratio in (("claim", 1), ("statement", 4), ("paper", 2), ("measured", 4), ("rule", 3), ("verdict", 1)):
        table.add_column(col, overflow="fold", ratio=ratio)
    for c in results["claims"]:
        verdict = verdict_text(c, scale)
        style = "yellow" if scale == "smoke" else ("green" if c.get("passed") else "red")
        rows = measured_rows(c["measured"])
        measured = "\n".join(escape(f"{k}: {v}" if k else v) for k, v in rows)
        table.add_row(
            escape(str(c["name"])),
            escape(str(c["statement"])),
            escape(fmt(c["paper_value"])),
            measured,
            escape(str(c["rule"])),
            f"[{style}]{escape(verdict)}[/{style}]",
        )
    console.print(table)
    n_pass = sum(bool(c.get("passed")) for c in results["claims"])
    summary = (
        f"{len(results['claims'])} claims (not judged at smoke)"
        if scale == "smoke"
        else f"{n_pass}/{len(results['claims'])} claims passed"
    )
    console.print(escape(f"{summary} in {results['wall_seconds']:.1f} s" + (f" · {out_dir}" if out_dir else "")))


def _valid_results(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if not isinstance(data.get("slug"), str) or not isinstance(data.get("scale"), str):
        return False
    claims = data.get("claims", [])
    return isinstance(claims, list) and all(isinstance(c, dict) and "name" in c for c in claims)


def all_runs(runs_dir: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Every readable ``results.json`` under ``runs_dir/<paper>/<run>/`` (with ``_dir`` set).

    A file that is not valid JSON or lacks the contract's fields is skipped; its path and reason
    are appended to ``skipped`` (the CLI prints them as one-line warnings).
    """
    out = []
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return out
    for paper in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        for res in sorted(paper.glob("*/results.json")):
            try:
                if res.stat().st_size > 50_000_000:
                    raise ValueError("larger than 50 MB")
                data = json.loads(res.read_text(encoding="utf-8"))
                if not _valid_results(data):
                    raise ValueError("not an iclr26 results file (missing slug/scale/claims)")
            except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
                if skipped is not None:
                    skipped.append(f"{res}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            data["_dir"] = str(res.parent)
            out.append(data)
    return out


def _newest(runs: Sequence[dict[str, Any]], key) -> list[dict[str, Any]]:
    best: dict[Any, dict[str, Any]] = {}
    for r in runs:
        k = key(r)
        stamp = (str(r.get("date", "")), Path(r["_dir"]).name)
        if k not in best or stamp > (str(best[k].get("date", "")), Path(best[k]["_dir"]).name):
            best[k] = r
    return [best[k] for k in sorted(best)]


def latest_runs(runs_dir: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The newest run of every paper under ``runs_dir`` (by its date field)."""
    return _newest(all_runs(runs_dir, skipped), key=lambda r: r["slug"])


def latest_runs_per_scale(runs_dir: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The newest run of every (paper, scale) pair: a smoke run never hides a small run's verdicts."""
    return _newest(all_runs(runs_dir, skipped), key=lambda r: (r["slug"], r["scale"]))


def latest_verdicts(runs_dir: Path) -> dict[str, str]:
    """slug -> ``"small 3/4 (2026-12-02)"`` from the newest judged run (small or paper), for ``iclr26 list``."""
    out: dict[str, str] = {}
    for r in latest_runs_per_scale(runs_dir):
        if r["scale"] == "smoke":
            continue
        claims = r.get("claims", [])
        n_pass = sum(bool(c.get("passed")) for c in claims)
        text = f"{r['scale']} {n_pass}/{len(claims)} ({str(r.get('date', ''))[:10]})"
        if r["slug"] not in out or r["scale"] == "small":
            out[r["slug"]] = text
    return out


def overview_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for r in runs:
        claims = r.get("claims", [])
        rows.append(
            [
                r.get("slug", "?"),
                r.get("title", ""),
                r.get("scale", "?"),
                ",".join(str(s) for s in r.get("seeds", [])),
                f"{sum(bool(c.get('passed')) for c in claims)}/{len(claims)}",
                f"{float(r.get('wall_seconds', 0)):.1f}",
                r.get("date", ""),
            ]
        )
    return markdown_table(["paper", "title", "scale", "seeds", "claims passed", "wall s", "date"], rows)


# --------------------------------------------------------------------------------------------------
# Plot helpers shared by papers.
# --------------------------------------------------------------------------------------------------


def save_fig(fig, path: Path) -> Path:
    """Save a matplotlib figure as PNG and close it."""
    plt = _pyplot()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_curves(path: Path, curves: Mapping[str, Any], xlabel: str, ylabel: str, title: str = "") -> Path:
    """Line plot of named curves. Each value is ``(x, y)`` or ``(x, y_mean, y_std)`` (shaded band)."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        x, y = np.asarray(curve[0], dtype=float), np.asarray(curve[1], dtype=float)
        ax.plot(x, y, label=name)
        if len(curve) > 2:
            s = np.asarray(curve[2], dtype=float)
            ax.fill_between(x, y - s, y + s, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return save_fig(fig, path)


def plot_bars(path: Path, values: Mapping[str, Any], ylabel: str, title: str = "") -> Path:
    """Bar chart of named values; each value is a number or a list of per-seed numbers (mean +- std)."""
    import numpy as np

    plt = _pyplot()
    names = list(values)
    arrs = [np.atleast_1d(np.asarray(to_jsonable(values[n]), dtype=float)) for n in names]
    means = [a.mean() for a in arrs]
    stds = [a.std(ddof=1) if a.size > 1 else 0.0 for a in arrs]
    fig, ax = plt.subplots(figsize=(max(4, 1.1 * len(names)), 4))
    ax.bar(range(len(names)), means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return save_fig(fig, path)


def read_logged(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl`` (malformed lines are skipped)."""
    path = Path(out_dir) / METRICS_FILE
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows


MAX_CURVE_FIGURES = 12


def plot_logged_curves(out_dir: Path, max_series: int = 12) -> list[Path]:
    """One PNG per logged scalar (``curve_<name>.png``), one line per series, from ``metrics.jsonl``.

    At most :data:`MAX_CURVE_FIGURES` scalars and ``max_series`` series per figure are drawn (the
    rest stay in the jsonl file).
    """
    rows = read_logged(out_dir)
    if not rows:
        return []
    curves: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for row in rows:
        for key, value in row.items():
            if key in ("series", "step") or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(float(value)):
                continue
            curves.setdefault(key, {}).setdefault(str(row.get("series", "")), []).append((row["step"], value))
    paths = []
    for key in list(curves)[:MAX_CURVE_FIGURES]:
        series = dict(list(curves[key].items())[:max_series])
        data = {name: ([p[0] for p in pts], [p[1] for p in pts]) for name, pts in series.items()}
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in key)
        paths.append(plot_curves(Path(out_dir) / f"curve_{safe}.png", data, "step", key, title=key))
    return paths
