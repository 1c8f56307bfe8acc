"""A tiny bidirectional masked-diffusion LM trained the LLaDA way (spec §6).

Model: :class:`iclr26.core.transformer.Transformer` with ``causal=False`` and learned absolute
positions (pre-LN, tied embeddings). It sees ``prompt (left-padded) ++ canvas`` and predicts every
position; padding is hidden with the attention mask.

LLaDA SFT objective, which is what creates the EOS length signal DAEDAL reads:

* canvas = answer ++ EOS × pad, pad ~ U{1, ..., L_train_max - |answer|} (LLaDA pads each SFT
  batch to its longest sample with EOS, so the model learns to end with EOS runs of any length);
* the prompt is never masked; t ~ U(t_min, 1); each canvas token is masked independently with
  probability t;
* loss = Σ_{masked i} CE(x_i, f(x_t)_i) / t, divided by the canvas length, averaged over the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from iclr26.core.train import TrainConfig, fit
from iclr26.core.transformer import Transformer, TransformerConfig

from . import tasks as T


@dataclass(frozen=True)
class TinyMDMConfig:
    """The tiny masked-diffusion LM and its SFT run; the defaults are the ones ``small`` uses.

    d_model: transformer width.
    n_layers: transformer layers.
    n_heads: attention heads.
    d_ff: feed-forward width.
    max_len: learned position table (prompt width + longest canvas).
    train_max_canvas: L_train_max, longest training canvas (answer + EOS padding).
    tasks: the benchmarks mixed uniformly in training.
    steps: optimisation steps (AdamW, warm-up then cosine).
    batch_size: training sequences per step.
    lr: peak learning rate.
    warmup_steps: linear warm-up steps before the cosine decay.
    t_min: smallest masking ratio t.
    stratified_t: draw the batch's t on a stratified grid ((i + u_i) / B, shuffled), each row still U(t_min, 1).
        A batch then always spans the whole range (lower-variance gradient for small batches).
    weight_by_t: the 1/t weight of the LLaDA loss (False = plain masked cross-entropy, a diagnostic).
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    max_len: int = 152
    train_max_canvas: int = 128
    tasks: tuple[str, ...] = ("rep4", "rep6", "rep8", "chain")
    steps: int = 1000
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 50
    t_min: float = 1e-3
    stratified_t: bool = True
    weight_by_t: bool = True

    def transformer_config(self) -> TransformerConfig:
        return TransformerConfig(
            vocab_size=T.VOCAB_SIZE,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            max_len=self.max_len,
            causal=False,
            pos="learned",
            dropout=0.0,
        )


def build_model(cfg: TinyMDMConfig, seed: int) -> Transformer:
    """A freshly initialised model; weights are a function of ``seed`` only."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(cfg.transformer_config())


def model_fn_of(model: Transformer):
    """The decoder-facing model function ``(ids [B, T], attention_mask [B, T]) -> logits [B, T, V]``."""

    def model_fn(ids: Tensor, attention_mask: Tensor) -> Tensor:
        return model(ids, attention_mask=attention_mask).logits

    return model_fn


def sft_batch(problems: Sequence[T.Problem], rng: np.random.Generator, cfg: TinyMDMConfig) -> dict[str, Tensor]:
    """Clean SFT sequences: ids [B, W + L_train_max], attention mask, canvas mask, canvas lengths."""
    W, Lc = T.PROMPT_WIDTH, cfg.train_max_canvas
    p_ids, p_mask = T.pad_prompts(problems, W)
    B = len(problems)
    canvas = torch.full((B, Lc), T.EOS, dtype=torch.long)
    c_mask = torch.zeros((B, Lc), dtype=torch.bool)
    for i, p in enumerate(problems):
        n = len(p.target)
        if n >= Lc:
            raise ValueError(f"answer of {n} tokens does not fit train_max_canvas={Lc}")
        length = n + int(rng.integers(1, Lc - n + 1))
        canvas[i, :n] = torch.tensor(p.target)
        c_mask[i, :length] = True
    ids = torch.cat([p_ids, canvas], 1)
    attn = torch.cat([p_mask, c_mask], 1)
    gen = torch.cat([torch.zeros_like(p_mask), c_mask], 1)
    return {"ids": ids, "attn": attn, "gen": gen, "canvas_len": c_mask.sum(1)}


def llada_sft_loss(
    model: Transformer, batch: dict[str, Tensor], t: Tensor, noise: Tensor, weight_by_t: bool = True
) -> Tensor:
    """LLaDA's SFT loss for given masking ratios t [B] and uniform draws noise [B, T] (see module doc)."""
    ids, gen = batch["ids"], batch["gen"]
    masked = gen & (noise < t[:, None])
    x_t = torch.where(masked, torch.full_like(ids, T.MASK), ids)
    logits = model(x_t, attention_mask=batch["attn"]).logits
    ce = F.cross_entropy(logits.float().transpose(1, 2), ids, reduction="none")  # [B, T]
    per_row = (ce * masked).sum(1) / (t if weight_by_t else 1.0) / batch["canvas_len"].clamp_min(1)
    return per_row.mean()


def train_tiny_mdm(
    cfg: TinyMDMConfig, seed: int, *, progress: bool = False, log: Callable[..., None] | None = None
) -> tuple[Transformer, list[float]]:
    """Train the tiny MDM with :func:`iclr26.core.train.fit`; batches are a function of (seed, step).

    ``log(step, **scalars)`` (e.g. ``ctx.logger("seed0/mdm_train")``) receives the per-step loss, lr and
    grad norm from ``fit``."""
    model = build_model(cfg, seed)

    def get_batch(step: int, rank: int, world: int):
        rng = np.random.default_rng([seed, step, rank])
        names = rng.choice(len(cfg.tasks), size=cfg.batch_size // world)
        probs = [T.make_problem(cfg.tasks[int(k)], rng) for k in names]
        batch = sft_batch(probs, rng, cfg)
        g = torch.Generator().manual_seed(int(rng.integers(2**62)))
        u = torch.rand(len(probs), generator=g)
        if cfg.stratified_t:
            u = (torch.randperm(len(probs), generator=g) + u) / len(probs)
        t = cfg.t_min + (1 - cfg.t_min) * u
        noise = torch.rand(batch["ids"].shape, generator=g)
        return batch, t, noise

    def loss_fn(m, b):
        return llada_sft_loss(m, *b, weight_by_t=cfg.weight_by_t)

    tc = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=min(cfg.warmup_steps, cfg.steps // 2),
        weight_decay=0.01,
        progress=progress,
        desc=f"train MDM seed {seed}",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        res = fit(model, loss_fn, get_batch, tc, log=log)
    model.eval()
    return model, res.losses
