"""Recursive GPT-NeoX transformers ``P+CRk+S`` with the state schemes of the MeSH paper.

Backbone (Prelude-Recurrent-Coda, paper Section 2 / Appendix B)::

    h_emb   = sqrt(D) * E[x]                               (scaled token embeddings)
    h_pre   = f_pre(h_emb)                                 (P untied NeoX layers)
    h^(0)   = h_pre            (or the transitional MeSH read, below)
    h^(t+1) = state_update(f_core(h^(t)), ...)             (C tied layers, t = 0..K-1)
    logits  = W_out LN(f_coda(h^(K)))                      (S untied layers)

Compute depth is ``P + C*K + S``: the same as a vanilla model with that many layers.

State schemes (paper Eq. 1, ``h^(t+1) = f_core(h^(t)) + h_sup^(t)``):

* ``base``:       ``h_sup = 0``
* ``residual``:   ``h_sup = h^(t)``
* ``anchor``:     ``h_sup = h^(0)``   (the state that entered the loop)
* ``anchor_emb``: ``h_sup = h_emb``   (the paper's "+anchor*")
* ``mesh``: a buffer ``M = {m_0..m_{B-1}}`` of hidden-state-shaped slots, ``m_0 = h_emb``, the others 0,
  and per-step write/read routers (Eqs. 4-5)::

      h_m^(t)    = f_core(h^(t))
      w_write^(t) = softmax(Linear_write^(t)(h^(t)))           (per token, over the B slots)
      w_read^(t)  = softmax(Linear_read^(t)(h^(t)))
      m_b        <- m_b + w_write,b^(t) * h_m^(t)              (additive write, nothing erased)
      h^(t+1)    = sum_b w_read,b^(t) * m_b                     (read from the updated buffer)

  One extra "transitional" write/read cycle with its own router pair turns the prelude output into
  ``h^(0)``: routers from ``h_pre`` (our reading; ``transition_router_input="h_emb"`` is the
  alternative), write ``h_pre``, read ``h^(0)``. So there are ``K + 1`` router pairs, each
  ``Linear(D, B, bias=True)``: ``(K+1) * B * 2 * (D+1)`` parameters (61,470 for Pythia-1.4B, B=5).

Blocks are GPT-NeoX (Pythia) layers, parameter names as in Hugging Face's ``GPTNeoXLayer`` so Pythia
checkpoints map by renaming only: parallel residual ``h + Attn(LN1(h)) + MLP(LN2(h))``, fused per-head
QKV, partial rotary (``rotary_pct`` of each head's dims, rotate-half convention), exact GeLU, biases.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SCHEMES = ("base", "residual", "anchor", "anchor_emb", "mesh")
Scheme = Literal["base", "residual", "anchor", "anchor_emb", "mesh"]


@dataclass(frozen=True)
class Layout:
    """``P+CRk+S``: ``prelude`` untied layers, ``core`` tied layers looped ``n_loop`` times, ``coda`` layers.

    A vanilla (non-recursive) model of L layers is ``Layout(prelude=L, core=0, n_loop=0, coda=0)``,
    written ``"L"``. ``depth`` is the number of layer applications in the unrolled graph.
    """

    prelude: int
    core: int
    n_loop: int
    coda: int

    def __post_init__(self) -> None:
        if min(self.prelude, self.core, self.n_loop, self.coda) < 0:
            raise ValueError(f"negative layout entry: {self}")
        if (self.core == 0) != (self.n_loop == 0):
            raise ValueError(f"a recursive layout needs core >= 1 and n_loop >= 1, got {self}")
        if self.depth == 0:
            raise ValueError("a layout needs at least one layer")

    @property
    def recursive(self) -> bool:
        return self.n_loop > 0

    @property
    def depth(self) -> int:
        """N_compute: layer applications in the unrolled graph, ``P + C*K + S``."""
        return self.prelude + self.core * self.n_loop + self.coda

    @property
    def unique_layers(self) -> int:
        """Layers with their own parameters, ``P + C + S`` (weight-tied core counted once)."""
        return self.prelude + self.core + self.coda

    def __str__(self) -> str:
        if not self.recursive:
            return str(self.prelude)
        return f"{self.prelude}+{self.core}R{self.n_loop}+{self.coda}"


_LAYOUT_RE = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*[Rr]\s*(\d+)\s*\+\s*(\d+)\s*$")


def parse_layout(text: str | Layout) -> Layout:
    """Parse the paper's notation: ``"4+8R2+4"`` (prelude+core R loops+coda) or ``"24"`` (vanilla)."""
    if isinstance(text, Layout):
        return text
    s = str(text).strip()
    if s.isdigit():
        return Layout(int(s), 0, 0, 0)
    m = _LAYOUT_RE.match(s)
    if not m:
        raise ValueError(f"bad layout {text!r}: expected 'P+CRK+S' (e.g. '4+8R2+4') or 'L' (vanilla)")
    return Layout(*(int(g) for g in m.groups()))


@dataclass(frozen=True)
class MeshConfig:
    """A recursive GPT-NeoX model; defaults are the paper's Pythia-1.4B ``4+8R2+4`` +mesh model.

    vocab_size: token ids (Pythia: 50,304; byte-level toys: 256).
    d_model: hidden size D.
    n_heads: attention heads.
    d_ff: MLP width (default 4 * D, as in Pythia).
    layout: ``"P+CRK+S"`` or ``"L"`` (vanilla), see :func:`parse_layout`.
    scheme: state scheme of the loop: base | residual | anchor | anchor_emb (+anchor*) | mesh.
    buffer_size: MeSH slots B (default ``n_loop + 3``, the paper's best k=2 in Table 3).
    transition_router_input: what the transitional routers read: ``"h_pre"`` (our reading, default)
        or ``"h_emb"`` (the alternative; the paper's Algorithm 2 did not render).
    share_core: True = one weight-tied core (recursive model); False = every loop has its own core
        layers (Table 6's "vanilla+mesh" on a non-recursive backbone).
    mesh_impl: ``"buffer"`` keeps the B slots explicitly (Eq. 5, the literal form); ``"unrolled"`` (default) computes
        the same read as Eq. 7, ``h = wr_0 h_emb + sum_s <w_read, w_write^(s)> x_s`` over the written states
        x_s, without materialising the buffer (fewer memory ops; identical result up to float rounding).
    rotary_pct: fraction of each head's dims that get rotary embeddings (Pythia 0.25).
    rotary_base: rotary frequency base.
    parallel_residual: GPT-NeoX parallel attention+MLP residual (Pythia: True).
    layer_norm_eps: LayerNorm epsilon.
    max_seq_len: longest sequence (checked).
    init_std: base std of weights (GPT-NeoX initializer_range 0.02; the paper does not state it).
    scale_embeddings: multiply embeddings by sqrt(D) (paper, Appendix B). Pythia itself does not:
        set False to reproduce a Pythia checkpoint exactly.
    scale_output_init: output projections (attention dense, MLP down) get std ``init_std/sqrt(2*N_compute)``.
    tie_embeddings: share embed_in and embed_out (Pythia: untied).
    router_init: MeSH router init (the paper does not state it). ``"normal"`` (default): weights N(0, init_std),
        zero bias, so every softmax starts near uniform (1/B per slot). ``"passthrough"``: same weights, and the
        bias puts ``router_init_prob`` of each softmax on the slot of :func:`passthrough_slots`, so the model
        starts close to the base recursion (each step writes and reads its own fresh slot).
    router_init_prob: the passthrough slot's share at init (``"passthrough"`` only).
    """

    vocab_size: int = 50304
    d_model: int = 2048
    n_heads: int = 16
    d_ff: int | None = None
    layout: str = "4+8R2+4"
    scheme: Scheme = "mesh"
    buffer_size: int | None = None
    transition_router_input: Literal["h_pre", "h_emb"] = "h_pre"
    share_core: bool = True
    mesh_impl: Literal["buffer", "unrolled"] = "unrolled"
    rotary_pct: float = 0.25
    rotary_base: float = 10000.0
    parallel_residual: bool = True
    layer_norm_eps: float = 1e-5
    max_seq_len: int = 2048
    init_std: float = 0.02
    scale_embeddings: bool = True
    scale_output_init: bool = True
    tie_embeddings: bool = False
    router_init: Literal["normal", "passthrough"] = "normal"
    router_init_prob: float = 0.9

    def __post_init__(self) -> None:
        lay = parse_layout(self.layout)
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if not lay.recursive and self.scheme != "base":
            raise ValueError(f"layout {self.layout!r} has no loop; scheme {self.scheme!r} needs 'P+CRK+S'")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} not divisible by n_heads={self.n_heads}")
        if self.rotary_dims % 2:
            raise ValueError(f"rotary dims int(head_dim*rotary_pct)={self.rotary_dims} must be even")
        if self.buffer_size is not None and self.buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {self.buffer_size}")
        if self.mesh_impl not in ("buffer", "unrolled"):
            raise ValueError(f"mesh_impl must be 'buffer' or 'unrolled', got {self.mesh_impl!r}")
        if self.transition_router_input not in ("h_pre", "h_emb"):
            raise ValueError(
                f"transition_router_input must be 'h_pre' or 'h_emb', got {self.transition_router_input!r}"
            )
        if self.router_init not in ("normal", "passthrough"):
            raise ValueError(f"router_init must be 'normal' or 'passthrough', got {self.router_init!r}")
        if self.router_init == "passthrough" and self.scheme == "mesh":
            if self.slots < lay.n_loop + 2 or not 0 < self.router_init_prob < 1:
                raise ValueError("router_init='passthrough' needs buffer_size >= n_loop + 2 and 0 < prob < 1")
        if self.vocab_size < 1 or self.max_seq_len < 1:
            raise ValueError("vocab_size and max_seq_len must be positive")

    @property
    def parsed_layout(self) -> Layout:
        return parse_layout(self.layout)

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def rotary_dims(self) -> int:
        return int(self.head_dim * self.rotary_pct)

    @property
    def slots(self) -> int:
        """B, the MeSH buffer size (``n_loop + 3`` unless set)."""
        return self.buffer_size if self.buffer_size is not None else self.parsed_layout.n_loop + 3


# --------------------------------------------------------------------------------------------------
# GPT-NeoX layer (written here; core.transformer is a plain sequential pre-LN block).
# --------------------------------------------------------------------------------------------------


def rotary_cos_sin(positions: Tensor, rotary_dims: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin tables ``(T, rotary_dims)``: angle_{p,i} = p * base^(-2i/rotary_dims), duplicated halves."""
    inv_freq = 1.0 / (
        base ** (torch.arange(0, rotary_dims, 2, device=positions.device, dtype=torch.float32) / rotary_dims)
    )
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_partial_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of every head of ``x`` (B, H, T, hd); pass the rest."""
    r = cos.shape[-1]
    if r == 0:
        return x
    x_rot, x_pass = x[..., :r], x[..., r:]
    return torch.cat([x_rot * cos + _rotate_half(x_rot) * sin, x_pass], dim=-1)


class NeoXAttention(nn.Module):
    """Causal self-attention with fused per-head ``[q_h | k_h | v_h]`` projection and partial rotary."""

    def __init__(self, cfg: MeshConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.query_key_value = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, _ = x.shape
        qkv = self.query_key_value(x).view(b, t, self.n_heads, 3 * self.head_dim).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k = apply_partial_rotary(q, cos, sin), apply_partial_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.dense(y.transpose(1, 2).reshape(b, t, -1))


class NeoXMLP(nn.Module):
    """``dense_4h_to_h(gelu(dense_h_to_4h(x)))`` with exact (erf) GeLU, as Pythia."""

    def __init__(self, cfg: MeshConfig):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(cfg.d_model, cfg.ff)
        self.dense_4h_to_h = nn.Linear(cfg.ff, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class NeoXLayer(nn.Module):
    """One GPT-NeoX layer. Parallel residual: ``h + Attn(LN1(h)) + MLP(LN2(h))``;
    sequential (``parallel_residual=False``): ``a = h + Attn(LN1(h)); a + MLP(LN2(a))``."""

    def __init__(self, cfg: MeshConfig):
        super().__init__()
        self.parallel = cfg.parallel_residual
        self.input_layernorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attention = NeoXAttention(cfg)
        self.mlp = NeoXMLP(cfg)

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        a = self.attention(self.input_layernorm(h), cos, sin)
        if self.parallel:
            return h + a + self.mlp(self.post_attention_layernorm(h))
        a = h + a
        return a + self.mlp(self.post_attention_layernorm(a))


class Stack(nn.Module):
    """A sequence of NeoX layers applied in order (prelude, one core application, coda)."""

    def __init__(self, cfg: MeshConfig, n: int):
        super().__init__()
        self.layers = nn.ModuleList(NeoXLayer(cfg) for _ in range(n))

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        for layer in self.layers:
            h = layer(h, cos, sin)
        return h


# --------------------------------------------------------------------------------------------------
# MeSH: buffer + routers
# --------------------------------------------------------------------------------------------------


class RouterPair(nn.Module):
    """Write and read routers of one step: ``softmax(Linear(D, B)(h))`` over the B slots, per token."""

    def __init__(self, d_model: int, slots: int):
        super().__init__()
        self.write = nn.Linear(d_model, slots)
        self.read = nn.Linear(d_model, slots)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """(w_write, w_read), each (..., B), non-negative and summing to 1 over the slots."""
        return torch.softmax(self.write(h), dim=-1), torch.softmax(self.read(h), dim=-1)


def mesh_write(memory: Tensor, w_write: Tensor, h_m: Tensor) -> Tensor:
    """Eq. 5 write: ``m_b <- m_b + w_write,b * h_m`` for all b. memory (..., B, D), w (..., B), h_m (..., D)."""
    return memory + w_write.unsqueeze(-1) * h_m.unsqueeze(-2)


def mesh_read(memory: Tensor, w_read: Tensor) -> Tensor:
    """Eq. 5 read: ``h = sum_b w_read,b * m_b``. memory (..., B, D), w (..., B) -> (..., D)."""
    return torch.einsum("...b,...bd->...d", w_read, memory)


class MeshRouters(nn.Module):
    """The ``n_loop + 1`` router pairs: ``pairs[0]`` is the transitional cycle, ``pairs[t+1]`` loop step t."""

    def __init__(self, d_model: int, slots: int, n_loop: int):
        super().__init__()
        self.slots = slots
        self.pairs = nn.ModuleList(RouterPair(d_model, slots) for _ in range(n_loop + 1))

    @torch.no_grad()
    def set_one_hot(self, slots: list[tuple[int, int]], logit: float = 1e4) -> None:
        """Fix every pair to constant one-hot routing: pair i writes slot ``slots[i][0]``, reads ``slots[i][1]``.

        Weights are zeroed and the bias is ``logit`` on the chosen slot, so softmax is exactly one-hot
        in float32. ``slots = passthrough_slots(n_loop)`` makes MeSH compute the base recursion.
        """
        if len(slots) != len(self.pairs):
            raise ValueError(f"need {len(self.pairs)} (write, read) slot pairs, got {len(slots)}")
        for pair, (ws, rs) in zip(self.pairs, slots):
            for lin, s in ((pair.write, ws), (pair.read, rs)):
                if not 0 <= s < self.slots:
                    raise ValueError(f"slot {s} outside 0..{self.slots - 1}")
                lin.weight.zero_()
                lin.bias.zero_()
                lin.bias[s] = logit


class _MeshBuffer:
    """The B-slot state buffer, initialised ``m_0 = h_emb``, ``m_b = 0`` (b > 0).

    ``buffer`` mode stores the slots (..., B, D) and applies Eq. 5 literally. ``unrolled`` mode stores the
    written states x_s and their write weights, and reads with Eq. 7:
    ``sum_b w_read,b m_b = sum_s <w_read, w_write^(s)> x_s`` (x_0 = h_emb with write weight e_0).
    """

    def __init__(self, h_emb: Tensor, slots: int, impl: str):
        self.impl = impl
        if impl == "buffer":
            self.memory = torch.zeros(*h_emb.shape[:-1], slots, h_emb.shape[-1], dtype=h_emb.dtype, device=h_emb.device)
            self.memory[..., 0, :] = h_emb
        else:
            self.h_emb = h_emb
            self.writes: list[Tensor] = []
            self.values: list[Tensor] = []

    def write_read(self, w_write: Tensor, x: Tensor, w_read: Tensor) -> Tensor:
        if self.impl == "buffer":
            self.memory = mesh_write(self.memory, w_write, x)
            return mesh_read(self.memory, w_read)
        self.writes.append(w_write)
        self.values.append(x)
        h = w_read[..., :1] * self.h_emb
        for w, v in zip(self.writes, self.values):
            h = h + (w_read * w).sum(-1, keepdim=True) * v
        return h


def passthrough_slots(n_loop: int) -> list[tuple[int, int]]:
    """Routing that reduces MeSH to base recursion: the transitional step writes/reads slot 1, loop step t
    writes/reads the fresh slot t+2 (needs B >= n_loop + 2)."""
    return [(1, 1)] + [(t + 2, t + 2) for t in range(n_loop)]


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


class RecursiveNeoX(nn.Module):
    """GPT-NeoX language model with a ``P+CRK+S`` layout and a loop state scheme (see module docstring).

    ``forward(input_ids)`` returns logits (B, T, V); with ``return_trace=True`` it returns
    ``(logits, trace)`` where trace holds ``h_emb``, ``h_pre`` (prelude output), ``states``
    ``[h^(0), ..., h^(K)]``, ``core_out`` ``[h_m^(0), ..., h_m^(K-1)]``, ``h_coda`` (coda output) and, for
    mesh, ``w_write``/``w_read`` lists (transitional first) and, with ``mesh_impl="buffer"``, ``memory0`` (the
    buffer at init) and ``memory`` (the final buffer).
    """

    def __init__(self, cfg: MeshConfig):
        super().__init__()
        self.cfg = cfg
        lay = cfg.parsed_layout
        self.layout = lay
        self.embed_in = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.prelude = Stack(cfg, lay.prelude)
        n_cores = 1 if cfg.share_core else lay.n_loop
        self.cores = nn.ModuleList(Stack(cfg, lay.core) for _ in range(n_cores if lay.recursive else 0))
        self.coda = Stack(cfg, lay.coda)
        self.routers = MeshRouters(cfg.d_model, cfg.slots, lay.n_loop) if cfg.scheme == "mesh" else None
        self.final_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.embed_out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.embed_out.weight = self.embed_in.weight
        self.reset_parameters()

    # ---- init (Appendix B) ----
    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, init_std) weights, zero biases, unit LayerNorms; output projections (attention dense and
        MLP down) get ``init_std / sqrt(2 * N_compute)`` with N_compute the unrolled depth."""
        cfg = self.cfg
        out_std = cfg.init_std / math.sqrt(2 * self.layout.depth) if cfg.scale_output_init else cfg.init_std
        for name, mod in self.named_modules():
            if isinstance(mod, nn.Linear):
                std = out_std if name.endswith(("attention.dense", "mlp.dense_4h_to_h")) else cfg.init_std
                if mod.weight.device.type != "meta":
                    nn.init.normal_(mod.weight, 0.0, std)
                    if mod.bias is not None:
                        nn.init.zeros_(mod.bias)
            elif isinstance(mod, nn.Embedding) and mod.weight.device.type != "meta":
                nn.init.normal_(mod.weight, 0.0, cfg.init_std)
            elif isinstance(mod, nn.LayerNorm) and mod.weight.device.type != "meta":
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
        if self.routers is not None and cfg.router_init == "passthrough" and self.embed_in.weight.device.type != "meta":
            # softmax share p on the target slot: exp(z) / (exp(z) + B - 1) = p  <=>  z = log(p (B-1) / (1-p))
            p, b = cfg.router_init_prob, cfg.slots
            z = math.log(p * (b - 1) / (1 - p))
            for pair, (ws, rs) in zip(self.routers.pairs, passthrough_slots(self.layout.n_loop)):
                pair.write.bias[ws] = z
                pair.read.bias[rs] = z

    def core(self, t: int) -> Stack:
        """The core stack used at loop step t (the same object for every t when weights are shared)."""
        return self.cores[0] if self.cfg.share_core else self.cores[t]

    def embed(self, input_ids: Tensor) -> Tensor:
        """``h_emb = sqrt(D) * E[x]`` (paper) or ``E[x]`` (Pythia, ``scale_embeddings=False``)."""
        h = self.embed_in(input_ids)
        return h * math.sqrt(self.cfg.d_model) if self.cfg.scale_embeddings else h

    def forward(
        self,
        input_ids: Tensor | None = None,
        *,
        inputs_embeds: Tensor | None = None,
        position_ids: Tensor | None = None,
        return_trace: bool = False,
    ) -> Any:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        h_emb = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        t_len = h_emb.shape[1]
        if t_len > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {t_len} > max_seq_len {self.cfg.max_seq_len}")
        pos = position_ids if position_ids is not None else torch.arange(t_len, device=h_emb.device)
        if pos.dim() > 1:
            if pos.shape[0] != 1 and not bool((pos == pos[:1]).all()):
                raise ValueError("per-sequence position_ids are not supported; pass one (T,) row")
            pos = pos[0]
        cos, sin = rotary_cos_sin(pos, self.cfg.rotary_dims, self.cfg.rotary_base, h_emb.dtype)

        trace: dict[str, Any] = {"h_emb": h_emb}
        h = self.prelude(h_emb, cos, sin)
        trace["h_pre"] = h
        h_out = self._loop(h, h_emb, cos, sin, trace) if self.layout.recursive else h
        h_out = self.coda(h_out, cos, sin)
        trace["h_coda"] = h_out
        logits = self.embed_out(self.final_layer_norm(h_out))
        return (logits, trace) if return_trace else logits

    def _loop(self, h_pre: Tensor, h_emb: Tensor, cos: Tensor, sin: Tensor, trace: dict[str, Any]) -> Tensor:
        """The K loop steps with the configured state scheme; returns h^(K)."""
        scheme, n_loop = self.cfg.scheme, self.layout.n_loop
        states, core_out = [], []
        memory = None
        if scheme == "mesh":
            assert self.routers is not None
            buffer = _MeshBuffer(h_emb, self.cfg.slots, self.cfg.mesh_impl)
            if self.cfg.mesh_impl == "buffer":
                trace["memory0"] = buffer.memory
            # Transitional cycle: routers from h_pre (or h_emb), write h_pre, read h^(0).
            r_in = h_pre if self.cfg.transition_router_input == "h_pre" else h_emb
            ww, wr = self.routers.pairs[0](r_in)
            h = buffer.write_read(ww, h_pre, wr)
            trace["w_write"], trace["w_read"] = [ww], [wr]
        else:
            h = h_pre
        h0 = h
        states.append(h)
        for t in range(n_loop):
            h_m = self.core(t)(h, cos, sin)  # Eq. 4: h_m^(t) = f_core(h^(t))
            core_out.append(h_m)
            if scheme == "mesh":
                ww, wr = self.routers.pairs[t + 1](h)  # routers from h^(t), the core's input
                h = buffer.write_read(ww, h_m, wr)  # write h_m, then read the updated buffer
                trace["w_write"].append(ww)
                trace["w_read"].append(wr)
            elif scheme == "base":
                h = h_m
            elif scheme == "residual":
                h = h_m + h
            elif scheme == "anchor":
                h = h_m + h0
            elif scheme == "anchor_emb":
                h = h_m + h_emb
            states.append(h)
        if scheme == "mesh" and self.cfg.mesh_impl == "buffer":
            memory = buffer.memory
        trace["states"], trace["core_out"] = states, core_out
        if memory is not None:
            trace["memory"] = memory
        return h


def lm_loss(model: nn.Module, tokens: Tensor) -> Tensor:
    """Next-token cross-entropy (nats/token) on a (batch, T+1) block of token ids."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def parameter_groups(model: RecursiveNeoX) -> dict[str, int]:
    """Parameter counts of the built model by part (shared parameters counted once)."""

    def n(mod: nn.Module | None) -> int:
        return 0 if mod is None else sum(p.numel() for p in mod.parameters())

    emb = model.embed_in.weight.numel() + (0 if model.cfg.tie_embeddings else model.embed_out.weight.numel())
    parts = {
        "embedding": emb,
        "prelude": n(model.prelude),
        "core": n(model.cores),
        "coda": n(model.coda),
        "routers": n(model.routers),
        "final_layer_norm": n(model.final_layer_norm),
    }
    parts["non_embedding"] = (
        parts["prelude"] + parts["core"] + parts["coda"] + parts["routers"] + parts["final_layer_norm"]
    )
    parts["total"] = sum(p.numel() for p in model.parameters())
    return parts
