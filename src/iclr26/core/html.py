"""``iclr26 report --html DIR``: a static results site, one page per run and an index.

The index has one row per (paper, scale) with the latest run of that scale (a newer smoke run never
hides the small run's verdicts). A run page shows the claims (statement, paper value, every nested
measurement, rule, verdict), the per-seed metrics, the figures (copied next to the page), the
resolved config and the provenance recorded in ``config.json``. Everything is escaped; the pages
use no JavaScript and no external resources, so they open from disk anywhere.
"""

from __future__ import annotations

import html
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iclr26.core.report import fmt, latest_runs_per_scale, measured_rows, verdict_text

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1b1b1b;padding:0 1rem;line-height:1.45}
table{border-collapse:collapse;width:100%;margin:1rem 0}th,td{border:1px solid #ccc;padding:.35rem .5rem;
vertical-align:top;text-align:left;font-size:.92rem}th{background:#f3f3f3}
.pass{color:#0a7a2f;font-weight:600}.fail{color:#b3261e;font-weight:600}.na{color:#8a6d00}
pre{background:#f6f6f6;padding:.75rem;overflow:auto;font-size:.82rem;max-height:30rem}
img{max-width:100%;border:1px solid #ddd;margin:.5rem 0}code{background:#f3f3f3;padding:0 .2rem}
.meta{color:#555}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style>'
        f"</head><body>\n{body}\n</body></html>\n"
    )


def _verdict_cell(claim: Mapping[str, Any], scale: str) -> str:
    text = verdict_text(claim, scale)
    cls = "na" if scale == "smoke" else ("pass" if claim.get("passed") else "fail")
    return f'<td class="{cls}" data-verdict="{_e(text)}">{_e(text)}</td>'


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:120] or "x"


def run_page_name(run: Mapping[str, Any]) -> str:
    return f"{_safe_name(run['slug'])}-{_safe_name(run['scale'])}-{_safe_name(Path(run['_dir']).name)}.html"


def render_run(run: Mapping[str, Any], config: Mapping[str, Any] | None, figures: list[str]) -> str:
    """The HTML of one run's page."""
    scale = run["scale"]
    claims = run.get("claims", [])
    rows = []
    for c in claims:
        measured = "<br>".join(_e(f"{k}: {v}" if k else v) for k, v in measured_rows(c.get("measured")))
        rows.append(
            f'<tr class="claim" data-claim="{_e(c.get("name", ""))}"><td>{_e(c.get("name", ""))}</td>'
            f"<td>{_e(c.get('statement', ''))}</td><td>{_e(fmt(c.get('paper_value')))}</td>"
            f"<td>{measured}</td><td>{_e(c.get('rule', ''))}</td>{_verdict_cell(c, scale)}</tr>"
        )
    n_pass = sum(bool(c.get("passed")) for c in claims)
    summary = (
        f"{len(claims)} claims (smoke checks the pipeline, not the claims)"
        if scale == "smoke"
        else f"{n_pass}/{len(claims)} claims passed"
    )
    parts = [
        '<p><a href="index.html">&larr; all papers</a></p>',
        f"<h1>{_e(run['slug'])}: {_e(run.get('title', ''))}</h1>",
        f'<p class="meta">arXiv {_e(run.get("arxiv", ""))} &middot; scale <code>{_e(scale)}</code> &middot; '
        f"seeds {_e(run.get('seeds', []))} &middot; {float(run.get('wall_seconds', 0) or 0):.1f} s &middot; "
        f"{_e(run.get('date', ''))}</p>",
        f"<h2>Claims: {_e(summary)}</h2>",
        "<table><thead><tr><th>claim</th><th>statement</th><th>paper</th><th>measured</th><th>rule</th>"
        "<th>verdict</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>",
    ]
    if figures:
        parts.append(
            "<h2>Figures</h2>"
            + "".join(
                f'<figure><img src="{_e(f)}" alt="{_e(f)}"><figcaption>{_e(f)}</figcaption></figure>' for f in figures
            )
        )
    parts.append(
        "<h2>Metrics (every number, every seed)</h2><pre>"
        + _e(json.dumps(run.get("metrics", {}), indent=1)[:500_000])
        + "</pre>"
    )
    if config:
        parts.append(
            "<h2>Config</h2><pre>" + _e(json.dumps(config.get("config") or config.get("options"), indent=1)) + "</pre>"
        )
        parts.append("<h2>Provenance</h2><pre>" + _e(json.dumps(config.get("provenance", {}), indent=1)) + "</pre>")
    return _page(f"{run['slug']} · {scale}", "\n".join(parts))


def render_index(runs: list[Mapping[str, Any]]) -> str:
    """The index: one row per (paper, scale), the latest run of that scale."""
    rows = []
    for r in runs:
        claims = r.get("claims", [])
        if r["scale"] == "smoke":
            verdicts = "n/a (smoke)"
        else:
            verdicts = f"{sum(bool(c.get('passed')) for c in claims)}/{len(claims)}"
        rows.append(
            f'<tr><td><a href="{_e(run_page_name(r))}">{_e(r["slug"])}</a></td><td>{_e(r.get("title", ""))}'
            f"</td><td>{_e(r['scale'])}</td><td>{_e(','.join(str(s) for s in r.get('seeds', [])))}</td>"
            f"<td>{_e(verdicts)}</td><td>{_e(r.get('date', ''))}</td></tr>"
        )
    body = (
        "<h1>iclr26: latest run of every paper and scale</h1>"
        "<table><thead><tr><th>paper</th><th>title</th><th>scale</th><th>seeds</th><th>claims passed</th>"
        "<th>date</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    return _page("iclr26 results", body)


def write_site(runs_dir: Path, site_dir: Path, skipped: list[str] | None = None) -> Path:
    """Write ``index.html`` and one page per latest (paper, scale) run into ``site_dir``; returns the index."""
    site_dir = Path(site_dir)
    site_dir.mkdir(parents=True, exist_ok=True)
    runs = latest_runs_per_scale(Path(runs_dir), skipped=skipped)
    for run in runs:
        run_dir = Path(run["_dir"])
        config = None
        try:
            config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
            if not isinstance(config, dict):
                config = None
        except (OSError, ValueError):
            config = None
        figures = []
        prefix = run_page_name(run)[: -len(".html")]
        for name in run.get("figures", []) or []:
            src = run_dir / Path(str(name)).name
            if src.suffix.lower() == ".png" and src.is_file():
                dest = f"{prefix}-{_safe_name(src.name)}"
                shutil.copyfile(src, site_dir / dest)
                figures.append(dest)
        (site_dir / run_page_name(run)).write_text(render_run(run, config, figures), encoding="utf-8")
    index = site_dir / "index.html"
    index.write_text(render_index(runs), encoding="utf-8")
    return index
