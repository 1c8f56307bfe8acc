"""Model functions for the DAEDAL tests: scripted (hand-computable) and tiny random transformers."""

from __future__ import annotations

import torch

from iclr26.core.transformer import Transformer, TransformerConfig

V, MASK, EOS = 16, 15, 14  # vocabulary of the test models: tokens 0..13, EOS, MASK
P = 6  # prompt width used by the tests


def logits_from(tokens: torch.Tensor, conf: torch.Tensor, vocab: int = V) -> torch.Tensor:
    """Logits whose softmax puts probability ``conf`` on ``tokens`` and spreads the rest uniformly
    over the other non-MASK tokens (MASK gets ~0)."""
    shape = tokens.shape
    probs = ((1 - conf) / (vocab - 2))[..., None].expand(*shape, vocab).clone()
    probs[..., MASK] = 1e-12
    probs.scatter_(-1, tokens[..., None], conf[..., None])
    return probs.log()


def length_aware_fn(true_len, p_content: float = 0.95, p_eos: float = 0.97, prompt_width: int = P):
    """A scripted "trained" model: at canvas position j it predicts EOS (prob p_eos) when
    j >= true_len(row) and token j % 10 (prob p_content) otherwise. ``true_len`` is an int or a
    function of the number of real prompt tokens of the row."""

    def fn(x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        B, T = x.shape
        n_prompt = attn[:, :prompt_width].sum(1)
        tl = torch.as_tensor([true_len(int(n)) if callable(true_len) else true_len for n in n_prompt])
        j = torch.arange(T)[None] - prompt_width
        is_eos = j >= tl[:, None]
        tok = torch.where(is_eos, torch.full_like(j, EOS), (j % 10).clamp_min(0).expand(B, T))
        conf = torch.where(is_eos, torch.full((B, T), p_eos), torch.full((B, T), p_content))
        return logits_from(tok, conf)

    return fn


def random_transformer(seed: int = 0, max_len: int = 96) -> Transformer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        cfg = TransformerConfig(
            vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=max_len, causal=False, pos="learned"
        )
        model = Transformer(cfg).eval()
        # larger weights -> peaked, varied confidences (a default init is almost uniform)
        for p in model.parameters():
            p.data.mul_(8.0)
    return model


def random_fn(seed: int = 0, suppress_mask: bool = True, scripted=None, scale: float = 1.0):
    """A tiny random bidirectional transformer as model_fn; optionally plus a scripted model's logits."""
    model = random_transformer(seed)

    def fn(x, attn):
        out = model(x, attention_mask=attn).logits * scale
        if scripted is not None:
            out = out + scripted(x, attn)
        if suppress_mask:
            out = out.clone()
            out[..., MASK] = -1e9
        return out

    return fn


def prompts(n: int, seed: int = 0, width: int = P) -> tuple[torch.Tensor, torch.Tensor]:
    """n random prompts of lengths 2..width, left-padded with EOS to ``width``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((n, width), EOS, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.bool)
    for i in range(n):
        k = int(torch.randint(2, width + 1, (1,), generator=g))
        ids[i, width - k :] = torch.randint(0, 10, (k,), generator=g)
        mask[i, width - k :] = True
    return ids, mask
