"""D-AR: *Diffusion via Autoregressive Models* (Gao, Shou; ICLR 2026; arXiv 2505.23660).

A sequential diffusion tokenizer turns an image into N discrete tokens in K groups; group k
conditions step k of a pixel-space flow-matching decoder, so the token order is the diffusion
order (coarse to fine). A completely vanilla Llama-style next-token model is trained on these
tokens; generating one more group is running one more denoising step, which gives streaming
previews and zero-shot layout control by fixing a prefix.

Implemented:

* :class:`VQModel` (:mod:`iclr26.d_ar.tokenizer`): causal-query encoder with the D-AR mask and 2-D
  RoPE, l2-normalised VQ, causal conditioning stack, pixel DiT with cross-attention into per-token
  adaLN, time shift, Euler / AB2 sampler, ``clip_steps`` previews; names and config keys mirror the
  official code (``configs/tokenizer_v1.yaml``);
* :class:`Transformer` (:mod:`iclr26.d_ar.gpt`): the LlamaGen decoder with class dropout, CFG with a
  linear scale schedule, prefix control, and the reversed-order baseline;
* the CPU reproduction on scikit-learn digits (:mod:`iclr26.d_ar.experiment`) and the paper-scale
  path (:mod:`iclr26.d_ar.paper`: released checkpoints, sharded 50k-sample generation, FID).

Not implemented: tokenizer training with LPIPS / REPA at ImageNet scale (loss hooks only), the
GAN option of the code, KV caching in generation, the continuous (non-VQ) bottleneck.
"""

from .gpt import GPT_PRESETS, GPTConfig, Transformer, cfg_schedule, generate, gpt_preset, guided_logits, reverse_tokens
from .tokenizer import (
    DiffDecoderConfig,
    TokenizerConfig,
    VectorQuantizer,
    VQModel,
    sampling_grid,
    time_shift,
    training_group,
)

__all__ = [
    "GPT_PRESETS",
    "DiffDecoderConfig",
    "GPTConfig",
    "TokenizerConfig",
    "Transformer",
    "VQModel",
    "VectorQuantizer",
    "cfg_schedule",
    "generate",
    "gpt_preset",
    "guided_logits",
    "reverse_tokens",
    "sampling_grid",
    "time_shift",
    "training_group",
]
