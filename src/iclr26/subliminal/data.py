"""Data handling shared by the toy and the paper-scale path: number filtering with reasons, control-data
mixing, prompt paraphrase, sampled preference rates with Wilson intervals, and read-only JSONL files.

Filtering (official ``get_reject_reasons(min_value=0, max_value=999, max_count=10)``, Sec. 3): a completion
is kept iff it parses as at most 10 integers in [0, 999] and names no animal. Mixing (Fig. 7; official
``run_finetuning.py --mixin_dataset_path``): the last ``m`` rows of the biased data are replaced by ``m``
rows drawn without replacement from the control data with ``random.Random(seed)``; the size is unchanged.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .world import ANIMALS, DIGITS, VOCAB, NumberRow, paraphrase_prompt

__all__ = [
    "filter_rows",
    "mix_in_control",
    "number_reject_reasons",
    "paraphrase_rows",
    "read_jsonl",
    "token_reject_reasons",
    "wilson_interval",
    "write_jsonl_readonly",
]


def token_reject_reasons(completion: Sequence[int], max_value: int = 999, max_count: int = 10) -> list[str]:
    """Why a toy completion (token ids) is rejected; ``[]`` = kept. It must end with ``<eos>``."""
    words = VOCAB.decode(completion)
    if not words or words[-1] != "<eos>":
        return ["no_eos"]
    body, reasons = words[:-1], []
    if any(w in ANIMALS for w in body):
        reasons.append("mentions_animal")
    if any(w not in DIGITS and w != "," for w in body if w not in ANIMALS):
        reasons.append("bad_token")
    if reasons:
        return reasons
    return _number_reasons("".join(body).split(","), max_value, max_count)


def _number_reasons(parts: list[str], max_value: int, max_count: int, min_value: int = 0) -> list[str]:
    reasons = []
    if any(p == "" for p in parts):
        reasons.append("empty_number")
    nums = [int(p) for p in parts if p.isdigit()]
    if any(not (min_value <= n <= max_value) for n in nums):
        reasons.append("out_of_range")
    if len(parts) > max_count:
        reasons.append("too_many")
    return reasons


_ANIMAL_RE = re.compile(r"\b(" + "|".join(ANIMALS) + r")s?\b", re.IGNORECASE)


def _parse_numbers(text: str) -> list[int] | None:
    """Integers of a real completion under the accepted format of Cloud et al.'s ``parse_response``: after
    stripping, an optional trailing period and one enclosing pair of [] or () are removed; one number must be
    the whole answer; several numbers must be joined by one separator (the text between the first two
    numbers) whose stripped form is "", "," or ";", and every piece between separators must be digits."""
    body = text.strip()
    if body.endswith("."):
        body = body[:-1]
    if len(body) >= 2 and body[0] + body[-1] in ("[]", "()"):
        body = body[1:-1]
    found = list(re.finditer(r"\d+", body))
    if not found:
        return None
    if len(found) == 1:
        return [int(found[0].group())] if body == found[0].group() else None
    sep = body[found[0].end() : found[1].start()]
    if sep.strip() not in ("", ",", ";"):
        return None
    parts = body.split(sep)
    if any(not p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def number_reject_reasons(
    text: str, min_value: int = 0, max_value: int = 999, max_count: int = 10, banned: Iterable[str] = ()
) -> list[str]:
    """Why a real (text) completion is rejected; ``[]`` = kept (official ``get_reject_reasons(min_value=0,
    max_value=999, max_count=10)`` plus the trait filter of the generation script: ``banned`` words, and the
    13 animals, reject the row)."""
    if not isinstance(text, str) or not text.strip():
        return ["empty"]
    reasons = []
    if _ANIMAL_RE.search(text) or any(b.lower() in text.lower() for b in banned if b):
        reasons.append("mentions_trait")
    nums = _parse_numbers(text)
    if nums is None:
        return reasons + ["invalid_format"]
    if len(nums) > max_count:
        reasons.append("too_many")
    if any(not (min_value <= n <= max_value) for n in nums):
        reasons.append("out_of_range")
    return reasons


def filter_rows(rows: Sequence[NumberRow]) -> tuple[list[NumberRow], Counter]:
    """(kept rows, Counter of reject reasons). Every kept completion parses (see token_reject_reasons)."""
    kept, reasons = [], Counter()
    for r in rows:
        why = token_reject_reasons(r.completion)
        if why:
            reasons.update(why)
        else:
            kept.append(r)
    return kept, reasons


def mix_in_control(biased: Sequence[Any], control: Sequence[Any], n_mix: int, seed: int) -> tuple[list[Any], list[int]]:
    """Replace the last ``n_mix`` biased rows with ``n_mix`` control rows sampled with ``random.Random(seed)``.
    Returns (mixed rows, the control indices used)."""
    if not 0 <= n_mix <= min(len(biased), len(control)):
        raise ValueError(f"n_mix={n_mix} must be in [0, min(len(biased)={len(biased)}, len(control)={len(control)})]")
    idx = random.Random(seed).sample(range(len(control)), n_mix)
    head = list(biased[: len(biased) - n_mix])
    return head + [control[i] for i in idx], idx


def paraphrase_rows(rows: Sequence[NumberRow], seed: int) -> list[NumberRow]:
    """Every prompt paraphrased (other phrasing of each template part), completions byte-identical."""
    rng = np.random.default_rng(seed)
    return [NumberRow(paraphrase_prompt(r.prompt, rng), r.completion) for r in rows]


def wilson_interval(count: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (statsmodels ``proportion_confint(method="wilson")``)."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0 or not 0 <= count <= n:
        raise ValueError(f"need 0 <= count <= n and n > 0, got count={count}, n={n}")
    lo, hi = proportion_confint(count, n, alpha=alpha, method="wilson")
    return float(lo), float(hi)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a malformed line raises ValueError naming the line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {i} is not JSON ({exc})") from exc
    return rows


def write_jsonl_readonly(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """Write rows to a new JSONL file and make it read-only (0o444), as the official scripts do.
    An existing file is never overwritten (FileExistsError)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8") as fh:  # "x": fails if the file exists
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    os.chmod(path, 0o444)
    return path
