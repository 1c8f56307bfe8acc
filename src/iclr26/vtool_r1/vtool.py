"""VTool-R1 training: SFT initialisation of TinyToolVLM and outcome-reward GRPO (paper section 3.2).

Objective (GRPO, per trainable token t of sample i, group = the G samples of one prompt):

    Â_i = (r_i − mean_G r) / (std_G r + 1e-6)                 (unbiased std, core.grpo.group_advantages)
    ρ_{i,t} = π_θ / π_old
    ℓ_{i,t} = −min(ρ Â, clip(ρ, 1−ε_low, 1+ε_high) Â)           (ε_low 0.2, ε_high 0.3: clip-higher)
    ℓ_{i,t} ← min(ℓ_{i,t}, −c·Â)  where Â < 0                    (dual clip, c = 3)
    L = token_mean(ℓ) + β · token_mean(k3(π_θ ‖ π_ref))         (β = 0.01, low_var_kl clamped to [−10, 10])

Only the tokens with ``mask = 1`` (see :mod:`.rollout`) are trained. The text-only GRPO baseline uses the
same loss on PURE-mode single-turn rollouts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from iclr26.core.grpo import group_advantages, kl_k3, policy_loss

from .charts import ChartSample
from .executor import ToolExecutor
from .model import ID, Q_LEN, R1_LEN, VOCAB, TinyToolVLM, call_tokens, question_tokens
from .rollout import TAIL_LEN, Rollout, rollout_pure, rollout_tools, sequence_logprobs
from .tools import apply_tool

__all__ = [
    "PRESETS",
    "SFTConfig",
    "VToolConfig",
    "dual_clip_policy_loss",
    "sft_init",
    "train_grpo",
    "vtool_loss",
]


@dataclass(frozen=True)
class VToolConfig:
    """GRPO settings of VTool-R1 (defaults: v2 semantics with the v1/EasyR1 loss hyper-parameters).

    version: masking / failure / tool semantics: v2 (training-v2 recipe, default) or v1 (the paper's code).
    tools_version: pixels of the tools (v1 inset 2 / v2 pads, see the tools module); "" = the same as version.
    n_prompts: prompts per RL step (full tiny setting: 32).
    group_size (G): rollouts per prompt (v2: 8; v1: 5).
    steps: RL steps.
    lr: AdamW learning rate of the tiny run (the real runs use 1e-6).
    weight_decay: AdamW weight decay (v1: 1e-2).
    kl_coef (β): weight of the low_var_kl (k3) loss term against the frozen SFT reference.
    clip_eps_low (ε_low): lower clip range of the ratio.
    clip_eps_high (ε_high): upper clip range of the ratio (clip-higher).
    dual_clip (c): dual clip on negative advantages (none or 0 disables).
    minibatches: optimiser steps per rollout batch (1 epoch; the 2nd is slightly off-policy, as in EasyR1).
    grad_clip: max gradient norm.
    temperature: round-1 sampling temperature.
    round2_temperature: round-2 sampling temperature (v1 uses its validation config, 0.5).
    adv_eps: added to the group std of the rewards.
    use_tools: false = the text-only GRPO baseline (PURE-mode single-turn rollouts, same everything else).
    train_tool_tokens: NOT the paper: also train the tool-call tokens y' on the tool path.
    process_reward: NOT the paper (reward-hacking ablation): +this for a successful call, -this for a failed one.
    """

    version: Literal["v1", "v2"] = "v2"
    tools_version: Literal["", "v1", "v2"] = ""
    n_prompts: int = 32
    group_size: int = 8
    steps: int = 250
    lr: float = 1e-4
    weight_decay: float = 1e-2
    kl_coef: float = 0.01
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.3
    dual_clip: float | None = 3.0
    minibatches: int = 2
    grad_clip: float = 1.0
    temperature: float = 1.0
    round2_temperature: float = 1.0
    adv_eps: float = 1e-6
    use_tools: bool = True
    train_tool_tokens: bool = False
    process_reward: float = 0.0

    def __post_init__(self) -> None:
        if self.version not in ("v1", "v2"):
            raise ValueError(f"version must be 'v1' or 'v2', got {self.version!r}")
        if self.tools_version not in ("", "v1", "v2"):
            raise ValueError(f"tools_version must be '', 'v1' or 'v2', got {self.tools_version!r}")
        if self.n_prompts < 1 or self.group_size < 2 or self.steps < 0 or self.minibatches < 1:
            raise ValueError("need n_prompts >= 1, group_size >= 2, steps >= 0, minibatches >= 1")
        if (self.n_prompts * self.group_size) % self.minibatches:
            raise ValueError("n_prompts * group_size must be divisible by minibatches")
        if self.lr <= 0 or self.kl_coef < 0 or self.temperature <= 0 or self.round2_temperature <= 0:
            raise ValueError("lr and temperatures must be > 0, kl_coef >= 0")

    @property
    def tool_pixels(self) -> str:
        """The official version whose tool pixels the run uses."""
        return self.tools_version or self.version


PRESETS = {
    "v2": VToolConfig(),
    "v1": VToolConfig(version="v1", group_size=5, n_prompts=32, round2_temperature=0.5),
}
"""v2: training-v2 semantics (library default); v1: the paper's EasyR1 code (n=5, round-2 T=0.5)."""


# ------------------------------------------------------------------------------------------ losses
def dual_clip_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.3,
    dual_clip: float | None = 3.0,
) -> Tensor:
    """Clipped surrogate with clip-higher and the dual clip, token-mean over ``mask`` (see module doc);
    :func:`iclr26.core.grpo.policy_loss` with VTool-R1's (EasyR1/verl) settings."""
    loss, _ = policy_loss(logp, old_logp, adv, mask, eps_low, eps_high, "token_mean", dual_clip or None)
    return loss


KL_CLAMP = 10.0
"""verl's ``low_var_kl`` clamps each token's k3 estimate to [−10, 10]."""


def vtool_loss(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor | None, adv: Tensor, mask: Tensor, cfg: VToolConfig
) -> Tensor:
    """Policy loss + β · token-mean k3 KL clamped like ``low_var_kl`` (the full VTool-R1 / GRPO loss of one
    minibatch), both from :mod:`iclr26.core.grpo`."""
    loss = dual_clip_policy_loss(logp, old_logp, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high, cfg.dual_clip)
    if cfg.kl_coef > 0 and ref_logp is not None:
        loss = loss + cfg.kl_coef * kl_k3(logp, ref_logp, mask, "token_mean", clamp=KL_CLAMP)
    return loss


# ------------------------------------------------------------------------------------------ SFT
@dataclass(frozen=True)
class SFTConfig:
    """The "instruction-tuned" initialisation of TinyToolVLM.

    pure_steps: (a) steps of PURE-mode direct QA.
    tool_steps: (b) steps imitating TOOLS mode (round-1 calls / direct answers, round-2 answers).
    batch_size: examples per step.
    lr: AdamW learning rate (cosine decay in each phase).
    weight_decay: AdamW weight decay.
    call_prob: P(the round-1 target is a CALL) in (b).
    label_noise: P(each call argument is replaced by a random label of the chart).
    round1_share: fraction of the TOOLS examples that train round 1 (the rest train round 2).
    pure_mix: fraction of PURE examples mixed into (b) batches (keeps the pure run from drifting).
    call_dims: dimensions of the imitated calls: COL (columns, as the ReFocus chart examples); COL,ROW adds rows.
    informative_edit: P(the round-2 example's second image is the edit its noisy call asked for); 0 = always random.
    second_slot: P(a PURE example shows a random other chart as image 1 and the asked chart as image 2), so
        that reading a chart also works on the second image slot, where I' sits in round 2.

    Vertical bar charts are focused by columns (x values); the rows tools keep the first bar as a header. With
    ``informative_edit=0`` (always a random edit, the default) SFT teaches the round-2 format but not when I'
    helps: prompted tool use stays weak and RL has to learn to exploit I'.
    """

    pure_steps: int = 2000
    tool_steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    call_prob: float = 0.6
    label_noise: float = 0.25
    round1_share: float = 0.6
    pure_mix: float = 0.1
    call_dims: tuple[Literal["COL", "ROW"], ...] = ("COL",)
    informative_edit: float = 0.0
    second_slot: float = 0.5


def _pick_labels(s: ChartSample, rng: np.random.Generator, noise: float) -> list[str]:
    labels = (
        list(s.args) if s.args else [str(x) for x in rng.choice(s.labels, size=int(rng.integers(1, 3)), replace=False)]
    )
    return [str(rng.choice(s.labels)) if rng.random() < noise else lab for lab in labels]


def _answer_ids(s: ChartSample) -> list[int]:
    return [ID[s.answer], ID["EOS"]]


def sft_batch(
    samples: list[ChartSample], rng: np.random.Generator, phase: str, cfg: SFTConfig, executor: ToolExecutor
) -> Rollout:
    """Teacher-forced SFT examples as a Rollout whose mask marks the target tokens."""
    B = len(samples)
    tail = torch.full((B, TAIL_LEN), ID["PAD"])
    mask = torch.zeros(B, TAIL_LEN - 1)
    mode = torch.full((B,), ID["PURE"])
    n_images = torch.ones(B, dtype=torch.long)
    img1 = np.stack([s.image for s in samples])
    img2 = np.full_like(img1, 255)
    for i, s in enumerate(samples):
        tail[i, :Q_LEN] = torch.tensor(question_tokens(s.qtype, s.args))
        if phase == "pure" or rng.random() < cfg.pure_mix:
            kind = "pure"
        elif rng.random() < cfg.round1_share:  # TOOLS examples: round 1 (call / direct) or round 2
            kind = "call" if rng.random() < cfg.call_prob else "direct"
        else:
            kind = "round2"
        if kind == "pure":
            if rng.random() < cfg.second_slot:  # the asked chart as image 2, after a distractor chart
                img1[i], img2[i], n_images[i] = samples[(i + 1) % B].image, s.image, 2
            y = _answer_ids(s)
            tail[i, Q_LEN : Q_LEN + len(y)] = torch.tensor(y)
            mask[i, Q_LEN - 1 : Q_LEN - 1 + len(y)] = 1
            continue
        mode[i] = ID["TOOLS"]
        op, dim = str(rng.choice(["MASK", "DRAW", "HIGHLIGHT"])), str(rng.choice(cfg.call_dims))
        call = call_tokens(op, dim, _pick_labels(s, rng, cfg.label_noise))
        if kind == "direct":
            y1 = [ID["DIRECT"], *_answer_ids(s)]
            tail[i, Q_LEN : Q_LEN + len(y1)] = torch.tensor(y1)
            mask[i, Q_LEN - 1 : Q_LEN - 1 + len(y1)] = 1
        elif kind == "call":
            tail[i, Q_LEN : Q_LEN + len(call)] = torch.tensor(call)
            mask[i, Q_LEN - 1 : Q_LEN - 1 + len(call)] = 1
        else:  # round 2: a RANDOM edit (random labels) teaches the format, not how to use I' ...
            rand_labels = [str(x) for x in rng.choice(s.labels, size=int(rng.integers(1, 3)), replace=False)]
            if rng.random() < cfg.informative_edit:  # ... unless the edit is the one the call asked for
                rand_labels = [VOCAB[t] for t in call[3:-1]]
            axis = {"COL": "columns", "ROW": "rows"}[dim]
            chart = Image.fromarray(s.image)
            try:
                edit = apply_tool(
                    chart, rand_labels, s.bboxes, axis=axis, op=op.lower(), tools_version=executor.version
                )
            except (KeyError, ValueError):  # a call the official tool refuses: I' is the unchanged chart
                edit = chart
            img2[i] = np.asarray(edit.convert("RGB"))
            n_images[i] = 2
            tail[i, Q_LEN : Q_LEN + len(call)] = torch.tensor(call)
            tail[i, Q_LEN + R1_LEN] = ID["OBS"]
            y = _answer_ids(s)
            tail[i, Q_LEN + R1_LEN + 1 : Q_LEN + R1_LEN + 1 + len(y)] = torch.tensor(y)
            mask[i, Q_LEN + R1_LEN : Q_LEN + R1_LEN + len(y)] = 1
    return Rollout(mode, n_images, img1, img2, tail, mask, torch.zeros(B), torch.arange(B))


def sft_init(
    model: TinyToolVLM,
    train: list[ChartSample],
    cfg: SFTConfig,
    seed: int,
    executor: ToolExecutor | None = None,
    progress: Callable | None = None,
) -> list[float]:
    """Run SFT phases (a) and (b) in place; returns the per-step losses."""
    executor = executor or ToolExecutor()
    rng = np.random.default_rng(seed + 7919)
    losses = []
    for phase, steps in (("pure", cfg.pure_steps), ("tools", cfg.tool_steps)):
        if steps == 0:
            continue
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda t, n=steps: min(1.0, (t + 1) / 50) * 0.5 * (1 + np.cos(np.pi * t / n))
        )
        it = range(steps) if progress is None else progress(range(steps), desc=f"SFT {phase}")
        for _ in it:
            idx = rng.integers(len(train), size=cfg.batch_size)
            batch = sft_batch([train[i] for i in idx], rng, phase, cfg, executor)
            lp = sequence_logprobs(model, batch)
            loss = -(lp * batch.mask).sum() / batch.mask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    return losses


# ------------------------------------------------------------------------------------------ GRPO
def _apply_process_reward(ro: Rollout, bonus: float) -> Tensor:
    r = ro.rewards.clone()
    if bonus and ro.called is not None:
        r = r + bonus * (ro.called & ro.tool_ok).float() - bonus * (ro.called & ~ro.tool_ok).float()
    return r


def grpo_step(
    policy: TinyToolVLM,
    ref: TinyToolVLM,
    opt: torch.optim.Optimizer,
    ro: Rollout,
    cfg: VToolConfig,
    generator: torch.Generator,
) -> dict:
    """Advantages (before any re-ordering), old / ref log-probs, then ``cfg.minibatches`` updates."""
    rewards = _apply_process_reward(ro, cfg.process_reward)
    adv = group_advantages(rewards, ro.group, "mean_std", cfg.adv_eps, "sample")
    with torch.no_grad():
        old = sequence_logprobs(policy, ro)
        ref_lp = sequence_logprobs(ref, ro) if cfg.kl_coef > 0 else None
    perm = torch.randperm(len(ro), generator=generator)
    losses = []
    for mb in perm.chunk(cfg.minibatches):
        sub = ro.select(mb)
        lp = sequence_logprobs(policy, sub)
        loss = vtool_loss(lp, old[mb], None if ref_lp is None else ref_lp[mb], adv[mb], sub.mask, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
    return {
        "loss": float(np.mean(losses)),
        "reward": float(ro.rewards.mean()),
        "tool_rate": float(ro.called.float().mean()) if ro.called is not None else 0.0,
    }


def train_grpo(
    policy: TinyToolVLM,
    train: list[ChartSample],
    cfg: VToolConfig,
    seed: int,
    executor: ToolExecutor | None = None,
    eval_fn: Callable | None = None,
    eval_every: int = 0,
    progress: Callable | None = None,
) -> dict:
    """GRPO from the current policy (the frozen copy at entry is π_ref). Returns history lists."""
    executor = executor or ToolExecutor(version=cfg.tool_pixels)
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(seed + 104729)
    rng = np.random.default_rng(seed + 15485863)
    hist: dict = {"step": [], "loss": [], "reward": [], "tool_rate": [], "eval_step": [], "eval": []}
    if eval_fn is not None and eval_every:
        hist["eval_step"].append(0)
        hist["eval"].append(eval_fn(policy))
    it = (
        range(cfg.steps)
        if progress is None
        else progress(range(cfg.steps), desc="GRPO " + ("tools" if cfg.use_tools else "text"))
    )
    for step in it:
        idx = rng.integers(len(train), size=cfg.n_prompts)
        samples = [train[i] for i in idx for _ in range(cfg.group_size)]
        group = torch.arange(cfg.n_prompts).repeat_interleave(cfg.group_size)
        if cfg.use_tools:
            ro = rollout_tools(
                policy,
                samples,
                group,
                executor,
                cfg.temperature,
                cfg.round2_temperature,
                cfg.version,
                gen,
                train_tool_tokens=cfg.train_tool_tokens,
            )
        else:
            ro = rollout_pure(policy, samples, group, cfg.temperature, gen, cfg.version)
        stats = grpo_step(policy, ref, opt, ro, cfg, gen)
        hist["step"].append(step + 1)
        for k in ("loss", "reward", "tool_rate"):
            hist[k].append(stats[k])
        if eval_fn is not None and eval_every and ((step + 1) % eval_every == 0 or step + 1 == cfg.steps):
            hist["eval_step"].append(step + 1)
            hist["eval"].append(eval_fn(policy))
    return hist


def with_overrides(cfg: VToolConfig, **kw) -> VToolConfig:
    """``dataclasses.replace`` (re-validates)."""
    return replace(cfg, **kw)
