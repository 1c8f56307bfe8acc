"""Training and PredCls evaluation of one relation model on ShapesSG (shared by every variant)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from iclr26.apt.config import OptimConfig
from iclr26.apt.models import RelationModel
from iclr26.apt.names import PREDICATES, SYNONYM_GROUPS
from iclr26.apt.sgg_metrics import ImageGraph, per_predicate_recall, sgg_report
from iclr26.apt.shapes_sg import LONGTAIL_ORDER, Split
from iclr26.core.train import TrainConfig, fit

__all__ = ["batch_of", "evaluate", "image_graphs", "train_model", "training_pairs"]


def training_pairs(
    split: Split, bg_ratio: int, seed: int, novel_ids: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pair indices, labels): every annotated pair plus background pairs subsampled to ``bg_ratio``:1.

    Open vocabulary: pairs labelled with a ``novel_ids`` predicate become background (never seen as positives).
    """
    labels = split.pair_label.clone()
    for k in novel_ids:
        labels[labels == k] = 0
    pos = torch.nonzero(labels > 0).squeeze(1)
    neg = torch.nonzero(labels == 0).squeeze(1)
    g = torch.Generator().manual_seed(int(seed) * 1009 + 17)
    n_neg = min(len(neg), bg_ratio * len(pos))
    neg = neg[torch.randperm(len(neg), generator=g)[:n_neg]]
    idx = torch.cat([pos, neg])
    return idx, labels[idx]


def batch_of(split: Split, idx: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The model inputs of pairs ``idx``."""
    s, o = split.pair_s[idx], split.pair_o[idx]
    out = {
        "cls_s": split.obj_cls[s],
        "cls_o": split.obj_cls[o],
        "vis_s": split.obj_vis[s],
        "vis_o": split.obj_vis[o],
        "union": split.pair_union[idx]
        if split.pair_text is None
        else torch.cat([split.pair_union[idx], split.pair_text[idx]], -1),
        "geo": split.pair_geo[idx],
    }
    if labels is not None:
        out["label"] = labels
    return out


def train_model(
    model: RelationModel,
    split: Split,
    pairs: torch.Tensor,
    labels: torch.Tensor,
    cfg: OptimConfig,
    seed: int,
    log: Callable[..., None] | None = None,
) -> dict[str, float]:
    """AdamW + warmup/cosine (core.train.fit) on random batches; returns the mean seconds per step."""
    g = torch.Generator().manual_seed(int(seed) * 7919 + 3)
    order = [torch.randint(0, len(pairs), (cfg.batch_size,), generator=g) for _ in range(cfg.steps)]

    device = next(model.parameters()).device

    def get_batch(step: int, rank: int, world: int):
        sel = order[step % len(order)]
        sel = sel[rank::world]
        return {k: v.to(device) for k, v in batch_of(split, pairs[sel], labels[sel]).items()}

    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_steps,
        betas=(0.9, 0.999),
        min_lr_ratio=0.05,
        grad_clip=5.0,
        progress=False,
        log_every=max(1, min(25, cfg.steps // 10)),
    )
    model.train()
    t0 = time.perf_counter()
    fit(model, lambda m, b: m.loss(b), get_batch, tcfg, log=log)
    return {"sec_per_step": (time.perf_counter() - t0) / max(1, cfg.steps)}


@torch.no_grad()
def score_pairs(model: RelationModel, split: Split, chunk: int = 4096) -> torch.Tensor:
    """Softmax class probabilities [Np, 1 + R] for every ordered pair of a split."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(split.pair_label), chunk):
        idx = torch.arange(start, min(start + chunk, len(split.pair_label)))
        batch = {k: v.to(device) for k, v in batch_of(split, idx).items()}
        out.append(model(batch).softmax(-1).cpu())
    return torch.cat(out)


def image_graphs(split: Split, probs: torch.Tensor) -> list[ImageGraph]:
    """Group pair scores by image: local pair indices, scores, ground-truth triplets."""
    img = split.pair_img.numpy()
    bounds = np.searchsorted(img, np.arange(split.n_images + 1))
    probs_np, s, o, lab = probs.numpy(), split.pair_s.numpy(), split.pair_o.numpy(), split.pair_label.numpy()
    graphs = []
    for i in range(split.n_images):
        a, b = bounds[i], bounds[i + 1]
        pairs = np.stack([s[a:b], o[a:b]], 1)
        gt_mask = lab[a:b] > 0
        gt = np.concatenate([pairs[gt_mask], lab[a:b][gt_mask, None]], 1)
        graphs.append(ImageGraph(pairs=pairs, scores=probs_np[a:b], gt=gt))
    return graphs


def evaluate(
    model: RelationModel, split: Split, ks: Sequence[int], head_k: int, tail_k: int, novel_ids: Sequence[int] = ()
) -> dict:
    """R/mR/F@K, per-predicate R@20, head/tail and synonym-group recall (and novel-split mR when given)."""
    graphs = image_graphs(split, score_pairs(model, split))
    out: dict = dict(sgg_report(graphs, ks))
    per = per_predicate_recall(graphs, 20)
    out["per_predicate_R@20"] = {PREDICATES[k - 1]: v for k, v in per.items()}
    pid = {n: PREDICATES.index(n) + 1 for n in PREDICATES}
    head = [pid[n] for n in LONGTAIL_ORDER[:head_k]]
    tail = [pid[n] for n in LONGTAIL_ORDER[-tail_k:]]
    out["head_R@20"] = float(np.mean([per.get(k, 0.0) for k in head]))
    out["tail_R@20"] = float(np.mean([per.get(k, 0.0) for k in tail]))
    for group, names in SYNONYM_GROUPS.items():
        out[f"group_{group}_R@20"] = float(np.mean([per.get(pid[n], 0.0) for n in names]))
    if novel_ids:
        for k in ks:
            out[f"novel_mR@{k}"] = float(np.mean([per_predicate_recall(graphs, k).get(c, 0.0) for c in novel_ids]))
    return out
