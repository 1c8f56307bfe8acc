"""Real scale: the temperature rule of AceReason-Nemotron 1.1 (Sec. 3.4, Fig. 5) on a real instruction-tuned
causal LM (default: the registered SmolLM2-135M-Instruct; any local causal LM by ``--set real.model=...``).

Per seed: code-generated arithmetic word problems with checkable integer answers; H_T of the model's own
rollouts at every T of the grid (sampled at T, teacher-forced, entropy of softmax(logits / T)); T* by the
paper's rule (bisection for H_T = 0.3 on rollouts at each tried T, :func:`.entropy.calibrate_temperature`);
H_T at T* on fresh prompts; then strict on-policy GRPO with LoRA at T*, at T = 0.6 and at the other fixed
grid temperatures, the zero-advantage share of the first rollout batch of each, and held-out avg@k at the
inference temperature 0.6 before and after. A target outside [H(T_min), H(T_max)] makes C1 untestable
(reported, the target is never moved).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from iclr26.core.experiment import RunContext, RunOutput
from iclr26.core.hf import pure_generation_kwargs

from .entropy import CalibrationResult, calibrate_temperature, temperature_adjusted_entropy
from .rl import OnPolicyGRPOConfig, onpolicy_grpo_loss, zero_advantage_fraction

__all__ = [
    "Problem",
    "RealRollouts",
    "answer_reward",
    "calibrate_on_rollouts",
    "chat_prompt",
    "grpo_step",
    "make_problems",
    "rollout_entropy_at",
    "run_real",
    "sample",
]

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana")
_ITEMS = ("apples", "books", "coins", "pencils", "stamps", "marbles")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int


def make_problems(n: int, level: int, rng: random.Random, exclude: set[str] | None = None) -> list[Problem]:
    """``n`` distinct word problems with ``level`` + 1 steps (a start count, then ``level`` gains/losses
    of 1..9 items each, never below 0); the answer is the final count. ``exclude``: questions to skip."""
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    exclude = exclude or set()
    out: list[Problem] = []
    seen: set[str] = set(exclude)
    while len(out) < n:
        who, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        count = rng.randint(2, 20)
        parts = [f"{who} has {count} {item}."]
        for _ in range(level):
            k = rng.randint(1, 9)
            if rng.random() < 0.5 and count - k >= 0:
                parts.append(f"{who} gives away {k}.")
                count -= k
            else:
                parts.append(f"{who} gets {k} more.")
                count += k
        q = " ".join(parts) + f" How many {item} does {who} have now?"
        if q not in seen:
            seen.add(q)
            out.append(Problem(q, count))
    return out


def chat_prompt(tokenizer: Any, question: str) -> str:
    """The question through the tokenizer's chat template (plain text when it has none)."""
    content = question + " Reply with only the final number."
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    return content


_NUM = re.compile(r"-?\d+(?:,\d{3})*")


def answer_reward(response: str, answer: int) -> float:
    """1 if the last integer in ``response`` equals ``answer`` (the paper's rule-based outcome reward on a
    final answer; the prompt asks for only the final number), else 0; no number gives 0."""
    nums = _NUM.findall(response)
    if not nums:
        return 0.0
    return float(int(nums[-1].replace(",", "")) == int(answer))


@dataclass
class RealRollouts:
    """``G`` sampled responses per prompt, laid out prompt by prompt.

    sequences: ``[B, P + L]`` prompt (left padded) + response ids. prompt_len: P. attention: ``[B, P + L]``.
    response_mask: ``[B, L]`` response tokens up to and including the first EOS. truncated: ``[B]`` no EOS
    within the budget. rewards: ``[B]``. texts: decoded responses.
    """

    sequences: Tensor
    prompt_len: int
    attention: Tensor
    response_mask: Tensor
    truncated: Tensor
    rewards: Tensor
    texts: list[str]


@torch.no_grad()
def sample(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    temperature: float,
    group_size: int,
    max_new_tokens: int,
    seed: int,
) -> RealRollouts:
    """Sample ``group_size`` responses per problem at ``temperature`` with pure sampling (nothing from the
    model's generation config), and score them with :func:`answer_reward`."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(model.parameters()).device
    enc = tokenizer([chat_prompt(tokenizer, p.question) for p in problems], return_tensors="pt", padding=True)
    enc = enc.to(device)
    torch.manual_seed(seed)
    out = model.generate(
        **enc,
        **pure_generation_kwargs(do_sample=True, temperature=float(temperature)),
        max_new_tokens=max_new_tokens,
        num_return_sequences=group_size,
        pad_token_id=tokenizer.pad_token_id,
    )
    p_len = enc["input_ids"].shape[1]
    resp = out[:, p_len:]
    is_eos = resp == tokenizer.eos_token_id
    after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
    resp_mask = (~after).long()
    truncated = ~is_eos.any(1)
    attn = torch.cat([enc["attention_mask"].repeat_interleave(group_size, 0), resp_mask], 1)
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    answers = [p.answer for p in problems for _ in range(group_size)]
    rewards = torch.tensor([answer_reward(t, a) for t, a in zip(texts, answers, strict=True)])
    return RealRollouts(out, p_len, attn, resp_mask, truncated, rewards, texts)


def _response_logits(model: Any, ro: RealRollouts) -> Tensor:
    logits = model(input_ids=ro.sequences, attention_mask=ro.attention).logits
    return logits[:, ro.prompt_len - 1 : -1].float()


@torch.no_grad()
def rollout_entropy_at(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    temperature: float,
    group_size: int,
    max_new: int,
    seed: int,
) -> float:
    """H_T at ``temperature``: the model's own rollouts sampled at T, re-scored teacher-forced, entropy of
    softmax(logits / T) per response token, token mean (verl's ``actor/entropy``)."""
    ro = sample(model, tokenizer, problems, temperature, group_size, max_new, seed)
    return float(temperature_adjusted_entropy(_response_logits(model, ro), temperature, ro.response_mask))


def grpo_step(
    model: Any, opt: torch.optim.Optimizer, ro: RealRollouts, temperature: float, cfg: OnPolicyGRPOConfig, clip: float
) -> dict[str, float]:
    """One strict on-policy GRPO update on ``ro`` (sampled at ``temperature``), with overlong filtering."""
    model.train()
    loss_mask = ro.response_mask.float()
    rewards = ro.rewards.float()
    if cfg.overlong_filter:
        loss_mask = loss_mask * (~ro.truncated).float()[:, None]
    logits = _response_logits(model, ro)
    tokens = ro.sequences[:, ro.prompt_len :]
    loss, stats = onpolicy_grpo_loss(logits, tokens, rewards, loss_mask, temperature, cfg)
    opt.zero_grad(set_to_none=True)
    if loss_mask.sum() > 0 and loss.requires_grad:
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], clip)
        opt.step()
    model.eval()
    stats["loss"] = float(loss.detach())
    stats["truncated_frac"] = float(ro.truncated.float().mean())
    return stats


def _avg_at_k(model: Any, tok: Any, problems: Sequence[Problem], rc: Any, seed: int) -> dict[str, float]:
    """avg@k (percent) and pass@k at the inference temperature, in chunks."""
    accs, passes = [], []
    for i in range(0, len(problems), rc.eval_chunk):
        chunk = problems[i : i + rc.eval_chunk]
        ro = sample(model, tok, chunk, rc.eval_temperature, rc.eval_samples, rc.max_new_tokens, seed + i)
        r = ro.rewards.reshape(len(chunk), rc.eval_samples)
        accs.append(r.mean(1))
        passes.append((r.amax(1) > 0).float())
    return {"acc": 100.0 * float(torch.cat(accs).mean()), "pass_at_k": float(torch.cat(passes).mean())}


def _lora(model: Any, rc: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model, LoraConfig(r=rc.lora_rank, lora_alpha=2 * rc.lora_rank, target_modules=list(rc.lora_targets))
    )


def calibrate_on_rollouts(
    model: Any, tok: Any, problems: Sequence[Problem], rc: Any, seed: int
) -> tuple[dict[str, float], CalibrationResult]:
    """H_T over ``rc.temperatures`` and T* by the paper's rule (bisection for H_T = ``rc.entropy_target`` on
    ``[rc.t_min, rc.t_max]``); every H_T comes from the model's own rollouts sampled at that T, with common
    random numbers (the same sampling seed at every T)."""

    def h_at(t: float) -> float:
        return rollout_entropy_at(model, tok, problems, t, rc.group_size, rc.max_new_tokens, seed)

    grid = {str(t): h_at(t) for t in rc.temperatures}
    cal = calibrate_temperature(h_at, rc.entropy_target, (rc.t_min, rc.t_max), rc.tol, rc.max_iter)
    return grid, cal


def run_seed(rc: Any, seed: int, model_dir: str, log: Any = print) -> dict[str, Any]:
    """Every measurement of one seed (see the module docstring)."""
    from iclr26.core.hf import load_local

    t0 = time.time()
    torch.manual_seed(seed)
    base, tok = load_local(model_dir, dtype=torch.float32)
    rng = random.Random(f"acereason-real-{seed}")
    held = make_problems(rc.n_eval, rc.level, rng)
    fresh = make_problems(rc.calib_prompts, rc.level, rng, {p.question for p in held})
    used = {p.question for p in held + fresh}
    calib = make_problems(rc.calib_prompts, rc.level, rng, used)
    used |= {p.question for p in calib}
    n_train = rc.steps * rc.prompts_per_step
    train = make_problems(n_train, rc.level, rng, used)

    grid, cal = calibrate_on_rollouts(base, tok, calib, rc, 20_000 + seed)
    log(f"[seed {seed}] H_T grid {grid} ({time.time() - t0:.0f}s)")
    h_fresh = rollout_entropy_at(base, tok, fresh, cal.temperature, rc.group_size, rc.max_new_tokens, 30_000 + seed)
    log(f"[seed {seed}] T* = {cal.temperature:.3f} (clamped={cal.clamped}), H fresh {h_fresh:.3f}")
    init = _avg_at_k(base, tok, held, rc, 40_000 + seed)
    log(f"[seed {seed}] init avg@{rc.eval_samples} {init['acc']:.1f} pass@k {init['pass_at_k']:.2f}")
    init_state = {k: v.clone() for k, v in base.state_dict().items()}
    arms: dict[str, dict] = {}
    gcfg = OnPolicyGRPOConfig(group_size=rc.group_size, overlong_filter=rc.overlong_filter)
    for name, temp in [("T*", cal.temperature)] + [(f"T={t}", t) for t in rc.temperatures if t in rc.rl_temperatures]:
        base.load_state_dict(init_state)
        torch.manual_seed(seed)
        model = _lora(base, rc)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=rc.lr, weight_decay=0.0)
        hist = []
        for step in range(rc.steps):
            batch = train[step * rc.prompts_per_step : (step + 1) * rc.prompts_per_step]
            ro = sample(model, tok, batch, temp, rc.group_size, rc.max_new_tokens, 50_000 + 97 * seed + step)
            stats = grpo_step(model, opt, ro, temp, gcfg, rc.grad_clip)
            stats["zero_adv_frac"] = zero_advantage_fraction(ro.rewards, rc.group_size)
            hist.append({"step": step, **stats})
        after = _avg_at_k(model, tok, held, rc, 40_000 + seed)
        arms[name] = {"temperature": temp, "history": hist, "hard": after}
        log(
            f"[seed {seed}] RL {name} (T={temp:.3f}): avg@k {after['acc']:.1f}, zero-adv step0 "
            f"{hist[0]['zero_adv_frac']:.2f} ({time.time() - t0:.0f}s)"
        )
        base = model.unload()  # drop the adapters, back to the plain model for the next arm
    return {
        "seed": seed,
        "h_grid": grid,
        "t_star": cal.temperature,
        "h_calib": cal.entropy,
        "history": cal.history,
        "clamped": cal.clamped,
        "h_fresh": h_fresh,
        "init": init,
        "arms": arms,
        "seconds": time.time() - t0,
    }


def _m(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs))


def run_real(ctx: RunContext) -> RunOutput:
    """All seeds, then the claims' inputs (means over seeds, as at ``small``) and the H_T(T) figure."""
    from iclr26.core.checkpoints import resolve_model_dir

    rc = ctx.cfg.real
    model_dir = str(resolve_model_dir(rc.model))
    per = []
    for s in ctx.seeds:
        out = run_seed(rc, s, model_dir)
        per.append(out)
        for name, arm in out["arms"].items():
            for row in arm["history"]:
                ctx.log(row["step"], series=f"seed{s}/{name}", **{k: v for k, v in row.items() if k != "step"})
    grid = [str(t) for t in rc.temperatures]
    rl_grid = [str(t) for t in rc.temperatures if t in rc.rl_temperatures]
    clamped = [o["clamped"] for o in per if o["clamped"]]
    c1 = {
        "target": rc.entropy_target,
        "h_grid": {t: _m([o["h_grid"][t] for o in per]) for t in grid},
        "h_fresh_t_star": _m([o["h_fresh"] for o in per]),
        "t_star": _m([o["t_star"] for o in per]),
        "zero_adv_step0": {t: _m([o["arms"][f"T={t}"]["history"][0]["zero_adv_frac"] for o in per]) for t in rl_grid},
        "zero_adv_step0_t_star": _m([o["arms"]["T*"]["history"][0]["zero_adv_frac"] for o in per]),
        "target_reachable": not clamped,
    }
    c2 = {
        "acc": {t: _m([o["arms"][f"T={t}"]["hard"]["acc"] for o in per]) for t in rl_grid},
        "acc_t_star": _m([o["arms"]["T*"]["hard"]["acc"] for o in per]),
        "init": _m([o["init"]["acc"] for o in per]),
    }
    pass_k = _m([o["init"]["pass_at_k"] for o in per])
    gate = {
        "rule": f"init pass@{rc.eval_samples} on held-out problems in [{rc.gate_pass_lo}, {rc.gate_pass_hi}] "
        "(mean over seeds)",
        "init_pass_at_k": pass_k,
        "passed": rc.gate_pass_lo <= pass_k <= rc.gate_pass_hi,
    }
    if clamped:
        c1["untestable"] = f"H_T = {rc.entropy_target} is outside [H({rc.t_min}), H({rc.t_max})] ({clamped})"
    if not gate["passed"]:
        for c in (c1, c2):
            c["untestable"] = (c.get("untestable", "") + "; " if c.get("untestable") else "") + "gate failed"
    untestable = [n for n, c in (("C1", c1), ("C2", c2)) if c.get("untestable")]
    notes = [
        f"competence gate: {'PASSED' if gate['passed'] else 'FAILED'} ({gate['rule']}; {pass_k:.2f})",
        "H_T = 0.3 "
        + ("is reachable" if not clamped else f"is NOT reachable ({clamped}): C1 untestable")
        + f" on T in [{rc.t_min}, {rc.t_max}]",
    ]
    tables = {"H_T over T and RL avg@k per seed": _table(per)}
    _figure(ctx, per, rc)
    metrics = {"competence_gate": gate, "untestable": untestable, "per_seed": per}
    for n in notes:
        print(n)
    return RunOutput(metrics=metrics, measured={"C1": c1, "C2": c2}, tables=tables, notes=notes)


def _table(per: list) -> str:
    grid = list(per[0]["h_grid"])
    arms = list(per[0]["arms"])
    head = ["seed", *(f"H({t})" for t in grid), "T*", "H fresh(T*)", "init acc", *(f"acc {a}" for a in arms)]
    head += [f"zero-adv0 {a}" for a in arms]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for o in per:
        cells = [str(o["seed"]), *(f"{o['h_grid'][t]:.3f}" for t in grid), f"{o['t_star']:.3f}", f"{o['h_fresh']:.3f}"]
        cells += [f"{o['init']['acc']:.1f}", *(f"{o['arms'][a]['hard']['acc']:.1f}" for a in arms)]
        cells += [f"{o['arms'][a]['history'][0]['zero_adv_frac']:.2f}" for a in arms]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _figure(ctx: RunContext, per: list, rc: Any) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for o in per:
        pts = sorted([(float(t), h) for t, h in o["h_grid"].items()] + [tuple(x) for x in o["history"]])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, alpha=0.7, label=f"seed {o['seed']}")
        ax.axvline(o["t_star"], ls=":", lw=0.8)
    ax.axhline(rc.entropy_target, color="k", ls="--", lw=1, label=f"target {rc.entropy_target}")
    ax.set_xlabel("rollout temperature T")
    ax.set_ylabel("H_T (nats / response token)")
    ax.set_title("H_T(T) on the model's own rollouts")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "h_t_curve.png", dpi=120)
    plt.close(fig)
