"""TinyToolVLM: the tiny tool-using vision-language model of the CPU-scale reproduction.

* Vision: a shared linear patch encoder plus a learned patch-position embedding and an image-index
  embedding (original image 0, edited image 1). A patch is one bar column: a 6-px wide, full-height strip of
  the 48x48 chart (one chart slot), so 8 tokens per image.
* Language: :class:`iclr26.core.transformer.Transformer` (causal, RoPE) fed through ``inputs_embeds``:
  ``[BOS, MODE] [img1] ([img2]) [tail tokens]``.
* Its token language (:data:`VOCAB`): modes ``PURE`` / ``TOOLS``, question tokens, the eight colour labels,
  ``DIRECT``, ``CALL``, ``MASK|DRAW|HIGHLIGHT``, ``COL|ROW``, ``ENDCALL``, ``OBS`` / ``OBS_FAIL``, digits,
  ``yes`` / ``no``, ``EOS``.
* :func:`detokenize_round1` turns a round-1 token sequence into the text a real VLM would write; a call
  ``CALL MASK COL green blue ENDCALL`` becomes a fenced python block
  ``img = focus_on_columns_with_mask(image_1, ["green", "blue"], columns_bbox)`` + ``display(img)``, which then
  goes through the library's real parser, executor (sandbox) and PIL tools. Malformed token sequences give
  code that fails (syntax or name errors), i.e. a failed tool step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from iclr26.core.transformer import Transformer, TransformerConfig

from .charts import COLORS, SIZE

__all__ = ["ID", "VOCAB", "TinyToolVLM", "TinyVLMConfig", "answer_text", "detokenize_round1", "question_tokens"]

LABELS = tuple(COLORS)
DIGITS = tuple(str(i) for i in range(10))
VOCAB = (
    "PAD",
    "BOS",
    "PURE",
    "TOOLS",
    "Q_VAL",
    "Q_CMP",
    "Q_CNT",
    "Q_MAX",
    *LABELS,
    "DIRECT",
    "CALL",
    "MASK",
    "DRAW",
    "HIGHLIGHT",
    "COL",
    "ROW",
    "ENDCALL",
    "OBS",
    "OBS_FAIL",
    *DIGITS,
    "yes",
    "no",
    "EOS",
)
ID = {t: i for i, t in enumerate(VOCAB)}
Q_LEN = 3  # question slot: type token + up to two labels, padded with PAD
R1_LEN = 6  # longest round-1 response: CALL OP DIM L1 L2 ENDCALL  /  DIRECT a EOS
ANS_LEN = 2  # answer + EOS
OPS = {"MASK": "mask", "DRAW": "draw", "HIGHLIGHT": "highlight"}
DIMS = {"COL": "columns", "ROW": "rows"}


@dataclass(frozen=True)
class TinyVLMConfig:
    """Shape of TinyToolVLM.

    image_size: chart side in pixels.
    patch: patch width in pixels (6 = one chart slot, i.e. one bar column).
    patch_h: patch height in pixels (48 = the full chart height: 8 column patches per image).
    d_model: residual width.
    n_layers: transformer blocks.
    n_heads: attention heads.
    """

    image_size: int = SIZE
    patch: int = 6
    patch_h: int = SIZE
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_h) * (self.image_size // self.patch)


def question_tokens(qtype: str, args: tuple) -> list[int]:
    """``[Q_type, label, label]`` padded with PAD to Q_LEN."""
    toks = [ID[f"Q_{qtype}"], *(ID[a] for a in args)]
    return toks + [ID["PAD"]] * (Q_LEN - len(toks))


def _names(tokens) -> list[str]:
    return [VOCAB[int(t)] for t in tokens]


def answer_text(tokens) -> str:
    """Answer tokens (up to EOS) -> ``"ANSWER: a. FINAL ANSWER: a. TERMINATE"`` ("" if no answer)."""
    words = []
    for name in _names(tokens):
        if name in ("EOS", "PAD"):
            break
        words.append(name)
    if not words:
        return ""
    a = " ".join(words)
    return f"ANSWER: {a}. FINAL ANSWER: {a}. TERMINATE"


def detokenize_round1(tokens) -> str:
    """Round-1 tokens -> response text y' (see the module docstring)."""
    names = [n for n in _names(tokens) if n != "PAD"]
    if not names:
        return ""
    if names[0] == "DIRECT":
        return "THOUGHT 0: The question can be answered from the image.\nACTION 0: No action needed.\n" + answer_text(
            [ID[n] for n in names[1:]]
        )
    if names[0] != "CALL":
        return " ".join(n for n in names if n != "EOS")
    ops, dims, args, closed = "", "", [], False
    for n in names[1:]:
        if n in ("ENDCALL", "EOS"):
            closed = n == "ENDCALL"
            break
        if n in OPS:
            ops += OPS[n]
        elif n in DIMS:
            dims += DIMS[n]
        elif n in LABELS:
            args.append(f'"{n}"')
        else:
            args.append(f"tok_{n}")  # not a label: an undefined name, i.e. a NameError at run time
    bbox = f"{dims}_bbox" if dims in ("columns", "rows") else "bbox"
    head = "THOUGHT 0: Focusing on the relevant bars will help.\nACTION 0:\n```python\n"
    call = f"img = focus_on_{dims}_with_{ops}(image_1, [{', '.join(args)}], {bbox})"
    if not closed:  # generation stopped inside the call: unterminated code
        return head + call[: -len(f"], {bbox})")]
    return head + call + "\ndisplay(img)\n```"


def call_tokens(op: str, dim: str, labels: list[str]) -> list[int]:
    """``CALL OP DIM labels... ENDCALL`` as ids (used by the SFT imitation data)."""
    return [ID["CALL"], ID[op], ID[dim], *(ID[lab] for lab in labels), ID["ENDCALL"]]


class TinyToolVLM(nn.Module):
    """Patch encoder + causal transformer over ``[BOS, MODE] [img1] ([img2]) [tail]``."""

    def __init__(self, cfg: TinyVLMConfig = TinyVLMConfig()):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Linear(3 * cfg.patch * cfg.patch_h, cfg.d_model)
        self.patch_pos = nn.Parameter(torch.randn(cfg.n_patches, cfg.d_model) * 0.02)
        self.image_index = nn.Embedding(2, cfg.d_model)
        self.patch_norm = nn.LayerNorm(cfg.d_model)  # image tokens at unit scale, like the text tokens below
        max_len = 2 + 2 * cfg.n_patches + Q_LEN + R1_LEN + 1 + ANS_LEN
        self.lm = Transformer(
            TransformerConfig(
                vocab_size=len(VOCAB),
                d_model=cfg.d_model,
                n_layers=cfg.n_layers,
                n_heads=cfg.n_heads,
                max_len=max_len,
                pos="rope",
                tie_embeddings=False,
            )
        )
        # unit-scale token embeddings: with the core's 0.02 init the 16-32 image tokens drown the identity of
        # the question's label tokens in the residual stream (measured: labels could not be copied)
        nn.init.normal_(self.lm.tok_emb.weight, 0.0, 1.0)

    def patches(self, images: Tensor | np.ndarray) -> Tensor:
        """uint8 ``[B, H, W, 3]`` -> flattened, normalised patches ``[B, P, 3 patch_h patch]`` (row-major)."""
        x = torch.as_tensor(np.asarray(images) if not isinstance(images, Tensor) else images)
        x = x.to(self.patch_pos.device, torch.float32) / 255.0 - 0.5
        B, H, W, C = x.shape
        pw, ph = self.cfg.patch, self.cfg.patch_h
        x = x.view(B, H // ph, ph, W // pw, pw, C).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(B, (H // ph) * (W // pw), ph * pw * C)

    def forward(self, mode_ids: Tensor, images: list, tail: Tensor) -> Tensor:
        """Logits ``[B, T, V]`` at the ``T`` tail positions. ``mode_ids`` [B] (PURE / TOOLS id), ``images`` a
        list of one or two uint8 ``[B, H, W, 3]`` batches, ``tail`` [B, T] token ids."""
        B = tail.shape[0]
        dev = self.patch_pos.device
        head = torch.stack([torch.full((B,), ID["BOS"], device=dev), mode_ids.to(dev)], 1)
        parts = [self.lm.embed(head)]
        for k, img in enumerate(images):
            parts.append(
                self.patch_norm(self.patch_embed(self.patches(img))) + self.patch_pos + self.image_index.weight[k]
            )
        parts.append(self.lm.embed(tail.to(dev)))
        x = torch.cat(parts, 1)
        return self.lm(inputs_embeds=x).logits[:, -tail.shape[1] :]


@torch.no_grad()
def sample_tail(
    model: TinyToolVLM,
    mode_ids: Tensor,
    images: list,
    prefix: Tensor,
    max_new: int,
    stop_ids: tuple[int, ...],
    temperature: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Extend ``prefix`` [B, T0] by up to ``max_new`` tokens (temperature 0 = greedy). Rows stop after a
    token in ``stop_ids``; later positions are PAD. Returns the new tokens [B, max_new]."""
    B = prefix.shape[0]
    seq = prefix
    alive = torch.ones(B, dtype=torch.bool)
    new = torch.full((B, max_new), ID["PAD"], dtype=torch.long)
    stops = torch.tensor(stop_ids)
    for t in range(max_new):
        logits = model(mode_ids, images, seq)[:, -1].float()
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator).squeeze(1)
        nxt = torch.where(alive, nxt, torch.full_like(nxt, ID["PAD"]))
        new[:, t] = nxt
        alive = alive & ~torch.isin(nxt, stops)
        seq = torch.cat([seq, nxt[:, None]], 1)
        if not alive.any():
            break
    return new
