"""The vanilla autoregressive model of D-AR: a LlamaGen-style decoder (official ``autoregressive/models/gpt.py``).

Nothing in it knows about images or token order: a class token then next-token prediction::

    h_0 = [E_cls[y]; E_tok[z_0 .. z_{N-2}]]   (class dropped to the null row with prob. p_drop in training)
    h_{l+1} = h' + SwiGLU(RMSNorm(h')),  h' = h_l + Attn_causal(RMSNorm(h_l)) with 1-D RoPE
    logits = W_out RMSNorm(h_L);  L = CE(logits, [z_0 .. z_{N-1}])

Generation samples token by token with classifier-free guidance whose scale grows linearly over the
positions (official ``generate.generate`` with ``--cfg-scale a,b``)::

    s_i = a + (b - a) i / (N - 1);   l_i = l_u + s_i (l_c - l_u)   (s_i <= 1: l_c, no guidance)

Prefix control (zero-shot layout control, paper Fig. 5): the first P tokens are given, the rest are
sampled. The reversed-order baseline trains on ``z[::-1]`` and un-reverses before decoding.

RoPE is :func:`iclr26.core.transformer.apply_rope` (pairs (2i, 2i+1), as LlamaGen's
``apply_rotary_emb``); the block itself differs from ``core.transformer.Block`` (RMSNorm, SwiGLU,
no biases), and the parameter names follow the official checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr26.core.transformer import apply_rope, rope_cache


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


@dataclass(frozen=True)
class GPTConfig:
    """LlamaGen ``ModelArgs`` (class-conditional, 1-D RoPE) with the official D-AR defaults.

    dim: width.
    n_layer: blocks.
    n_head: attention heads.
    multiple_of: SwiGLU hidden width is rounded up to a multiple of this.
    ffn_dim_multiplier: optional extra factor on the SwiGLU hidden width.
    rope_base: RoPE base.
    norm_eps: RMSNorm epsilon.
    token_dropout_p: dropout on the input embeddings.
    attn_dropout_p: attention-probability dropout.
    resid_dropout_p: dropout after the attention output projection.
    ffn_dropout_p: dropout after the SwiGLU output.
    num_classes: class labels (the null class is row num_classes).
    class_dropout_prob: probability a training label becomes the null class (for CFG).
    vocab_size: token vocabulary (= tokenizer codebook size).
    cls_token_num: class-prefix tokens.
    block_size: image tokens per sequence (N).
    """

    dim: int = 1024
    n_layer: int = 24
    n_head: int = 16
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    token_dropout_p: float = 0.1
    attn_dropout_p: float = 0.0
    resid_dropout_p: float = 0.1
    ffn_dropout_p: float = 0.1
    num_classes: int = 1000
    class_dropout_prob: float = 0.1
    vocab_size: int = 16384
    cls_token_num: int = 1
    block_size: int = 256

    def __post_init__(self) -> None:
        if self.dim % self.n_head or (self.dim // self.n_head) % 2:
            raise ValueError(f"dim={self.dim} needs n_head={self.n_head} dividing it into even head widths")

    @property
    def ffn_hidden(self) -> int:
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return find_multiple(hidden, self.multiple_of)


#: Official size presets (``GPT_models``): (n_layer, n_head, dim).
GPT_PRESETS = {"GPT-B": (12, 12, 768), "GPT-L": (24, 16, 1024), "GPT-XL": (36, 20, 1280), "GPT-XXL": (48, 24, 1536)}


def gpt_preset(name: str, **kw) -> GPTConfig:
    if name not in GPT_PRESETS:
        raise ValueError(f"unknown GPT preset {name!r}; known: {', '.join(GPT_PRESETS)}")
    n_layer, n_head, dim = GPT_PRESETS[name]
    return GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, **kw)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w (in float32)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class FeedForward(nn.Module):
    """SwiGLU: w2(SiLU(w1 x) * w3 x)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        h = cfg.ffn_hidden
        self.w1 = nn.Linear(cfg.dim, h, bias=False)
        self.w3 = nn.Linear(cfg.dim, h, bias=False)
        self.w2 = nn.Linear(h, cfg.dim, bias=False)
        self.ffn_dropout = nn.Dropout(cfg.ffn_dropout_p)

    def forward(self, x: Tensor) -> Tensor:
        return self.ffn_dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class Attention(nn.Module):
    """Causal multi-head attention with a fused wqkv projection and 1-D RoPE."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.dim // cfg.n_head
        self.wqkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.attn_dropout_p = cfg.attn_dropout_p
        self.resid_dropout = nn.Dropout(cfg.resid_dropout_p)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.wqkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        drop = self.attn_dropout_p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        return self.resid_dropout(self.wo(out.transpose(1, 2).reshape(B, T, C)))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x: Tensor, rope) -> Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    """Class embedding with a null row (index num_classes) for classifier-free guidance."""

    def __init__(self, num_classes: int, dim: int, dropout_prob: float):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), dim)
        self.num_classes, self.dropout_prob = num_classes, dropout_prob

    def token_drop(self, labels: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """labels -> num_classes (null) with probability dropout_prob, independently per row."""
        drop = torch.rand(labels.shape[0], generator=generator).to(labels.device) < self.dropout_prob
        return torch.where(drop, torch.full_like(labels, self.num_classes), labels)

    def forward(self, labels: Tensor, train: bool) -> Tensor:
        if train and self.dropout_prob > 0:
            labels = self.token_drop(labels)
        return self.embedding_table(labels)[:, None]


class Transformer(nn.Module):
    """Class-conditional LlamaGen decoder; parameter names equal the official checkpoints'."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.cls_embedding = LabelEmbedder(cfg.num_classes, cfg.dim, cfg.class_dropout_prob)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.tok_dropout = nn.Dropout(cfg.token_dropout_p)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.apply(self._init)
        nn.init.zeros_(self.output.weight)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: Tensor, cond_idx: Tensor, train_labels: bool | None = None) -> Tensor:
        """idx [B, T] (T <= block_size) image tokens, cond_idx [B] labels -> logits [B, T + 1, V]:
        row j predicts image token j from the class token and tokens < j. Class dropout applies in
        training mode (or when ``train_labels`` is True)."""
        cfg = self.config
        if idx.shape[1] > cfg.block_size:
            raise ValueError(f"{idx.shape[1]} tokens exceed block_size={cfg.block_size}")
        if idx.numel() and (idx.min() < 0 or idx.max() >= cfg.vocab_size):
            raise ValueError(f"token ids must be in [0, {cfg.vocab_size})")
        drop = self.training if train_labels is None else train_labels
        h = torch.cat([self.cls_embedding(cond_idx, drop)[:, : cfg.cls_token_num], self.tok_embeddings(idx)], 1)
        h = self.tok_dropout(h)
        pos = torch.arange(h.shape[1], device=h.device)[None]
        rope = rope_cache(pos, cfg.dim // cfg.n_head, cfg.rope_base)
        for layer in self.layers:
            h = layer(h, rope)
        return self.output(self.norm(h)).float()[:, cfg.cls_token_num - 1 :]

    def loss(self, tokens: Tensor, labels: Tensor) -> Tensor:
        """Mean next-token CE over all N positions: input [cls, z_0..z_{N-2}], target z_0..z_{N-1}."""
        logits = self(tokens[:, :-1], labels)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))

    @torch.no_grad()
    def token_nll(self, tokens: Tensor, labels: Tensor) -> Tensor:
        """Per-position NLL [B, N] in nats (no class dropout)."""
        logits = self(tokens[:, :-1], labels, train_labels=False)
        return F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")


def cfg_schedule(start: float, end: float, n: int) -> Tensor:
    """Guidance scale per generated position: linspace(start, end, n) (official ``--cfg-scale a,b``)."""
    return torch.linspace(start, end, n)


def guided_logits(cond_logits: Tensor, uncond_logits: Tensor, scale: float) -> Tensor:
    """l_u + s (l_c - l_u) for s > 1; the conditional logits themselves for s <= 1 (as the official
    sampler, which only builds the unconditional half when the scale exceeds 1)."""
    if scale <= 1.0:
        return cond_logits
    return uncond_logits + (cond_logits - uncond_logits) * scale


def sample_logits(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One token per row from logits [B, V] with temperature, top-k (0 = off), top-p (1 = off)."""
    logits = logits / max(temperature, 1e-5)
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        srt, order = logits.sort(dim=-1, descending=True)
        cum = srt.softmax(-1).cumsum(-1)
        drop = cum > top_p
        drop[:, 1:] = drop[:, :-1].clone()
        drop[:, 0] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).to(logits.device).squeeze(1)


@torch.no_grad()
def generate(
    model: Transformer,
    labels: Tensor,
    n_tokens: int | None = None,
    *,
    cfg_scale: tuple[float, float] = (1.0, 1.0),
    prefix: Tensor | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Sample [B, N] tokens for labels [B] (no KV cache: recomputes the prefix each step).

    prefix [B, P]: tokens kept as given (zero-shot layout control); positions P..N-1 are sampled.
    cfg_scale (a, b): guidance scale linspace(a, b, N) over the positions; scale <= 1 = no guidance.
    """
    cfg = model.config
    n = cfg.block_size if n_tokens is None else n_tokens
    seq = labels.new_zeros(labels.shape[0], 0) if prefix is None else prefix.to(labels.device).long()
    if seq.shape[0] != labels.shape[0] or seq.shape[1] > n:
        raise ValueError(f"prefix {tuple(seq.shape)} does not fit {labels.shape[0]} rows of {n} tokens")
    scales = cfg_schedule(cfg_scale[0], cfg_scale[1], n)
    guided = bool((scales > 1.0).any())
    null = torch.full_like(labels, cfg.num_classes)
    was_training = model.training
    model.eval()
    try:
        for i in range(seq.shape[1], n):
            if guided:
                both = model(torch.cat([seq, seq]), torch.cat([labels, null]))[:, -1]
                logits = guided_logits(both[: len(labels)], both[len(labels) :], float(scales[i]))
            else:
                logits = model(seq, labels)[:, -1]
            nxt = sample_logits(logits, temperature, top_k, top_p, generator)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    finally:
        model.train(was_training)
    return seq


def reverse_tokens(tokens: Tensor) -> Tensor:
    """The reversed-order baseline's view of a sequence (its own inverse)."""
    return tokens.flip(-1)
