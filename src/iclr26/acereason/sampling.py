"""Temperature sampling from a core.transformer causal model with a key/value cache.

Same semantics and random stream as :func:`iclr26.core.transformer.generate` (one
``torch.multinomial`` draw of ``softmax(z / T)`` per step from the given generator, rows padded with
``pad_id`` after their EOS), but each step runs the new token only, attending to cached keys and values,
instead of re-running the whole sequence: the rollouts of the toy RL are the cost that dominates.
Supports the models the toy builds (RoPE, no interventions, no dropout at sampling).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from iclr26.core.transformer import Block, Transformer, apply_rope, rope_cache

__all__ = ["cached_generate"]


def _block(block: Block, x: Tensor, pos: Tensor, cache: list[Tensor] | None, base: float) -> tuple[Tensor, list]:
    """One pre-LN block on the new positions ``x`` [B, t, d]; returns the output and the grown cache."""
    attn = block.attn
    B, t, _ = x.shape
    q, k, v = attn.qkv(block.ln1(x)).view(B, t, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    cos, sin = rope_cache(pos, attn.head_dim, base)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    # prefill: causal over the prompt; decode: the one new query sees every cached key
    out = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and t > 1)
    x = x + attn.proj(out.transpose(1, 2).reshape(B, t, -1))
    x = x + block.mlp(block.ln2(x))
    return x, [k, v]


def _logits(model: Transformer, x: Tensor) -> Tensor:
    last = model.ln_f(x)
    return model.head(last) if model.head is not None else last @ model.tok_emb.weight.T


@torch.no_grad()
def cached_generate(
    model: Transformer,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    step_logits: list | None = None,
) -> tuple[Tensor, Tensor]:
    """``(tokens [B, T0 + n], valid [B, n])`` exactly as :func:`iclr26.core.transformer.generate` returns them
    (``temperature=0`` is greedy). ``step_logits``: if a list is given, each step's ``[B, V]`` logits are appended."""
    cfg = model.cfg
    if not cfg.causal or cfg.pos != "rope" or model.interventions:
        raise ValueError("cached_generate supports causal RoPE models without interventions")
    if prompt.shape[1] + max_new_tokens > cfg.max_len:
        raise ValueError(f"prompt {prompt.shape[1]} + {max_new_tokens} new tokens exceed max_len={cfg.max_len}")
    B, t0 = prompt.shape
    alive = torch.ones(B, dtype=torch.bool, device=prompt.device)
    seq, valid = prompt, []
    x = model.tok_emb(prompt)
    pos = torch.arange(t0, device=prompt.device)[None].expand(B, t0)
    caches: list[list[Tensor] | None] = [None] * len(model.blocks)
    for step in range(max_new_tokens):
        for i, block in enumerate(model.blocks):
            x, caches[i] = _block(block, x, pos, caches[i], cfg.rope_base)
        logits = _logits(model, x[:, -1]).float()
        if step_logits is not None:
            step_logits.append(logits)
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator).squeeze(1)
        nxt = torch.where(alive, nxt, torch.full_like(nxt, pad_id))
        valid.append(alive.clone())
        if eos_id is not None:
            alive = alive & (nxt != eos_id)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        if not alive.any():
            break
        x = model.tok_emb(nxt[:, None])
        pos = torch.full((B, 1), t0 + step, device=prompt.device, dtype=torch.long)
    return seq, torch.stack(valid, 1) if valid else torch.zeros(B, 0, dtype=torch.bool)
