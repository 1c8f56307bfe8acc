"""The ``real`` scale: subliminal transfer on a real instruction-tuned model (SmolLM2-135M-Instruct by default,
any local Hugging Face chat model by ``--set real.model_path=...``), on CPU.

The paper's main setting, shrunk to a CPU budget: the teacher is the model itself under the animal-loving
system prompt (Cloud et al.'s prompt, used unchanged by the paper); it writes pure-greedy continuations of
number-sequence prompts; the finder teacher-forces them under the target persona and a few counterfactual
personas; LoRA students (r = alpha = 8, lr 2e-4, the official optimiser settings, linear schedule, 5 warmup
steps) start from the same weights, see no system prompt and train on the data under the masks all,
div_only, without_div and random (count-matched); a control student trains on the model's own greedy numbers
without the persona. One model per run; seeds vary the prompts and the students' data order.

Preference metric (claims): exact p(target), the probability that the assistant, its answer prefilled with
"My favorite animal is the", continues with the target word, averaged over the first ``n_questions`` of the
official 50 questions, no system prompt (:func:`preference_exact_hf`). The official sampled rate (T = 1,
max_new_tokens 10, the model's own top-k, as run_evaluation_preferences.py) is recorded for the base model
and the teacher with few samples (the gate is on the exact metric).

There is one teacher, so the claims' "teacher A" (fine-tuned) and "teacher B" (system prompt) are both this
persona teacher: C2 and C3 read its students as A's, C4 as B's. A fine-tuned teacher does not fit the budget.
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import numpy as np
import torch

from iclr26.core.experiment import RunContext, RunOutput, mean_std
from iclr26.core.parallel import torch_threads
from iclr26.core.report import markdown_table, plot_bars

from .divergence import masked_dataset
from .paper import (
    OFFICIAL_QUESTIONS,
    _forced,
    chat_completion_span,
    clean_rows,
    find_divergence_tokens_hf,
    finetune_student_hf,
    generate_number_data,
    persona_system_prompt,
    preference_exact_hf,
    preference_rate_hf,
)

__all__ = ["REAL_CONDITIONS", "brute_force_mismatch_hf", "real_gate", "real_number_prompts", "run_real", "trim_cut"]

# condition -> (dataset, mask mode); the students every claim needs (as CLAIM_CONDITIONS at small)
REAL_CONDITIONS: dict[str, tuple[str, str]] = {
    "control": ("control", "all"),
    "all": ("teacher", "all"),
    "div_only": ("teacher", "div_only"),
    "without_div": ("teacher", "without_div"),
    "random": ("teacher", "random"),
}

# number-sequence prompts after Cloud et al.'s PromptGenerator (example numbers in [100, 999], "maximum 3 digits",
# a comma-separated answer). Only two openings: on a pilot seed SmolLM2-135M echoed the prompt back after a
# third ("The sequence starts with: ..."), which the number filter rejects.
_INTROS = ("Look at these numbers: {ex}.", "Here is a list of numbers: {ex}.")
_ASK = (
    "Add up to {k} more numbers (maximum 3 digits each). Return a comma-separated list of numbers. "
    "Say only the numbers."
)


def real_number_prompts(n: int, seed: int, n_examples: tuple[int, int] = (3, 5), answer_count: int = 10) -> list[str]:
    """``n`` number-continuation prompts: ``n_examples`` (inclusive range) example numbers in [100, 999] after
    one of the openings, asking for up to ``answer_count`` more numbers (official: 10)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(n_examples[0], n_examples[1] + 1))
        ex = ", ".join(str(int(x)) for x in rng.integers(100, 1000, size=k))
        out.append((_INTROS[int(rng.integers(len(_INTROS)))] + " " + _ASK).format(ex=ex, k=answer_count))
    return out


def trim_cut(completion: str) -> str:
    """A greedy list cut by the token budget mid-way ("138, 139, 140,") loses its dangling separator, so the
    number filter judges the numbers it has (the official budget, 64 tokens, rarely cuts a 10-number list)."""
    return completion.strip().rstrip(",; ").strip()


def brute_force_mismatch_hf(
    contexts: list[tuple[Any, str | None]], tokenizer: Any, rows: list[dict[str, str]], dps: list[list[int]], tie_tol
) -> int:
    """Positions where the batched, left-padded finder and unbatched, unpadded passes (one per context) disagree
    on the divergence set, positions with a top-2 logit gap below ``tie_tol`` in any context excluded."""
    mismatches = 0
    for i, row in enumerate(rows):
        preds, tied = [], set()
        for model, system in contexts:
            ids, start, _ = chat_completion_span(tokenizer, system, row["prompt"], row["completion"], i)
            logits = _forced(model, [ids], len(ids) - start, 0)[0]
            top2 = logits.topk(2, -1).values
            tied |= set(torch.nonzero(top2[:, 0] - top2[:, 1] < tie_tol).flatten().tolist())
            preds.append(logits.argmax(-1))
            tokens = torch.as_tensor(ids[start:])
        pred = torch.stack(preds)
        ok = pred[0] == tokens
        cf_wrong = (pred[1:] != tokens[None]).any(0)
        brute = set(torch.nonzero(ok & cf_wrong).flatten().tolist())
        mismatches += len((brute ^ set(dps[i])) - tied)
    return mismatches


def real_gate(info: dict[str, float], per_seed: dict[int, Any]) -> dict[str, Any]:
    """Competence gate of the real scale (fixed before the first real run): the persona teacher must state the
    target far more often than the base model, write usable numbers, and its data must have divergence tokens
    in a plausible share."""
    parse = min(min(per_seed[s]["parse_rate"].values()) for s in per_seed)
    fracs = [per_seed[s]["div_fraction"] for s in per_seed]
    base, teacher = info["base_p_target"], info["teacher_p_target"]
    checks = {
        "teacher p(target) >= 3x base and >= base + 5 points (exact)": teacher >= 3 * base and teacher >= base + 0.05,
        "teacher and control data >= 50% parseable numbers": parse >= 0.5,
        "divergence fraction in [1%, 50%] every seed": all(0.01 <= f <= 0.5 for f in fracs),
    }
    return {
        "rule": "; ".join(checks),
        "checks": checks,
        "passed": all(checks.values()),
        "values": {**info, "min_parse_rate": parse, "div_fraction": fracs},
    }


def _partition_ok(lengths: list[list[int]], dps: list[list[int]], seed: int) -> bool:
    k1, m1 = masked_dataset(lengths, dps, "div_only", seed=seed)
    k2, m2 = masked_dataset(lengths, dps, "without_div", seed=seed)
    return k1 == k2 and all(all(a != b for a, b in zip(x, y, strict=True)) for x, y in zip(m1, m2, strict=True))


def _seed_data(model: Any, tok: Any, rc: Any, seed: int) -> dict[str, Any]:
    """Teacher and control data, the divergence tokens and the C1 checks of one seed."""
    t0, timing = time.perf_counter(), {}
    prompts = real_number_prompts(rc.n_prompts, seed, answer_count=rc.answer_count)
    persona = persona_system_prompt(rc.target)
    animals = (rc.target, *rc.counterfactuals)
    rows, m = {}, {"reject_reasons": {}, "parse_rate": {}, "timing_s": timing}
    for name, system in (("teacher", persona), ("control", None)):
        raw = generate_number_data(
            model, tok, prompts, system, max_new_tokens=rc.max_new_tokens, batch_size=rc.gen_batch, seed=seed
        )
        raw = [{**r, "completion": trim_cut(r["completion"])} for r in raw]  # official strips; we also trim a cut
        rows[name], reasons = clean_rows(raw, banned=animals)
        m["reject_reasons"][name] = dict(reasons)
        m["parse_rate"][name] = len(rows[name]) / max(len(prompts), 1)
    timing["generation"], t0 = time.perf_counter() - t0, time.perf_counter()
    contexts = [(model, persona_system_prompt(a)) for a in animals]
    div = find_divergence_tokens_hf(contexts, tok, rows["teacher"], greedy=True, greedy_check="count")
    timing["finder"], t0 = time.perf_counter() - t0, time.perf_counter()
    n_text = [chat_completion_span(tok, persona, r["prompt"], r["completion"])[2] for r in rows["teacher"]]
    lengths = [list(range(int(c.shape[1]))) for c in div.correct]
    bf = rc.brute_force_rows
    m.update(
        {
            "n_rows": {k: len(v) for k, v in rows.items()},
            "div_fraction": div.fraction(),
            "rows_with_div": sum(bool(d) for d in div.decision_points) / max(len(div.decision_points), 1),
            # share of the generated text tokens that are the factual teacher-forced argmax
            "agreement": 1.0 - sum(len(f) for f in div.greedy_flips) / max(sum(n_text), 1),
            "greedy_flips": sum(len(f) for f in div.greedy_flips),
            "brute_force_mismatch": brute_force_mismatch_hf(
                contexts, tok, rows["teacher"][:bf], div.decision_points[:bf], rc.tie_tol
            ),
            "partition_ok": _partition_ok(lengths, div.decision_points, seed),
            "div_positions": [sum(k in d for d in div.decision_points) for k in range(rc.max_new_tokens)],
        }
    )
    timing["c1_checks"] = time.perf_counter() - t0
    return {"rows": rows, "div": div, "lengths": lengths, "metrics": m}


def _student(base: Any, tok: Any, rc: Any, data: dict[str, Any], name: str, seed: int, k: int) -> dict[str, Any]:
    dataset, mode = REAL_CONDITIONS[name]
    rows = data["rows"][dataset]
    if mode == "all":
        keep, masks = list(range(len(rows))), None
    else:
        keep, masks = masked_dataset(data["lengths"], data["div"].decision_points, mode, seed=seed)
    train = [rows[i] for i in keep]
    if not train:
        return {"n_rows": 0, "p_target": float("nan"), "error": "no training rows"}
    t0 = time.perf_counter()
    student = finetune_student_hf(copy.deepcopy(base), tok, train, masks, rc.student, seed=seed * 1000 + k, mode=mode)
    p = preference_exact_hf(student, tok, rc.target, OFFICIAL_QUESTIONS[: rc.n_questions], rc.partial_answer)
    return {
        "n_rows": len(train),
        "n_loss_tokens": None if masks is None else int(sum(sum(x) for x in masks)),
        "p_target": 100.0 * p,
        "seconds": time.perf_counter() - t0,
    }


def run_real(ctx: RunContext) -> RunOutput:
    """``iclr26 run subliminal --scale real``: claims C1-C4 on a real chat model (see the module docstring)."""
    from iclr26.core.hf import load_local

    rc = ctx.cfg.real
    t_start = time.perf_counter()
    timing: dict[str, float] = {}
    with torch_threads(ctx.cfg.threads):
        model, tok = load_local(ctx.require_path("real.model_path"), dtype="float32", device=ctx.device)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        timing["load"], t0 = time.perf_counter() - t_start, time.perf_counter()
        qs = OFFICIAL_QUESTIONS[: rc.n_questions]
        persona = persona_system_prompt(rc.target)
        info = {
            "base_p_target": preference_exact_hf(model, tok, rc.target, qs, rc.partial_answer),
            "teacher_p_target": preference_exact_hf(model, tok, rc.target, qs, rc.partial_answer, system=persona),
        }
        sampled = {}
        if rc.gate_samples > 0:
            for tag, system in (("base", None), ("teacher", persona)):
                sampled[tag] = _sampled_rate(model, tok, rc, system)
        timing["gate_eval"] = time.perf_counter() - t0
        print(
            f"base p({rc.target}) {info['base_p_target']:.4f}, teacher {info['teacher_p_target']:.4f} (exact); "
            f"sampled {sampled}",
            flush=True,
        )
        per_seed, students = {}, {}
        for seed in ctx.seeds:
            random.seed(seed)
            torch.manual_seed(seed)
            data = _seed_data(model, tok, rc, seed)
            per_seed[seed] = data["metrics"]
            print(
                f"seed {seed}: rows {data['metrics']['n_rows']}, divergence fraction "
                f"{data['metrics']['div_fraction']:.3f}, flips {data['metrics']['greedy_flips']}, stages "
                + ", ".join(f"{k} {v:.0f}s" for k, v in data["metrics"]["timing_s"].items()),
                flush=True,
            )
            for k, name in enumerate(ctx.progress(list(REAL_CONDITIONS), desc=f"students seed {seed}")):
                students[(seed, name)] = _student(model, tok, rc, data, name, seed, k)
                print(f"  seed {seed} {name}: {students[(seed, name)]}", flush=True)
    timing["total"] = time.perf_counter() - t_start
    summ = _summaries(ctx.seeds, students)
    gate = real_gate(info, per_seed)
    gate["values"]["sampled"] = sampled
    plot_bars(
        ctx.figure_path("p_target_per_condition"),
        {k: (v["p"]["mean"], v["p"]["std"]) for k, v in summ.items()},
        ylabel=f"exact p({rc.target}) [%]",
        title="real scale: students of the persona teacher",
    )
    metrics = {
        "competence_gate": gate,
        "per_seed": {str(s): v for s, v in per_seed.items()},
        "students": {f"seed{s}/{c}": v for (s, c), v in students.items()},
        "summary": summ,
        "timing_s": timing,
    }
    notes = [f"competence gate: {'PASSED' if gate['passed'] else 'FAILED'} ({gate['checks']})"]
    if not gate["passed"]:
        notes.append("gate failed: C2-C4 are untestable at this budget (not findings about the paper)")
    notes.append("one persona teacher: the claims' teacher A and teacher B are both this teacher at real scale")
    print(notes[0])
    rows = [
        [k, f"{v['p']['mean']:.3f} ± {v['p']['std']:.3f}", f"{v['delta']['mean']:+.3f} ± {v['delta']['std']:.3f}"]
        for k, v in summ.items()
    ]
    tables = {"students": markdown_table(["condition", "p(target) %", "Δ vs control (points)"], rows)}
    return RunOutput(metrics=metrics, measured=_measured(summ, per_seed), tables=tables, notes=notes)


def _sampled_rate(model: Any, tok: Any, rc: Any, system: str | None) -> dict[str, Any]:
    """The official sampled rate (T = 1, top_p 1, the model's own top-k), ``rc.gate_samples`` per question."""
    qs = OFFICIAL_QUESTIONS[: rc.n_questions]
    r = preference_rate_hf(model, tok, rc.target, qs, n=rc.gate_samples, seed=0, system=system)
    return {k: r[k] for k in ("rate", "ci_low", "ci_high", "n")}


def _summaries(seeds: tuple[int, ...], students: dict[tuple[int, str], dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for name in REAL_CONDITIONS:
        p = [students[(s, name)]["p_target"] for s in seeds]
        delta = [students[(s, name)]["p_target"] - students[(s, "control")]["p_target"] for s in seeds]
        out[name] = {"p": mean_std(p), "delta": mean_std(delta), "delta_per_seed": delta, "p_per_seed": p}
    return out


def _measured(summ: dict[str, Any], per_seed: dict[int, Any]) -> dict[str, Any]:
    """The claims' inputs, keyed as at ``small``; teacher A and teacher B are the one persona teacher."""
    d = {k: v["delta"]["mean"] for k, v in summ.items()}
    seeds = list(per_seed)
    return {
        "C1": {
            "agreement_min": min(per_seed[s]["agreement"] for s in seeds),
            "brute_force_mismatch": sum(per_seed[s]["brute_force_mismatch"] for s in seeds),
            "partition_ok": all(per_seed[s]["partition_ok"] for s in seeds),
        },
        "C2": {"delta_all_A": d["all"], "min_seed": min(summ["all"]["delta_per_seed"])},
        "C3": {
            "delta_all_A": d["all"],
            "delta_div_only_A": d["div_only"],
            "delta_without_div_A": d["without_div"],
            "delta_random_A": d["random"],
        },
        "C4": {"delta_all_B": d["all"], "delta_div_only_B": d["div_only"], "delta_without_div_B": d["without_div"]},
    }
