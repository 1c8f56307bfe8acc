"""The sequential diffusion tokenizer of D-AR (paper Sec. 3; official ``tokenizer/tokenizer_image``).

An image ``x`` becomes ``N`` discrete tokens in ``K`` groups of ``G = N / K``; group ``k`` conditions
step ``k`` of a pixel-space flow-matching decoder, so the 1-D token order is the diffusion order.

Encoder (official ``vq_model.VQModel.encode``)::

    P      = LN(patchify(x))                     patch tokens, 2-D RoPE on their grid positions
    Q      = W_q E_q[:N]                          learnable queries (low rank), identity rotation
    H      = Blocks([P; Q], mask)                 mask: patch rows see patches only; query i sees all
                                                  patches and queries 0..i (causal among queries)
    z_i    = normalize(W_in LN(H_q)_i)            i = 0..N-1, vq_dim values, l2-normalised
    c_i    = argmin_j ||z_i - normalize(e_j)||^2  (= argmax cosine)

Conditioning (``decoder_layers_forward``): ``cond = LN(CausalBlocks(W_out e_c + E_pos))``, so
``cond[j]`` depends on tokens ``0..j`` only.

Decoder (``diff_decoder.SequentialDiffusionDecoder``), ``t = 0`` noise, ``t = 1`` data::

    tau(t)   = t / (t + s (1 - t))                time shift s (config ``time_shift``)
    x_tau    = tau x1 + (1 - tau) x0,  x1 = std * x, x0 ~ N(0, I)
    L_fm     = ||v_theta(x_tau, tau, cond_k) - (x1 - x0)||^2 / std^2
    x1_hat   = x_tau + (1 - tau) v_theta          one-step jump estimate (previews)

Sampler: ``tau_i = tau(i / S)``, ``i = 0..S-1`` then 1; Euler for the first step and
Adams-Bashforth-2 ``x += h_i (1.5 v_i - 0.5 v_{i-1})`` after it; step ``i`` uses the group of
``round(i K / S)``. A preview with ``k`` groups (``clip_steps=k``) integrates ``tau_0..tau_{k-1}``
and then steps straight to 1, so it shares its first ``k`` velocity evaluations with the full decode.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr26.core.transformer import apply_rope

# --------------------------------------------------------------------------------------------------
# Configuration (mirrors configs/tokenizer_v1.yaml of the official code, key for key)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffDecoderConfig:
    """The pixel flow-matching decoder (official ``diff_decoder`` section of tokenizer_v1.yaml).

    in_dim: image channels in.
    out_dim: image channels out.
    dim: DiT width.
    cond_dim: width of the condition tokens (= tokenizer decoder_dim).
    patch_size: pixel patch side of the DiT (8 at 256x256 gives 32x32 tokens).
    depth: DiT blocks.
    data_std: pixels are scaled by this before flow matching (x1 = std * x).
    time_shift (s): tau = t / (t + s (1 - t)); s > 1 puts more steps at high noise.
    mlp_head: official option for an adaLN output head (only false, the released setting, is built).
    share_time_encoding: official option for one shared time embedder (only false is built).
    repa: build the REPA projection head (official: always built; its loss needs DINOv2 features).
    repa_layer: DiT block before which the REPA features are taken.
    repa_hidden: REPA MLP hidden width.
    repa_out_dim: REPA feature width (DINOv2-ViT-B/14: 768).
    """

    in_dim: int = 3
    out_dim: int = 3
    dim: int = 768
    cond_dim: int = 768
    patch_size: int = 8
    depth: int = 12
    data_std: float = 0.6
    time_shift: float = 2.0
    mlp_head: bool = False
    share_time_encoding: bool = False
    repa: bool = True
    repa_layer: int = 8
    repa_hidden: int = 2048
    repa_out_dim: int = 768


@dataclass(frozen=True)
class TokenizerConfig:
    """The sequential diffusion tokenizer (official ``model`` section of tokenizer_v1.yaml).

    encoder_patch_size: conv patchify kernel = stride of the encoder.
    num_encoder_layers: encoder blocks (patches + causal queries).
    num_decoder_layers: causal conditioning blocks over the quantised tokens.
    query_low_rank: queries = Linear(8 -> dim) of an 8-d table (official default).
    encoder_dim: encoder width.
    decoder_dim: conditioning-stack width.
    vq_dim: code dimension (l2-normalised).
    vq_codebook_size: codebook entries (AR vocabulary).
    num_denoising_steps (S): sampler steps.
    num_query_groups (K): token groups = diffusion steps they condition.
    num_all_queries (N): tokens per image.
    queries_per_step (G): tokens per group (N / K).
    vq_enable: discrete tokens (the continuous LN bottleneck of the code is not built).
    image_size: input resolution (official sampling_resolution 256).
    head_dim: attention head width everywhere (official code: 64).
    rope_base: 2-D RoPE base (official rope_base_len).
    vq_beta (β): commitment weight.
    max_queries: rows of the query / position tables (official: 1024).
    group_rule: training group of time t: "round" = clamp(floor(tK + 0.5)) (official code) or
        "ceil" = clamp(ceil(tK) - 1) (paper's c(t) = g_ceil(t'K), 1-based groups).
    diff_decoder: the pixel decoder.
    """

    encoder_patch_size: int = 16
    num_encoder_layers: int = 8
    num_decoder_layers: int = 8
    query_low_rank: bool = True
    encoder_dim: int = 768
    decoder_dim: int = 768
    vq_dim: int = 8
    vq_codebook_size: int = 16384
    num_denoising_steps: int = 8
    num_query_groups: int = 8
    num_all_queries: int = 256
    queries_per_step: int = 32
    vq_enable: bool = True
    image_size: int = 256
    head_dim: int = 64
    rope_base: float = 10000.0
    vq_beta: float = 0.25
    max_queries: int = 1024
    group_rule: Literal["round", "ceil"] = "round"
    diff_decoder: DiffDecoderConfig = DiffDecoderConfig()

    def __post_init__(self) -> None:
        d = self.diff_decoder
        problems = []
        if not self.vq_enable:
            problems.append("vq_enable=false (continuous bottleneck) is not implemented")
        if d.mlp_head or d.share_time_encoding:
            problems.append("mlp_head / share_time_encoding = true are not implemented (released: false)")
        if self.num_all_queries > self.max_queries or self.queries_per_step > self.num_all_queries:
            problems.append(
                f"num_all_queries={self.num_all_queries}, queries_per_step={self.queries_per_step}, "
                f"max_queries={self.max_queries} are inconsistent"
            )
        if self.image_size % self.encoder_patch_size or self.image_size % d.patch_size:
            problems.append(f"image_size {self.image_size} is not a multiple of the patch sizes")
        for name, dim in (("encoder_dim", self.encoder_dim), ("decoder_dim", self.decoder_dim), ("dim", d.dim)):
            if dim % self.head_dim or self.head_dim % 4:
                problems.append(f"{name}={dim} needs head_dim={self.head_dim} dividing it (and head_dim % 4 == 0)")
        if d.cond_dim != self.decoder_dim:
            problems.append(f"diff_decoder.cond_dim={d.cond_dim} != decoder_dim={self.decoder_dim}")
        if problems:
            raise ValueError("bad TokenizerConfig: " + "; ".join(problems))

    @property
    def groups(self) -> int:
        return self.num_query_groups

    def to_official(self) -> dict:
        """The official ``model`` config dict (keys of configs/tokenizer_v1.yaml plus ours)."""
        out = asdict(self)
        out["sampling_resolution"] = out.pop("image_size")
        out["rope_base_len"] = out.pop("rope_base")
        return out

    @classmethod
    def from_official(cls, model_cfg: dict, **overrides) -> TokenizerConfig:
        """Build from an official ``config['model']`` dict; unknown keys are an error listing them."""
        cfg = dict(model_cfg)
        renames = {"sampling_resolution": "image_size", "rope_base_len": "rope_base"}
        for old, new in renames.items():
            if old in cfg:
                cfg[new] = cfg.pop(old)
        if cfg.get("output_resolution", 0) == 0:
            cfg.pop("output_resolution", None)  # 0 = no output resize (the released setting)
        dec = dict(cfg.pop("diff_decoder", {}))
        dec.pop("grad_checkpointing", None)  # memory option only
        if "rope_base_len" in dec:
            if float(dec.pop("rope_base_len")) != float(cfg.get("rope_base", 10000.0)):
                raise ValueError("different RoPE bases for encoder and decoder are not supported")
        known = {f.name for f in fields(cls)}
        known_dec = {f.name for f in fields(DiffDecoderConfig)}
        unknown = sorted(set(cfg) - known) + sorted(f"diff_decoder.{k}" for k in set(dec) - known_dec)
        if unknown:
            raise ValueError(f"official tokenizer config has keys this implementation does not know: {unknown}")
        return replace(cls(**cfg, diff_decoder=DiffDecoderConfig(**dec)), **overrides)


# --------------------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------------------


def time_shift(t: Tensor | float, s: float):
    """tau = t / (t + s (1 - t)) (official ``adjust_schedule``); s = 1 is the identity."""
    return t / (t + s * (1 - t))


def training_group(t: Tensor, K: int, rule: str = "round") -> Tensor:
    """Group index k in 0..K-1 that conditions the decoder at (unshifted) time t during training.

    round (official ``VQModel.encode``): k = clamp(floor(t K + 0.5), 0, K - 1).
    ceil (paper's c(t) = g_{ceil(t' K)} with groups 1..K): k = clamp(ceil(t K) - 1, 0, K - 1).
    """
    if rule == "round":
        k = torch.floor(t * K + 0.5)
    elif rule == "ceil":
        k = torch.ceil(t * K) - 1
    else:
        raise ValueError(f"group_rule must be 'round' or 'ceil', got {rule!r}")
    return k.clamp(0, K - 1).long()


def sampling_grid(steps: int) -> list[float]:
    """Unshifted evaluation times t_i = i / S, i = 0..S-1 (official ``decode_into_pixels``)."""
    return [i / steps for i in range(steps)]


def sampling_group_start(t: float, K: int, N: int, G: int) -> int:
    """First token of the group used at time t when sampling: round(t K) / K * N, at most N - G."""
    discrete = math.floor(t * K + 0.5) / K
    return min(N - G, int(discrete * N))


# --------------------------------------------------------------------------------------------------
# 2-D RoPE (FLUX-style: first half of the rotated pairs follow the row, second half the column)
# --------------------------------------------------------------------------------------------------


def rope2d_angles(height: int, width: int, head_dim: int, base: float, device=None) -> Tensor:
    """Angles [h*w, head_dim/2]: pair j < head_dim/4 rotates by row * base^(-4j/head_dim), the rest
    by column with the same frequencies (official ``EmbedND2DMaker`` with axes [hd/2, hd/2])."""
    axis = head_dim // 2
    omega = 1.0 / (base ** (torch.arange(0, axis, 2, dtype=torch.float64, device=device) / axis))
    rows, cols = torch.meshgrid(
        torch.arange(height, device=device, dtype=torch.float64),
        torch.arange(width, device=device, dtype=torch.float64),
        indexing="ij",
    )
    ang = torch.cat([rows.reshape(-1, 1) * omega, cols.reshape(-1, 1) * omega], dim=-1)
    return ang.float()


def rope_tables(angles: Tensor) -> tuple[Tensor, Tensor]:
    """cos / sin tables broadcastable to [B, H, T, head_dim/2]."""
    return angles.cos()[None, None], angles.sin()[None, None]


# --------------------------------------------------------------------------------------------------
# Blocks (official tokenizer_transformer.Attention / TransformerBlock, diff_decoder.SiTBlock)
# --------------------------------------------------------------------------------------------------


class Mlp(nn.Module):
    """fc2(SiLU(fc1(x))) (timm ``Mlp`` with act_layer=SiLU, the official choice)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.SiLU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    """softmax(RoPE(LN(q)) RoPE(LN(k))^T / sqrt(d_h) + mask) v with separate q/k/v projections with
    bias and QK-LayerNorm over the head dimension (official QKV_BIAS = QK_NORM = True)."""

    def __init__(self, dim: int, head_dim: int):
        super().__init__()
        self.num_heads, self.head_dim = dim // head_dim, head_dim
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.q_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.proj = nn.Linear(dim, dim)

    def _heads(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        q: Tensor,
        kv: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        q_rope: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """q [B, Tq, d]; kv [B, Tk, d] (None: self-attention); rope rotates q and k, q_rope q only;
        mask: bool, True = may attend."""
        kv = q if kv is None else kv
        B, T, C = q.shape
        qh = self.q_norm(self._heads(self.q(q)))
        kh = self.k_norm(self._heads(self.k(kv)))
        vh = self._heads(self.v(kv))
        if rope is not None:
            qh, kh = apply_rope(qh, *rope), apply_rope(kh, *rope)
        if q_rope is not None:
            qh = apply_rope(qh, *q_rope)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, is_causal=causal)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))


class TransformerBlock(nn.Module):
    """Pre-norm block with zero-initialised per-channel residual gates (official ``TransformerBlock``):
    x += gate1 * Attn(LN1(x)); x += gate2 * MLP(LN2(x))."""

    def __init__(self, dim: int, head_dim: int = 64, mlp_mult: int = 4):
        super().__init__()
        self.attention = Attention(dim, head_dim)
        self.mlp = Mlp(dim, dim * mlp_mult)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.gate1 = nn.Parameter(torch.zeros(dim))
        self.gate2 = nn.Parameter(torch.zeros(dim))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, rope=None, causal: bool = False) -> Tensor:
        x = x + self.attention(self.norm1(x), mask=mask, rope=rope, causal=causal) * self.gate1
        return x + self.mlp(self.norm2(x)) * self.gate2


class TimestepEmbedder(nn.Module):
    """MLP(sinusoid(1000 tau)) with cos/sin halves and max period 10^4 (official ``TimestepEmbedder``)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: Tensor, mul: float = 1000.0) -> Tensor:
        half = self.dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = (t * mul)[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if self.dim % 2:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return self.mlp(emb)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale) + shift


class SiTBlock(nn.Module):
    """DiT block whose condition enters only through per-token adaLN (official ``SiTBlock``)::

    c    = LN(MLP_c(cond_k));  sc = CrossAttn(q = LN(x) (RoPE), k = v = c)     [B, T, d]
    (a_s, a_c, a_g, m_s, m_c, m_g) = Linear(SiLU(t_emb + sc))
    x   += a_g * SelfAttn(LN(x) (1 + a_c) + a_s);  x += m_g * MLP(LN(x) (1 + m_c) + m_s)
    """

    def __init__(self, dim: int, head_dim: int = 64, mlp_mult: int = 4):
        super().__init__()
        self.attention = Attention(dim, head_dim)
        self.cross_attn = Attention(dim, head_dim)
        self.mlp = Mlp(dim, dim * mlp_mult)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.time_embed = TimestepEmbedder(dim)
        self.cond_embed = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        nn.init.zeros_(self.adaLN_modulation[-1].weight)
        nn.init.zeros_(self.adaLN_modulation[-1].bias)

    def forward(self, x: Tensor, c: Tensor, t: Tensor, rope) -> Tensor:
        temb = self.time_embed(t)[:, None]
        c = self.norm(self.cond_embed(c))
        sc = self.cross_attn(self.norm(x), c, q_rope=rope)
        a_s, a_c, a_g, m_s, m_c, m_g = self.adaLN_modulation(temb + sc).chunk(6, dim=-1)
        x = x + a_g * self.attention(modulate(self.norm(x), a_s, a_c), rope=rope)
        return x + m_g * self.mlp(modulate(self.norm(x), m_s, m_c))


def patchify(x: Tensor, p: int) -> Tensor:
    """[B, C, H p, W p] -> [B, C p p, H, W] (channel order c, p1, p2; official ``Patcher`` 'rearrange')."""
    B, C, H, W = x.shape
    x = x.reshape(B, C, H // p, p, W // p, p).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(B, C * p * p, H // p, W // p)


def unpatchify(x: Tensor, p: int) -> Tensor:
    """Inverse of :func:`patchify`."""
    B, Cpp, h, w = x.shape
    C = Cpp // (p * p)
    x = x.reshape(B, C, p, p, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(B, C, h * p, w * p)


class DiffusionCore(nn.Module):
    """Pixel-space DiT v_theta(x_tau, tau, cond_k) (official ``DiffusionCore``)."""

    def __init__(self, cfg: DiffDecoderConfig, head_dim: int, rope_base: float):
        super().__init__()
        self.cfg, self.head_dim, self.rope_base = cfg, head_dim, rope_base
        p = cfg.patch_size
        self.cond_mlp = nn.Linear(cfg.cond_dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim, elementwise_affine=False, eps=1e-6)
        self.conv_in = nn.Conv2d(cfg.in_dim * p * p, cfg.dim, 1)
        self.conv_out = nn.Conv2d(cfg.dim, cfg.out_dim * p * p, 1)
        self.blocks = nn.ModuleList(SiTBlock(cfg.dim, head_dim) for _ in range(cfg.depth))
        self.repa_out = (
            nn.Sequential(
                nn.Linear(cfg.dim, cfg.repa_hidden),
                nn.SiLU(),
                nn.Linear(cfg.repa_hidden, cfg.repa_hidden),
                nn.SiLU(),
                nn.Linear(cfg.repa_hidden, cfg.repa_out_dim),
            )
            if cfg.repa
            else None
        )
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, x: Tensor, t: Tensor, cond: Tensor) -> tuple[Tensor, Tensor | None]:
        """x [B, C, H, W]; t [B] (shifted time); cond [B, G, cond_dim] -> (velocity, REPA features)."""
        cond = self.norm(self.cond_mlp(cond))
        p = patchify(x, self.cfg.patch_size)
        h, w = p.shape[2], p.shape[3]
        rope = rope_tables(rope2d_angles(h, w, self.head_dim, self.rope_base, x.device))
        tok = self.conv_in(p).flatten(2).transpose(1, 2)
        h_repa = None
        for i, block in enumerate(self.blocks):
            if i == self.cfg.repa_layer and self.repa_out is not None:
                stride = max(1, h // 16)  # average-pool to 16x16 (official)
                grid = tok.transpose(1, 2).reshape(tok.shape[0], -1, h, w)
                h_repa = self.repa_out(F.avg_pool2d(grid, stride, stride).flatten(2).transpose(1, 2))
            tok = block(tok, cond, t, rope)
        tok = self.norm(tok).transpose(1, 2).reshape(tok.shape[0], -1, h, w)
        return unpatchify(self.conv_out(tok), self.cfg.patch_size), h_repa


class SequentialDiffusionDecoder(nn.Module):
    """Flow matching on std-scaled pixels with the time shift, and the Euler / AB2 sampler."""

    def __init__(self, cfg: DiffDecoderConfig, head_dim: int, rope_base: float):
        super().__init__()
        self.cfg = cfg
        self.net = DiffusionCore(cfg, head_dim, rope_base)
        self.std, self.shift = cfg.data_std, cfg.time_shift

    def forward(self, target: Tensor, cond: Tensor, t: Tensor, noise: Tensor | None = None) -> dict[str, Tensor]:
        """L_fm = ||v - (x1 - x0)||^2 / std^2 at tau = shift(t); x1_hat = x_tau + (1 - tau) v."""
        tau = time_shift(t, self.shift)
        te = tau[:, None, None, None]
        x0 = torch.randn_like(target) if noise is None else noise
        x1 = target * self.std
        xt = te * x1 + (1 - te) * x0
        v, h_repa = self.net(xt, tau, cond)
        fm = F.mse_loss(v, x1 - x0) / self.std**2
        return {"fm_loss": fm, "x1_hat": (xt + (1 - te) * v) / self.std, "h_repa": h_repa, "tau": tau}

    @torch.no_grad()
    def sample(
        self,
        conds: list[Tensor],
        timesteps: list[float],
        noise: Tensor,
        method: str = "adams2",
        clip_steps: int | None = None,
        trajectory: list | None = None,
    ) -> Tensor:
        """Integrate from noise through shift(t_0..t_{k-1}) then to 1 (k = clip_steps or all).

        Step i: v_i = v_theta(x, tau_i, conds[i]); x += h_i v_i (Euler, and AB2's first step) or
        x += h_i (1.5 v_i - 0.5 v_{i-1}) (AB2), h_i = tau_{i+1} - tau_i. Returns x / std. If
        ``trajectory`` is a list, the state before every step is appended to it."""
        if method not in ("euler", "adams2"):
            raise ValueError(f"sampler must be 'euler' or 'adams2', got {method!r}")
        if clip_steps is not None and clip_steps < 1:
            raise ValueError("clip_steps must be >= 1 (a preview needs at least one group)")
        ts = list(timesteps[:clip_steps]) if clip_steps is not None else list(timesteps)
        sched = time_shift(torch.tensor(ts + [1.0], dtype=torch.float32, device=noise.device), self.shift)
        x, v_prev = noise, None
        for i in range(len(ts)):
            if trajectory is not None:
                trajectory.append(x)
            v, _ = self.net(x, sched[i].repeat(x.shape[0]), conds[i])
            h = sched[i + 1] - sched[i]
            x = x + h * v if (method == "euler" or v_prev is None) else x + h * (1.5 * v - 0.5 * v_prev)
            v_prev = v
        return x / self.std


# --------------------------------------------------------------------------------------------------
# Vector quantiser and the whole tokenizer
# --------------------------------------------------------------------------------------------------


class VectorQuantizer(nn.Module):
    """l2-normalised VQ with straight-through gradients (official ``VectorQuantizer``)::

        z <- z / ||z||,  e_j <- e_j / ||e_j||,  c = argmin_j ||z - e_j||^2,  z_q = z + sg(e_c - z)
        L_vq = ||e_c - sg(z)||^2,  L_commit = beta ||sg(e_c) - z||^2   (means over the code dim)

    both averaged over the token positions up to ``last_pos`` of each image (later ones get none).
    """

    def __init__(self, n_e: int, e_dim: int, beta: float = 0.25):
        super().__init__()
        self.n_e, self.e_dim, self.beta = n_e, e_dim, beta
        self.embedding = nn.Embedding(n_e, e_dim)
        self.embedding.weight.data.uniform_(-1.0 / n_e, 1.0 / n_e)
        self.embedding.weight.data = F.normalize(self.embedding.weight.data, dim=-1)
        self.register_buffer("codebook_used", torch.zeros(65536))  # official usage buffer (kept for key parity)

    def codebook(self) -> Tensor:
        return F.normalize(self.embedding.weight, dim=-1)

    def forward(self, z: Tensor, last_pos: Tensor | None = None) -> dict[str, Tensor]:
        """z [B, N, e_dim] -> quantized [B, N, e_dim] (straight-through), indices [B, N], losses."""
        z = F.normalize(z, dim=-1)
        emb = self.codebook()
        flat = z.reshape(-1, self.e_dim)
        d = flat.pow(2).sum(1, keepdim=True) + emb.pow(2).sum(1) - 2 * flat @ emb.T
        idx = d.argmin(1).view(z.shape[:-1])
        z_q = emb[idx]
        out = {"indices": idx}
        if last_pos is not None:
            mask = (torch.arange(z.shape[1], device=z.device)[None] <= last_pos[:, None]).float()
            vq = (z_q - z.detach()).pow(2).mean(-1)
            commit = self.beta * (z_q.detach() - z).pow(2).mean(-1)
            out["vq_loss"] = (vq * mask).sum() / mask.sum()
            out["commit_loss"] = (commit * mask).sum() / mask.sum()
        out["quantized"] = z + (z_q - z).detach()
        return out

    def get_codebook_entry(self, indices: Tensor) -> Tensor:
        return self.codebook()[indices]


class VQModel(nn.Module):
    """Encoder + VQ + causal conditioning stack + sequential diffusion decoder (official ``VQModel``)."""

    def __init__(self, cfg: TokenizerConfig):
        super().__init__()
        self.cfg = cfg
        D, E = cfg.decoder_dim, cfg.encoder_dim
        self.encoder_layers = nn.ModuleList(TransformerBlock(E, cfg.head_dim) for _ in range(cfg.num_encoder_layers))
        self.decoder_layers = nn.ModuleList(TransformerBlock(D, cfg.head_dim) for _ in range(cfg.num_decoder_layers))
        self.encoder_norm = nn.LayerNorm(E, eps=1e-6, elementwise_affine=False, bias=False)
        self.norm = nn.LayerNorm(D, eps=1e-6, elementwise_affine=False, bias=False)
        in_ch = cfg.diff_decoder.in_dim
        self.patchify = nn.Conv2d(in_ch, E, kernel_size=cfg.encoder_patch_size, stride=cfg.encoder_patch_size)
        self.quant_in_conv = nn.Conv2d(E, cfg.vq_dim, 1, bias=False)
        self.quant_out_conv = nn.Conv2d(cfg.vq_dim, D, 1, bias=False)
        self.quantize = VectorQuantizer(cfg.vq_codebook_size, cfg.vq_dim, cfg.vq_beta)
        if cfg.query_low_rank:
            self.query_embedding = nn.Embedding(cfg.max_queries, 8)
            self.query_linear = nn.Linear(8, E)
            nn.init.trunc_normal_(self.query_embedding.weight, std=1.0)
        else:
            self.query_embedding = nn.Embedding(cfg.max_queries, E)
            self.query_linear = nn.Identity()
            nn.init.trunc_normal_(self.query_embedding.weight, std=0.02)
        self.decoder_embedding = nn.Embedding(cfg.max_queries, D)
        nn.init.trunc_normal_(self.decoder_embedding.weight, std=0.02)
        self.diff_decoder = SequentialDiffusionDecoder(cfg.diff_decoder, cfg.head_dim, cfg.rope_base)

    # -- encoder ------------------------------------------------------------------------------------

    def encoder_mask(self, n_patches: int, device=None) -> Tensor:
        """Bool [T, T], True = may attend: lower-triangular, plus every row sees every patch column."""
        T = n_patches + self.cfg.num_all_queries
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        mask[:, :n_patches] = True
        return mask

    def encoder_rope_angles(self, h: int, w: int, device=None) -> Tensor:
        """2-D RoPE angles of the h*w patches, then zeros (identity rotation) for the N queries."""
        angles = rope2d_angles(h, w, self.cfg.head_dim, self.cfg.rope_base, device)
        return torch.cat([angles, angles.new_zeros(self.cfg.num_all_queries, angles.shape[1])])

    def encode_latents(self, x: Tensor) -> Tensor:
        """Continuous (pre-VQ) latents [B, N, vq_dim] of images x [B, C, H, W]."""
        cfg = self.cfg
        p = self.patchify(x)
        B, _, h, w = p.shape
        patches = self.encoder_norm(p.flatten(2).transpose(1, 2))
        angles = self.encoder_rope_angles(h, w, x.device)
        rope = rope_tables(angles)
        queries = self.query_linear(self.query_embedding.weight[: cfg.num_all_queries])
        tokens = torch.cat([patches, queries[None].expand(B, -1, -1)], dim=1)
        mask = self.encoder_mask(h * w, x.device)
        for layer in self.encoder_layers:
            tokens = layer(tokens, mask=mask, rope=rope)
        q = self.encoder_norm(tokens[:, -cfg.num_all_queries :])
        return self.quant_in_conv(q.transpose(1, 2)[:, :, None]).squeeze(2).transpose(1, 2)

    @torch.no_grad()
    def extract_code(self, x: Tensor) -> Tensor:
        """Token ids [B, N] of images x (official ``extract_code``)."""
        return self.quantize(self.encode_latents(x))["indices"]

    # -- conditioning --------------------------------------------------------------------------------

    def decoder_layers_forward(self, quant: Tensor) -> Tensor:
        """cond = LN(CausalBlocks(W_out z_q + E_pos)) [B, N, decoder_dim]; cond[j] sees tokens <= j."""
        tokens = self.quant_out_conv(quant.transpose(1, 2)[:, :, None]).squeeze(2).transpose(1, 2)
        tokens = tokens + self.decoder_embedding.weight[: tokens.shape[1]]
        for layer in self.decoder_layers:
            tokens = layer(tokens, causal=True)
        return self.norm(tokens)

    def cond_from_codes(self, codes: Tensor) -> Tensor:
        return self.decoder_layers_forward(self.quantize.get_codebook_entry(codes))

    # -- training --------------------------------------------------------------------------------------

    def training_losses(self, x: Tensor, t: Tensor | None = None, noise: Tensor | None = None) -> dict[str, Tensor]:
        """One tokenizer training pass: t ~ U[0,1] per image, its group k, VQ losses masked to tokens
        <= (k+1)G - 1, and flow matching conditioned on cond[kG:(k+1)G] at tau = shift(t)."""
        cfg = self.cfg
        N, G, K = cfg.num_all_queries, cfg.queries_per_step, cfg.num_query_groups
        t = torch.rand(x.shape[0], device=x.device) if t is None else t
        k = training_group(t, K, cfg.group_rule)
        start = (k * N // K).clamp(0, N - G)
        vq = self.quantize(self.encode_latents(x), last_pos=start + G - 1)
        cond = self.decoder_layers_forward(vq["quantized"])
        idx = start[:, None] + torch.arange(G, device=x.device)[None]
        cond_k = cond[torch.arange(x.shape[0], device=x.device)[:, None], idx]
        out = self.diff_decoder(x, cond_k, t, noise)
        return {**out, "vq_loss": vq["vq_loss"], "commit_loss": vq["commit_loss"], "indices": vq["indices"], "group": k}

    # -- decoding ---------------------------------------------------------------------------------------

    def step_conds(self, cond: Tensor, clip_steps: int | None = None) -> tuple[list[Tensor], list[float]]:
        """Per-step condition groups and unshifted times (official ``decode_into_pixels``)."""
        cfg = self.cfg
        ts = sampling_grid(cfg.num_denoising_steps)
        ts = ts[:clip_steps] if clip_steps is not None else ts
        G = cfg.queries_per_step
        starts = [sampling_group_start(t, cfg.num_query_groups, cfg.num_all_queries, G) for t in ts]
        return [cond[:, s : s + G] for s in starts], ts

    @torch.no_grad()
    def decode_code(
        self,
        codes: Tensor,
        noise: Tensor | None = None,
        clip_steps: int | None = None,
        method: str = "adams2",
        generator: torch.Generator | None = None,
        trajectory: list | None = None,
    ) -> Tensor:
        """Pixels [B, C, H, W] in about [-1, 1] from tokens [B, N]; ``clip_steps=k`` gives the preview
        from the first k groups (tokens 0..kG-1 only)."""
        if codes.dim() != 2 or codes.shape[1] != self.cfg.num_all_queries:
            raise ValueError(f"codes must be [B, {self.cfg.num_all_queries}], got {tuple(codes.shape)}")
        if codes.min() < 0 or codes.max() >= self.cfg.vq_codebook_size:
            raise ValueError(f"token ids must be in [0, {self.cfg.vq_codebook_size})")
        cfg = self.cfg
        if noise is None:
            shape = (codes.shape[0], cfg.diff_decoder.in_dim, cfg.image_size, cfg.image_size)
            noise = torch.randn(shape, generator=generator).to(codes.device)
        conds, ts = self.step_conds(self.cond_from_codes(codes), clip_steps)
        return self.diff_decoder.sample(conds, ts, noise, method, clip_steps, trajectory)
