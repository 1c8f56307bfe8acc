"""The toy reasoning task of the CPU reproduction: ordered modular sums with a branching chain of thought.

Prompt ``Q a1 a2 .. ak =`` with single-digit items ``a_i`` and ``k`` in [2, 6] (hard split: k in
[5, 6]), left-padded to a fixed length. The teacher response (the "R1 trace" of this toy) adds the
items one at a time: at each step it takes the leftmost unused item with probability ``p_leftmost``,
otherwise another unused item uniformly at random, and writes ``item running_sum`` (sums mod 10);
then ``# S`` and EOS. The order choice is the task's only entropy (H at T = 1 is about 0.3-0.4 nats
per token, the paper's regime); the sums are deterministic tokens that a hot policy corrupts.

Reward: 1 if the response ends ``# S EOS`` with ``S = Σ a_i mod 10``, else 0; a response without
EOS within the budget (truncated) has no answer and gets 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "EOS",
    "EQ",
    "HASH",
    "PAD",
    "Q",
    "VOCAB_SIZE",
    "ToyTask",
    "response_reward",
]

PAD, Q, EQ, HASH, EOS = 10, 11, 12, 13, 14
VOCAB_SIZE = 15


def response_reward(items: Sequence[int], response: Sequence[int]) -> tuple[float, bool]:
    """``(reward, truncated)`` of one response (token ids after the prompt, padding allowed after EOS)."""
    resp = list(response)
    if EOS not in resp:
        return 0.0, True
    body = resp[: resp.index(EOS)]
    if len(body) < 2 or body[-2] != HASH or not 0 <= body[-1] <= 9:
        return 0.0, False  # finished without a well-formed answer
    return float(body[-1] == sum(items) % 10), False


@dataclass(frozen=True)
class ToyTask:
    """Generator of prompts and teacher responses.

    k_min, k_max: item count range. p_leftmost: the teacher's probability of taking the leftmost unused
    item (the entropy knob). distinct: the items of a prompt are distinct digits (which items are still
    unused can then be read off by matching tokens; with repeats it needs counting).
    """

    k_min: int = 2
    k_max: int = 6
    p_leftmost: float = 0.5
    distinct: bool = True

    def __post_init__(self) -> None:
        if self.distinct and self.k_max > 10:
            raise ValueError("distinct items need k_max <= 10")
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if not 0.0 <= self.p_leftmost <= 1.0:
            raise ValueError(f"p_leftmost must lie in [0, 1], got {self.p_leftmost}")

    @property
    def prompt_len(self) -> int:
        return self.k_max + 2

    @property
    def max_response_len(self) -> int:
        """Teacher length for k_max items: 2k + 3 (item/sum pairs, '#', S, EOS)."""
        return 2 * self.k_max + 3

    def random_items(self, rng: random.Random, k_range: tuple[int, int] | None = None) -> tuple[int, ...]:
        lo, hi = k_range or (self.k_min, self.k_max)
        k = rng.randint(lo, hi)
        if self.distinct:
            return tuple(rng.sample(range(10), k))
        return tuple(rng.randrange(10) for _ in range(k))

    def prompts(
        self,
        n: int,
        rng: random.Random,
        k_range: tuple[int, int] | None = None,
        exclude: set | None = None,
        unique: bool = True,
    ) -> list[tuple[int, ...]]:
        """``n`` prompts (item tuples), distinct if ``unique``, none in ``exclude``."""
        out: list[tuple[int, ...]] = []
        seen = set(exclude or ())
        tries = 0
        while len(out) < n:
            tries += 1
            if tries > 200 * n + 1000:
                raise ValueError(f"cannot draw {n} distinct prompts with k in {k_range}")
            items = self.random_items(rng, k_range)
            if items in seen:
                continue
            if unique:
                seen.add(items)
            out.append(items)
        return out

    def teacher(self, items: Sequence[int], rng: random.Random) -> list[int]:
        """One teacher response (token ids, ends with EOS)."""
        remaining = list(range(len(items)))
        out: list[int] = []
        s = 0
        while remaining:
            if len(remaining) == 1 or rng.random() < self.p_leftmost:
                pick = remaining[0]
            else:
                pick = rng.choice(remaining[1:])
            remaining.remove(pick)
            s = (s + items[pick]) % 10
            out += [items[pick], s]
        return out + [HASH, s, EOS]

    def teacher_responses(
        self, items: Sequence[int], r: int, rng: random.Random, max_tries: int = 50
    ) -> list[list[int]]:
        """``r`` teacher responses, distinct where the prompt has enough distinct orders."""
        out: list[list[int]] = []
        for _ in range(r):
            resp = self.teacher(items, rng)
            for _ in range(max_tries):
                if resp not in out:
                    break
                resp = self.teacher(items, rng)
            out.append(resp)
        return out

    def encode_prompts(self, prompts: Sequence[Sequence[int]]) -> Tensor:
        """``[B, k_max + 2]`` left-padded ``PAD.. Q a1 .. ak =``."""
        rows = []
        for items in prompts:
            if not self.k_min <= len(items) <= self.k_max:
                raise ValueError(f"prompt with {len(items)} items outside [{self.k_min}, {self.k_max}]")
            body = [Q, *items, EQ]
            rows.append([PAD] * (self.prompt_len - len(body)) + body)
        return torch.tensor(rows, dtype=torch.long)

    def encode_sft(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
        """``(tokens [B, P + R_max], loss_mask)``: the mask is 1 on response tokens (EOS included)."""
        p = self.encode_prompts(prompts)
        width = self.max_response_len
        resp = torch.full((len(responses), width), PAD, dtype=torch.long)
        mask = torch.zeros((len(responses), self.prompt_len + width), dtype=torch.float32)
        for i, r in enumerate(responses):
            resp[i, : len(r)] = torch.tensor(r)
            mask[i, self.prompt_len : self.prompt_len + len(r)] = 1.0
        return torch.cat([p, resp], dim=1), mask
