"""Reproduction in miniature: APT on ShapesSG (PredCls), with controls and the open-vocabulary split.

Per seed: generate ShapesSG (2,000 / 300 / 600 images), train B0, B0 + APT, the D-only and R-only ablations
and three controls (unfrozen tables, a parameter-matched context-free adapter, APT without prompts) on the
same pairs; then the open-vocabulary pair (B0 vs B0 + CGP) with 5 novel predicates trained as background.
Diagnostics on APT's adapted subject embeddings vs the frozen ones: MI proxy, silhouette, PCA, linear CKA.
"""

from __future__ import annotations

import math

from iclr26.apt.config import RunConfig, config_for
from iclr26.core.experiment import Claim, Experiment, ExperimentError, RunContext, RunOutput

COMPETENCE = {"b0_R@20": 60.0, "head_minus_tail": 15.0}


def _gate(m) -> None:
    if not m["competence_gate"]:
        raise ValueError(
            "untestable at this budget: B0 misses the competence gate (R@20 >= 60 and head recall >= tail recall + 15)"
        )


def _c1(m) -> bool:
    return m["mi_adapted"] - m["mi_frozen"] >= 0.2


def _c2(m) -> bool:
    _gate(m)
    need = math.ceil(2 * m["n_seeds"] / 3)
    return (
        m["apt_mR@20"] >= m["b0_mR@20"] + 2.0 and m["seeds_apt_higher"] >= need and m["apt_R@20"] >= m["b0_R@20"] - 1.0
    )


def _c3(m) -> bool:
    _gate(m)
    return m["cgp_novel_mR@20"] >= m["b0_novel_mR@20"] + 2.0


CLAIMS = (
    Claim(
        "C1",
        "Mechanism: APT's context-adapted subject embeddings carry more information about the predicate than the "
        "frozen ones (discretised MI proxy, k-means with the same cluster count).",
        "MI proxy 1.96 (APT) vs 1.49 bits (frozen GloVe) (IB table)",
        "mean over seeds of MI(adapted) - MI(frozen) >= 0.2 bits",
        _c1,
    ),
    Claim(
        "C2",
        "Headline, direction: B0 + APT raises PredCls mR@20 over B0 without losing R@20.",
        "+1.3 to +3.4 mR@100 on VG150 PredCls (Table 2)",
        "mean APT mR@20 >= mean B0 mR@20 + 2, APT higher in >= ceil(2n/3) of n seeds, mean APT R@20 >= mean B0 "
        "R@20 - 1; competence gate must hold",
        _c2,
    ),
    Claim(
        "C3",
        "Open vocabulary, direction: CGP raises novel-predicate mR@20 over frozen zero-shot prototypes.",
        "+1.1 to +6.0 mR@50 on novel splits (Table 3)",
        "mean novel mR@20 (CGP) >= mean novel mR@20 (B0 zero-shot) + 2; competence gate must hold",
        _c3,
    ),
)


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "paper" and cfg.render:
        raise ExperimentError("render=true applies to the ShapesSG scales (smoke, small), not to paper scale")
    if ctx.scale == "paper":
        from iclr26.apt.vg import run_paper

        return run_paper(ctx)
    from iclr26.apt.runner import run_small

    return run_small(ctx)


EXPERIMENT = Experiment(
    slug="apt",
    title="APT: Towards Universal Scene Graph Generation via Plug-in Adaptive Prompt Tuning",
    arxiv="openreview:IZWJhdK2o7",
    claims=CLAIMS,
    run=run,
    config=config_for,
)
