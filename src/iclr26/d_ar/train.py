"""Training of the tokenizer and of the AR model (both through :func:`iclr26.core.train.fit`).

Tokenizer loss (official ``vq_loss.VQLoss``, no GAN)::

    L = L_fm + L_vq + L_commit + w_lpips LPIPS(x, x1_hat) + w_repa (1 - cos(h_repa, DINO(x))) + w_mse ||x1_hat - x||^2

AR loss: next-token cross-entropy over all N positions of the frozen tokenizer's codes of randomly
shifted images; the reversed-order model sees the same codes reversed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from iclr26.core.train import fit

from .config import ARTrain, TokenizerTrain
from .data import random_shift
from .gpt import GPTConfig, Transformer, reverse_tokens
from .tokenizer import TokenizerConfig, VQModel


def repa_loss(h_repa: Tensor, target_feats: Tensor) -> Tensor:
    """1 - mean cosine similarity between projected DiT features and frozen encoder features [B, T, d]."""
    return 1 - F.cosine_similarity(h_repa, target_feats, dim=-1).mean()


def tokenizer_loss(
    model: VQModel, x: Tensor, tt: TokenizerTrain, lpips_fn: Callable | None = None, repa_fn: Callable | None = None
) -> tuple[Tensor, dict[str, float]]:
    """One tokenizer step's loss and its parts (see the module docstring)."""
    out = model.training_losses(x)
    loss = out["fm_loss"] + out["vq_loss"] + out["commit_loss"]
    parts = {k: float(out[k + "_loss"].detach()) for k in ("fm", "vq", "commit")}
    if tt.recon_mse_weight > 0:
        mse = F.mse_loss(out["x1_hat"], x)
        loss = loss + tt.recon_mse_weight * mse
        parts["recon_mse"] = float(mse.detach())
    if tt.lpips_weight > 0:
        if lpips_fn is None:
            raise ValueError("lpips_weight > 0 needs an LPIPS function (local VGG-LPIPS weights)")
        lp = lpips_fn(x, out["x1_hat"]).mean()
        loss = loss + tt.lpips_weight * lp
        parts["lpips"] = float(lp.detach())
    if tt.repa_weight > 0:
        if repa_fn is None or out["h_repa"] is None:
            raise ValueError("repa_weight > 0 needs a REPA head and a feature function (local DINOv2 weights)")
        rp = repa_loss(out["h_repa"], repa_fn(x))
        loss = loss + tt.repa_weight * rp
        parts["repa"] = float(rp.detach())
    parts["codes_used"] = float(out["indices"].unique().numel())
    return loss, parts


def train_tokenizer(
    cfg: TokenizerConfig, tt: TokenizerTrain, x_train: Tensor, seed: int, max_shift: int, log: Callable | None = None
) -> VQModel:
    """Tokenizer on randomly shifted training images; batch at step s drawn from a (seed, s) generator."""
    torch.manual_seed(seed)
    model = VQModel(cfg)

    def get_batch(step: int, rank: int, world: int) -> Tensor:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        idx = torch.randint(0, len(x_train), (tt.batch,), generator=g)
        return random_shift(x_train[idx], max_shift, g)

    fit(model, lambda m, x: tokenizer_loss(m, x, tt), get_batch, tt.train, log=log)
    return model.eval()


def all_shift_codes(tok: VQModel, x: Tensor, max_shift: int, batch: int = 512) -> Tensor:
    """Codes [S, n, N] of every image under each of the S = (2m + 1)^2 translations. Sampling a
    random (image, translation) pair from this table is exactly the official on-the-fly extraction
    with a frozen tokenizer and random translations."""
    m = max_shift
    out = []
    pad = F.pad(x, (m, m, m, m), value=-1.0)
    H, W = x.shape[-2:]
    with torch.no_grad():
        for dy in range(2 * m + 1):
            for dx in range(2 * m + 1):
                shifted = pad[:, :, dy : dy + H, dx : dx + W]
                out.append(torch.cat([tok.extract_code(shifted[i : i + batch]) for i in range(0, len(x), batch)]))
    return torch.stack(out)


def ar_batch(codes: Tensor, labels: Tensor, seed: int, step: int, batch: int, reverse: bool) -> tuple[Tensor, Tensor]:
    """Rows of (translation, image) drawn from a (seed, step) generator: both orders get the same
    rows; the reversed baseline sees each row reversed."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + 500_000 + step)
    S, n, _ = codes.shape
    i = torch.randint(0, n, (batch,), generator=g)
    s = torch.randint(0, S, (batch,), generator=g)
    z = codes[s, i]
    return (reverse_tokens(z) if reverse else z), labels[i]


def train_ar(
    gcfg: GPTConfig, at: ARTrain, codes: Tensor, labels: Tensor, seed: int, reverse: bool, log: Callable | None = None
) -> Transformer:
    """Vanilla AR on codes [S, n, N] (random translation and image per row); reverse = the baseline."""
    torch.manual_seed(seed + 17)
    model = Transformer(gcfg)
    fit(
        model,
        lambda m, b: m.loss(*b),
        lambda step, r, w: ar_batch(codes, labels, seed, step, at.batch, reverse),
        at.train,
        log=log,
    )
    return model.eval()
