"""Training InfGen with ``iclr26.core.train.fit`` (AdamW, warmup + cosine, grad clip 1.0, DDP under torchrun).

Official settings (``cfgs/scenestreamer-full-large.yaml``): AdamW lr 3e-4, weight decay 0, clip 1.0, cosine
with 2000 warm-up steps, 30 epochs, batch 4 per GPU, full teacher forcing. Under torchrun every rank draws
its own part of the global batch (``get_batch(step, rank, world)``), so the data is sharded per rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from iclr26.core.train import FitResult, TrainConfig, fit
from iclr26.infgen.model import InfGenModel, attach_neighbours, collate, collate_maps, seq_neighbours
from iclr26.infgen.tokenizer import TokenSeq


def paper_train_config(steps: int, **kw) -> TrainConfig:
    """The official optimisation settings for ``steps`` optimiser steps."""
    base = dict(
        steps=steps,
        lr=3e-4,
        weight_decay=0.0,
        warmup_steps=min(2000, max(1, steps // 10)),
        grad_clip=1.0,
        min_lr_ratio=0.0,
        desc="infgen",
    )
    base.update(kw)
    return TrainConfig(**base)


def train_infgen(
    model: InfGenModel,
    seqs: Sequence[TokenSeq],
    cfg: TrainConfig,
    batch_size: int,
    seed: int,
    ckpt_dir=None,
    device: str | torch.device = "cpu",
    cache_neighbours: bool = False,
) -> FitResult:
    """Teacher-forced training on token sequences; batches drawn with a per-step seeded generator.
    ``cache_neighbours``: with ``model.cfg.sparse_attn``, compute each sequence's attention key lists once
    and keep them (the mask depends on token metadata only; the same numbers, less work per step)."""
    if not seqs:
        raise ValueError("no training sequences")
    lists: dict[int, np.ndarray] = {}
    use_lists = cache_neighbours and model.cfg.sparse_attn

    def get_batch(step: int, rank: int, world: int):
        rng = np.random.default_rng([seed, step])
        idx = rng.choice(len(seqs), size=batch_size * world, replace=len(seqs) < batch_size * world)
        mine = [int(i) for i in idx[rank::world]]
        b = collate([seqs[i] for i in mine], device=device)
        if use_lists:
            for i in mine:
                if i not in lists:
                    lists[i] = seq_neighbours(model, seqs[i])
            b = attach_neighbours(b, [lists[i] for i in mine])
        return b, collate_maps([seqs[i].map for i in mine], device=device)

    def loss_fn(m, batch):
        b, mb = batch
        h, mc = m(b, mb)
        core = m.module if hasattr(m, "module") else m
        return core.loss_from_hidden(h, mc, b)

    torch.manual_seed(seed)
    return fit(model, loss_fn, get_batch, cfg, ckpt_dir=ckpt_dir)
