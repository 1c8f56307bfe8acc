"""Seed results -> claims' measured values, tables, figures (the run's report)."""

from __future__ import annotations

import numpy as np

from iclr26.core.experiment import RunContext, RunOutput, mean_std
from iclr26.core.report import markdown_table, plot_curves
from iclr26.vif.config import RunConfig

GATE_ACC, GATE_DROP = 0.80, 0.15


def _mean(results: list[dict], getter) -> float:
    return float(np.mean([getter(r) for r in results]))


def gate(results: list[dict]) -> dict:
    """Baseline single-agent accuracy (turn 1, full views, natural) >= 0.80 and snowballing: the seeded
    split's final-turn accuracy at least 15 points below it (seed means)."""
    single = _mean(results, lambda r: r["baseline"]["full_natural"]["first_acc"])
    seeded = _mean(results, lambda r: r["baseline"]["full_seeded"]["final_acc"])
    return {
        "single_agent_acc": single,
        "seeded_final_acc": seeded,
        "snowball_drop": single - seeded,
        "passed": bool(single >= GATE_ACC and single - seeded >= GATE_DROP),
    }


def measured_claims(results: list[dict]) -> dict:
    """The value each claim's check receives (see experiment.CLAIMS)."""
    g = gate(results)["passed"]
    fs, os_ = "full_seeded", "occluded_seeded"
    share = {k: [r[k][fs]["share_turn"] for r in results] for k in ("baseline", "vif")}
    c1 = {
        "max_row_err": max(r["max_row_err"] for r in results),
        "max_move_err": max(r["max_move_err"] for r in results),
        "alpha0_same_answers": min(r["alpha0_same_answers"] for r in results),
    }
    c2 = {
        "competence_gate": g,
        "base_share_ratio_per_seed": [s[-1] / s[0] for s in share["baseline"]],
        "base_share_T": float(np.mean([s[-1] for s in share["baseline"]])),
        "vif_share_T": float(np.mean([s[-1] for s in share["vif"]])),
    }
    c2["vif_over_base_share_T"] = c2["vif_share_T"] / c2["base_share_T"]
    hs_b = [r["baseline"][fs]["hs"] for r in results]
    hs_v = [r["vif"][fs]["hs"] for r in results]
    c3 = {
        "competence_gate": g,
        "hs_base": float(np.mean(hs_b)),
        "hs_vif": float(np.mean(hs_v)),
        "seeds_hs_lower": float(np.mean([v < b for v, b in zip(hs_v, hs_b, strict=True)])),
        "turn1_acc_base": _mean(results, lambda r: r["baseline"]["full_natural"]["first_acc"]),
        "turn1_acc_vif": _mean(results, lambda r: r["vif"]["full_natural"]["first_acc"]),
    }
    c4 = {
        "competence_gate": g,
        "final_acc_base": _mean(results, lambda r: r["baseline"][os_]["final_acc"]),
        "final_acc_vif": _mean(results, lambda r: r["vif"][os_]["final_acc"]),
        "hs_base": _mean(results, lambda r: r["baseline"][os_]["hs"]),
        "hs_vif": _mean(results, lambda r: r["vif"][os_]["hs"]),
    }
    return {"C1": c1, "C2": c2, "C3": c3, "C4": c4}


def _variant_rows(results: list[dict]) -> list[list]:
    rows = []
    names = ["baseline", "vif"] + sorted(results[0]["ablations"])
    for split in ("full_seeded", "full_natural", "occluded_seeded", "occluded_natural"):
        for name in names:
            src = [r[name] if name in ("baseline", "vif") else r["ablations"][name] for r in results]
            if split not in src[0]:
                continue
            vals = [s[split] for s in src]
            rows.append(
                [split, name] + [_fmt(mean_std([v[k] for v in vals])) for k in ("first_acc", "final_acc", "hs")]
            )
    return rows


def _fmt(ms: dict) -> str:
    return f"{ms['mean']:.3f} ± {ms['std']:.3f}"


def _drop_table(results: list[dict]) -> str:
    drops = [r["token_drop"] for r in results if "token_drop" in r]
    if not drops:
        return ""
    rows = []
    for band in ("shallow", "middle", "deep"):
        for name in ("random", "inactive", "rise", "fall", "unimodal"):
            cells = []
            for mode in ("all", "matched"):
                vals = [d[f"{band}/{name}/{mode}"] for d in drops if np.isfinite(d[f"{band}/{name}/{mode}"])]
                cells.append(f"{np.mean(vals):.3f}" if vals else "n/a")
            rows.append([band, name, *cells])
    head = f"no drop: {np.mean([d['no_drop'] for d in drops]):.3f}; class shares: " + ", ".join(
        f"{k} {np.mean([d['class_share'][k] for d in drops]):.3f}" for k in drops[0]["class_share"]
    )
    return head + "\n\n" + markdown_table(["band", "class dropped", "acc (all of class)", "acc (count-matched)"], rows)


def summarise(ctx: RunContext, cfg: RunConfig, results: list[dict]) -> RunOutput:
    for r in results:
        for stage, losses in r["losses"].items():
            for step in range(0, len(losses), 10):
                ctx.log(step, series=f"seed{r['seed']}/{stage}", loss=losses[step])
    measured = measured_claims(results)
    g = gate(results)
    T = cfg.eval.turns
    turns = list(range(1, T + 1))
    for key, fig, ylabel in (
        ("share_turn", "vision_share", "middle-band vision attention share"),
        ("acc_turn", "seeded_accuracy", "accuracy (seeded split)"),
    ):
        curves = {}
        for view in ("full", "occluded"):
            for name in ("baseline", "vif"):
                ys = np.mean([r[name][f"{view}_seeded"][key] for r in results], 0)
                curves[f"{name} ({view})"] = (turns, ys.tolist())
        plot_curves(ctx.figure_path(fig), curves, "agent turn", ylabel)
    tables = {
        "Variants (mean ± std over seeds)": markdown_table(
            ["split", "variant", "turn-1 acc", "final acc", "HS"], _variant_rows(results)
        )
    }
    share_rows = []
    for view in ("full", "occluded"):
        for name in ("baseline", "vif"):
            ys = np.mean([r[name][f"{view}_seeded"]["share_turn"] for r in results], 0)
            share_rows.append([view, name] + [f"{y:.3f}" for y in ys])
    tables["Middle-band vision share of text queries by turn (seeded split, seed means)"] = markdown_table(
        ["view", "model"] + [f"turn {t}" for t in turns], share_rows
    )
    drop = _drop_table(results)
    if drop:
        tables["Token drop by morphology and band (Table 1 analogue, baseline, single agent)"] = drop
    uni = {
        v: np.mean([r[v]["full_seeded"]["unimodal_turn"] for r in results], 0).round(4).tolist()
        for v in ("baseline", "vif")
    }
    metrics = {"competence_gate": g, "per_seed": results, "unimodal_share_turn": uni, "measured": measured}
    notes = [
        f"competence gate {'passed' if g['passed'] else 'FAILED'}: single-agent acc "
        f"{g['single_agent_acc']:.3f} (>= {GATE_ACC}), seeded final acc {g['seeded_final_acc']:.3f} "
        f"(drop {g['snowball_drop']:.3f} >= {GATE_DROP})"
    ]
    print(notes[0], flush=True)
    return RunOutput(metrics=metrics, measured=measured, tables=tables, notes=notes)
