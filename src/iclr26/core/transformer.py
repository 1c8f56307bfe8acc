"""A small, readable transformer used by many papers (nanoGPT-style, one file).

Pre-LayerNorm blocks::

    h_0     = E[x] (+ P[pos] for learned positions)
    h_{l+1} = h_l' + MLP(LN(h_l')),   h_l' = h_l + Attn(LN(h_l))
    logits  = LN(h_L) W_E^T            (tied embeddings by default)

Attention is causal or bidirectional, with RoPE or learned absolute positions, and uses PyTorch's
``scaled_dot_product_attention`` (SDPA) unless attention probabilities are requested, in which case
the explicit ``softmax(QK^T / sqrt(d_h) + bias) V`` path runs (the two agree to 1e-5; tested).

Hidden-state convention (as in Hugging Face): ``hidden_states[0]`` is the embedding output,
``hidden_states[l + 1]`` the output of block ``l``; there are ``n_layers + 1`` of them.

Interventions (context manager :meth:`Transformer.intervene`), used by several papers:

* :class:`AttentionReweight` multiplies the attention probability of chosen key positions by a
  factor ``s`` in chosen layers/heads and renormalises: ``p'_j ∝ p_j · s`` for chosen ``j``. This is
  exactly adding ``log s`` to those keys' attention logits, so it also works on the SDPA path.
* :class:`ResidualAdd` adds ``alpha · v`` to the residual stream ``hidden_states[layer]`` (so
  ``layer=0`` edits the embeddings and ``layer=l+1`` the output of block ``l``), at all or chosen
  positions.

Sampling (:func:`generate`): temperature / top-k / greedy decoding with EOS handling; ``kv_cache=True``
keeps each block's keys and values (one prefill pass over the prompt, then one single-token decode pass
per new token) and returns the same tokens as re-running the whole sequence every step (tested).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class TransformerConfig:
    """Shape and behaviour of :class:`Transformer`.

    vocab_size: number of token ids.
    d_model: residual width.
    n_layers: number of blocks.
    n_heads: attention heads (d_model must be divisible by it).
    d_ff: MLP hidden width (default 4 * d_model).
    max_len: longest sequence (size of the learned position table; RoPE has no limit but checks it).
    causal: causal (GPT) or bidirectional (BERT / masked-diffusion) attention.
    pos: "rope", "learned" (absolute table) or "none".
    rope_base: RoPE frequency base θ.
    dropout: dropout on attention probabilities and residual branches.
    bias: biases in linear layers and LayerNorms.
    tie_embeddings: output head shares the token embedding matrix.
    norm_eps: LayerNorm epsilon.
    """

    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None
    max_len: int = 256
    causal: bool = True
    pos: Literal["rope", "learned", "none"] = "rope"
    rope_base: float = 10000.0
    dropout: float = 0.0
    bias: bool = True
    tie_embeddings: bool = True
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.pos not in ("rope", "learned", "none"):
            raise ValueError(f"pos must be 'rope', 'learned' or 'none', got {self.pos!r}")
        if self.pos == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError("RoPE needs an even head dimension")

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    def num_params(self) -> int:
        """Closed-form parameter count (equals ``sum(p.numel())`` of the built model; tested)."""
        d, ff, b = self.d_model, self.ff, int(self.bias)
        ln = d * (1 + b)
        per_layer = 2 * ln + (3 * d * d + 3 * d * b) + (d * d + d * b) + (d * ff + ff * b) + (ff * d + d * b)
        emb = self.vocab_size * d + (self.max_len * d if self.pos == "learned" else 0)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return emb + self.n_layers * per_layer + ln + head


# --------------------------------------------------------------------------------------------------
# Interventions
# --------------------------------------------------------------------------------------------------


class Intervention:
    """Base class: override either hook. Both receive the layer index."""

    def attn_bias(self, layer: int, n_heads: int, q_len: int, k_len: int, device, dtype) -> Tensor | None:
        """Additive attention-logit bias broadcastable to [B, H, q_len, k_len], or None."""
        return None

    def residual(self, layer: int, h: Tensor) -> Tensor:
        """Edit ``hidden_states[layer]`` ([B, T, d]); return the new tensor."""
        return h


@dataclass
class AttentionReweight(Intervention):
    """Scale the attention paid to chosen keys by ``factor`` (s) and renormalise.

    layers: block indices to edit. heads: head indices (None = all heads).
    key_mask: bool [S] or [B, S], True at the chosen key positions.
    factor: s > 0; ``p'_j = p_j s / (sum_{i chosen} p_i s + sum_{i other} p_i)``.
    """

    layers: tuple[int, ...]
    key_mask: Tensor
    factor: float
    heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ValueError("AttentionReweight.factor must be > 0 (use a tiny value to suppress keys)")

    def attn_bias(self, layer, n_heads, q_len, k_len, device, dtype):
        if layer not in self.layers:
            return None
        mask = self.key_mask.to(device=device, dtype=torch.bool)
        if mask.dim() == 1:
            mask = mask[None]
        if mask.shape[-1] != k_len:
            raise ValueError(f"key_mask has {mask.shape[-1]} positions, attention has {k_len} keys")
        bias = mask.to(dtype) * math.log(self.factor)  # [B, S]
        bias = bias[:, None, None, :].expand(-1, n_heads, 1, -1).clone()
        if self.heads is not None:
            keep = torch.zeros(n_heads, dtype=torch.bool, device=device)
            keep[list(self.heads)] = True
            bias[:, ~keep] = 0.0
        return bias


@dataclass
class ResidualAdd(Intervention):
    """Add ``alpha * vector`` to ``hidden_states[layer]`` (steering).

    vector: [d] or broadcastable to [B, T, d]. positions: None (all) or bool [T] / [B, T].
    """

    layer: int
    vector: Tensor
    alpha: float = 1.0
    positions: Tensor | None = None

    def residual(self, layer, h):
        if layer != self.layer:
            return h
        delta = self.alpha * self.vector.to(device=h.device, dtype=h.dtype)
        if self.positions is None:
            return h + delta
        pos = self.positions.to(h.device, torch.bool)
        if pos.dim() == 1:
            pos = pos[None]
        return h + delta * pos[..., None].to(h.dtype)


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------


def rope_cache(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos/sin tables [B, 1, T, head_dim/2] for positions [B, T]."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [B, T, hd/2]
    return angles.cos()[:, None], angles.sin()[:, None]


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_{2i}, x_{2i+1}) by angle pos·θ^{-2i/d}."""
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.head_dim = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor] | None, mask: Tensor | None, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        drop = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores + mask
            elif self.cfg.causal:
                scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            probs = scores.softmax(-1)
            out = F.dropout(probs, drop, self.training) @ v
        else:
            probs = None
            is_causal = mask is None and self.cfg.causal
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop, is_causal=is_causal)
        return self.proj(out.transpose(1, 2).reshape(B, T, -1)), probs


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ff, bias=cfg.bias), nn.GELU(), nn.Linear(cfg.ff, cfg.d_model, bias=cfg.bias)
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, rope, mask, need_weights):
        a, probs = self.attn(self.ln1(x), rope, mask, need_weights)
        x = x + self.drop(a)
        x = x + self.drop(self.mlp(self.ln2(x)))
        return x, probs


@dataclass
class TransformerOutput:
    """logits [B, T, V]; last_hidden [B, T, d] (after the final LayerNorm);
    hidden_states: n_layers + 1 tensors [B, T, d] (see module doc) when requested;
    attentions: n_layers tensors [B, H, T, T] when requested."""

    logits: Tensor
    last_hidden: Tensor
    hidden_states: list[Tensor] | None = None
    attentions: list[Tensor] | None = None


class Transformer(nn.Module):
    """Token (or embedding) sequence -> logits. See the module docstring for the equations."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.interventions: list[Intervention] = []
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2 scaled init of residual projections
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @contextmanager
    def intervene(self, *interventions: Intervention):
        """Apply interventions inside a ``with`` block (nested blocks stack)."""
        n = len(self.interventions)
        self.interventions.extend(interventions)
        try:
            yield self
        finally:
            del self.interventions[n:]

    def _mask(self, layer: int, B: int, T: int, attention_mask: Tensor | None, device, dtype) -> Tensor | None:
        """Additive float mask [B or 1, H or 1, T, T]: causal, key padding and intervention biases."""
        parts = [iv.attn_bias(layer, self.cfg.n_heads, T, T, device, dtype) for iv in self.interventions]
        parts = [p for p in parts if p is not None]
        if attention_mask is None and not parts:
            return None  # SDPA's is_causal fast path (or no mask at all)
        allowed = torch.ones(1, 1, T, T, dtype=torch.bool, device=device)
        if self.cfg.causal:
            allowed = allowed.tril()
        if attention_mask is not None:
            allowed = allowed & attention_mask.to(torch.bool)[:, None, None, :]
            # a padded query with no visible key would give NaN: let every query see itself
            allowed = allowed | torch.eye(T, dtype=torch.bool, device=device)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))
        for p in parts:
            mask = mask + p
        return mask

    def embed(self, input_ids: Tensor) -> Tensor:
        return self.tok_emb(input_ids)

    def forward(
        self,
        input_ids: Tensor | None = None,
        *,
        inputs_embeds: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> TransformerOutput:
        """input_ids [B, T] (or inputs_embeds [B, T, d]); attention_mask [B, T] with 1 = real token
        (keys that are 0 are never attended to); position_ids [B, T] (default 0..T-1)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        B, T, _ = x.shape
        if T > self.cfg.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len={self.cfg.max_len}")
        if position_ids is None:
            position_ids = torch.arange(T, device=x.device)[None].expand(B, T)
        if self.pos_emb is not None:
            x = x + self.pos_emb(position_ids)
        rope = (
            rope_cache(position_ids, self.cfg.d_model // self.cfg.n_heads, self.cfg.rope_base)
            if self.cfg.pos == "rope"
            else None
        )
        x = self.drop(x)
        hidden, attns = [], []
        for iv in self.interventions:
            x = iv.residual(0, x)
        if output_hidden_states:
            hidden.append(x)
        for i, block in enumerate(self.blocks):
            mask = self._mask(i, B, T, attention_mask, x.device, x.dtype)
            x, probs = block(x, rope, mask, output_attentions)
            for iv in self.interventions:
                x = iv.residual(i + 1, x)
            if output_hidden_states:
                hidden.append(x)
            if output_attentions:
                attns.append(probs)
        last = self.ln_f(x)
        logits = self.head(last) if self.head is not None else last @ self.tok_emb.weight.T
        return TransformerOutput(
            logits, last, hidden if output_hidden_states else None, attns if output_attentions else None
        )


def _sample_next(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> Tensor:
    """One token per row from next-token logits [B, V]: argmax for temperature 0, else one
    ``torch.multinomial`` draw of ``softmax(z / T)`` (restricted to the top k logits if given)."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)


def _cached_next_logits(model: Transformer, ids: Tensor, cache: list[tuple[Tensor, Tensor] | None]) -> Tensor:
    """Next-token logits [B, V] after ``ids`` [B, t], given the keys/values of the earlier positions in
    ``cache`` (one (K, V) pair [B, H, S, d_h] per block, S = positions seen so far; grown in place).

    The same pre-LN blocks as :meth:`Transformer.forward`, run on the new positions only:

    * prefill (empty cache): the whole prompt, positions 0..t-1, causal attention over itself;
    * decode (t = 1): the one new token at position S; its query attends to all S cached keys and to its
      own key (no mask needed: nothing lies in its future), ``softmax(q K^T / sqrt(d_h)) V``.

    The new keys/values are appended to the cache, so every position's K and V are computed once."""
    cfg = model.cfg
    B, t = ids.shape
    # S: positions already in the cache (0 at the prefill); the new tokens sit at S..S+t-1
    start = 0 if cache[0] is None else cache[0][0].shape[2]
    if start and t != 1:
        raise ValueError("after the prefill the cache takes one token per step")
    positions = torch.arange(start, start + t, device=ids.device)[None].expand(B, t)
    h = model.embed(ids)
    if model.pos_emb is not None:
        h = h + model.pos_emb(positions)
    rope = rope_cache(positions, cfg.d_model // cfg.n_heads, cfg.rope_base) if cfg.pos == "rope" else None
    for i, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.qkv(block.ln1(h)).view(B, t, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        past = cache[i]
        if past is not None:  # decode: K = [K_cache; k_new], V = [V_cache; v_new]  ([B, H, S + 1, d_h])
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        cache[i] = (k, v)
        # prefill: causal over the prompt; decode: the single query sees every key (all are in its past)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=past is None and t > 1)
        h = h + attn.proj(out.transpose(1, 2).reshape(B, t, -1))
        h = h + block.mlp(block.ln2(h))
    last = model.ln_f(h[:, -1])  # only the last position predicts the next token
    return model.head(last) if model.head is not None else last @ model.tok_emb.weight.T


@torch.no_grad()
def generate(
    model: Transformer,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    kv_cache: bool = False,
    step_logits: list[Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Sample continuations of equal-length prompts [B, T0] (left-padded prompts are run as they are: no
    attention mask) from a causal model. temperature=0 is greedy; ``top_k`` keeps the k largest logits.
    Returns (tokens [B, T0 + n], finished mask of the new tokens [B, n]: True up to and including each
    row's first EOS). After EOS a row is padded with ``pad_id``; generation stops once every row is done.

    Each step draws one ``torch.multinomial`` sample per row from ``generator``, so the same generator
    state gives the same tokens with or without the cache.

    kv_cache=False: every step re-runs the whole sequence (cropped to the last ``max_len`` tokens).
    kv_cache=True: a key/value cache (see :func:`_cached_next_logits`): one prefill pass over the prompt,
    then one single-token decode pass per new token; the same tokens (tested). Where a cache does not
    apply, it silently re-runs the whole sequence instead: interventions on the model, dropout active
    (training mode), or a sequence that outgrows ``max_len`` (the uncached path crops the context).

    step_logits: if a list is given, each step's next-token logits [B, V] (float32, before temperature)
    are appended to it."""
    if not model.cfg.causal:
        raise ValueError("generate() needs a causal model")
    B, T0 = prompt.shape
    use_cache = (
        kv_cache
        and not model.interventions
        and not (model.training and model.cfg.dropout > 0)
        and T0 + max_new_tokens - 1 <= model.cfg.max_len
    )
    if use_cache:
        cache: list[tuple[Tensor, Tensor] | None] = [None] * len(model.blocks)

        # the cache holds seq.shape[1] - 1 positions after the prefill: feed only what it has not seen
        def next_logits(seq: Tensor) -> Tensor:
            seen = 0 if cache[0] is None else cache[0][0].shape[2]
            return _cached_next_logits(model, seq[:, seen:], cache)

    else:

        def next_logits(seq: Tensor) -> Tensor:
            return model(seq[:, -model.cfg.max_len :]).logits[:, -1]

    seq = prompt
    alive = torch.ones(B, dtype=torch.bool, device=prompt.device)
    valid = []
    for _ in range(max_new_tokens):
        logits = next_logits(seq).float()
        if step_logits is not None:
            step_logits.append(logits)
        nxt = _sample_next(logits, temperature, top_k, generator)
        nxt = torch.where(alive, nxt, torch.full_like(nxt, pad_id))
        valid.append(alive.clone())
        if eos_id is not None:
            alive = alive & (nxt != eos_id)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        if not alive.any():
            break
    return seq, torch.stack(valid, 1) if valid else torch.zeros(B, 0, dtype=torch.bool)
