"""A tiny GPT trained on the toy world with :func:`iclr26.core.train.fit` (next-token loss on the
response tokens only), and batched sampling of responses with optional steering."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from iclr26.core.train import TrainConfig, fit
from iclr26.core.transformer import Transformer, TransformerConfig, generate
from iclr26.dishonesty.steering import SteeringHook
from iclr26.dishonesty.toy_world import ToyWorld


@dataclass(frozen=True)
class ToyModelConfig:
    """The toy GPT (causal, RoPE, tied embeddings) and its training with core.train.fit (AdamW + cosine).

    d_model: residual width (default 128: 4 layers, d = 128, 4 heads, about 0.8M parameters).
    n_layers: decoder blocks.
    n_heads: attention heads.
    steps: optimisation steps.
    batch_size: sequences per step.
    lr: peak learning rate.
    warmup_steps: linear warm-up steps.
    pool_size: number of pre-sampled training sequences (batches are drawn from it by step).
    max_len: padded sequence length.
    """

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    steps: int = 2500
    batch_size: int = 128
    lr: float = 2e-3
    warmup_steps: int = 100
    pool_size: int = 60_000
    max_len: int = 20


def response_loss(model: Transformer, batch) -> torch.Tensor:
    """Cross-entropy of the next token, averaged over response-token targets only."""
    ids, tgt_mask = batch
    logits = model(ids[:, :-1]).logits
    mask = tgt_mask[:, :-1]
    return F.cross_entropy(logits[mask], ids[:, 1:][mask])


def train_toy_gpt(
    world: ToyWorld, cfg: ToyModelConfig, seed: int, progress: bool = False, log=None
) -> tuple[Transformer, list]:
    """Build and train the toy GPT on the world's mixture. ``log(step, **scalars)`` receives loss, lr
    and grad norm per step. Returns (model in eval mode, losses)."""
    torch.manual_seed(seed)
    model = Transformer(
        TransformerConfig(
            vocab_size=world.vocab_size,
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            max_len=cfg.max_len + 8,
            pos="rope",
        )
    )
    ids, tgt = world.training_pool(cfg.pool_size, seed=seed, max_len=cfg.max_len)

    def get_batch(step, rank, world_size):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        idx = torch.randint(0, ids.shape[0], (cfg.batch_size // world_size,), generator=g)
        return ids[idx], tgt[idx]

    res = fit(
        model,
        response_loss,
        get_batch,
        TrainConfig(
            steps=cfg.steps,
            lr=cfg.lr,
            warmup_steps=cfg.warmup_steps,
            weight_decay=0.1,
            progress=progress,
            desc=f"train toy GPT (seed {seed})",
        ),
        log=log,
    )
    model.eval()
    return model, res.losses


@torch.no_grad()
def sample_responses(
    model: Transformer,
    world: ToyWorld,
    prompts: list[list[int]],
    *,
    seed: int,
    max_new_tokens: int = 7,
    temperature: float = 1.0,
    steer: dict | None = None,
    batch_size: int = 1024,
) -> list[list[int]]:
    """Sample one response per prompt (prompts of equal length per batch; math prompts without persona
    all have the same length). ``steer``: {"layer", "vector", "alpha"} for :class:`SteeringHook`.
    Returns token lists up to and including the first ``<eos>`` (or the cut)."""
    lengths = {len(p) for p in prompts}
    if len(lengths) != 1:
        raise ValueError("sample_responses needs prompts of equal length")
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(0, len(prompts), batch_size):
        x = torch.tensor(prompts[i : i + batch_size], dtype=torch.long)
        if steer is not None and steer.get("alpha", 0.0) != 0.0:
            with SteeringHook(model, steer["layer"], steer["vector"], steer["alpha"]):
                seq, valid = generate(
                    model,
                    x,
                    max_new_tokens,
                    temperature=temperature,
                    eos_id=world.eos_id,
                    generator=g,
                    pad_id=world.pad_id,
                )
        else:
            seq, valid = generate(
                model, x, max_new_tokens, temperature=temperature, eos_id=world.eos_id, generator=g, pad_id=world.pad_id
            )
        new = seq[:, x.shape[1] :]
        for row, ok in zip(new, valid):
            out.append(row[ok].tolist())
    return out
