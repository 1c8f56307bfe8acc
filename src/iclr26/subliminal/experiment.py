"""The registered reproduction: hard-label subliminal transfer in the toy world, and which tokens carry it.

One base model and teacher A per run (fixed ``world.base_seed``); each seed draws fresh prompts, teacher data
and students. Teacher A = the base fine-tuned to answer owl in QA (counterfactual: the base); teacher B = the
base with the "love raven" persona (counterfactuals: the 12 other personas). Students start from the base,
see no persona and train on the teachers' greedy number completions with a loss mask.
Δ(condition) = p(target | student) − p(target | control student), in percentage points.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, RunContext, RunOutput, mean_std
from iclr26.core.parallel import seed_map, torch_threads
from iclr26.core.report import markdown_table, plot_bars, plot_curves
from iclr26.core.transformer import Transformer, TransformerConfig

from .attribution import attribution_patching
from .config import RunConfig, config_for
from .data import filter_rows, mix_in_control, paraphrase_rows
from .divergence import DivergenceResult, masked_dataset
from .toy import (
    StudentConfig,
    brute_force_divergence,
    build_model,
    find_divergence_tokens,
    finetune_student,
    generate_completions,
    persona_following,
    preference_exact,
    preference_sampled,
    pretrain_base,
    train_qa_teacher,
)
from .world import ANIMALS, VOCAB, NumberRow, make_number_prompts, persona

# condition -> (dataset, mask mode, trainable block or None); the students every claim needs
CLAIM_CONDITIONS: dict[str, tuple[str, str, int | None]] = {
    "control": ("control", "all", None),
    "A_all": ("A", "all", None),
    "A_div_only": ("A", "div_only", None),
    "A_without_div": ("A", "without_div", None),
    "A_random": ("A", "random", None),
    "B_all": ("B", "all", None),
    "B_div_only": ("B", "div_only", None),
    "B_without_div": ("B", "without_div", None),
}
# reported, not claimed (``world.extras``): the layer arm, T=1 data, paraphrase, 25% mixing
EXTRA_CONDITIONS: dict[str, tuple[str, str, int | None]] = {
    "A_block_first": ("A", "all", 0),
    "A_block_last": ("A", "all", -1),
    "A_T1": ("A_T1", "all", None),
    "A_paraphrase": ("A_paraphrase", "all", None),
    "A_mix": ("A_mix", "all", None),
}
CONDITIONS = {**CLAIM_CONDITIONS, **EXTRA_CONDITIONS}


def _conditions(cfg: RunConfig) -> dict[str, tuple[str, str, int | None]]:
    return CONDITIONS if cfg.world.extras else CLAIM_CONDITIONS


def _model_cfg(cfg: RunConfig) -> TransformerConfig:
    m = cfg.model
    return TransformerConfig(
        vocab_size=len(VOCAB), d_model=m.d_model, n_layers=m.n_layers, n_heads=m.n_heads, max_len=m.max_len
    )


def _teachers(ctx: RunContext, cfg: RunConfig) -> tuple[Transformer, Transformer, dict[str, float], dict[str, float]]:
    """The base, teacher A, their gate values, and wall seconds of the two trainings."""
    w = cfg.world
    t0 = time.perf_counter()
    base = build_model(_model_cfg(cfg), w.base_seed)
    torch.manual_seed(w.base_seed)
    pretrain_base(base, cfg.base_train, w.base_batch, w.base_seed, log=ctx.logger("base"))
    timing = {"base": time.perf_counter() - t0}
    t0 = time.perf_counter()
    teacher_a = train_qa_teacher(
        base, w.teacher_a_target, cfg.teacher_a_train, w.teacher_a_batch, w.base_seed + 1, log=ctx.logger("teacher_A")
    )
    timing["teacher_A"] = time.perf_counter() - t0
    info = {
        "base_persona_following": persona_following(base),
        "base_p_target_A": preference_exact(base, w.teacher_a_target),
        "base_p_target_B": preference_exact(base, w.teacher_b_target),
        "teacher_A_p_target": preference_exact(teacher_a, w.teacher_a_target),
        "teacher_B_p_target": preference_exact(base, w.teacher_b_target, persona(w.teacher_b_target)),
    }
    return base, teacher_a, info, timing


def _brute_force_mismatch(rows: list[NumberRow], div: DivergenceResult, contexts, tie_tol: float) -> int:
    """Positions where the batched finder and the unbatched brute force disagree, exact ties excluded."""
    sets, ties = brute_force_divergence(rows, contexts, tie_tol)
    return sum(len((set(div.decision_points[i]) ^ s) - t) for i, (s, t) in enumerate(zip(sets, ties, strict=True)))


def _partition_ok(rows: list[NumberRow], div: DivergenceResult, seed: int) -> bool:
    """div_only and without_div keep the same rows and split each row's completion mask exactly."""
    comps = [r.completion for r in rows]
    k1, m1 = masked_dataset(comps, div.decision_points, "div_only", seed=seed)
    k2, m2 = masked_dataset(comps, div.decision_points, "without_div", seed=seed)
    if k1 != k2:
        return False
    return all(all(a != b for a, b in zip(x, y, strict=True)) for x, y in zip(m1, m2, strict=True))


def _positions(rows: list[NumberRow], div: DivergenceResult, length: int = 20) -> list[float]:
    """Fraction of rows whose completion position k is a divergence token, k = 0..length-1."""
    counts = np.zeros(length)
    for d in div.decision_points:
        for k in d:
            if k < length:
                counts[k] += 1
    return (counts / max(len(rows), 1)).tolist()


def _seed_data(base: Transformer, teacher_a: Transformer, cfg: RunConfig, seed: int) -> dict[str, Any]:
    """Teacher data, filtering, divergence tokens and the C1 checks of one seed (wall seconds per stage in
    ``metrics["timing_s"]``)."""
    w = cfg.world
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    prompts = make_number_prompts(w.n_prompts, seed)
    sys_b = persona(w.teacher_b_target)
    gen = {"control": (base, (), 0.0), "A": (teacher_a, (), 0.0), "B": (base, sys_b, 0.0)}
    if w.extras:
        gen["A_T1"] = (teacher_a, (), 1.0)
    rows, m = {}, {"reject_reasons": {}, "parse_rate": {}, "timing_s": timing}
    for name, (model, system, temp) in gen.items():
        comps = generate_completions(
            model, prompts, system, temperature=temp, max_new_tokens=w.max_new_tokens, seed=seed
        )
        rows[name], reasons = filter_rows([NumberRow(p, c) for p, c in zip(prompts, comps, strict=True)])
        m["reject_reasons"][name] = dict(reasons)
        m["parse_rate"][name] = len(rows[name]) / len(prompts)
    timing["generation"], t0 = time.perf_counter() - t0, time.perf_counter()
    cf_b = (
        [(base, persona(a)) for a in ANIMALS if a != w.teacher_b_target]
        if w.counterfactuals_b == "other_personas"
        else [(base, ())]
    )
    ctx_a, ctx_b = [(teacher_a, ()), (base, ())], [(base, sys_b), *cf_b]
    div = {
        "A": find_divergence_tokens(rows["A"], ctx_a[0], ctx_a[1:]),
        "B": find_divergence_tokens(rows["B"], ctx_b[0], ctx_b[1:]),
    }
    if w.extras:
        div["A_T1"] = find_divergence_tokens(rows["A_T1"], ctx_a[0], ctx_a[1:])
    timing["finder"], t0 = time.perf_counter() - t0, time.perf_counter()
    n_bf = w.brute_force_rows
    m.update(
        {
            "div_fraction": {k: d.fraction() for k, d in div.items()},
            "rows_with_div": {
                k: sum(len(x) > 0 for x in d.decision_points) / max(len(d.decision_points), 1) for k, d in div.items()
            },
            "agreement": {k: div[k].factual_agreement([r.completion for r in rows[k]]) for k in ("A", "B")},
            "brute_force_mismatch": {
                "A": _brute_force_mismatch(rows["A"][:n_bf], div["A"], ctx_a, w.tie_tol),
                "B": _brute_force_mismatch(rows["B"][:n_bf], div["B"], ctx_b, w.tie_tol),
            },
            "partition_ok": {k: _partition_ok(rows[k], div[k], seed) for k in ("A", "B")},
            "div_positions": {k: _positions(rows[k], div[k]) for k in ("A", "B")},
        }
    )
    timing["c1_checks"] = time.perf_counter() - t0
    if w.extras:
        rows["A_paraphrase"] = paraphrase_rows(rows["A"], seed)
        n_mix = int(round(w.mix_fraction * len(rows["A"])))
        rows["A_mix"], _ = mix_in_control(rows["A"], rows["control"], min(n_mix, len(rows["control"])), seed)
    return {"rows": rows, "div": div, "metrics": m}


def _jobs(data: dict[str, Any], cfg: RunConfig, seed: int, state: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    jobs = []
    for k, (name, (dataset, mode, block)) in enumerate(CONDITIONS.items()):
        if name not in _conditions(cfg):
            continue
        rows = data["rows"][dataset]
        if mode == "all":
            keep, masks = list(range(len(rows))), [[True] * len(r.completion) for r in rows]
        else:
            d = data["div"][dataset]
            keep, masks = masked_dataset([r.completion for r in rows], d.decision_points, mode, seed=seed)
        jobs.append(
            {
                "seed": seed,
                "condition": name,
                "rows": [rows[i] for i in keep],
                "masks": masks,
                "trainable": block,
                "state": state,
                "model": _model_cfg(cfg),
                "students": cfg.students,
                "targets": (cfg.world.teacher_a_target, cfg.world.teacher_b_target),
                "n_samples": cfg.world.n_samples,
                "train_seed": seed * 1000 + k,
            }
        )
    return jobs


def _student_job(job: dict[str, Any]) -> dict[str, Any]:
    """One student: fine-tune a base copy, then its exact and sampled preference rates."""
    base = Transformer(job["model"])
    base.load_state_dict(job["state"])
    scfg: StudentConfig = job["students"]
    if not job["rows"]:  # every row filtered or dropped: a handled failure, reported as NaN
        nan = float("nan")
        return {"n_rows": 0, "n_loss_tokens": 0, "p_A": nan, "p_B": nan, "error": "no training rows"}
    torch.manual_seed(job["train_seed"])
    student = finetune_student(base, job["rows"], job["masks"], scfg, job["train_seed"], job["trainable"])
    out: dict[str, Any] = {"n_rows": len(job["rows"]), "n_loss_tokens": int(sum(sum(m) for m in job["masks"]))}
    for tag, target in zip(("A", "B"), job["targets"], strict=True):
        out[f"p_{tag}"] = 100.0 * preference_exact(student, target)
        s = preference_sampled(student, target, job["n_samples"], seed=job["train_seed"])
        out[f"sampled_{tag}"] = {k: (100.0 * v if k != "n" else v) for k, v in s.items()}
    return out


def _attribution(base: Transformer, data: dict[str, Any], cfg: RunConfig) -> dict[str, list[float]]:
    """Mean attribution per layer (total, at the persona's animal token, at the position whose logits predict
    the divergence token) for (row, counterfactual persona) pairs of teacher B, at the first position the
    counterfactual gets wrong."""
    w, rows, div = cfg.world, data["rows"]["B"], data["div"]["B"]
    others = [a for a in ANIMALS if a != w.teacher_b_target]
    pairs = []
    for i, r in enumerate(rows):
        if not div.decision_points[i] or w.counterfactuals_b != "other_personas":
            continue
        for j, a in enumerate(others):
            wrong = (~div.correct[i][1 + j]) & div.correct[i][0]
            if wrong.any():
                k = int(torch.nonzero(wrong)[0])
                pairs.append((r, a, k, int(r.completion[k]), int(div.preds[i][1 + j, k])))
        if len(pairs) >= w.attribution_pairs:
            break
    pairs = pairs[: w.attribution_pairs]
    if not pairs:
        return {}
    sys_b = persona(w.teacher_b_target)
    seqs_c = [[VOCAB.bos, *sys_b, *r.prompt, *r.completion] for r, *_ in pairs]
    seqs_p = [[VOCAB.bos, *persona(a), *r.prompt, *r.completion] for r, a, *_ in pairs]
    T = max(len(s) for s in seqs_c)
    clean = torch.tensor([s + [VOCAB.pad] * (T - len(s)) for s in seqs_c])
    patch = torch.tensor([s + [VOCAB.pad] * (T - len(s)) for s in seqs_p])
    pos = torch.tensor([1 + len(sys_b) + len(r.prompt) + k for r, _, k, _, _ in pairs])
    attr = attribution_patching(
        base, clean, patch, pos, [p[3] for p in pairs], [p[4] for p in pairs], steps=w.attribution_steps
    )
    rows_idx = torch.arange(len(pairs))
    return {
        "total": attr.sum(-1).mean(0).tolist(),
        "persona_token": attr[:, :, 3].mean(0).tolist(),
        # the metric reads the logits at pos - 1 (they predict the divergence token); by causality the
        # divergence token's own position cannot move them, so its attribution is read at pos - 1
        "predicts_divergence": attr[rows_idx, :, pos - 1].mean(0).tolist(),
        "n_pairs": len(pairs),
    }


def _summaries(seeds: tuple[int, ...], students: dict[tuple[int, str], dict[str, Any]]) -> dict[str, Any]:
    """p(target) per condition and seed, and Δ = p − p(control) in points, with mean ± std over seeds."""
    out: dict[str, Any] = {}
    for name, (dataset, _, _) in CONDITIONS.items():
        if (seeds[0], name) not in students:  # an arm this run did not train (world.extras)
            continue
        tag = "B" if dataset == "B" else "A"
        p = [students[(s, name)][f"p_{tag}"] for s in seeds]
        delta = [students[(s, name)][f"p_{tag}"] - students[(s, "control")][f"p_{tag}"] for s in seeds]
        out[name] = {
            "target": tag,
            "p": mean_std(p),
            "delta": mean_std(delta),
            "delta_per_seed": delta,
            "p_per_seed": p,
        }
    return out


def _measured(summ: dict[str, Any], per_seed: dict[int, Any]) -> dict[str, Any]:
    d = {k: v["delta"]["mean"] for k, v in summ.items()}
    seeds = list(per_seed)
    c1 = {
        "agreement_min": min(min(per_seed[s]["agreement"].values()) for s in seeds),
        "brute_force_mismatch": sum(sum(per_seed[s]["brute_force_mismatch"].values()) for s in seeds),
        "partition_ok": all(all(per_seed[s]["partition_ok"].values()) for s in seeds),
    }
    return {
        "C1": c1,
        "C2": {"delta_all_A": d["A_all"], "min_seed": min(summ["A_all"]["delta_per_seed"])},
        "C3": {
            "delta_all_A": d["A_all"],
            "delta_div_only_A": d["A_div_only"],
            "delta_without_div_A": d["A_without_div"],
            "delta_random_A": d["A_random"],
        },
        "C4": {
            "delta_all_B": d["B_all"],
            "delta_div_only_B": d["B_div_only"],
            "delta_without_div_B": d["B_without_div"],
        },
    }


def _gate(info: dict[str, float], per_seed: dict[int, Any]) -> dict[str, Any]:
    parse = min(min(per_seed[s]["parse_rate"][k] for k in ("A", "B")) for s in per_seed)
    fracs = [per_seed[s]["div_fraction"]["A"] for s in per_seed]
    checks = {
        "base follows personas (p >= 0.9)": info["base_persona_following"] >= 0.9,
        "teacher A p(owl) >= 0.8": info["teacher_A_p_target"] >= 0.8,
        "teachers A and B write >= 95% parseable numbers": parse >= 0.95,
        "A's divergence fraction in [1%, 50%]": all(0.01 <= f <= 0.5 for f in fracs),
    }
    return {
        "rule": "; ".join(checks),
        "checks": checks,
        "passed": all(checks.values()),
        "values": {**info, "min_parse_rate": parse, "div_fraction_A": fracs},
    }


def _figures(ctx: RunContext, summ: dict[str, Any], per_seed: dict[int, Any]) -> None:
    plot_bars(
        ctx.figure_path("p_target_per_condition"),
        {k: (v["p"]["mean"], v["p"]["std"]) for k, v in summ.items()},
        ylabel="p(target) [%]",
        title="exact p(target): owl for control/A_*, raven for B_*",
    )
    curves = {}
    for tag in ("A", "B"):
        arr = np.array([per_seed[s]["div_positions"][tag] for s in per_seed])
        curves[f"teacher {tag}"] = (np.arange(arr.shape[1]), arr.mean(0), arr.std(0))
    plot_curves(
        ctx.figure_path("divergence_positions"),
        curves,
        xlabel="completion position",
        ylabel="share of rows divergent",
        title="where divergence tokens sit",
    )


def _tables(summ: dict[str, Any], per_seed: dict[int, Any], attribution: dict[int, Any]) -> dict[str, str]:
    rows = [
        [
            k,
            v["target"],
            f"{v['p']['mean']:.2f} ± {v['p']['std']:.2f}",
            f"{v['delta']['mean']:+.2f} ± {v['delta']['std']:.2f}",
            ", ".join(f"{x:+.2f}" for x in v["delta_per_seed"]),
        ]
        for k, v in summ.items()
    ]
    t = {
        "students": markdown_table(["condition", "target", "p(target) %", "Δ vs control (points)", "Δ per seed"], rows)
    }
    frac = [
        [
            s,
            *(
                f"{100 * per_seed[s]['div_fraction'][k]:.1f}%" if k in per_seed[s]["div_fraction"] else "—"
                for k in ("A", "B", "A_T1")
            ),
            *(f"{100 * per_seed[s]['agreement'][k]:.2f}%" for k in ("A", "B")),
        ]
        for s in per_seed
    ]
    t["divergence"] = markdown_table(
        ["seed", "div frac A", "div frac B", "div frac A (T=1)", "argmax=token A", "argmax=token B"], frac
    )
    attr = [
        [s, *(", ".join(f"{x:+.3f}" for x in a.get(k, [])) for k in ("total", "persona_token", "predicts_divergence"))]
        for s, a in attribution.items()
    ]
    t["attribution (teacher B, per block)"] = markdown_table(
        ["seed", "Σ positions", "persona token", "position predicting the divergence token"], attr
    )
    return t


def run(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    if ctx.scale == "paper":
        from .paper import run_paper

        return run_paper(ctx)
    if ctx.scale == "real":
        from .real import run_real

        return run_real(ctx)
    t_start = time.perf_counter()
    with torch_threads(cfg.threads):
        base, teacher_a, info, timing = _teachers(ctx, cfg)
        state = {k: v.detach().clone() for k, v in base.state_dict().items()}
        per_seed, jobs, attribution = {}, [], {}
        for seed in ctx.progress(ctx.seeds, total=len(ctx.seeds), desc="teacher data"):
            random.seed(seed)
            data = _seed_data(base, teacher_a, cfg, seed)
            per_seed[seed] = data["metrics"]
            t0 = time.perf_counter()
            attribution[seed] = _attribution(base, data, cfg)
            per_seed[seed]["timing_s"]["attribution"] = time.perf_counter() - t0
            jobs += _jobs(data, cfg, seed, state)
    for stage in ("generation", "finder", "c1_checks", "attribution"):
        timing[f"seeds_{stage}"] = sum(per_seed[s]["timing_s"][stage] for s in per_seed)
    t0 = time.perf_counter()
    results = seed_map(
        _student_job, jobs, workers=cfg.workers, threads_per_worker=1, progress=ctx.progress, desc="students"
    )
    timing["students"] = time.perf_counter() - t0
    timing["n_students"] = len(jobs)
    timing["total"] = time.perf_counter() - t_start
    print("wall seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in timing.items()))
    students = {(j["seed"], j["condition"]): r for j, r in zip(jobs, results, strict=True)}
    summ = _summaries(ctx.seeds, students)
    gate = _gate(info, per_seed)
    _figures(ctx, summ, per_seed)
    metrics = {
        "competence_gate": gate,
        "teachers": info,
        "per_seed": {str(s): v for s, v in per_seed.items()},
        "students": {f"seed{s}/{c}": v for (s, c), v in students.items()},
        "summary": summ,
        "attribution": {str(s): a for s, a in attribution.items()},
        "timing_s": timing,
    }
    notes = [f"competence gate: {'PASSED' if gate['passed'] else 'FAILED'} ({gate['checks']})"]
    if not gate["passed"]:
        notes.append("gate failed: C2-C4 are untestable at this budget (not findings about the paper)")
    print(notes[0])
    return RunOutput(
        metrics=metrics, measured=_measured(summ, per_seed), tables=_tables(summ, per_seed, attribution), notes=notes
    )


CLAIMS = (
    Claim(
        "C1",
        "Mechanism (exact): teacher-forced argmax reproduces the greedy tokens, the batched finder equals "
        "a brute-force check, div-only and without-div partition the completion mask.",
        paper_value="definition (Sec. 4)",
        rule="agreement_min >= 0.999 and brute_force_mismatch == 0 (exact ties excluded) and partition_ok",
        check=lambda m: m["agreement_min"] >= 0.999 and m["brute_force_mismatch"] == 0 and bool(m["partition_ok"]),
    ),
    Claim(
        "C2",
        "Hard-label transfer: a student trained on teacher A's greedy numbers prefers owl more than "
        "the control student.",
        paper_value="p(target) rises above control (Figs. 2-3)",
        rule="mean Δ_all(A) >= 3 points and Δ_all(A) > 0 in every seed",
        check=lambda m: m["delta_all_A"] >= 3.0 and m["min_seed"] > 0,
    ),
    Claim(
        "C3",
        "Divergence tokens carry the bias: div-only keeps it, without-div loses most of it, masking as "
        "many random tokens keeps it.",
        paper_value="div-only ≈ all; without-div ≈ control (Fig. 5)",
        rule="Δ_all(A) > 0 and Δ_div(A) >= 0.6 Δ_all(A) and Δ_without(A) <= 0.4 Δ_all(A) and "
        "Δ_random(A) >= 0.6 Δ_all(A)",
        check=lambda m: (
            m["delta_all_A"] > 0
            and m["delta_div_only_A"] >= 0.6 * m["delta_all_A"]
            and m["delta_without_div_A"] <= 0.4 * m["delta_all_A"]
            and m["delta_random_A"] >= 0.6 * m["delta_all_A"]
        ),
    ),
    Claim(
        "C4",
        "System-prompt teacher (direction): transfer from teacher B's data, and it rides on the divergence tokens.",
        paper_value="p(target) > control; without-div < div-only (Figs. 2, 5)",
        rule="Δ_all(B) > 0 and Δ_without(B) < Δ_div(B)",
        check=lambda m: m["delta_all_B"] > 0 and m["delta_without_div_B"] < m["delta_div_only_B"],
    ),
)

EXPERIMENT = Experiment(
    slug="subliminal",
    title="Towards Understanding Subliminal Learning: When and How Hidden Biases Transfer",
    arxiv="2509.23886",
    claims=CLAIMS,
    run=run,
    config=config_for,
    scales=("smoke", "small", "real", "paper"),
)
