"""The registered reproduction of VTool-R1 (``iclr26 run vtool_r1 --scale smoke|small|paper``).

Per seed: SFT-initialise TinyToolVLM (the "instruction-tuned" base), measure its pure run (PURE mode) and its
prompted tool use (TOOLS mode, no RL), then from the same SFT weights run two RL arms with the SAME budget
(steps x prompts x G, same optimiser and loss): text-only GRPO (PURE rollouts) and VTool-R1 (two-round tool
rollouts, v2 masking). All accuracies are greedy on a held-out, type-balanced test set.

Every setting is one typed tree (:mod:`.config`). Seeds run in parallel worker processes (``workers``,
``threads`` torch threads each) through ``core.parallel.seed_map``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from functools import partial

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, RunContext, RunOutput, mean_std
from iclr26.core.parallel import seed_map
from iclr26.core.report import markdown_table, plot_bars, plot_curves, save_fig

from .charts import QUESTION_TYPES, make_dataset
from .config import RunConfig, config_for
from .executor import ToolExecutor
from .model import TinyToolVLM
from .rollout import evaluate, read_second_image, rollout_tools
from .vtool import sft_init, train_grpo


def _tool_gap(ev: dict) -> float:
    """Tool-call rate on VAL+CMP minus the rate on CNT+MAX (balanced test set: mean of the per-type rates)."""
    return 0.5 * (ev["tool_rate_VAL"] + ev["tool_rate_CMP"]) - 0.5 * (ev["tool_rate_CNT"] + ev["tool_rate_MAX"])


def _hist_rows(hist: dict, eval_scalars) -> list[tuple[int, dict]]:
    """train_grpo's history as (step, scalars) rows: loss/reward/tool_rate per step, then the evaluations."""
    rows = [
        (int(st), {k: float(hist[k][i]) for k in ("loss", "reward", "tool_rate") if i < len(hist[k])})
        for i, st in enumerate(hist["step"])
    ]
    return rows + [(int(st), eval_scalars(e)) for st, e in zip(hist["eval_step"], hist["eval"])]


def run_seed(seed: int, sc: RunConfig) -> dict:
    """One seed end to end (runs in a worker process)."""
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    train = make_dataset(sc.n_train, seed=10_000 + seed, balanced=False)
    test = make_dataset(sc.n_test, seed=20_000 + seed)
    curve_set = test[: sc.n_curve]
    executor = ToolExecutor(version=sc.rl.tool_pixels)
    model = TinyToolVLM(sc.model)
    sft_losses = sft_init(model, train, sc.sft, seed, executor)
    out: dict = {"seed": seed, "sft_final_loss": float(np.mean(sft_losses[-20:]))}
    # the gate: can the warm-started model read the tallest bar of a chart shown as the second image?
    out["gate_read_I2_max"] = read_second_image(model, [s for s in test if s.qtype == "MAX"])
    out["pure"] = evaluate(model, test, "pure")
    out["prompted"] = evaluate(model, test, "tools", executor, sc.rl.version)
    sft_state = {k: v.clone() for k, v in model.state_dict().items()}

    # arm 1: text-only GRPO (PURE-mode rollouts), same budget
    torch.manual_seed(seed + 1)
    text_cfg = replace(sc.rl, use_tools=False)
    hist_text = train_grpo(
        model,
        train,
        text_cfg,
        seed,
        executor,
        eval_fn=lambda m: evaluate(m, curve_set, "pure")["acc"],
        eval_every=sc.eval_every,
    )
    out["text_grpo"] = evaluate(model, test, "pure")

    # arm 2: VTool-R1 from the same SFT weights
    model.load_state_dict(sft_state)
    torch.manual_seed(seed + 1)
    hist_tool = train_grpo(
        model,
        train,
        sc.rl,
        seed,
        executor,
        eval_fn=lambda m: evaluate(m, curve_set, "tools", executor, sc.rl.version),
        eval_every=sc.eval_every,
    )
    out["vtool"] = evaluate(model, test, "tools", executor, sc.rl.version)
    out["curve_text"] = {"step": hist_text["eval_step"], "acc": hist_text["eval"]}
    out["curve_tool"] = {
        "step": hist_tool["eval_step"],
        "acc": [e["acc"] for e in hist_tool["eval"]],
        "tool_rate": [e["tool_rate"] for e in hist_tool["eval"]],
        **{f"tool_rate_{t}": [e[f"tool_rate_{t}"] for e in hist_tool["eval"]] for t in QUESTION_TYPES},
    }
    out["train_reward_tool"] = hist_tool["reward"]
    out["train_reward_text"] = hist_text["reward"]
    # per-step scalars for metrics.jsonl (popped by _run_tiny, logged through RunContext.log)
    out["_log"] = {
        "sft": [(i + 1, {"loss": float(v)}) for i, v in enumerate(sft_losses)],
        "text_grpo": _hist_rows(hist_text, lambda e: {"eval_acc": float(e)}),
        "vtool": _hist_rows(
            hist_tool, lambda e: {"eval_acc": float(e["acc"]), "eval_tool_rate": float(e["tool_rate"])}
        ),
    }
    out["executor_stats"] = dict(executor.stats)
    # one example rollout of the final VTool model (a VAL question), for the figure
    ex_sample = next(s for s in test if s.qtype == "VAL")
    ro = rollout_tools(model, [ex_sample], torch.zeros(1, dtype=torch.long), executor, 0.0, 0.0, sc.rl.version)
    out["example"] = {
        "image": ex_sample.image,
        "edited": ro.img2[0],
        "question": ex_sample.question,
        "answer": ex_sample.answer,
        "y1": ro.texts[0][0],
        "y2": ro.texts[0][1],
        "reward": float(ro.rewards[0]),
        "n_images": int(ro.n_images[0]),
    }
    out["wall_s"] = time.perf_counter() - t0
    return out


def _example_figure(path, ex: dict) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1, 1, 1.6]})
    axes[0].imshow(ex["image"], interpolation="nearest")
    axes[0].set_title("I (original)")
    axes[1].imshow(ex["edited"], interpolation="nearest")
    axes[1].set_title("I' (tool output)" if ex["n_images"] == 2 else "(no tool call)")
    for a in axes[:2]:
        a.axis("off")
    axes[2].axis("off")
    text = (
        f"Q: {ex['question']}  (truth: {ex['answer']})\n\nround 1 (y'):\n{ex['y1']}\n\n"
        f"round 2 (y):\n{ex['y2'] or '-'}\n\nreward: {ex['reward']:.0f}"
    )
    axes[2].text(0, 1, text, va="top", family="monospace", fontsize=6.5, wrap=True)
    save_fig(fig, path)


def _run_tiny(ctx: RunContext) -> RunOutput:
    sc: RunConfig = ctx.cfg
    results = seed_map(
        partial(run_seed, sc=sc),
        ctx.seeds,
        workers=sc.workers,
        threads_per_worker=sc.threads,
        progress=ctx.progress,
        desc="seeds",
    )
    for r in results:
        for series, rows in r.pop("_log").items():
            for step, scalars in rows:
                ctx.log(step, series=f"seed{r['seed']}/{series}", **scalars)
    return _summarise(ctx, sc, results)


ARMS = {
    "pure": "SFT, pure run (no tools)",
    "prompted": "SFT, prompted tool use",
    "text_grpo": "text-only GRPO",
    "vtool": "VTool-R1 (GRPO + tools)",
}
"""Result key of each evaluated arm -> its label in the tables."""


def _pct(x: float) -> float:
    return 100.0 * x


def _fmt(s: dict) -> str:
    return f"{s['mean']:.1f} ± {s['std']:.1f}"


@dataclass(frozen=True)
class _Stats:
    """Per-seed numbers of a run aggregated over seeds (percentages)."""

    per_seed: dict
    """arm -> accuracy per seed."""
    acc: dict
    """arm -> mean_std of the accuracy."""
    gap_seed: list
    """VTool-R1 tool-rate gap (VAL+CMP - CNT+MAX) per seed."""
    gap: dict
    """mean_std of ``gap_seed``."""
    rate: dict
    """question type -> mean_std of VTool-R1's tool-call rate."""
    prompted_rate: dict
    """question type -> mean_std of the prompted tool-call rate."""
    acc_type: dict
    """arm -> question type -> mean_std of the accuracy."""

    @property
    def mean(self) -> dict:
        return {a: self.acc[a]["mean"] for a in ARMS}


def _aggregate(results: list[dict]) -> _Stats:
    per_seed = {a: [_pct(r[a]["acc"]) for r in results] for a in ARMS}
    gap_seed = [_pct(_tool_gap(r["vtool"])) for r in results]
    return _Stats(
        per_seed=per_seed,
        acc={a: mean_std(v) for a, v in per_seed.items()},
        gap_seed=gap_seed,
        gap=mean_std(gap_seed),
        rate={t: mean_std([_pct(r["vtool"][f"tool_rate_{t}"]) for r in results]) for t in QUESTION_TYPES},
        prompted_rate={t: mean_std([_pct(r["prompted"][f"tool_rate_{t}"]) for r in results]) for t in QUESTION_TYPES},
        acc_type={a: {t: mean_std([_pct(r[a][f"acc_{t}"]) for r in results]) for t in QUESTION_TYPES} for a in ARMS},
    )


def _measured(st: _Stats) -> dict:
    """Claim name -> the numbers its check reads."""
    m, rate = st.mean, st.rate
    return {
        "C1": {"vtool_acc": m["vtool"], "text_grpo_acc": m["text_grpo"], "diff": m["vtool"] - m["text_grpo"]},
        "C2": {"text_grpo_acc": m["text_grpo"], "pure_acc": m["pure"], "diff": m["text_grpo"] - m["pure"]},
        "C3": {"vtool_acc": m["vtool"], "prompted_acc": m["prompted"], "diff": m["vtool"] - m["prompted"]},
        "C4": {
            "rate_val_cmp": 0.5 * (rate["VAL"]["mean"] + rate["CMP"]["mean"]),
            "rate_cnt_max": 0.5 * (rate["CNT"]["mean"] + rate["MAX"]["mean"]),
            "gap": st.gap["mean"],
        },
    }


RAW_KEYS = (
    "seed",
    "pure",
    "prompted",
    "text_grpo",
    "vtool",
    "curve_text",
    "curve_tool",
    "sft_final_loss",
    "executor_stats",
    "gate_read_I2_max",
    "wall_s",
)
"""Per-seed entries copied unchanged into ``metrics.per_seed_raw``."""


def _gate(sc: RunConfig, results: list[dict]) -> dict:
    """Before RL, the SFT model must read the tallest bar of a chart shown as image 2 (where I' sits in round
    2) at >= ``sc.gate_min_pct`` (mean over seeds); otherwise RL cannot learn to exploit I' at this scale."""
    per_seed = [_pct(r["gate_read_I2_max"]) for r in results]
    ms = mean_std(per_seed)
    return {
        "read_tallest_on_I2_pct": {"per_seed": per_seed, **ms},
        "min_pct": sc.gate_min_pct,
        "passed": bool(ms["mean"] >= sc.gate_min_pct),
    }


def _metrics(sc: RunConfig, results: list[dict], st: _Stats) -> dict:
    return {
        "gate": _gate(sc, results),
        "accuracy_pct": {a: {"per_seed": st.per_seed[a], **st.acc[a]} for a in ARMS},
        "accuracy_by_type_pct": st.acc_type,
        "vtool_tool_rate_pct": st.rate,
        "prompted_tool_rate_pct": st.prompted_rate,
        "vtool_tool_gap_pct": {"per_seed": st.gap_seed, **st.gap},
        "vtool_tool_success": [r["vtool"]["tool_success"] for r in results],
        "call_arg_acc_pct": {a: mean_std([_pct(r[a]["call_arg_acc"]) for r in results]) for a in ("prompted", "vtool")},
        "per_seed_raw": [{k: r[k] for k in RAW_KEYS} for r in results],
        "config": {
            "sft": asdict(sc.sft),
            "rl": asdict(sc.rl),
            "model": asdict(sc.model),
            "n_train": sc.n_train,
            "n_test": sc.n_test,
        },
    }


def _figures(ctx: RunContext, results: list[dict], st: _Stats) -> None:
    m = st.mean
    steps = results[0]["curve_tool"]["step"]
    curves = {}
    for name, key in (("VTool-R1", "curve_tool"), ("text-only GRPO", "curve_text")):
        ys = np.array([[_pct(v) for v in r[key]["acc"]] for r in results])
        curves[name] = (steps, ys.mean(0), ys.std(0))
    curves["SFT pure run"] = (steps, [m["pure"]] * len(steps))
    curves["SFT prompted tools"] = (steps, [m["prompted"]] * len(steps))
    plot_curves(
        ctx.figure_path("accuracy_vs_steps"),
        curves,
        "RL step",
        "greedy accuracy %",
        f"curve set, mean ± std over {len(results)} seeds",
    )
    rate_curves = {
        t: (steps, np.mean([[_pct(v) for v in r["curve_tool"][f"tool_rate_{t}"]] for r in results], 0))
        for t in QUESTION_TYPES
    }
    plot_curves(ctx.figure_path("tool_rate_vs_steps"), rate_curves, "RL step", "tool-call rate % (VTool-R1)")
    plot_bars(
        ctx.figure_path("tool_rate_by_type"),
        {f"{t} (RL)": st.rate[t]["mean"] for t in QUESTION_TYPES}
        | {f"{t} (prompted)": st.prompted_rate[t]["mean"] for t in QUESTION_TYPES},
        "tool-call rate %",
        "tool-call rate per question type",
    )
    _example_figure(ctx.figure_path("example_rollout"), results[0]["example"])


def _tables(st: _Stats) -> dict:
    rows = [
        [label, _fmt(st.acc[a]), ", ".join(f"{v:.1f}" for v in st.per_seed[a])]
        + [_fmt(st.acc_type[a][t]) for t in QUESTION_TYPES]
        for a, label in ARMS.items()
    ]
    return {
        "Accuracy % (greedy, held-out test set)": markdown_table(
            ["arm", "acc mean ± std", "per seed", *QUESTION_TYPES], rows
        ),
        "Tool-call rate % per question type": markdown_table(
            ["model", *QUESTION_TYPES, "gap (VAL+CMP − CNT+MAX)"],
            [
                ["VTool-R1", *(_fmt(st.rate[t]) for t in QUESTION_TYPES), _fmt(st.gap)],
                ["SFT prompted", *(_fmt(st.prompted_rate[t]) for t in QUESTION_TYPES), "-"],
            ],
        ),
    }


def _notes(sc: RunConfig, results: list[dict], metrics: dict) -> list[str]:
    arg, gate = metrics["call_arg_acc_pct"], metrics["gate"]
    read = gate["read_tallest_on_I2_pct"]
    return [
        f"Gate {'PASSED' if gate['passed'] else 'FAILED'}: before RL the SFT model reads the tallest bar of a "
        f"chart shown as image 2 at {read['mean']:.1f}% (per seed "
        + ", ".join(f"{v:.1f}" for v in read["per_seed"])
        + f"; needs >= {gate['min_pct']:.0f}%)"
        + ("." if gate["passed"] else "; the claims are then untestable at this budget (I' cannot be read)."),
        f"RL budget per arm: {sc.rl.steps} steps x {sc.rl.n_prompts} prompts x G={sc.rl.group_size} "
        f"(version {sc.rl.version}); SFT {sc.sft.pure_steps}+{sc.sft.tool_steps} steps.",
        "Call-argument accuracy (VAL/CMP tool calls naming exactly the question's labels), prompted -> "
        f"VTool-R1: {arg['prompted']['mean']:.1f}% -> {arg['vtool']['mean']:.1f}%.",
        "Executor calls (fast whitelisted path / sandbox): "
        + "; ".join(f"seed {r['seed']}: {r['executor_stats']}" for r in results),
    ]


def _summarise(ctx: RunContext, sc: RunConfig, results: list[dict]) -> RunOutput:
    """Aggregate the seeds: claims' numbers, metrics, figures, tables and notes."""
    st = _aggregate(results)
    metrics = _metrics(sc, results, st)
    _figures(ctx, results, st)
    return RunOutput(metrics=metrics, measured=_measured(st), tables=_tables(st), notes=_notes(sc, results, metrics))


def run(ctx: RunContext) -> RunOutput:
    if ctx.scale == "paper":
        from .hf_policy import run_paper_scale

        return run_paper_scale(ctx)
    return _run_tiny(ctx)


EXPERIMENT = Experiment(
    slug="vtool_r1",
    title="VTool-R1: VLMs Learn to Think with Images via Reinforcement Learning on Multimodal Tool Use",
    arxiv="2505.19255",
    claims=(
        Claim(
            "C1",
            "VTool-R1 accuracy >= text-only GRPO accuracy + 5 points (equal RL budget)",
            "VTool-R1-7B 80.7 vs R1-VL-7B 63.8 on the chart split [2nd]",
            "mean acc(VTool-R1) - mean acc(text-only GRPO) >= 5 points",
            lambda m: m["diff"] >= 5.0,
        ),
        Claim(
            "C2",
            "text-only GRPO accuracy > accuracy of the SFT model answering without tools",
            "R1-VL-style text RL improves over the pure run (our added baseline)",
            "mean acc(text-only GRPO) - mean acc(SFT pure run) > 0",
            lambda m: m["diff"] > 0.0,
        ),
        Claim(
            "C3",
            "VTool-R1 accuracy >= prompted tool use without RL + 10 points",
            "3B: 64.0 vs 24.6; 7B: 80.7 vs 53.4 (chart split) [2nd]",
            "mean acc(VTool-R1) - mean acc(SFT prompted tool use) >= 10 points",
            lambda m: m["diff"] >= 10.0,
        ),
        Claim(
            "C4",
            "selective tool use: tool-call rate on VAL/CMP exceeds the rate on CNT/MAX by >= 20 points",
            "tool use is selective and non-monotone over training (qualitative)",
            "mean over seeds of [rate(VAL,CMP) - rate(CNT,MAX)] >= 20 points (VTool-R1, greedy)",
            lambda m: m["gap"] >= 20.0,
        ),
    ),
    run=run,
    config=config_for,
    runs_model_code=True,  # the policy's edit code that is not a whitelisted call runs in the sandbox
)
