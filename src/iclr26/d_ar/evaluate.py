"""Measurements of one seed: previews (C1), group swaps (C2), order comparison (C3), layout control (C4)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .data import Evaluator, frechet_distance
from .gpt import Transformer, generate, reverse_tokens
from .tokenizer import VQModel


def _noise(tok: VQModel, n: int, seed: int) -> Tensor:
    c = tok.cfg
    return torch.randn(
        n, c.diff_decoder.in_dim, c.image_size, c.image_size, generator=torch.Generator().manual_seed(seed)
    )


def _random_codes(shape, vocab: int, seed: int) -> Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def preview_mechanism(tok: VQModel, codes: Tensor, seed: int, sampler: str = "adams2") -> dict:
    """C1: with one noise draw, preview_k (k groups, then a step to tau = 1) shares its first k states
    with the full decode, depends only on tokens < kG (bit-identical when later tokens are random),
    preview_K is the final image, and ||preview_k - final||^2 per pixel falls with k."""
    cfg = tok.cfg
    K, G = cfg.num_query_groups, cfg.queries_per_step
    eps = _noise(tok, len(codes), seed)
    traj_full: list = []
    final = tok.decode_code(codes, eps, method=sampler, trajectory=traj_full)
    follows, prefix_only, dist = True, True, []
    for k in range(1, K + 1):
        traj: list = []
        prev = tok.decode_code(codes, eps, clip_steps=k, method=sampler, trajectory=traj)
        follows &= len(traj) == k and all(torch.equal(a, b) for a, b in zip(traj, traj_full[:k], strict=True))
        other = codes.clone()
        other[:, k * G :] = _random_codes(other[:, k * G :].shape, cfg.vq_codebook_size, seed + k)
        prefix_only &= torch.equal(tok.decode_code(other, eps, clip_steps=k, method=sampler), prev)
        dist.append(float((prev - final).pow(2).mean()))
    final_equal = torch.equal(tok.decode_code(codes, eps, clip_steps=K, method=sampler), final)
    monotone = all(a > b for a, b in zip(dist[:-1], dist[1:], strict=True))
    return {
        "follows_full_decode": bool(follows),
        "depends_only_on_prefix": bool(prefix_only),
        "preview_K_is_final": bool(final_equal),
        "dist_to_final": dist,
        "monotone": bool(monotone),
    }


def group_swap_effect(tok: VQModel, codes: Tensor, seed: int, sampler: str = "adams2") -> list[float]:
    """C2: mean squared pixel change of the decode when group g's tokens are replaced by random codes."""
    cfg = tok.cfg
    G = cfg.queries_per_step
    eps = _noise(tok, len(codes), seed)
    base = tok.decode_code(codes, eps, method=sampler)
    out = []
    for g in range(cfg.num_query_groups):
        swapped = codes.clone()
        swapped[:, g * G : (g + 1) * G] = _random_codes((len(codes), G), cfg.vq_codebook_size, seed + 100 + g)
        out.append(float((tok.decode_code(swapped, eps, method=sampler) - base).pow(2).mean()))
    return out


def reconstruction_by_groups(tok: VQModel, x: Tensor, codes: Tensor, seed: int, sampler: str = "adams2") -> list[float]:
    """Per-pixel MSE between the test image and its k-group preview, k = 1..K (report only)."""
    eps = _noise(tok, len(codes), seed)
    return [
        float((tok.decode_code(codes, eps, clip_steps=k, method=sampler) - x).pow(2).mean())
        for k in range(1, tok.cfg.num_query_groups + 1)
    ]


def unigram_nll(train_codes: Tensor, test_codes: Tensor, vocab: int) -> float:
    """Held-out NLL (nats/token) of a unigram model with add-one smoothing on the training codes."""
    counts = torch.bincount(train_codes.reshape(-1), minlength=vocab).double() + 1
    logp = (counts / counts.sum()).log()
    return float(-logp[test_codes.reshape(-1)].mean())


def sample_images(
    ar: Transformer, tok: VQModel, labels: Tensor, seed: int, reverse: bool, ev_cfg, prefix: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Generate codes (un-reversed for the baseline) and decode them with a fixed noise draw."""
    g = torch.Generator().manual_seed(seed)
    z = generate(
        ar, labels, cfg_scale=tuple(ev_cfg.cfg_scale), prefix=prefix, temperature=ev_cfg.temperature, generator=g
    )
    z = reverse_tokens(z) if reverse else z
    return tok.decode_code(z, _noise(tok, len(z), seed + 1), method=ev_cfg.sampler), z


def order_comparison(
    ars: dict[str, Transformer],
    tok: VQModel,
    evaluator: Evaluator,
    real_feats: np.ndarray,
    test_codes: Tensor,
    test_labels: Tensor,
    seed: int,
    ev_cfg,
) -> tuple[dict, dict]:
    """C3: FD to the real digits, class consistency and held-out NLL (overall and per position)."""
    labels = torch.arange(10).repeat_interleave(ev_cfg.samples_per_class)
    out, images = {}, {}
    for name, ar in ars.items():
        reverse = name == "reversed"
        imgs, _ = sample_images(ar, tok, labels, seed + 7, reverse, ev_cfg)
        nll = ar.token_nll(reverse_tokens(test_codes) if reverse else test_codes, test_labels)
        out[name] = {
            "fd": frechet_distance(evaluator.features(imgs), real_feats),
            "class_consistency": float((evaluator.predict(imgs) == labels.numpy()).mean()),
            "nll": float(nll.mean()),
            "nll_per_step": nll.mean(0).tolist(),  # index = generation step of that model
        }
        images[name] = imgs
    return out, images


def _pool(x: Tensor) -> Tensor:
    """2x2 average pooling (8x8 digits -> 4x4)."""
    return F.avg_pool2d(x, 2, 2)


def layout_control(
    ar: Transformer, tok: VQModel, x_ref: Tensor, y_ref: Tensor, codes_ref: Tensor, seed: int, ev_cfg
) -> tuple[dict, dict]:
    """C4: samples of another class started from a reference's first group vs free samples of that
    class; squared distance of 2x2-average-pooled images to the reference."""
    G = tok.cfg.queries_per_step
    g = torch.Generator().manual_seed(seed + 300)
    target = (y_ref + torch.randint(1, 10, y_ref.shape, generator=g)) % 10
    ctrl, ctrl_codes = sample_images(ar, tok, target, seed + 301, False, ev_cfg, prefix=codes_ref[:, :G])
    free, _ = sample_images(ar, tok, target, seed + 302, False, ev_cfg)
    d_ctrl = (_pool(ctrl) - _pool(x_ref)).pow(2).flatten(1).sum(1)
    d_free = (_pool(free) - _pool(x_ref)).pow(2).flatten(1).sum(1)
    res = {
        "dist_controlled": float(d_ctrl.mean()),
        "dist_free": float(d_free.mean()),
        "ratio": float(d_ctrl.mean() / d_free.mean()),
    }
    return res, {"ref": x_ref, "controlled": ctrl, "free": free, "target": target, "controlled_codes": ctrl_codes}
