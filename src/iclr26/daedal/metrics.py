"""Token statistics of the paper (§3.6): E_tok, N_tok and E_ratio.

* N_tok: number of generated tokens of a response, EOS padding included (the canvas length).
* E_tok: the effective (non-padding) length:
  - ``mode="count"`` (released ``metrics/*.py``): N_tok minus the number of EOS tokens anywhere;
  - ``mode="trailing"`` (paper text): N_tok minus the trailing run of EOS padding.
* E_ratio = 100 · ΣE_tok / ΣN_tok over the data set -- a ratio of totals, NOT the mean of the
  per-sample ratios (the released code computes ``100 - 100 · #EOS / #tokens``).

Table 1 prints per-sample means ``E_tok / N_tok`` and E_ratio; since both share the denominator
count, E_ratio equals mean E_tok / mean N_tok (tested against every Table 1 and 2 entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor


def effective_length(seq: Tensor | Sequence[int], eos_id: int, mode: Literal["count", "trailing"] = "count") -> int:
    """E_tok of one response (see module docstring)."""
    t = torch.as_tensor(seq).reshape(-1)
    n = int(t.numel())
    is_eos = t == eos_id
    if mode == "count":
        return n - int(is_eos.sum())
    if mode == "trailing":
        if n == 0:
            return 0
        trailing = int(is_eos.flip(0).long().cumprod(0).sum())
        return n - trailing
    raise ValueError(f"mode must be 'count' or 'trailing', got {mode!r}")


def effective_token_stats(
    outputs: Sequence[Tensor | Sequence[int]], eos_id: int, mode: Literal["count", "trailing"] = "count"
) -> dict[str, float]:
    """E_tok and N_tok (per-sample means), their totals, and E_ratio = 100 · ΣE / ΣN (percent)."""
    if len(outputs) == 0:
        raise ValueError("effective_token_stats of no outputs")
    e = [effective_length(o, eos_id, mode) for o in outputs]
    n = [int(torch.as_tensor(o).numel()) for o in outputs]
    total_e, total_n = sum(e), sum(n)
    return {
        "E_tok": total_e / len(e),
        "N_tok": total_n / len(n),
        "E_total": float(total_e),
        "N_total": float(total_n),
        "E_ratio": 100.0 * total_e / total_n if total_n else float("nan"),
    }
