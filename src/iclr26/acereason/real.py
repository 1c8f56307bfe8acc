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

from .entropy import CalibrationResult, calibrate_temperature, token_entropy
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
    within the budget. rewards: ``[B]``. texts: decoded responses. entropies: ``[B, L]`` entropy of
    softmax(logits / T) at each response position, from the logits the token was sampled from (``None``
    unless asked for).
    """

    sequences: Tensor
    prompt_len: int
    attention: Tensor
    response_mask: Tensor
    truncated: Tensor
    rewards: Tensor
    texts: list[str]
    entropies: Tensor | None = None


def _positions(attention: Tensor) -> Tensor:
    """RoPE positions of left-padded rows: 0 at each row's first real token (padding gets 0)."""
    return (attention.long().cumsum(-1) - 1).clamp_min(0)


@torch.no_grad()
def sample(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    temperature: float,
    group_size: int,
    max_new_tokens: int,
    seed: int,
    entropy: bool = False,
) -> RealRollouts:
    """Sample ``group_size`` responses per problem at ``temperature`` with pure sampling (``softmax(z / T)``,
    no top-k / top-p / repetition penalty), and score them with :func:`answer_reward`.

    Each prompt is run through the model once and its KV cache is shared by its ``group_size`` rollouts
    (the same distribution as ``generate(num_return_sequences=G)``, without G copies of the prompt's
    forward pass). ``entropy=True`` also keeps the per-token H_T of the sampling logits, which equal the
    teacher-forced logits of the finished rollout (checked in the tests), so H_T needs no second forward.
    """
    if not temperature > 0:
        raise ValueError(f"sampling needs a temperature > 0, got {temperature}")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    device = next(model.parameters()).device
    enc = tokenizer([chat_prompt(tokenizer, p.question) for p in problems], return_tensors="pt", padding=True)
    enc = enc.to(device)
    ids, p_mask = enc["input_ids"], enc["attention_mask"]
    gen = torch.Generator(device=device).manual_seed(int(seed))
    pos = _positions(p_mask)
    out = model(input_ids=ids, attention_mask=p_mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(group_size)
    logits = out.logits[:, -1].repeat_interleave(group_size, 0)
    mask = p_mask.repeat_interleave(group_size, 0)
    nxt = pos[:, -1:].repeat_interleave(group_size, 0) + 1
    done = torch.zeros(mask.shape[0], dtype=torch.bool, device=device)
    toks: list[Tensor] = []
    ents: list[Tensor] = []
    for step in range(max_new_tokens):
        if entropy:
            ents.append(token_entropy(logits.float(), temperature))
        probs = torch.softmax(logits.float() / temperature, -1)
        t = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        t = torch.where(done, torch.full_like(t, pad), t)
        toks.append(t)
        done = done | (t == eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        out = model(input_ids=t[:, None], attention_mask=mask, position_ids=nxt, past_key_values=cache, use_cache=True)
        cache, logits, nxt = out.past_key_values, out.logits[:, -1], nxt + 1
    resp = torch.stack(toks, 1)
    p_len = ids.shape[1]
    is_eos = resp == eos
    after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
    resp_mask = (~after).long()
    truncated = ~is_eos.any(1)
    seqs = torch.cat([ids.repeat_interleave(group_size, 0), resp], 1)
    attn = torch.cat([p_mask.repeat_interleave(group_size, 0), resp_mask], 1)
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    answers = [p.answer for p in problems for _ in range(group_size)]
    rewards = torch.tensor([answer_reward(t, a) for t, a in zip(texts, answers, strict=True)])
    h = torch.stack(ents, 1) if entropy else None
    return RealRollouts(seqs, p_len, attn, resp_mask, truncated, rewards, texts, h)


def _response_logits(model: Any, ro: RealRollouts) -> Tensor:
    """Teacher-forced logits predicting each response token, ``[B, L, V]`` (the LM head only on those)."""
    n_resp = ro.sequences.shape[1] - ro.prompt_len
    out = model(
        input_ids=ro.sequences,
        attention_mask=ro.attention,
        position_ids=_positions(ro.attention),
        logits_to_keep=n_resp + 1,
    )
    return out.logits[:, -(n_resp + 1) : -1].float()


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
    """H_T at ``temperature``: the model's own rollouts sampled at T, entropy of softmax(logits / T) per
    response token (the logits each token was sampled from), token mean over response tokens (verl's
    ``actor/entropy``)."""
    ro = sample(model, tokenizer, problems, temperature, group_size, max_new, seed, entropy=True)
    m = ro.response_mask.to(ro.entropies.dtype)
    return float((ro.entropies * m).sum() / m.sum().clamp_min(1.0))


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
    random numbers (the same sampling seed at every T). A T met twice (a bisection midpoint on the grid) is
    measured once: with the same seed its rollouts, and so its H_T, are the same."""
    measured: dict[float, float] = {}

    def h_at(t: float) -> float:
        key = round(float(t), 9)
        if key not in measured:
            measured[key] = rollout_entropy_at(model, tok, problems, t, rc.group_size, rc.max_new_tokens, seed)
        return measured[key]

    grid = {str(t): h_at(t) for t in rc.temperatures}
    cal = calibrate_temperature(h_at, rc.entropy_target, (rc.t_min, rc.t_max), rc.tol, rc.max_iter)
    return grid, cal


def run_seed(rc: Any, seed: int, model_dir: str, log: Any = print) -> dict[str, Any]:
    """Every measurement of one seed (see the module docstring)."""
    from iclr26.core.hf import load_local

    t0 = time.time()
    timings: dict[str, float] = {}
    torch.manual_seed(seed)
    base, tok = load_local(model_dir, dtype=torch.float32)
    timings["load"] = time.time() - t0
    rng = random.Random(f"acereason-real-{seed}")
    held = make_problems(rc.n_eval, rc.level, rng)
    fresh = make_problems(rc.calib_prompts, rc.level, rng, {p.question for p in held})
    used = {p.question for p in held + fresh}
    calib = make_problems(rc.calib_prompts, rc.level, rng, used)
    used |= {p.question for p in calib}
    n_train = rc.steps * rc.prompts_per_step
    train = make_problems(n_train, rc.level, rng, used)

    t1 = time.time()
    grid, cal = calibrate_on_rollouts(base, tok, calib, rc, 20_000 + seed)
    timings["calibration"] = time.time() - t1
    timings["calibration_evals"] = float(len({round(t, 9) for t in [*rc.temperatures, *(t for t, _ in cal.history)]}))
    log(f"[seed {seed}] H_T grid {grid} ({time.time() - t0:.0f}s)")
    t1 = time.time()
    h_fresh = rollout_entropy_at(base, tok, fresh, cal.temperature, rc.group_size, rc.max_new_tokens, 30_000 + seed)
    timings["fresh"] = time.time() - t1
    log(f"[seed {seed}] T* = {cal.temperature:.3f} (clamped={cal.clamped}), H fresh {h_fresh:.3f}")
    t1 = time.time()
    init = _avg_at_k(base, tok, held, rc, 40_000 + seed)
    timings["eval_init"] = time.time() - t1
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
        t1 = time.time()
        for step in range(rc.steps):
            batch = train[step * rc.prompts_per_step : (step + 1) * rc.prompts_per_step]
            ro = sample(model, tok, batch, temp, rc.group_size, rc.max_new_tokens, 50_000 + 97 * seed + step)
            stats = grpo_step(model, opt, ro, temp, gcfg, rc.grad_clip)
            stats["zero_adv_frac"] = zero_advantage_fraction(ro.rewards, rc.group_size)
            hist.append({"step": step, **stats})
        timings[f"rl {name}"] = time.time() - t1
        t1 = time.time()
        after = _avg_at_k(model, tok, held, rc, 40_000 + seed)
        timings[f"eval {name}"] = time.time() - t1
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
        "timings": timings,
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
