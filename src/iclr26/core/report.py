"""Reports: the per-run ``report.md``, the claims table printed at the end of a run, shared plot
helpers, and the ``iclr26 report`` overview of the latest run of every paper."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display needed; figures are PNG files

from iclr26.core.experiment import RunOutput, to_jsonable  # noqa: E402


def fmt(value: Any, digits: int = 3) -> str:
    """Compact text for a measured value (numbers rounded, dicts as k=v)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3) \
            else f"{value:.{digits}f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={fmt(v, digits)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v, digits) for v in value) + "]"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells are formatted with :func:`fmt`."""
    def cell(v: Any) -> str:
        return (v if isinstance(v, str) else fmt(v)).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def claims_markdown(claims: Sequence[Mapping[str, Any]]) -> str:
    rows = [[c["name"], c["statement"], fmt(c["paper_value"]), fmt(c["measured"]), c["rule"],
             "PASS" if c["passed"] else "FAIL" + (f" ({c['error']})" if c.get("error") else "")]
            for c in claims]
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
        f"## Claims: {n_pass}/{len(results['claims'])} passed",
        "",
        claims_markdown(results["claims"]),
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


def print_claims(results: Mapping[str, Any], out_dir: Path | None = None) -> None:
    """The claims table at the end of a run (rich, plain text when not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{results['slug']} · scale {results['scale']} · seeds {results['seeds']}")
    for col in ("claim", "statement", "paper", "measured", "rule", "verdict"):
        table.add_column(col, overflow="fold")
    for c in results["claims"]:
        verdict = "[green]PASS[/green]" if c["passed"] else "[red]FAIL[/red]"
        table.add_row(c["name"], c["statement"], fmt(c["paper_value"]), fmt(c["measured"]), c["rule"],
                      verdict)
    console = Console(width=160)
    console.print(table)
    n_pass = sum(c["passed"] for c in results["claims"])
    console.print(f"{n_pass}/{len(results['claims'])} claims passed in {results['wall_seconds']:.1f} s"
                  + (f" · {out_dir}" if out_dir else ""))


def latest_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """The newest ``results.json`` of every paper folder under ``runs_dir`` (by its date field)."""
    out = []
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return out
    for paper in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        best = None
        for res in paper.glob("*/results.json"):
            try:
                data = json.loads(res.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            key = (data.get("date", ""), res.parent.name)
            if best is None or key > best[0]:
                best = (key, data, res.parent)
        if best is not None:
            best[1]["_dir"] = str(best[2])
            out.append(best[1])
    return out


def overview_markdown(runs: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for r in runs:
        claims = r.get("claims", [])
        rows.append([r.get("slug", "?"), r.get("title", ""), r.get("scale", "?"),
                     ",".join(str(s) for s in r.get("seeds", [])),
                     f"{sum(bool(c.get('passed')) for c in claims)}/{len(claims)}",
                     f"{float(r.get('wall_seconds', 0)):.1f}", r.get("date", "")])
    return markdown_table(["paper", "title", "scale", "seeds", "claims passed", "wall s", "date"], rows)


# --------------------------------------------------------------------------------------------------
# Plot helpers shared by papers.
# --------------------------------------------------------------------------------------------------


def save_fig(fig, path: Path) -> Path:
    """Save a matplotlib figure as PNG and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_curves(path: Path, curves: Mapping[str, Any], xlabel: str, ylabel: str, title: str = "") -> Path:
    """Line plot of named curves. Each value is ``(x, y)`` or ``(x, y_mean, y_std)`` (shaded band)."""
    import matplotlib.pyplot as plt
    import numpy as np

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
    import matplotlib.pyplot as plt
    import numpy as np

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
