"""Divergence tokens (paper Sec. 4; official ``modify_dataset_divergence_tokens_system_prompt.py``),
completion masks (official ``run_finetuning.py``) and teacher mixing.

For a completion x from the factual teacher b, with teacher-forced argmaxes over the completion positions
k under the factual context and every counterfactual context b':

    pred_b'[k]    = argmax_t p_b'(t | x_<k)
    correct[b',k] = (pred_b'[k] == x_k)
    divergent(k)  ⇔ correct[b, k]  ∧  ∃ b' : ¬correct[b', k]

Positions where the factual teacher's own argmax is not x_k (possible under temperature sampling) are
excluded. Counterfactual contexts are either the other personas (the main setting), no persona, or another
model (the fine-tuned-teacher setting: counterfactual = the base model).

Completion masks (``mode``):

* ``all``: every completion token;
* ``div_only``: only the divergence positions;
* ``without_div``: every completion token except the divergence positions;
* ``random``: every completion token except as many *random* positions as the row has divergence tokens
  (a count-matched control for ``without_div``; not in the official code).

Rows without any divergence token are dropped in every mode except ``all`` (as the official code does for
any dataset that carries decision points). Ablations: ``ratio`` keeps a random ``int(n·r)`` of the n
positions when that is >= 1; ``subset`` keeps ``first_only`` / ``first_half`` / ``second_half`` (applied
when n > 1; for odd n the half size is drawn from {n//2, n//2 + 1}, as officially).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "DivergenceResult",
    "MaskMode",
    "build_completion_mask",
    "divergence_positions",
    "masked_dataset",
    "select_decision_points",
    "teacher_mixing",
]

MaskMode = Literal["all", "div_only", "without_div", "random"]
Subset = Literal["first_only", "first_half", "second_half"]


def divergence_positions(tokens: Tensor, pred_factual: Tensor, preds_cf: Tensor) -> Tensor:
    """Divergence positions of one completion.

    tokens [T]: the completion; pred_factual [T]: the factual teacher's teacher-forced argmax;
    preds_cf [n_cf, T]: the counterfactual teachers' argmaxes. Returns the sorted positions k with
    ``pred_factual[k] == tokens[k]`` and ``any_b' preds_cf[b', k] != tokens[k]``.
    """
    if preds_cf.dim() == 1:
        preds_cf = preds_cf[None]
    if tokens.shape != pred_factual.shape or preds_cf.shape[-1] != tokens.shape[-1]:
        raise ValueError(
            f"shape mismatch: tokens {tuple(tokens.shape)}, factual {tuple(pred_factual.shape)}, "
            f"counterfactual {tuple(preds_cf.shape)}"
        )
    ok_factual = pred_factual == tokens  # correct[b, k]
    any_cf_wrong = (preds_cf != tokens[None]).any(0)  # ∃ b': ¬correct[b', k]
    return torch.nonzero(ok_factual & any_cf_wrong).flatten()


@dataclass
class DivergenceResult:
    """Output of a divergence-token search over a dataset.

    decision_points: per row, the divergence positions (completion offsets).
    correct: per row, a bool tensor [n_contexts, T] (row 0 = factual teacher), the official "correct matrix".
    preds: per row, the argmax tensor [n_contexts, T] (used by teacher mixing).
    greedy_flips: per row, completion positions where greedy data's token is not the factual argmax
        (counted, not fatal, under the paper path's ``greedy_check="count"``); empty when not checked.
    """

    decision_points: list[list[int]]
    correct: list[Tensor]
    preds: list[Tensor]
    greedy_flips: list[list[int]] = field(default_factory=list)

    def fraction(self) -> float:
        """Divergence tokens / completion tokens over the dataset (paper: 7.5% Qwen, 18.3% Gemma)."""
        total = sum(int(c.shape[1]) for c in self.correct)
        return sum(len(d) for d in self.decision_points) / max(total, 1)

    def factual_agreement(self, tokens: Sequence[Sequence[int]]) -> float:
        """Fraction of completion tokens equal to the factual teacher's teacher-forced argmax."""
        hits = sum(int(c[0].sum()) for c in self.correct)
        return hits / max(sum(len(t) for t in tokens), 1)


def from_predictions(completions: Sequence[Sequence[int]], preds: Sequence[Tensor]) -> DivergenceResult:
    """Build a :class:`DivergenceResult` from per-row argmax tables ``[n_contexts, T]`` (row 0 factual)."""
    dps, correct = [], []
    for tokens, pred in zip(completions, preds, strict=True):
        t = torch.as_tensor(list(tokens), dtype=torch.long)
        correct.append(pred == t[None])
        dps.append(divergence_positions(t, pred[0], pred[1:]).tolist())
    return DivergenceResult(dps, correct, list(preds))


def select_decision_points(
    dp: Sequence[int], ratio: float | None = None, subset: Subset | None = None, rng: random.Random | None = None
) -> list[int]:
    """The ratio / subset ablations of the official mask (Fig. 21), applied to one row's positions."""
    rng = rng or random.Random(0)
    dp = sorted(int(d) for d in dp)
    if ratio is not None:
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        k = int(len(dp) * ratio)
        if k >= 1:
            dp = sorted(rng.sample(dp, k))
    if subset is not None and len(dp) > 1:
        if subset == "first_only":
            dp = dp[:1]
        elif subset in ("first_half", "second_half"):
            k = rng.choice([len(dp) // 2, len(dp) // 2 + 1]) if len(dp) % 2 else len(dp) // 2
            dp = dp[:k] if subset == "first_half" else dp[k:]
        else:
            raise ValueError(f"unknown subset {subset!r}")
    return dp


def build_completion_mask(
    length: int, decision_points: Sequence[int], mode: MaskMode, rng: random.Random | None = None
) -> list[bool]:
    """Loss mask over the ``length`` completion positions of one row (see the module docstring)."""
    dp = [int(d) for d in decision_points]
    if any(d < 0 or d >= length for d in dp):
        raise ValueError(f"decision point out of range 0..{length - 1}: {dp}")
    if mode == "all":
        return [True] * length
    if mode == "div_only":
        keep = set(dp)
        return [k in keep for k in range(length)]
    if mode == "without_div":
        drop = set(dp)
        return [k not in drop for k in range(length)]
    if mode == "random":
        drop = set((rng or random.Random(0)).sample(range(length), len(set(dp))))
        return [k not in drop for k in range(length)]
    raise ValueError(f"unknown mask mode {mode!r}; use all, div_only, without_div or random")


def masked_dataset(
    completions: Sequence[Sequence[int]],
    decision_points: Sequence[Sequence[int]],
    mode: MaskMode,
    *,
    ratio: float | None = None,
    subset: Subset | None = None,
    seed: int = 0,
) -> tuple[list[int], list[list[bool]]]:
    """(kept row indices, their masks). Rows with no divergence token are dropped unless ``mode == "all"``."""
    rng = random.Random(seed)
    keep, masks = [], []
    for i, (tokens, dp) in enumerate(zip(completions, decision_points, strict=True)):
        if mode != "all" and len(dp) == 0:
            continue  # official: zero-divergence samples are dropped before training
        chosen = select_decision_points(dp, ratio, subset, rng) if mode != "all" else list(dp)
        keep.append(i)
        masks.append(build_completion_mask(len(tokens), chosen, mode, rng))
    return keep, masks


def teacher_mixing(
    tokens: Sequence[int],
    decision_points: Sequence[int],
    preds: Tensor,
    digit_ids: Sequence[int],
    *,
    mix_ratio: float | None = None,
    only_first: bool = False,
    rng: random.Random | None = None,
) -> list[int]:
    """Replace divergence tokens with a counterfactual teacher's choice (official teacher mixing, Fig. 21).

    At each chosen position k (``max(1, int(n·mix_ratio))`` random ones, or the first one), pick at random
    one of the argmaxes ``preds[:, k]`` that differs from ``tokens[k]``; if it is a digit it replaces the
    token, otherwise the token is deleted. Other tokens are unchanged. Rows without divergence are returned
    unchanged.
    """
    if (mix_ratio is None) == (not only_first):
        raise ValueError("give exactly one of mix_ratio or only_first")
    rng = rng or random.Random(0)
    out, dp = list(int(t) for t in tokens), sorted(int(d) for d in decision_points)
    if not dp:
        return out
    chosen = [dp[0]] if only_first else rng.sample(dp, max(1, int(len(dp) * mix_ratio)))
    digits, shift = set(int(d) for d in digit_ids), 0
    for k in sorted(chosen):
        j = k + shift
        options = [int(t) for t in preds[:, k].tolist() if int(t) != out[j]]
        if not options:
            continue
        new = rng.choice(options)
        if new in digits:
            out[j] = new
        else:
            del out[j]
            shift -= 1
    return out
