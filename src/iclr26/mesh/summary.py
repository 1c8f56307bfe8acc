"""What the small and paper scales share after training: the arm table, the competence gate, and the
metrics, claim measurements, table and figures of :func:`summarize` (kept out of ``experiment.py`` so that
``train.py``, the paper-scale path, needs no import of the experiment that dispatches to it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from iclr26.core.experiment import RunContext, RunOutput, mean_std
from iclr26.core.report import markdown_table, plot_curves, save_fig

ARM_SCHEMES = {
    "vanilla": "base",
    "base": "base",
    "residual": "residual",
    "anchor": "anchor",
    "anchor_emb": "anchor_emb",
    "mesh": "mesh",
}


def _plots(ctx: RunContext, per_arm: dict[str, list[dict[str, Any]]], title: str) -> None:
    import matplotlib.pyplot as plt

    curves = {}
    for arm, runs in per_arm.items():
        steps = [st for st, _ in runs[0]["val_curve"]]
        vals = np.array([[v for _, v in r["val_curve"]] for r in runs])
        curves[arm] = (steps, vals.mean(0), vals.std(0, ddof=1) if len(runs) > 1 else np.zeros(len(steps)))
    plot_curves(
        ctx.figure_path("val_loss_curves"),
        curves,
        "step",
        "validation loss (nats/token)",
        f"{title} (mean ± std over seeds)",
    )

    rec = [a for a in per_arm if a != "vanilla"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for arm in rec:
        d = [r["diagnostics"] for r in per_arm[arm]]
        ups = np.mean([x["update_loops"] for x in d], axis=0)
        cka = np.mean([x["cka_consecutive"] for x in d], axis=0)
        er = np.mean([x["effective_rank"] for x in d], axis=0)
        axes[0].plot(range(1, len(ups) + 1), ups, marker="o", label=arm)
        axes[1].plot([f"h{t}→h{t + 1}" for t in range(len(cka))], cka, marker="o", label=arm)
        axes[2].plot(d[0]["state_names"], er, marker="o", label=arm)
    axes[0].set(
        xlabel="loop t",
        ylabel="relative update of f_core",
        title="per-loop update magnitude",
        xticks=range(1, len(ups) + 1),
    )
    axes[1].set(ylabel="RBF CKA", title="CKA of consecutive loop states")
    axes[2].set(ylabel="effective rank", title="effective rank of states")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    save_fig(fig, ctx.figure_path("diagnostics_per_loop"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in rec:
        sv = np.mean([r["diagnostics"]["singular_values"] for r in per_arm[arm]], axis=0)  # states x k
        ax.semilogy(sv[-2], label=f"{arm} h^(K)")
    ax.set(xlabel="index i", ylabel="σ_i / σ_0", title="spectrum of the last loop state")
    ax.grid(alpha=0.3)
    ax.legend()
    save_fig(fig, ctx.figure_path("singular_values"))


def summarize(
    ctx: RunContext,
    per_arm: dict[str, list[dict[str, Any]]],
    arms: tuple[str, ...],
    settings: dict[str, Any],
    layouts: dict[str, str],
    title: str = "",
    gate_nats: float = 0.02,
) -> RunOutput:
    """Metrics, claim measurements, table and figures from the per-arm, per-seed run results.

    Each run result has ``val_loss``, ``val_curve`` [(step, loss)], and for recursive arms ``diagnostics``
    (:func:`loop_diagnostics`). Shared by the small and paper scales. ``gate_nats``: the competence gate's
    minimum vanilla-over-base margin.
    """
    loss = {a: [r["val_loss"] for r in per_arm[a]] for a in arms}
    mean = {a: float(np.mean(v)) for a, v in loss.items()}
    diag = {
        a: {
            k: float(np.mean([r["diagnostics"][k] for r in per_arm[a]]))
            for k in ("cka_consecutive_mean", "update_balance")
        }
        for a in arms
        if a != "vanilla"
    }
    # Share of the base-to-vanilla gap closed by mesh; undefined (NaN) when vanilla is not better than base.
    gap = mean["base"] - mean["vanilla"]
    gap_share = (mean["base"] - mean["mesh"]) / gap if gap > 1e-12 else float("nan")
    gate = competence_gate(mean["vanilla"], mean["base"], gate_nats)
    _plots(ctx, per_arm, title)
    params = {a: per_arm[a][0].get("params_non_embedding") for a in arms}
    metrics: dict[str, Any] = {
        "competence_gate": gate,
        "settings": settings,
        "val_loss_per_seed": loss,
        "val_loss": {a: mean_std(v) for a, v in loss.items()},
        "gap_share_closed_by_mesh": gap_share,
        "diagnostics_mean": diag,
        "per_run": per_arm,
        "params_non_embedding": params,
    }
    measured = {
        "C1": {
            "mesh_per_seed": loss["mesh"],
            "base_per_seed": loss["base"],
            "mesh": mean["mesh"],
            "base": mean["base"],
        },
        "C2": {"mesh": mean["mesh"], "anchor": mean["anchor"]},
        "C3": {
            "cka_mesh": diag["mesh"]["cka_consecutive_mean"],
            "cka_base": diag["base"]["cka_consecutive_mean"],
            "balance_mesh": diag["mesh"]["update_balance"],
            "balance_base": diag["base"]["update_balance"],
        },
    }
    rows = []
    for a in arms:
        ms = mean_std(loss[a])
        d = diag.get(a, {})
        rows.append(
            [
                a,
                layouts[a],
                params[a] if params[a] is not None else "-",
                f"{ms['mean']:.4f}",
                f"{ms['std']:.4f}",
                ", ".join(f"{v:.4f}" for v in loss[a]),
                f"{d['cka_consecutive_mean']:.3f}" if d else "-",
                f"{d['update_balance']:.2f}" if d else "-",
            ]
        )
    table = markdown_table(
        ["arm", "layout", "non-emb params", "val loss mean", "std", "per seed", "CKA(h_t,h_t+1)", "update max/min"],
        rows,
    )
    notes = [
        f"share of the base-to-vanilla gap closed by mesh, (base - mesh) / (base - vanilla): {gap_share:.3f}"
        + (" (undefined: vanilla is not better than base)" if gap <= 1e-12 else "")
    ]
    notes.append(
        f"competence gate {'PASSED' if gate['passed'] else 'FAILED'}: base - vanilla = {gate['gap']:.4f} nats "
        f"(needs >= {gate_nats})"
        + ("" if gate["passed"] else "; C1-C3 are untestable at this budget (no recursion gap for mesh to close)")
    )
    return RunOutput(metrics=metrics, measured=measured, tables={"Validation loss and diagnostics": table}, notes=notes)


def competence_gate(vanilla: float, base: float, min_gap: float) -> dict[str, Any]:
    """The gate: mean vanilla loss below mean base loss by at least ``min_gap`` nats (a recursion gap exists)."""
    gap = base - vanilla
    return {
        "rule": f"mean(base) - mean(vanilla) >= {min_gap} nats",
        "vanilla": vanilla,
        "base": base,
        "gap": gap,
        "min_gap": min_gap,
        "passed": bool(gap >= min_gap),
    }
