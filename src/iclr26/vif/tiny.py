"""A tiny VLM for the CPU-scale reproduction, built on ``iclr26.core.transformer``.

Per-patch vision encoder (8x8x3 pixels -> d) -> LLaVA-style 2-layer MLP projector -> causal RoPE LM.
The LM's attention modules are :class:`HookedAttention`, which runs the explicit softmax path and
calls a post-softmax hook ``hook(layer, p) -> p'`` (ViF's reallocation, Table 1's token drop) and keeps
each token's key norm ‖K_j‖ (the Key-Norm signal, Sec. 4.4). Sequence layout (Sec. 4.2)::

    [SYS] [question] V_1..V_16 [R̂_1..R̂_n] [question] [msg_1..msg_4] [ASK] -> yes / no

(system prompt = [SYS] + the task question, as an agent's role prompt states its task; instruction =
the question and the upstream messages).

Position ids run 0..T-1 except the relay slots, which reuse their source patches' ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr26.core.transformer import Attention, Transformer, TransformerConfig, apply_rope
from iclr26.vif.config import ModelConfig, ViFConfig
from iclr26.vif.data import ASK, COLORS, N_CELLS, NO, PATCH_DIM, SHAPE_NAMES, SYS, VOCAB, YES
from iclr26.vif.method import RelayBlock

N_SYS = 2  # [SYS] [question]


class HookedAttention(Attention):
    """core Attention with a post-softmax hook and key norms (explicit path always)."""

    def __init__(self, cfg: TransformerConfig, layer: int):
        super().__init__(cfg)
        self.layer = layer
        self.hook = None
        self.key_norm: Tensor | None = None

    def forward(self, x, rope, mask, need_weights):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # ‖K_j‖ over the head-concatenated key, before RoPE (a rotation: the norm is unchanged)
        self.key_norm = k.detach().permute(0, 2, 1, 3).reshape(B, T, -1).norm(dim=-1)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        elif self.cfg.causal:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
        probs = scores.softmax(-1)
        if self.hook is not None:
            probs = self.hook(self.layer, probs)
        out = F.dropout(probs, self.dropout, self.training) @ v
        return self.proj(out.transpose(1, 2).reshape(B, T, -1)), (probs if need_weights else None)


@dataclass
class Relay:
    """Visual flow from one agent to the next: R̂ [B, n, d], source position ids [B, n], valid [B, n]."""

    tokens: Tensor
    positions: Tensor
    valid: Tensor


@dataclass
class AgentOutput:
    """One agent forward: yes-vs-no logit [B], attentions (per layer [B, H, T, T]), key norms [B, T, L]."""

    logit: Tensor
    attentions: list[Tensor] | None
    key_norms: Tensor
    vision: Tensor  # projector outputs V [B, 16, d]
    instr_embeds: Tensor  # I [B, k, d]
    layout: dict
    hidden: Tensor | None = None  # residual stream after block ``hidden_layer`` [B, T, d], when asked


class TinyVLM(nn.Module):
    """Vision encoder + projector + LM (+ the relay block f, used only by ViF)."""

    def __init__(self, cfg: ModelConfig, vif: ViFConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.encoder = nn.Sequential(nn.Linear(PATCH_DIM, cfg.enc_hidden), nn.GELU(), nn.Linear(cfg.enc_hidden, d))
        n_cls = 1 + len(COLORS) * len(SHAPE_NAMES)
        self.projector = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.LayerNorm(d))
        tcfg = TransformerConfig(
            vocab_size=VOCAB, d_model=d, n_layers=cfg.n_layers, n_heads=cfg.n_heads, max_len=64, pos="rope"
        )
        self.lm = Transformer(tcfg)
        for i, block in enumerate(self.lm.blocks):
            hooked = HookedAttention(tcfg, i)
            hooked.load_state_dict(block.attn.state_dict())
            block.attn = hooked
        self.f = RelayBlock(d, vif.f_layers, vif.f_heads)
        # linear probe of the encoder's cell features (the vision encoder's own pretraining; unused after)
        self.cell_head = nn.Linear(d, n_cls)
        # grounding head: does this vision token show the asked object? (pretraining only; unused after)
        self.match_head = nn.Linear(d, 1)

    def set_hook(self, hook) -> None:
        for block in self.lm.blocks:
            block.attn.hook = hook

    def vision_tokens(self, patches: Tensor) -> Tensor:
        """V = projector(encoder(patches)): [B, 16, 192] -> [B, 16, d]."""
        return self.projector(self.encoder(patches))

    def forward(
        self,
        patches: Tensor,
        instr: Tensor,
        relay: Relay | None = None,
        hook=None,
        output_attentions: bool = False,
        hidden_layer: int | None = None,
    ) -> AgentOutput:
        """patches [B, 16, 192]; instr [B, k] token ids (colour, shape, message slots); hidden_layer: also
        return the residual stream after that LM block (the grounding loss of pretraining)."""
        B = patches.shape[0]
        dev = patches.device
        vis = self.vision_tokens(patches)
        emb = self.lm.embed
        # system prompt: [SYS] + the task question (every agent's role prompt states the task)
        sys_e = emb(torch.cat([torch.full((B, 1), SYS, device=dev), instr[:, :1]], 1))
        ask_e = emb(torch.full((B, 1), ASK, device=dev))
        ins_e = emb(instr)
        n = 0 if relay is None else relay.tokens.shape[1]
        S = N_SYS
        parts = [sys_e, vis] + ([relay.tokens] if relay is not None else []) + [ins_e, ask_e]
        x = torch.cat(parts, 1)
        T = x.shape[1]
        pos = torch.arange(T, device=dev)[None].expand(B, T).clone()
        mask = None
        if relay is not None and n:
            pos[:, S + N_CELLS : S + N_CELLS + n] = relay.positions
            mask = torch.ones(B, T, dtype=torch.bool, device=dev)
            mask[:, S + N_CELLS : S + N_CELLS + n] = relay.valid
        self.set_hook(hook)
        try:
            out = self.lm(
                inputs_embeds=x,
                position_ids=pos,
                attention_mask=mask,
                output_attentions=output_attentions,
                output_hidden_states=hidden_layer is not None,
            )
        finally:
            self.set_hook(None)
        last = out.logits[:, -1]
        logit = last[:, YES] - last[:, NO]
        key_norms = torch.stack([b.attn.key_norm for b in self.lm.blocks], -1)
        k = instr.shape[1]
        layout = {
            "vision": slice(S, S + N_CELLS),
            "relay": slice(S + N_CELLS, S + N_CELLS + n),
            "instr": slice(S + N_CELLS + n, S + N_CELLS + n + k),
            "T": T,
            "n": n,
            "positions": pos,
            "key_mask": mask,
        }
        hidden = out.hidden_states[hidden_layer + 1] if hidden_layer is not None else None
        return AgentOutput(logit, out.attentions, key_norms, vis, ins_e, layout, hidden)


def type_masks(
    layout: dict, B: int, active_vision: Tensor | None, relay_valid: Tensor | None, device=None
) -> tuple[Tensor, Tensor, Tensor]:
    """Key masks [B, T] (vision incl. relay, active vision incl. valid relay, instruction)."""
    T = layout["T"]
    vision = torch.zeros(B, T, dtype=torch.bool, device=device)
    vision[:, layout["vision"]] = True
    vision[:, layout["relay"]] = True
    active = torch.zeros_like(vision)
    active[:, layout["vision"]] = active_vision if active_vision is not None else True
    if layout["n"]:
        active[:, layout["relay"]] = relay_valid if relay_valid is not None else True
    instruction = torch.zeros_like(vision)
    instruction[:, layout["instr"]] = True
    return vision, active, instruction


def freeze_for(model: TinyVLM, stage: str) -> None:
    """Trainable modules per stage (paper's freeze table; official configs/stage*.yaml).

    pretrain: everything but f (with the encoder's cell probe and the grounding head). stage1: projector + f.
    stage2: projector + f + LM. baseline: projector + LM. frozen_baseline: projector only (the text-flow
    counterpart of stage 1: the LM stays as pretrained).
    The vision encoder is frozen in every stage after pretraining.
    """
    train = {
        "pretrain": ("encoder", "projector", "lm", "cell_head", "match_head"),
        "stage1": ("projector", "f"),
        "stage2": ("projector", "f", "lm"),
        "baseline": ("projector", "lm"),
        "frozen_baseline": ("projector",),
    }
    if stage not in train:
        raise ValueError(f"unknown stage {stage!r}; one of {sorted(train)}")
    for name, p in model.named_parameters():
        p.requires_grad_(name.split(".")[0] in train[stage])
