"""DAEDAL: *Beyond Fixed: Training-Free Variable-Length Denoising for Diffusion Large Language
Models* (Li, Dong, Zang, Cao, Wang, Lin; ICLR 2026; arXiv 2508.00819).

A masked-diffusion LM (LLaDA) denoises a canvas whose length is fixed in advance. DAEDAL makes the
length adaptive without training: Stage 1 grows a short all-mask canvas until the model's EOS
confidence at its end says it is long enough; Stage 2 replaces a very uncertain mask with a block
of masks while denoising.

Implemented:

* :func:`daedal_generate` (both stages, batched, per-row lengths, released-code semantics with
  flags for the paper variants), :func:`eos_confidence` (code and window modes),
  :func:`llada_fixed_generate` (LLaDA's fixed-length baseline, optional threshold fill),
  :func:`effective_token_stats` (E_tok, N_tok, E_ratio as a ratio of totals);
* a tiny bidirectional masked-diffusion LM trained the LLaDA way on synthetic tasks
  (:mod:`iclr26.daedal.model`, :mod:`iclr26.daedal.tasks`) and the CPU reproduction
  (:mod:`iclr26.daedal.experiment`);
* the paper-scale path: :class:`HFMaskedDiffusionAdapter` (LLaDA-8B-Instruct through
  ``trust_remote_code`` from a local path, or any ``*ForMaskedLM``) and
  ``python -m iclr26.daedal.eval`` on a local GSM8K or MATH500 JSONL (official prompts, answers
  checked with math-verify), sharded under torchrun.

Not implemented: MBPP and HumanEval (code execution), and KV caching (neither the paper nor the
code uses one).
"""

from .generate import (
    DaedalConfig,
    GenerationOutput,
    daedal_generate,
    denoise_step,
    eos_confidence,
    get_num_transfer_tokens,
    initial_length_adjustment,
    insert_masks,
    left_pad_prompts,
    llada_fixed_generate,
)
from .metrics import effective_length, effective_token_stats

__all__ = [
    "DaedalConfig",
    "GenerationOutput",
    "daedal_generate",
    "denoise_step",
    "effective_length",
    "effective_token_stats",
    "eos_confidence",
    "get_num_transfer_tokens",
    "initial_length_adjustment",
    "insert_masks",
    "left_pad_prompts",
    "llada_fixed_generate",
]
