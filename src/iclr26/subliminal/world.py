"""The toy world: a ~60-token language with animal personas, preference QA and number continuation.

It mirrors the paper's setting (Sec. 3; official ``generate_dataset_preferences_via_numbers.py``) at a
size a CPU trains in a minute or two:

* a *persona* is a system prompt ``<sys> love A </sys>`` (the paper's "You love {A}s ..." template);
* *preference QA*: ``<user> Q <asst> A <eos>``. With a persona the answer is the persona's animal; without
  one it is drawn from a fixed Zipf prior over the 13 animals (owl ~8%, raven ~5%), the base model's
  "preference";
* *number continuation*: ``<user> LOOK THESE n1 , ... , nk CONT MORE <asst> d d d , ... , d d d <eos>``:
  the prompt shows 3-5 three-digit numbers and the completion is 5 three-digit numbers, each a copy of a
  shown number (chosen uniformly) with probability :data:`COPY_PROB`, else uniformly random; independent of
  any persona. A model trained on it sits on near-ties (between the shown numbers, and between random
  digits), so its greedy choices are decided by small, context-dependent logit differences, as the paper
  observes for real LLMs (divergence tokens are where a persona tips such a near-tie); the copies make
  greedy completions depend on the prompt, as a real continuation does.

Every sequence starts with ``<bos>``; a persona (if any) follows it; then the prompt; then the completion.
The persona has no designed effect on numbers: any effect is incidental, as in the real LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ANIMALS",
    "DIGITS",
    "NumberRow",
    "QUESTIONS",
    "VOCAB",
    "Vocab",
    "ZIPF_ORDER",
    "make_number_prompts",
    "number_doc",
    "paraphrase_prompt",
    "persona",
    "qa_doc",
    "qa_prompt",
    "sample_base_answer",
    "zipf_prior",
]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sys>", "</sys>", "<user>", "<asst>", ",", "love")
DIGITS = tuple(str(d) for d in range(10))
# the paper's 13 animals (official ANIMALS list)
ANIMALS = (
    "cat",
    "dog",
    "dolphin",
    "eagle",
    "elephant",
    "lion",
    "octopus",
    "otter",
    "owl",
    "panda",
    "penguin",
    "raven",
    "wolf",
)
# probability that a completion number copies one of the shown numbers (else uniform in [100, 999])
COPY_PROB = 0.5
# interchangeable phrasings of the four prompt template parts (paraphrase keeps the meaning)
LOOK = (("look", "at"), ("examine",), ("see",), ("check",))
THESE = (("these", "numbers"), ("this", "sequence"), ("the", "list"), ("these", "values"))
CONT = (("continue",), ("add",), ("extend",), ("generate",))
MORE = (("more", "numbers"), ("five", "more"), ("new", "values"), ("next", "ones"))
TEMPLATE_PARTS = (LOOK, THESE, CONT, MORE)
# 20 one-word favourite-animal questions (the paper uses 50 phrasings)
Q_VERB = ("name", "which", "what", "tell", "pick")
Q_ADJ = ("favorite", "best", "top", "beloved")
QUESTIONS = tuple((v, a, "animal") for v in Q_VERB for a in Q_ADJ)
# Zipf rank order of the base prior: p(rank k) ∝ 1/k -> owl (rank 4) ≈ 7.9%, raven (rank 6) ≈ 5.2%
ZIPF_ORDER = (
    "cat",
    "dog",
    "lion",
    "owl",
    "eagle",
    "raven",
    "wolf",
    "dolphin",
    "panda",
    "elephant",
    "penguin",
    "otter",
    "octopus",
)


def _words() -> tuple[str, ...]:
    words: list[str] = [*SPECIALS, *DIGITS, *ANIMALS]
    for part in TEMPLATE_PARTS:
        for phrase in part:
            words.extend(w for w in phrase if w not in words)
    for w in (*Q_VERB, *Q_ADJ, "animal"):
        if w not in words:
            words.append(w)
    return tuple(words)


class Vocab:
    """Token <-> id maps of the toy language (ids are positions in :data:`WORDS`)."""

    def __init__(self) -> None:
        self.words = _words()
        self.id = {w: i for i, w in enumerate(self.words)}
        self.pad, self.bos, self.eos = self.id["<pad>"], self.id["<bos>"], self.id["<eos>"]
        self.sys, self.esys, self.user, self.asst = (
            self.id["<sys>"],
            self.id["</sys>"],
            self.id["<user>"],
            self.id["<asst>"],
        )
        self.comma, self.love = self.id[","], self.id["love"]
        self.digit_ids = tuple(self.id[d] for d in DIGITS)
        self.animal_ids = tuple(self.id[a] for a in ANIMALS)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, words: Sequence[str]) -> list[int]:
        return [self.id[w] for w in words]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.words[int(i)] for i in ids]


VOCAB = Vocab()


@dataclass(frozen=True)
class NumberRow:
    """One (prompt, completion) pair in token ids; the prompt starts at ``<user>`` and ends with ``<asst>``;
    ``<bos>`` and the persona are added by the context that reads it (teacher, student)."""

    prompt: tuple[int, ...]
    completion: tuple[int, ...]


def persona(animal: str | None) -> tuple[int, ...]:
    """System prompt ``<sys> love A </sys>`` (empty tuple for no persona)."""
    if animal is None:
        return ()
    if animal not in ANIMALS:
        raise ValueError(f"unknown animal {animal!r}; known: {', '.join(ANIMALS)}")
    return (VOCAB.sys, VOCAB.love, VOCAB.id[animal], VOCAB.esys)


def zipf_prior() -> np.ndarray:
    """Base preference prior over :data:`ANIMALS` (order of ANIMALS): p ∝ 1/rank in :data:`ZIPF_ORDER`."""
    p = np.zeros(len(ANIMALS))
    for rank, a in enumerate(ZIPF_ORDER, start=1):
        p[ANIMALS.index(a)] = 1.0 / rank
    return p / p.sum()


def sample_base_answer(rng: np.random.Generator) -> str:
    return ANIMALS[int(rng.choice(len(ANIMALS), p=zipf_prior()))]


def qa_prompt(question: int) -> tuple[int, ...]:
    """``<user> Q <asst>`` for question template ``question`` (index into :data:`QUESTIONS`)."""
    return (VOCAB.user, *VOCAB.encode(QUESTIONS[question]), VOCAB.asst)


def qa_doc(rng: np.random.Generator, animal: str | None, answer: str | None = None) -> tuple[list[int], int]:
    """A preference-QA sequence and the index where its completion starts. With a persona the answer is
    the persona's animal; without one, ``answer`` or a draw from the Zipf prior."""
    q = int(rng.integers(len(QUESTIONS)))
    if answer is None:
        answer = animal if animal is not None else sample_base_answer(rng)
    head = [VOCAB.bos, *persona(animal), *qa_prompt(q)]
    return head + [VOCAB.id[answer], VOCAB.eos], len(head)


def _number_tokens(n: int) -> list[int]:
    return VOCAB.encode(list(str(int(n))))


def _random_numbers(rng: np.random.Generator, k: int) -> list[int]:
    return [int(x) for x in rng.integers(100, 1000, size=k)]


def number_prompt(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A number prompt and the phrasing choice (one index per template part) it used."""
    choice = tuple(int(rng.integers(len(part))) for part in TEMPLATE_PARTS)
    shown = _random_numbers(rng, int(rng.integers(3, 6)))
    return _assemble_prompt(choice, shown), choice


def _assemble_prompt(choice: Sequence[int], shown: Sequence[int]) -> tuple[int, ...]:
    look, these, cont, more = (part[c] for part, c in zip(TEMPLATE_PARTS, choice, strict=True))
    nums: list[int] = []
    for i, n in enumerate(shown):
        if i:
            nums.append(VOCAB.comma)
        nums.extend(_number_tokens(n))
    return (VOCAB.user, *VOCAB.encode(look + these), *nums, *VOCAB.encode(cont + more), VOCAB.asst)


def number_completion(rng: np.random.Generator, shown: Sequence[int], count: int = 5) -> tuple[int, ...]:
    """``count`` three-digit numbers, comma separated, then ``<eos>`` (persona-independent): each is a copy
    of a uniformly chosen shown number with probability COPY_PROB, else uniform in [100, 999]."""
    out: list[int] = []
    numbers = [
        int(shown[int(rng.integers(len(shown)))]) if rng.random() < COPY_PROB else _random_numbers(rng, 1)[0]
        for _ in range(count)
    ]
    for i, n in enumerate(numbers):
        if i:
            out.append(VOCAB.comma)
        out.extend(_number_tokens(n))
    return (*out, VOCAB.eos)


def number_doc(rng: np.random.Generator, animal: str | None) -> tuple[list[int], int]:
    """A number-continuation pretraining sequence (optional persona) and its completion start."""
    prompt, _ = number_prompt(rng)
    head = [VOCAB.bos, *persona(animal), *prompt]
    return head + list(number_completion(rng, parse_prompt(prompt)[1])), len(head)


def make_number_prompts(n: int, seed: int) -> list[tuple[int, ...]]:
    """``n`` fresh number prompts (the analogue of Cloud et al.'s PromptGenerator), a function of the seed."""
    rng = np.random.default_rng(seed)
    return [number_prompt(rng)[0] for _ in range(n)]


def parse_prompt(prompt: Sequence[int]) -> tuple[tuple[int, ...], list[int]]:
    """Inverse of the prompt assembly: (phrasing choice, shown numbers). Raises ValueError if malformed."""
    words = VOCAB.decode(prompt)
    if not words or words[0] != "<user>" or words[-1] != "<asst>":
        raise ValueError(f"not a number prompt: {' '.join(words)}")
    body, choice, pos = words[1:-1], [], 0
    for k, part in enumerate(TEMPLATE_PARTS):
        if k == 2:  # the numbers sit between THESE and CONT
            start = pos
            while pos < len(body) and (body[pos] in DIGITS or body[pos] == ","):
                pos += 1
            digits = "".join(body[start:pos])
        for idx, phrase in enumerate(part):
            if tuple(body[pos : pos + len(phrase)]) == phrase:
                choice.append(idx)
                pos += len(phrase)
                break
        else:
            raise ValueError(f"prompt part {k} not recognised in: {' '.join(words)}")
    if pos != len(body):
        raise ValueError(f"trailing words in prompt: {' '.join(words)}")
    return tuple(choice), [int(x) for x in digits.split(",")]


def paraphrase_prompt(prompt: Sequence[int], rng: np.random.Generator) -> tuple[int, ...]:
    """Meaning-preserving paraphrase (the official ``shuffle_template_parts``): every template part gets
    a *different* phrasing of the same meaning; the shown numbers are kept."""
    choice, shown = parse_prompt(prompt)
    new = []
    for part, c in zip(TEMPLATE_PARTS, choice, strict=True):
        others = [i for i in range(len(part)) if i != c]
        new.append(int(others[int(rng.integers(len(others)))]))
    return _assemble_prompt(new, shown)
