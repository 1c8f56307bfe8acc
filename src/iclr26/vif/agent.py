"""One agent turn with or without ViF, and the training stages (pretrain, ViF stage 1/2, baseline).

An agent turn (the pseudocode of Sec. 4, ``agent_forward``): a probe pass without intervention gives
the vision tokens' layer curves (attention column mass, or key norms); they are classified (App. B.1);
the reallocation hook is installed for the answering pass; the relay set R (top unimodal tokens) and
``R̂ = f(R ⊕ I)[:n]`` go to the next agent with the source patches' position ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from iclr26.core.train import TrainConfig, fit
from iclr26.vif.config import DataConfig, ViFConfig
from iclr26.vif.data import (
    N_CELLS,
    NONE,
    SHAPE_NAMES,
    cell_labels,
    instruction,
    make_scenes,
    patches,
    train_messages,
    transcript,
    view_masks,
)
from iclr26.vif.method import (
    INACTIVE,
    Morphology,
    Reallocation,
    ReallocStats,
    classify,
    keynorm_signal,
    layer_curves,
    select_relay,
    select_relay_keynorm,
)
from iclr26.vif.tiny import AgentOutput, Relay, TinyVLM, freeze_for, type_masks


@dataclass
class TurnResult:
    """logit [B]; out: the answering pass; morph: the probe's morphology; relay: for the next agent."""

    logit: Tensor
    out: AgentOutput
    morph: Morphology
    relay: Relay | None


def empty_relay(model: TinyVLM, B: int, n: int, device=None) -> Relay:
    """n relay slots with nothing in them (the first agent of a chain): masked keys."""
    d = model.cfg.d_model
    return Relay(
        torch.zeros(B, n, d, device=device),
        torch.zeros(B, n, dtype=torch.long, device=device),
        torch.zeros(B, n, dtype=torch.bool, device=device),
    )


def curves_of(out: AgentOutput, vcfg: ViFConfig) -> Tensor:
    """Vision tokens' layer curves [B, 16, L] from a probe pass (Eq. 5-6 column mass, or ‖K_j‖ per layer)."""
    vis = out.layout["vision"]
    if vcfg.selection == "keynorm":
        return out.key_norms[:, vis]
    rows = None
    if vcfg.curve_rows == "text":
        rows = torch.zeros(out.logit.shape[0], out.layout["T"], dtype=torch.bool, device=out.logit.device)
        rows[:, out.layout["instr"].start :] = True
    return layer_curves(out.attentions, vis, rows)


def agent_turn(
    model: TinyVLM,
    pat: Tensor,
    instr: Tensor,
    relay: Relay | None,
    vcfg: ViFConfig,
    use_vif: bool,
    stats: ReallocStats | None = None,
    generator: torch.Generator | None = None,
) -> TurnResult:
    """One agent: probe -> classify -> (reallocated) answer -> relay for the next agent."""
    bands = model.cfg
    with torch.no_grad():
        probe = model(pat, instr, relay, output_attentions=True)
    morph = classify(curves_of(probe, vcfg), bands.middle, vcfg.omega, vcfg.inactive_var, vcfg.mono_tol)
    if not use_vif:
        out = probe if not torch.is_grad_enabled() else model(pat, instr, relay, output_attentions=True)
        return TurnResult(out.logit, out, morph, None)
    if vcfg.reallocate:
        B = pat.shape[0]
        vision, active, instr_m = type_masks(
            probe.layout, B, morph.kind != INACTIVE, relay.valid if relay is not None else None, pat.device
        )
        hook = Reallocation.from_config(vcfg, bands.middle, bands.deep, vision, active, instr_m, stats)
        out = model(pat, instr, relay, hook=hook, output_attentions=True)
    else:
        out = probe if not torch.is_grad_enabled() else model(pat, instr, relay, output_attentions=True)
    new_relay = make_relay(model, out, morph, vcfg, generator, probe.key_norms) if vcfg.relay else None
    return TurnResult(out.logit, out, morph, new_relay)


def make_relay(
    model: TinyVLM,
    out: AgentOutput,
    morph: Morphology,
    vcfg: ViFConfig,
    generator: torch.Generator | None = None,
    key_norms: Tensor | None = None,
) -> Relay:
    """R = top unimodal vision tokens (or, ``relay_rule="keynorm_topk"``, the top-k by the middle band's
    mean key norm of the probe pass, ``key_norms`` [B, T, L]); R̂ = f(R ⊕ I)[:n]; positions = the source
    patches' position ids."""
    if vcfg.relay_rule == "keynorm_topk" and not vcfg.random_relay:
        kn = out.key_norms if key_norms is None else key_norms
        signal = keynorm_signal(kn[:, out.layout["vision"]], model.cfg.middle)
        idx, valid = select_relay_keynorm(signal, vcfg.relay_ratio)
    else:
        idx, valid = select_relay(morph, vcfg.relay_count(N_CELLS), generator, vcfg.random_relay)
    d = out.vision.shape[-1]
    R = out.vision.gather(1, idx[..., None].expand(-1, -1, d))
    R_hat = model.f(R, out.instr_embeds, valid)
    src = out.layout["positions"][:, out.layout["vision"]]
    return Relay(R_hat, src.gather(1, idx), valid)


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------


def training_batch(
    seed: int, stage: str, step: int, n: int, dcfg: DataConfig, occluded_share: float, no_msgs: bool = False
) -> dict:
    """The batch of one step (a pure function of seed, stage and step: exact resume, same seed same data).

    Each example: a scene and its question, the current agent's view and upstream messages, and the
    previous agent's view and messages (for its relay). Transcript context (``dcfg.context``): the
    current agent reads a transcript of K earlier answers (one K per batch) and the previous agent its
    first K - 1 entries. ``no_msgs``: no upstream messages at all (the
    vision-only opening of the pretraining curriculum); the scenes, views and questions are unchanged.
    "match" [n, 16]: the visible cell shows the asked object (target of the pretraining grounding loss).
    """
    rng = np.random.default_rng([seed, sum(map(ord, stage)), step])
    sc = make_scenes(rng, n, dcfg)
    occ = rng.random(n) < occluded_share
    cur_v = view_masks(rng, n, occ, dcfg.visible_cells)
    prev_v = view_masks(rng, n, occ, dcfg.visible_cells)
    if dcfg.context == "transcript":
        # one transcript length K per batch (no padding); the previous agent read the first K - 1 entries
        k = 0 if no_msgs else int(rng.integers(0, dcfg.transcript_max + 1))
        said = train_messages(rng, sc.answer, dcfg, k=k)
        instr, prev_instr = transcript(sc, said), transcript(sc, said[:, : max(k - 1, 0)])
        has_prev = np.full(n, k > 0)
    else:
        msgs = train_messages(rng, sc.answer, dcfg)
        prev_msgs = train_messages(rng, sc.answer, dcfg)
        if no_msgs:
            msgs[:], prev_msgs[:] = NONE, NONE
        instr, prev_instr = instruction(sc, msgs), instruction(sc, prev_msgs)
        has_prev = (msgs != NONE).any(1)  # an upstream agent exists iff a message does
    cells = np.where(cur_v, cell_labels(sc), 0)
    asked = 1 + sc.q_color * len(SHAPE_NAMES) + sc.q_shape
    return {
        "cur": torch.from_numpy(patches(sc.images, cur_v)),
        "prev": torch.from_numpy(patches(sc.images, prev_v)),
        "instr": torch.from_numpy(instr),
        "prev_instr": torch.from_numpy(prev_instr),
        "has_prev": torch.from_numpy(has_prev),
        "y": torch.from_numpy(sc.answer.astype(np.float32)),
        "cells": torch.from_numpy(cells),
        "match": torch.from_numpy((cells == asked[:, None]).astype(np.float32)),
    }


def text_loss(model: TinyVLM, batch: dict):
    """Binary cross-entropy of the yes/no answer, text flow only (baseline)."""
    logit = model(batch["cur"], batch["instr"]).logit
    loss = F.binary_cross_entropy_with_logits(logit, batch["y"])
    return loss, {"acc": float(((logit > 0).float() == batch["y"]).float().mean())}


def pretrain_loss(ground_weight: float = 1.0):
    """Pretraining loss: answer BCE, plus the vision encoder's per-cell classification (empty or colour x
    shape), a stand-in for the pretrained vision encoder every real VLM starts from, plus
    ``ground_weight`` x a grounding loss: from the residual stream after the last shallow LM block, each
    vision token predicts whether its cell shows the asked object (the question is in the system prompt,
    before the vision tokens). A stand-in for the grounded pretraining of real VLMs; without it the tiny LM
    learns the message shortcut and answers at chance without messages (see the README)."""

    def loss_fn(model: TinyVLM, batch: dict):
        layer = model.cfg.shallow[-1] if ground_weight else None
        out = model(batch["cur"], batch["instr"], hidden_layer=layer)
        loss = F.binary_cross_entropy_with_logits(out.logit, batch["y"])
        logs = {"acc": float(((out.logit > 0).float() == batch["y"]).float().mean())}
        cell_logits = model.cell_head(model.encoder(batch["cur"]))
        aux = F.cross_entropy(cell_logits.flatten(0, 1), batch["cells"].flatten())
        logs["cell_ce"] = float(aux.detach())
        total = loss + aux
        if ground_weight:
            vis = out.layout["vision"]
            match_logit = model.match_head(out.hidden[:, vis]).squeeze(-1)
            ground = F.binary_cross_entropy_with_logits(match_logit, batch["match"])
            logs["ground_bce"] = float(ground.detach())
            total = total + ground_weight * ground
        return total, logs

    return loss_fn


def vif_loss(vcfg: ViFConfig):
    """ViF training loss: the previous agent's relay (selection without gradient, R̂ with gradient into
    the projector and f), then the current agent with relay and reallocation active (official wrapper)."""

    def loss_fn(model: TinyVLM, batch: dict):
        B = batch["y"].shape[0]
        relay = None
        n_relay = vcfg.relay_count(N_CELLS)
        if vcfg.relay and n_relay:
            with torch.no_grad():
                prev = model(batch["prev"], batch["prev_instr"], empty_relay(model, B, n_relay), output_attentions=True)
            morph = classify(curves_of(prev, vcfg), model.cfg.middle, vcfg.omega, vcfg.inactive_var, vcfg.mono_tol)
            prev_vis = model.vision_tokens(batch["prev"])
            prev = AgentOutput(
                prev.logit, None, prev.key_norms, prev_vis, model.lm.embed(batch["prev_instr"]), prev.layout
            )
            relay = make_relay(model, prev, morph, vcfg, key_norms=prev.key_norms)
            relay.valid = relay.valid & batch["has_prev"][:, None]
        turn = agent_turn(model, batch["cur"], batch["instr"], relay, vcfg, use_vif=True)
        loss = F.binary_cross_entropy_with_logits(turn.logit, batch["y"])
        return loss, {"acc": float(((turn.logit > 0).float() == batch["y"]).float().mean())}

    return loss_fn


def train_stage(
    model: TinyVLM,
    stage: str,
    tcfg: TrainConfig,
    seed: int,
    batch: int,
    dcfg: DataConfig,
    vcfg: ViFConfig | None = None,
    log=None,
    ground_weight: float = 0.0,
    vision_only_steps: int = 0,
) -> list[float]:
    """Run one stage with core.train.fit; returns the loss per step. Pretraining only: ``ground_weight``
    (grounding loss, see :func:`pretrain_loss`) and ``vision_only_steps`` (the first steps see no messages)."""
    freeze_for(model, stage)
    occ = 0.0 if stage == "pretrain" else dcfg.occluded_share
    if stage != "pretrain" and (ground_weight or vision_only_steps):
        raise ValueError("ground_weight and vision_only_steps apply to pretraining only")

    def get_batch(step: int, rank: int, world: int) -> dict:
        return training_batch(seed * world + rank, stage, step, batch, dcfg, occ, step < vision_only_steps)

    if stage in ("stage1", "stage2"):
        loss = vif_loss(vcfg)
    else:
        loss = pretrain_loss(ground_weight) if stage == "pretrain" else text_loss
    res = fit(model, loss, get_batch, tcfg, log=log)
    model.eval()
    return res.losses
