"""Markdown tables and figures of an APT run."""

from __future__ import annotations

import numpy as np

from iclr26.apt.config import RunConfig
from iclr26.apt.names import PREDICATES, SYNONYM_GROUPS

__all__ = ["figures", "tables"]


def _ms(values) -> str:
    arr = np.asarray(values, dtype=float)
    return f"{arr.mean():.1f} ± {arr.std(ddof=1) if arr.size > 1 else 0.0:.1f}"


def tables(cfg: RunConfig, per_seed: list[dict], metrics: dict) -> dict[str, str]:
    """Closed-set metrics per model, group / head / tail recall, open vocabulary, diagnostics, efficiency."""
    cols = [f"{m}@{k}" for k in cfg.ks for m in ("R", "mR", "F")]
    rows = ["| model | " + " | ".join(cols) + " | added params |", "|---" * (len(cols) + 2) + "|"]
    for v in cfg.models:
        vals = [_ms([r["models"][v][c] for r in per_seed]) for c in cols]
        rows.append(f"| {v} | " + " | ".join(vals) + f" | {per_seed[0]['models'][v]['added_params']} |")
    out = {"PredCls on ShapesSG (mean ± std over seeds)": "\n".join(rows)}
    gcols = ["head_R@20", "tail_R@20"] + [f"group_{g}_R@20" for g in SYNONYM_GROUPS]
    rows = ["| model | " + " | ".join(gcols) + " |", "|---" * (len(gcols) + 1) + "|"]
    for v in cfg.models:
        rows.append(f"| {v} | " + " | ".join(_ms([r["models"][v][c] for r in per_seed]) for c in gcols) + " |")
    out["Head / tail / synonym-group recall@20"] = "\n".join(rows)
    ocols = [f"novel_mR@{k}" for k in cfg.ks] + ["R@20", "mR@20"]
    rows = ["| model | " + " | ".join(ocols) + " |", "|---" * (len(ocols) + 1) + "|"]
    for v in ("b0", "cgp"):
        rows.append(f"| {v} | " + " | ".join(_ms([r["ov"][v][c] for r in per_seed]) for c in ocols) + " |")
    out[f"Open vocabulary (novel: {', '.join(cfg.novel)})"] = "\n".join(rows)
    diag = [k for k in per_seed[0].get("diag", {}) if not k.startswith("_")]
    if diag:
        rows = ["| diagnostic | mean ± std |", "|---|---|"]
        rows += [f"| {k} | {_ms([r['diag'][k] for r in per_seed if k in r['diag']])} |" for k in diag]
        out["Subject embeddings: APT (D-prompt) vs frozen"] = "\n".join(rows)
    eff = metrics["efficiency"]
    rows = ["| quantity | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in eff.items()]
    out["Efficiency"] = "\n".join(rows)
    return out


def figures(ctx, cfg: RunConfig, per_seed: list[dict]) -> None:
    """'person' embeddings frozen vs adapted (PCA, coloured by predicate); per-predicate recall@20."""
    import matplotlib.pyplot as plt  # noqa: I001  (after core.report: its backend choice applies)

    from iclr26.core.report import save_fig

    person = per_seed[0].get("diag", {}).get("_person")
    if person is not None and len(person["label"]):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        both = np.concatenate([person["frozen"], person["adapted"]])
        mean = both.mean(0)
        _, _, vt = np.linalg.svd(person["adapted"] - person["adapted"].mean(0), full_matrices=False)
        for ax, key in zip(axes, ("frozen", "adapted"), strict=True):
            xy = (person[key] - mean) @ vt[:2].T
            for p in np.unique(person["label"]):
                m = person["label"] == p
                ax.scatter(xy[m, 0], xy[m, 1], s=8, color=plt.cm.tab20(int(p) % 20), label=PREDICATES[p - 1])
            ax.set_title(f"'person' subject embeddings: {key}")
        axes[1].legend(fontsize=6, ncol=2)
        save_fig(fig, ctx.figure_path("person_embeddings"))
    models = [m for m in ("b0", "apt", "unfrozen", "noprompt") if m in cfg.models]
    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        vals = [np.mean([r["models"][m]["per_predicate_R@20"].get(p, 0.0) for r in per_seed]) for p in PREDICATES]
        ax.bar(np.arange(len(PREDICATES)) + i * width, vals, width, label=m)
    ax.set_xticks(np.arange(len(PREDICATES)) + 0.4 - width / 2, PREDICATES, rotation=60, fontsize=7)
    ax.set_ylabel("R@20 per predicate (%)")
    ax.legend()
    save_fig(fig, ctx.figure_path("per_predicate_recall"))
