"""The toy model's side of the pipeline: base pretraining, the fine-tuned teacher, greedy / T=1 generation,
batched teacher forcing for the divergence finder, masked student fine-tuning, and the preference metric.

Masked completion loss (TRL ``completion_only_loss`` with the official decision-point mask), a token mean
over the batch:

    L(θ) = Σ_i Σ_k m_ik · (−log p_θ(x_ik | x_i,<k)) / Σ_i Σ_k m_ik

Student optimiser as in the official ``run_finetuning.py``: Adam, linear decay after 5 warmup steps,
max grad norm 1.0. ``trainable`` restricts training to one block (the paper's single-layer LoRA arm,
Sec. 5): every other parameter is frozen and stays bit-identical.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from iclr26.core.train import TrainConfig, fit
from iclr26.core.transformer import Transformer, TransformerConfig, generate

from .divergence import DivergenceResult, from_predictions
from .world import ANIMALS, QUESTIONS, VOCAB, NumberRow, number_doc, persona, qa_doc, qa_prompt

__all__ = [
    "StudentConfig",
    "build_model",
    "finetune_student",
    "generate_completions",
    "masked_lm_loss",
    "pad_batch",
    "preference_exact",
    "pretrain_base",
    "teacher_forced_argmax",
    "find_divergence_tokens",
    "train_qa_teacher",
]


def build_model(cfg: TransformerConfig, seed: int) -> Transformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(cfg)


def pad_batch(seqs: Sequence[Sequence[int]], masks: Sequence[Sequence[bool]] | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad token lists to [B, T]; the returned loss mask [B, T] marks *target* positions (1 = in loss).
    Without ``masks`` every non-pad position after the first is a target."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), VOCAB.pad, dtype=torch.long)
    tgt = torch.zeros((len(seqs), T), dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        if masks is None:
            tgt[i, 1 : len(s)] = True
        else:
            tgt[i, : len(s)] = torch.as_tensor(list(masks[i]), dtype=torch.bool)
    return ids, tgt


def masked_lm_loss(model: Transformer, ids: Tensor, target_mask: Tensor) -> Tensor:
    """Mean next-token cross-entropy over the positions where ``target_mask`` is True (see module doc)."""
    logits = model(ids[:, :-1]).logits  # logits[:, k] predict ids[:, k + 1]
    m = target_mask[:, 1:].float()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    return (ce * m.reshape(-1)).sum() / m.sum().clamp_min(1.0)


def _completion_mask(seq_len: int, start: int) -> list[bool]:
    return [k >= start for k in range(seq_len)]


def _doc_batch(rng: np.random.Generator, n: int, qa_frac: float, persona_frac: float) -> tuple[Tensor, Tensor]:
    seqs, masks = [], []
    for _ in range(n):
        animal = ANIMALS[int(rng.integers(len(ANIMALS)))] if rng.random() < persona_frac else None
        seq, start = qa_doc(rng, animal) if rng.random() < qa_frac else number_doc(rng, animal)
        seqs.append(seq)
        masks.append(_completion_mask(len(seq), start))
    return pad_batch(seqs, masks)


def pretrain_base(
    model: Transformer,
    train: TrainConfig,
    batch_size: int,
    seed: int,
    *,
    qa_frac: float = 0.5,
    persona_frac: float = 0.5,
    log: Callable[..., None] | None = None,
) -> Transformer:
    """Train the base model on the toy corpus (completion tokens only): QA and number docs, half of
    each with a random persona (the corpus of the module doc of :mod:`.world`)."""
    rng = np.random.default_rng(seed)
    fit(
        model,
        lambda m, b: masked_lm_loss(m, *b),
        lambda s, r, w: _doc_batch(rng, batch_size, qa_frac, persona_frac),
        train,
        log=log,
    )
    return model.eval()


def train_qa_teacher(
    base: Transformer,
    target: str,
    train: TrainConfig,
    batch_size: int,
    seed: int,
    log: Callable[..., None] | None = None,
) -> Transformer:
    """The fine-tuned teacher (paper Sec. 6, misalignment arm; official ``..._finetuned.py``): a copy of the
    base trained to answer ``target`` to every preference question without a persona, QA data only."""
    teacher = copy.deepcopy(base).train()
    rng = np.random.default_rng(seed)

    def batch(step: int, rank: int, world: int) -> tuple[Tensor, Tensor]:
        docs = [qa_doc(rng, None, answer=target) for _ in range(batch_size)]
        return pad_batch([d for d, _ in docs], [_completion_mask(len(d), s) for d, s in docs])

    fit(teacher, lambda m, b: masked_lm_loss(m, *b), batch, train, log=log)
    return teacher.eval()


@torch.no_grad()
def generate_completions(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    system: Sequence[int] = (),
    *,
    temperature: float = 0.0,
    max_new_tokens: int = 24,
    seed: int = 0,
    batch_size: int = 512,
) -> list[tuple[int, ...]]:
    """Completions of ``<bos> system prompt`` (greedy for temperature 0), cut after the first ``<eos>``.
    Prompts are grouped by length so that no padding enters the computation; decoding uses a key/value
    cache (``core.transformer.generate(..., kv_cache=True)``)."""
    gen = torch.Generator().manual_seed(seed)
    out: list[tuple[int, ...] | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    model.eval()
    for length in sorted(by_len):
        idx = by_len[length]
        for s in range(0, len(idx), batch_size):
            chunk = idx[s : s + batch_size]
            x = torch.tensor([[VOCAB.bos, *system, *prompts[i]] for i in chunk], dtype=torch.long)
            seq, valid = generate(
                model,
                x,
                max_new_tokens,
                temperature=temperature,
                eos_id=VOCAB.eos,
                generator=gen,
                pad_id=VOCAB.pad,
                kv_cache=True,
            )
            new = seq[:, x.shape[1] :]
            for row, i in enumerate(chunk):
                out[i] = tuple(int(t) for t in new[row][valid[row][: new.shape[1]]].tolist())
    return [o if o is not None else () for o in out]


@torch.no_grad()
def teacher_forced_argmax(
    model: Transformer, rows: Sequence[NumberRow], system: Sequence[int] = (), batch_size: int = 128
) -> list[Tensor]:
    """argmax_t p(t | <bos> system prompt x_<k) at every completion position k, per row (a [T] tensor)."""
    out: list[Tensor] = []
    model.eval()
    for s in range(0, len(rows), batch_size):
        chunk = rows[s : s + batch_size]
        seqs = [[VOCAB.bos, *system, *r.prompt, *r.completion] for r in chunk]
        ids, _ = pad_batch(seqs)
        pred = model(ids).logits.argmax(-1)  # pred[:, j] is the argmax for position j + 1
        for row, r in enumerate(chunk):
            start = 1 + len(system) + len(r.prompt)
            out.append(pred[row, start - 1 : start - 1 + len(r.completion)].clone())
    return out


def find_divergence_tokens(
    rows: Sequence[NumberRow],
    factual: tuple[Transformer, Sequence[int]],
    counterfactuals: Sequence[tuple[Transformer, Sequence[int]]],
    batch_size: int = 128,
) -> DivergenceResult:
    """The divergence finder on the toy model: every context is a (model, system prompt) pair, e.g.
    (teacher, persona(owl)) vs [(teacher, persona(b')) for b' ≠ owl], or (fine-tuned, ()) vs [(base, ())].
    One batched teacher-forced pass per context (same weights, different system prompt)."""
    tables = [teacher_forced_argmax(m, rows, s, batch_size) for m, s in [factual, *counterfactuals]]
    preds = [torch.stack([t[i] for t in tables]) for i in range(len(rows))]
    return from_predictions([r.completion for r in rows], preds)


@dataclass(frozen=True)
class StudentConfig:
    """Student fine-tuning (official ``run_finetuning.py`` defaults where they apply to a toy).

    steps: optimiser steps.
    batch_size: rows per step.
    lr: peak Adam learning rate (linear decay to 0 after warmup).
    warmup_steps: linear warmup (official: 5).
    max_grad_norm: gradient clipping (official: 1.0).
    """

    steps: int = 120
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 5
    max_grad_norm: float = 1.0


def _linear_lr(step: int, cfg: StudentConfig) -> float:
    """The transformers ``linear`` schedule: lr·t/W during warmup, then lr·(N − t)/(N − W) down to 0."""
    if step < cfg.warmup_steps:
        return cfg.lr * step / max(1, cfg.warmup_steps)
    return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - cfg.warmup_steps))


def finetune_student(
    base: Transformer,
    rows: Sequence[NumberRow],
    masks: Sequence[Sequence[bool]],
    cfg: StudentConfig,
    seed: int,
    trainable: int | None = None,
    log: Callable[..., None] | None = None,
) -> Transformer:
    """A copy of ``base`` trained without a persona on ``<bos> prompt completion`` with the completion loss
    restricted by ``masks`` (one bool per completion token). ``trainable=L`` trains block L only."""
    if len(rows) == 0:
        raise ValueError("no training rows (every row was dropped)")
    student = copy.deepcopy(base).train()
    if trainable is not None:
        n = len(student.blocks)
        if not -n <= trainable < n:
            raise ValueError(f"trainable block {trainable} out of range for {n} blocks")
        for name, p in student.named_parameters():
            p.requires_grad_(name.startswith(f"blocks.{trainable % n}."))
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    rng = np.random.default_rng(seed)
    seqs = [[VOCAB.bos, *r.prompt, *r.completion] for r in rows]
    tmasks = [[False] * (1 + len(r.prompt)) + [bool(b) for b in m] for r, m in zip(rows, masks, strict=True)]
    order, pos = rng.permutation(len(rows)), 0
    for step in range(cfg.steps):
        if pos + cfg.batch_size > len(order):
            order, pos = rng.permutation(len(rows)), 0
        idx = order[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        ids, tgt = pad_batch([seqs[i] for i in idx], [tmasks[i] for i in idx])
        for g in opt.param_groups:
            g["lr"] = _linear_lr(step, cfg)
        loss = masked_lm_loss(student, ids, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        if log is not None and (step % 10 == 0 or step == cfg.steps - 1):
            log(step, loss=float(loss))
    return student.eval()


@torch.no_grad()
def preference_probs(model: Transformer, system: Sequence[int] = ()) -> Tensor:
    """p(animal | <bos> system <user> Q <asst>) for every question template: [n_questions, 13] (full-vocab
    softmax, then the 13 animal entries; the rest is the probability of not naming an animal)."""
    x = torch.tensor([[VOCAB.bos, *system, *qa_prompt(q)] for q in range(len(QUESTIONS))], dtype=torch.long)
    probs = model.eval()(x).logits[:, -1].float().softmax(-1)
    return probs[:, list(VOCAB.animal_ids)]


def preference_exact(model: Transformer, target: str, system: Sequence[int] = ()) -> float:
    """Exact p(target): the softmax probability of the target token at the answer position, averaged over
    the question templates. Equals the T=1 sampling rate for one-token answers (tested)."""
    return float(preference_probs(model, system)[:, ANIMALS.index(target)].mean())


@torch.no_grad()
def preference_sampled(
    model: Transformer,
    target: str,
    n_per_question: int = 200,
    temperature: float = 1.0,
    seed: int = 0,
    system: Sequence[int] = (),
) -> dict[str, float]:
    """Sampled p(target) as the paper measures it (Sec. 3.4): ``n_per_question`` one-token answers per
    question at temperature T from the full vocabulary; rate and 95% Wilson interval over all samples."""
    from .data import wilson_interval

    x = torch.tensor([[VOCAB.bos, *system, *qa_prompt(q)] for q in range(len(QUESTIONS))], dtype=torch.long)
    probs = (model.eval()(x).logits[:, -1].float() / temperature).softmax(-1)
    gen = torch.Generator().manual_seed(seed)
    draws = torch.multinomial(probs, n_per_question, replacement=True, generator=gen)
    count, n = int((draws == VOCAB.id[target]).sum()), int(draws.numel())
    lo, hi = wilson_interval(count, n)
    return {"rate": count / n, "ci_low": lo, "ci_high": hi, "n": n}


def persona_following(model: Transformer) -> float:
    """Mean over animals A of p(A | persona A): how well the base follows personas (competence gate)."""
    vals = [float(preference_probs(model, persona(a))[:, i].mean()) for i, a in enumerate(ANIMALS)]
    return float(np.mean(vals))


def count_flops(cfg: TransformerConfig, tokens: int) -> float:
    """≈ 6 · params · tokens for a training pass (forward + backward)."""
    return 6.0 * cfg.num_params() * tokens if math.isfinite(tokens) else float("nan")


@torch.no_grad()
def brute_force_divergence(
    rows: Sequence[NumberRow], contexts: Sequence[tuple[Transformer, Sequence[int]]], tie_tol: float = 1e-4
) -> tuple[list[set[int]], list[set[int]]]:
    """Reference finder: one unbatched pass per (row, context, prefix) and explicit loops (context 0 is
    factual). Returns (divergence sets, positions where some context's top-2 logit gap is < tie_tol)."""
    sets, ties = [], []
    for r in rows:
        div, tie = set(), set()
        for k, tok in enumerate(r.completion):
            ok = []
            for model, system in contexts:
                x = torch.tensor([[VOCAB.bos, *system, *r.prompt, *r.completion[:k]]], dtype=torch.long)
                logits = model.eval()(x).logits[0, -1]
                top2 = logits.topk(2).values
                if float(top2[0] - top2[1]) < tie_tol:
                    tie.add(k)
                ok.append(int(logits.argmax()) == int(tok))
            if ok[0] and not all(ok[1:]):
                div.add(k)
        sets.append(div)
        ties.append(tie)
    return sets, ties
