"""Attribution patching over the residual stream (paper Sec. 5, Fig. 8; official ``attribution_patching.py``).

For a clean run (factual persona) and a patch run (a counterfactual persona whose prompt has the same
length, so positions align), let h_l and h'_l be the outputs of decoder block l ([T, d]) and the metric

    M(h_l) = logit[x_clean](k) − logit[x_cf](k)

at the first divergence position k (next-token logits; ``x_clean`` is the factual teacher's token there,
``x_cf`` the counterfactual teacher's). "Noising" interpolates h_l(α) = h_l + α (h'_l − h_l) for
α = s / S, s = 0..S−1, averages the gradient over the S points (integrated gradients, left Riemann sum) and
scores every position t:

    A_l[t] = Σ_dim (h'_l[t] − h_l[t]) ⊙ mean_α ∂M/∂h_l(α)[t]

By IG completeness, Σ_t A_l[t] → M(h'_l) − M(h_l) as S → ∞ (tested), and A = 0 when clean == patch.
The paper finds the salient entries at the persona's animal token and the divergence token, in early layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from iclr26.core.transformer import Intervention, Transformer

__all__ = ["attribution_patching", "patched_metric"]


@dataclass
class _Replace(Intervention):
    """Replace ``hidden_states[layer]`` (the output of block layer − 1) with ``value``."""

    layer: int
    value: Tensor

    def residual(self, layer: int, h: Tensor) -> Tensor:
        return self.value if layer == self.layer else h


def _metric(logits: Tensor, positions: Tensor, clean_tok: Tensor, cf_tok: Tensor) -> Tensor:
    """Per-pair M = logit[clean] − logit[cf] at ``positions`` (the logits row that predicts that token)."""
    rows = torch.arange(logits.shape[0])
    at = logits[rows, positions - 1]
    return at[rows, clean_tok] - at[rows, cf_tok]


@torch.no_grad()
def patched_metric(
    model: Transformer, clean: Tensor, patch: Tensor, layer: int, positions: Tensor, clean_tok: Tensor, cf_tok: Tensor
) -> Tensor:
    """M with block ``layer``'s output taken from the patch run (all positions)."""
    h_patch = model(patch, output_hidden_states=True).hidden_states[layer + 1]
    with model.intervene(_Replace(layer + 1, h_patch)):
        return _metric(model(clean).logits, positions, clean_tok, cf_tok)


def attribution_patching(
    model: Transformer,
    clean: Tensor,
    patch: Tensor,
    positions: Sequence[int] | Tensor,
    clean_tok: Sequence[int] | Tensor,
    cf_tok: Sequence[int] | Tensor,
    layers: Sequence[int] | None = None,
    steps: int = 10,
) -> Tensor:
    """Attribution scores [B, n_layers, T] for a batch of aligned (clean, patch) pairs [B, T].

    positions [B]: index of the divergence token in each sequence; clean_tok / cf_tok [B]: the tokens the
    metric compares. Gradients are per pair (pairs are independent rows of one batch).
    """
    if clean.shape != patch.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and patch {tuple(patch.shape)} must align")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    positions = torch.as_tensor(positions, dtype=torch.long)
    clean_tok = torch.as_tensor(clean_tok, dtype=torch.long)
    cf_tok = torch.as_tensor(cf_tok, dtype=torch.long)
    if (positions < 1).any() or (positions >= clean.shape[1]).any():
        raise ValueError("positions must lie in 1..T-1 (the metric reads the logits of the previous position)")
    layers = list(range(len(model.blocks))) if layers is None else list(layers)
    model.eval()
    with torch.no_grad():
        h_clean = model(clean, output_hidden_states=True).hidden_states
        h_patch = model(patch, output_hidden_states=True).hidden_states
    out = torch.zeros(clean.shape[0], len(layers), clean.shape[1])
    for j, layer in enumerate(layers):
        c, p = h_clean[layer + 1], h_patch[layer + 1]
        grad_sum = torch.zeros_like(c)
        for s in range(steps):
            h = (c + (s / steps) * (p - c)).detach().requires_grad_(True)  # h(α) = h + α (h' − h)
            with model.intervene(_Replace(layer + 1, h)):
                m = _metric(model(clean).logits, positions, clean_tok, cf_tok)
            (grad,) = torch.autograd.grad(m.sum(), h)
            grad_sum += grad
        out[:, j] = ((p - c) * (grad_sum / steps)).sum(-1)  # A_l[t] = Σ_dim Δh ⊙ mean grad
    return out
