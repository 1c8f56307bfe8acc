"""One typed config per DAEDAL run (printed by ``iclr26 run daedal --show-config``).

The decoder's thresholds and lengths are :class:`~iclr26.daedal.generate.DaedalConfig` (the paper's
defaults, defined once there). The CPU reproduction uses a copy with the lengths scaled down
(``daedal``); the paper scale and ``python -m iclr26.daedal.eval`` use :class:`PaperConfig`, whose
defaults are also the defaults of eval.py's command-line flags.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .generate import DaedalConfig
from .hf import LLADA_EOS_ID, LLADA_MASK_ID
from .model import TinyMDMConfig


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: a local LLaDA checkpoint on a local GSM8K or MATH500 JSONL (nothing downloads).

    model_path: local model directory (LLaDA-8B-Instruct, LLaDA-1.5 or any *ForMaskedLM).
    data_path: local JSONL in the released format of the task (gsm8k: question, answer; math500: problem, answer).
    task: gsm8k or math500 (the official prompt and the data set's field names).
    checker: answer check: math_verify (symbolic, via math-verify) or number (numbers, else exact strings).
    method: which decoder runs: daedal, fixed (LLaDA at fixed_length) or both (the claims need both).
    fixed_length: the fixed baseline's canvas length (steps = length, block = daedal.block_length).
    daedal: DAEDAL's thresholds and lengths (paper defaults; block_length is the baseline's block too).
    mask_id: the model's mask token id (LLaDA: 126336).
    eos_id: the EOS/padding id (LLaDA: <|endoftext|> 126081, not <|eot_id|> 126348).
    batch_size: problems decoded per batch (forced to 1 without the attention mask).
    limit: first N problems only (0 = all).
    device: torch device; auto = the runner's --set device if not cpu, else cuda when available, else cpu.
    dtype: model weights dtype (bfloat16, float16, float32).
    attention_mask: pass the length-derived attention mask (false for models that reject it: batch size 1).
    position_ids_from_mask: pass position ids that ignore left padding (BERT-style models; not LLaDA).
    trust_remote_code: run the modelling file in the model directory (LLaDA needs it; off unless asked for).
    self_check: on the first padded batch, stop if a padded row decodes differently from the row alone.
    check_atol: self-check tolerance on the logits (none = 1e-3 in float32, 0.25 in 16-bit).
    """

    model_path: str = ""
    data_path: str = ""
    task: Literal["gsm8k", "math500"] = "gsm8k"
    checker: Literal["math_verify", "number"] = "math_verify"
    method: Literal["daedal", "fixed", "both"] = "both"
    fixed_length: int = 512
    daedal: DaedalConfig = DaedalConfig()
    mask_id: int = LLADA_MASK_ID
    eos_id: int = LLADA_EOS_ID
    batch_size: int = 8
    limit: int = 0
    device: str = "auto"
    dtype: str = "bfloat16"
    attention_mask: bool = True
    position_ids_from_mask: bool = False
    trust_remote_code: bool = False
    self_check: bool = True
    check_atol: float | None = None

    def __post_init__(self) -> None:
        if self.fixed_length < 1 or self.batch_size < 1 or self.limit < 0:
            raise ValueError("fixed_length and batch_size must be >= 1 and limit >= 0")
        if self.check_atol is not None and not self.check_atol >= 0:
            raise ValueError(f"check_atol must be >= 0, got {self.check_atol}")

    def resolved_check_atol(self) -> float:
        """``check_atol``, or its dtype default (bf16/fp16 logits differ by more than fp32 rounding)."""
        if self.check_atol is not None:
            return self.check_atol
        return 1e-3 if self.dtype == "float32" else 0.25


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one DAEDAL run.

    model: the tiny masked-diffusion LM and its SFT run (smoke / small scale).
    daedal: DAEDAL at smoke / small scale: the paper's thresholds, lengths scaled to the tasks.
    hidden_length_task: the task of claim C5 (length not readable from the prompt); C1-C4 use the others.
    n_eval: held-out problems per task.
    lengths: canvas lengths of the fixed-length baseline (must include daedal.initial_length, for C3).
    stage2_inits: initial lengths of the "stage 2 only" ablation (Table 3).
    eval_seed: seed of the held-out problems (task k uses eval_seed + k).
    threads: torch intra-op threads (the ops are tiny: one thread is as fast as two).
    paper: paper scale (local checkpoint and data).
    """

    model: TinyMDMConfig = TinyMDMConfig()
    daedal: DaedalConfig = DaedalConfig(
        initial_length=8, max_length=128, block_length=8, expansion_factor=4, eos_window=8, eos_anchor=4
    )
    hidden_length_task: str = "chain"
    n_eval: int = 48
    # a roughly geometric grid (the paper doubles L from 64 to 2048) from L_init up to L_max, the
    # longest training canvas
    lengths: tuple[int, ...] = (8, 24, 48, 80, 128)
    stage2_inits: tuple[int, ...] = (8, 32)
    eval_seed: int = 12345
    threads: int = 1
    paper: PaperConfig = PaperConfig()

    def __post_init__(self) -> None:
        if self.n_eval < 1 or self.threads < 1:
            raise ValueError("n_eval and threads must be >= 1")
        if not self.lengths or min(self.lengths) < 1 or (self.stage2_inits and min(self.stage2_inits) < 1):
            raise ValueError("lengths must be non-empty and every length >= 1")
        if self.hidden_length_task and self.hidden_length_task not in self.model.tasks:
            raise ValueError(f"hidden_length_task {self.hidden_length_task!r} is not in model.tasks {self.model.tasks}")
        if len([t for t in self.model.tasks if t != self.hidden_length_task]) < 1:
            raise ValueError("claims C1-C4 need at least one task besides hidden_length_task")
        if self.daedal.initial_length not in self.lengths:
            raise ValueError(
                f"lengths {self.lengths} must include daedal.initial_length={self.daedal.initial_length} (claim C3)"
            )


def config_for(scale: str) -> RunConfig:
    """smoke: a d=32 model for 80 steps, 8 problems, lengths 8 and 16, L_max 32; small and paper: the defaults."""
    base = RunConfig()
    if scale == "smoke":
        model = replace(base.model, d_model=32, d_ff=128, steps=80, batch_size=16, warmup_steps=10)
        daedal = replace(base.daedal, max_length=32)
        return replace(base, model=model, daedal=daedal, n_eval=8, lengths=(8, 16), stage2_inits=(8,))
    return base
