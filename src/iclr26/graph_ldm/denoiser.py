"""The raw networks F_θl, F_θg inside the EDM denoisers: set transformers without positional
encodings (so permutation-equivariant over nodes / cluster tokens), key-padding masks (so padding
cannot change real outputs), and adaLN conditioning on the noise level:

    e = MLP(Fourier(c_noise)),    LN_e(h) = LayerNorm(h) ⊙ (1 + s(e)) + b(e)
    h ← h + Attn(LN_e(h)),        h ← h + MLP(LN_e(h))

(architecture reconstructed; the paper states only "two GNN denoisers").
"""

from __future__ import annotations

import math

import torch
from torch import nn


class NoiseEmbedding(nn.Module):
    """Fixed Fourier features of c_noise followed by an MLP."""

    def __init__(self, dim: int, n_freq: int = 16):
        super().__init__()
        self.register_buffer("freqs", torch.exp(torch.linspace(0, math.log(100.0), n_freq)))
        self.mlp = nn.Sequential(nn.Linear(2 * n_freq, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, c_noise: torch.Tensor) -> torch.Tensor:
        arg = c_noise.unsqueeze(-1) * self.freqs
        return self.mlp(torch.cat([arg.sin(), arg.cos()], -1))


class AdaLNBlock(nn.Module):
    """One pre-norm transformer block with noise-conditioned LayerNorm scale and shift."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.SiLU(), nn.Linear(mlp_ratio * dim, dim))
        self.ada = nn.Linear(dim, 4 * dim)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, h: torch.Tensor, emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s1, b1, s2, b2 = self.ada(emb).unsqueeze(1).chunk(4, dim=-1)
        x = self.norm1(h) * (1 + s1) + b1
        h = h + self.attn(x, x, x, key_padding_mask=~mask, need_weights=False)[0]
        x = self.norm2(h) * (1 + s2) + b2
        return h + self.mlp(x)


class SetDenoiser(nn.Module):
    """F_θ(x, c_noise, mask): tokens [B, T, d_in] -> [B, T, d_out], zero on masked tokens."""

    def __init__(self, d_in: int, d_out: int, d_model: int = 64, n_layers: int = 3, n_heads: int = 4):
        super().__init__()
        self.inp = nn.Linear(d_in, d_model)
        self.emb = NoiseEmbedding(d_model)
        self.blocks = nn.ModuleList(AdaLNBlock(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, d_out)

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        emb = self.emb(c_noise)
        for block in self.blocks:
            h = block(h, emb, mask)
        return self.out(self.norm(h)) * mask.unsqueeze(-1).float()
