"""DAEDAL and the LLaDA fixed-length baseline: the two decoders of a masked-diffusion LM.

Both decoders only need a *model function*::

    model_fn(input_ids [B, T] long, attention_mask [B, T] bool) -> logits [B, T, V]

Layout of a batch: prompts are LEFT-padded to a common width ``P`` (``prompt_mask`` says which
prompt positions are real), the generation canvas of row ``b`` occupies ``[P, P + L_b)`` and the
rest of the row is right-padded with EOS and hidden from attention by the length-derived mask, as in
the official batch-inference code (``models/LLaDA_DAEDAL.py``, ``generate``).

Two differences from that code, each a flag with the official behaviour available:

* the official attention mask only cuts each row at ``P + L_b``, so the LEFT pads of the prompt are
  attended to and a row's decode depends on the width of its batch. Here the pads are hidden by
  default, so a row decodes exactly as it would alone (tested); ``attend_prompt_padding=True`` is the
  official behaviour;
* the classifier-free-guidance unconditional pass of the official code masks every prompt position,
  pads included; here it masks the real prompt tokens by default, and
  ``cfg_mask_prompt_padding=True`` is the official behaviour (with hidden pads the two agree).

Notation (paper §3): ``p_i = softmax(logits_i)``, ``a_i = argmax p_i``, confidence ``c_i = p_i[a_i]``
(softmax over the *raw* logits, also when sampling with a temperature).

* :func:`eos_confidence` -- the sequence-completion signal of the paper (both definitions).
* :func:`daedal_generate` -- Stage 1 (Initial Length Adjustment) + Stage 2 (Iterative Denoising
  with Mask Insertion), batched, per-row lengths.
* :func:`llada_fixed_generate` -- LLaDA's block semi-autoregressive, low-confidence-remasking
  decoder on a fixed canvas (optionally with DAEDAL's threshold fill: the "baseline + threshold
  fill" control).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

ModelFn = Callable[[Tensor, Tensor], Tensor]


# --------------------------------------------------------------------------------------------------
# Configuration and outputs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DaedalConfig:
    """DAEDAL hyper-parameters; defaults are the paper's and ``scripts/eval_LLaDA*_DAEDAL.sh``.

    initial_length: L_init, the short starting canvas length.
    max_length: L_max, the hard cap on the canvas length.
    block_length: semi-autoregressive block size of stage 2 (as in LLaDA).
    tau_high: τ_high, masked positions with c_i > τ_high are filled in parallel.
    tau_low: τ_low, masked positions with c_i < τ_low are expansion candidates.
    tau_eos: τ_eos, stage 1 stops growing once EOS confidence >= τ_eos.
    tau_expand: τ_expand, stage 2 may insert masks only while EOS confidence < τ_expand.
    expansion_factor: E_factor; stage 1 grows by E, a stage-2 insertion turns 1 mask into E.
    eos_window: W_eos, number of EOS predictions averaged by :func:`eos_confidence`.
    eos_anchor: fixed EOS tokens appended between the stages (None = W_eos // 2, official code; 0 = paper).
        The official code appends 16 for W_eos = 32; paper Algorithm 1 appends none.
    eos_conf_mode: EOS confidence: "code" (released code) or "window_mean" (paper text).
        "code": the last W_eos EOS-argmax positions, scanning backwards, sum / W_eos; "window_mean":
        mean p(EOS) over the last W_eos positions.
    block_local: fill and expansion candidates from the current block (True, code) or all masks (False, paper).
        True: fill set and expansion candidates come from the current semi-autoregressive block.
        False (paper Algorithm 1): from all masked positions.
    parallel_fill: fill every mask with c_i > τ_high, at least one (True, code and paper); False: one per step.
        False gives exactly one token per step (the LLaDA baseline's budget; a compute-matched
        variant, not in the paper).
    initial_length_adjustment: run stage 1 (False = the "stage 2 only" ablation).
    mask_insertion: allow stage-2 insertions (False = the "stage 1 only" ablation).
    temperature: Gumbel-max sampling temperature (0 = greedy argmax, the paper's setting).
    cfg_scale: classifier-free guidance scale (0 = off, the paper's setting).
    attend_prompt_padding: attend to the prompts' left pads (True, official code) or hide them (False).
        False (default): a padded row decodes exactly as the same row alone. True: the official
        attention mask, which only cuts each row after its canvas, so pads are visible.
    cfg_mask_prompt_padding: CFG's unconditional pass masks every prompt position (True, official) or only real ones.
        True: pads included, as the official code; False (default): only the real prompt tokens.
    """

    initial_length: int = 64
    max_length: int = 2048
    block_length: int = 32
    tau_high: float = 0.9
    tau_low: float = 0.1
    tau_eos: float = 0.5
    tau_expand: float = 0.9
    expansion_factor: int = 8
    eos_window: int = 32
    eos_anchor: int | None = None
    eos_conf_mode: Literal["code", "window_mean"] = "code"
    block_local: bool = True
    parallel_fill: bool = True
    initial_length_adjustment: bool = True
    mask_insertion: bool = True
    temperature: float = 0.0
    cfg_scale: float = 0.0
    attend_prompt_padding: bool = False
    cfg_mask_prompt_padding: bool = False

    def __post_init__(self) -> None:
        if self.initial_length < 1 or self.max_length < self.initial_length:
            raise ValueError(f"need 1 <= initial_length <= max_length, got {self.initial_length}, {self.max_length}")
        if self.block_length < 1 or self.expansion_factor < 1 or self.eos_window < 1:
            raise ValueError("block_length, expansion_factor and eos_window must be >= 1")
        if self.eos_anchor is not None and self.eos_anchor < 0:
            raise ValueError(f"eos_anchor must be >= 0, got {self.eos_anchor}")
        if self.eos_conf_mode not in ("code", "window_mean"):
            raise ValueError(f"eos_conf_mode must be 'code' or 'window_mean', got {self.eos_conf_mode!r}")
        if self.temperature < 0 or self.cfg_scale < 0:
            raise ValueError("temperature and cfg_scale must be >= 0")

    @property
    def anchor_length(self) -> int:
        """EOS tokens appended between the stages: ``eos_anchor``, or W_eos // 2 when it is None."""
        return self.eos_window // 2 if self.eos_anchor is None else self.eos_anchor


@dataclass
class GenerationOutput:
    """Result of a decoder call, one entry per batch row.

    sequences: the generated canvases ``x[P : P + L_b]`` (EOS padding included), variable lengths.
    lengths: final canvas length L_b (= N_tok of the row).
    stage1_lengths: L after stage 1, before the EOS anchor (fixed length for the baseline).
    n_insertions: number of stage-2 mask insertions.
    nfe: model forward passes this row needed (stage 1 + stage 2; CFG counts 2 per step).
    nfe_stage1: the stage-1 share of ``nfe``.
    stagnated: the row stopped because a step changed nothing (should never happen: the fallback
        fill guarantees progress).
    """

    sequences: list[Tensor]
    lengths: Tensor
    stage1_lengths: Tensor
    n_insertions: Tensor
    nfe: Tensor
    nfe_stage1: Tensor
    stagnated: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))

    def __len__(self) -> int:
        return len(self.sequences)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def left_pad_prompts(
    prompts: Sequence[Tensor] | Tensor, pad_id: int, prompt_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Prompts -> (ids [B, P], mask [B, P] bool), left-padded with ``pad_id``.

    A 2-D tensor is taken as already padded (``prompt_mask`` defaults to all ones); a list of 1-D
    tensors is left-padded to the longest prompt.
    """
    if isinstance(prompts, Tensor):
        if prompts.dim() != 2:
            raise ValueError(f"prompt tensor must be [B, P], got shape {tuple(prompts.shape)}")
        mask = torch.ones_like(prompts, dtype=torch.bool) if prompt_mask is None else prompt_mask.bool()
        if mask.shape != prompts.shape:
            raise ValueError("prompt_mask must have the prompt tensor's shape")
        return prompts.long(), mask
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    width = max(int(p.numel()) for p in prompts)
    dev = prompts[0].device
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=dev)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool, device=dev)
    for b, p in enumerate(prompts):
        n = int(p.numel())
        if n:
            ids[b, width - n :] = p.reshape(-1).long()
            mask[b, width - n :] = True
    return ids, mask


def prompt_masks(p_mask: Tensor, attend_padding: bool, cfg_mask_padding: bool) -> tuple[Tensor, Tensor]:
    """(attention over the prompt [B, P], prompt positions masked by CFG's unconditional pass [B, P]).

    ``attend_padding`` / ``cfg_mask_padding`` True: every prompt position (the official code);
    False: the real prompt tokens only (``p_mask``).
    """
    every = torch.ones_like(p_mask, dtype=torch.bool)
    return (every if attend_padding else p_mask), (every if cfg_mask_padding else p_mask)


def _forward(model_fn: ModelFn, x: Tensor, attn: Tensor, uncond: Tensor, mask_id: int, cfg_scale: float) -> Tensor:
    """Logits [B, T, V] (float32); with CFG: ``l_u + (s + 1)(l_c - l_u)``, where l_u sees the prompt
    positions ``uncond`` [B, P] replaced by MASK."""
    if cfg_scale > 0:
        un = x.clone()
        n_prompt = uncond.shape[1]
        un[:, :n_prompt] = torch.where(uncond, torch.full_like(un[:, :n_prompt], mask_id), un[:, :n_prompt])
        logits = model_fn(torch.cat([x, un]), torch.cat([attn, attn]))
        cond, uncond = logits.chunk(2)
        logits = uncond + (cfg_scale + 1.0) * (cond - uncond)
    else:
        logits = model_fn(x, attn)
    if logits.dim() != 3 or logits.shape[:2] != x.shape:
        raise ValueError(f"model_fn returned logits of shape {tuple(logits.shape)} for input {tuple(x.shape)}")
    logits = logits.float()
    if not torch.isfinite(logits).all():
        raise FloatingPointError("model_fn returned non-finite logits")
    return logits


def _sample(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """``a_i``: argmax, or LLaDA's Gumbel-max trick ``argmax exp(l) / (-log u)^T`` for T > 0."""
    if temperature == 0:
        return logits.argmax(-1)
    lg = logits.double()
    gdev = generator.device if generator is not None else lg.device
    u = torch.rand(lg.shape, dtype=torch.float64, generator=generator, device=gdev).to(lg.device)
    gumbel = (-torch.log(u.clamp_min(1e-300))) ** temperature
    return (lg.exp() / gumbel).argmax(-1)


def eos_confidence(
    logits: Tensor,
    gen_start: int,
    lengths: Tensor | Sequence[int],
    eos_id: int,
    window: int,
    mode: Literal["code", "window_mean"] = "code",
) -> Tensor:
    """The paper's sequence-completion signal, one number per row (in [0, 1]).

    Only the generation region ``[gen_start, gen_start + L_b)`` of each row is read.

    * ``mode="code"`` (released code, default): walk backwards from the last generated position;
      at each position whose argmax is EOS record ``p_i(EOS)``; skip the others (they count
      neither as 0 nor toward the window); stop after ``W`` recorded positions.
      ``conf = (sum of recorded p(EOS)) / W`` -- the divisor is always W.
    * ``mode="window_mean"`` (paper text): ``conf = mean_{i in last min(W, L) positions} p_i(EOS)``.

    logits: [B, T, V]; lengths: L_b per row; window: W_eos.
    """
    lengths = torch.as_tensor(lengths, dtype=torch.long, device=logits.device)
    B, T, _ = logits.shape
    gen = logits[:, gen_start:].float()
    Lmax = gen.shape[1]
    if bool((lengths > Lmax).any()) or bool((lengths < 0).any()):
        raise ValueError(f"lengths {lengths.tolist()} do not fit the {Lmax} generation positions")
    p_eos = gen.softmax(-1)[..., eos_id]  # [B, Lmax]
    j = torch.arange(Lmax, device=logits.device)[None]
    valid = j < lengths[:, None]
    if mode == "window_mean":
        in_win = valid & (j >= (lengths[:, None] - window))
        n = in_win.sum(1).clamp_min(1)
        return (p_eos * in_win).sum(1) / n
    if mode != "code":
        raise ValueError(f"mode must be 'code' or 'window_mean', got {mode!r}")
    is_eos = (gen.argmax(-1) == eos_id) & valid
    # rank from the end: number of EOS-argmax positions at or after i (within the row's region)
    rank = is_eos.flip(1).long().cumsum(1).flip(1)
    keep = is_eos & (rank <= window)
    return (p_eos * keep).sum(1) / window


# --------------------------------------------------------------------------------------------------
# LLaDA fixed-length baseline
# --------------------------------------------------------------------------------------------------


def get_num_transfer_tokens(mask_index: Tensor, steps: int) -> Tensor:
    """LLaDA's schedule: split each row's m masked positions over ``steps`` steps as evenly as
    possible, the remainder going to the first steps. mask_index [B, T] bool -> [B, steps] long."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    m = mask_index.sum(1, keepdim=True)
    base = m // steps
    rem = m % steps
    out = base.expand(-1, steps).clone()
    out += (torch.arange(steps, device=mask_index.device)[None] < rem).long()
    return out


@torch.no_grad()
def llada_fixed_generate(
    model_fn: ModelFn,
    prompts: Sequence[Tensor] | Tensor,
    gen_length: int,
    steps: int,
    block_length: int,
    mask_id: int,
    eos_id: int,
    *,
    prompt_mask: Tensor | None = None,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    remasking: Literal["low_confidence", "random"] = "low_confidence",
    tau_high: float | None = None,
    generator: torch.Generator | None = None,
    attend_prompt_padding: bool = False,
    cfg_mask_prompt_padding: bool = False,
) -> GenerationOutput:
    """LLaDA's fixed-length decoder (the paper's baseline).

    The canvas ``prompt ++ [MASK] * gen_length`` is split into ``gen_length / block_length`` blocks
    decoded left to right; each block gets ``steps / num_blocks`` steps and, at every step, the
    ``k_t`` most confident masked positions of the current block are revealed
    (``k_t`` from :func:`get_num_transfer_tokens`; positions after the block get confidence -inf).
    ``remasking="random"`` ranks by a uniform draw instead of ``c_i``.

    ``tau_high`` (not in LLaDA): the "baseline + threshold fill" control. Each step then reveals
    every masked position of the current block with ``c_i > tau_high`` and ``a_i != MASK``, or the
    single most confident one if none is, until the block is done (adaptive step count).

    ``attend_prompt_padding`` / ``cfg_mask_prompt_padding``: as in :class:`DaedalConfig` (True = the
    official ``models/LLaDA.py``, which calls the model without an attention mask and masks every
    prompt position for CFG).
    """
    if gen_length < 1 or block_length < 1 or gen_length % block_length:
        raise ValueError(f"gen_length={gen_length} must be a positive multiple of block_length={block_length}")
    num_blocks = gen_length // block_length
    if tau_high is None and (steps < num_blocks or steps % num_blocks):
        raise ValueError(f"steps={steps} must be a positive multiple of the number of blocks {num_blocks}")
    if remasking not in ("low_confidence", "random"):
        raise ValueError(f"unknown remasking {remasking!r}")
    p_ids, p_mask = left_pad_prompts(prompts, eos_id, prompt_mask)
    p_attn, uncond = prompt_masks(p_mask, attend_prompt_padding, cfg_mask_prompt_padding)
    B, P = p_ids.shape
    dev = p_ids.device
    x = torch.cat([p_ids, torch.full((B, gen_length), mask_id, dtype=torch.long, device=dev)], 1)
    attn = torch.cat([p_attn, torch.ones(B, gen_length, dtype=torch.bool, device=dev)], 1)
    nfe = torch.zeros(B, dtype=torch.long)
    per_call = 2 if cfg_scale > 0 else 1
    for nb in range(num_blocks):
        lo, hi = P + nb * block_length, P + (nb + 1) * block_length
        if tau_high is None:
            sched = get_num_transfer_tokens(x[:, lo:hi] == mask_id, steps // num_blocks)
            n_steps = sched.shape[1]
        else:
            n_steps = block_length  # upper bound: at least one token per step
        for s in range(n_steps):
            is_mask = x == mask_id
            if not bool(is_mask[:, lo:hi].any()):
                break
            logits = _forward(model_fn, x, attn, uncond, mask_id, cfg_scale)
            nfe += per_call * is_mask[:, lo:hi].any(1).long().cpu()  # passes this row needed
            a = _sample(logits, temperature, generator)
            probs = logits.softmax(-1)
            if remasking == "low_confidence":
                conf = probs.gather(-1, a[..., None]).squeeze(-1)
            else:
                gdev = generator.device if generator is not None else dev
                conf = torch.rand(a.shape, generator=generator, device=gdev).to(dev)
            conf[:, hi:] = float("-inf")
            a = torch.where(is_mask, a, x)
            conf = torch.where(is_mask, conf, torch.full_like(conf, float("-inf")))
            transfer = torch.zeros_like(is_mask)
            if tau_high is None:
                for b in range(B):
                    k = int(sched[b, s])
                    if k > 0:
                        transfer[b, conf[b].topk(k).indices] = True
            else:
                ok = is_mask & (a != mask_id)
                ok[:, :lo] = False
                ok[:, hi:] = False
                transfer = ok & (conf > tau_high)
                for b in range(B):
                    if not bool(is_mask[b, lo:hi].any()) or bool(transfer[b].any()):
                        continue
                    if bool(ok[b].any()):
                        transfer[b, torch.where(ok[b], conf[b], torch.full_like(conf[b], -1.0)).argmax()] = True
                    else:  # every prediction in the block is MASK: drop that logit, take the best
                        blk = is_mask[b, lo:hi]
                        pos, tok = _best_non_mask(logits[b, lo:hi][blk], mask_id)
                        idx = lo + int(blk.nonzero()[pos])
                        a[b, idx] = tok
                        transfer[b, idx] = True
            x = torch.where(transfer, a, x)
    seqs = [x[b, P:].cpu() for b in range(B)]
    full = torch.full((B,), gen_length, dtype=torch.long)
    return GenerationOutput(
        seqs,
        full.clone(),
        full.clone(),
        torch.zeros(B, dtype=torch.long),
        nfe,
        torch.zeros(B, dtype=torch.long),
        torch.zeros(B, dtype=torch.bool),
    )


def _best_non_mask(logits: Tensor, mask_id: int) -> tuple[int, int]:
    """Guard of the official code: drop the MASK logit, re-softmax, return the best (position, token)."""
    lg = logits.clone()
    lg[..., mask_id] = float("-inf")
    conf, tok = lg.softmax(-1).max(-1)
    pos = int(conf.argmax())
    return pos, int(tok[pos])


# --------------------------------------------------------------------------------------------------
# DAEDAL
# --------------------------------------------------------------------------------------------------


def _canvas_batch(p_ids: Tensor, p_mask: Tensor, rows: Sequence[Tensor], eos_id: int) -> tuple[Tensor, Tensor]:
    """prompt ++ row canvas, right-padded with EOS to the longest row; attention hides the padding."""
    B, P = p_ids.shape
    Lmax = max(int(r.numel()) for r in rows)
    gen = torch.full((B, Lmax), eos_id, dtype=torch.long, device=p_ids.device)
    gmask = torch.zeros((B, Lmax), dtype=torch.bool, device=p_ids.device)
    for b, r in enumerate(rows):
        gen[b, : r.numel()] = r
        gmask[b, : r.numel()] = True
    return torch.cat([p_ids, gen], 1), torch.cat([p_mask, gmask], 1)


@torch.no_grad()
def initial_length_adjustment(
    model_fn: ModelFn, p_ids: Tensor, p_mask: Tensor, mask_id: int, eos_id: int, cfg: DaedalConfig
) -> tuple[Tensor, Tensor]:
    """Stage 1: grow each all-mask canvas by E_factor at its end until it is "long enough".

    ::

        L = L_init
        while L < L_max:
            conf = eos_confidence(f(prompt ++ [MASK] * L))     # one full forward pass
            if conf >= τ_eos: break
            L = min(L + E_factor, L_max)

    Nothing is decoded. Rows grow independently; a row that stopped keeps its length (and stops
    counting passes). Returns (L per row, passes per row).
    """
    B, P = p_ids.shape
    p_attn, uncond = prompt_masks(p_mask, cfg.attend_prompt_padding, cfg.cfg_mask_prompt_padding)
    L = torch.full((B,), cfg.initial_length, dtype=torch.long)
    nfe = torch.zeros(B, dtype=torch.long)
    active = L < cfg.max_length
    per_call = 2 if cfg.cfg_scale > 0 else 1
    while bool(active.any()):
        rows = [torch.full((int(L[b]),), mask_id, dtype=torch.long, device=p_ids.device) for b in range(B)]
        x, attn = _canvas_batch(p_ids, p_attn, rows, eos_id)
        logits = _forward(model_fn, x, attn, uncond, mask_id, cfg.cfg_scale)
        nfe += per_call * active.long()
        conf = eos_confidence(logits, P, L, eos_id, cfg.eos_window, cfg.eos_conf_mode).cpu()
        grow = active & (conf < cfg.tau_eos)
        L = torch.where(grow, (L + cfg.expansion_factor).clamp(max=cfg.max_length), L)
        active = grow & (L < cfg.max_length)
    return L, nfe


def insert_masks(row: Tensor, pos: int, expansion_factor: int, max_length: int, mask_id: int) -> Tensor:
    """Stage-2 mask insertion: the (still masked) position ``pos`` becomes ``E_factor`` masks.

    Tokens before ``pos`` are unchanged, later tokens shift right by E_factor - 1, and the result is
    truncated to ``max_length`` (the tail, even the EOS anchor or content, is dropped at the cap).
    """
    if int(row[pos]) != mask_id:
        raise ValueError(f"insertion point {pos} is not a masked position")
    masks = torch.full((expansion_factor,), mask_id, dtype=row.dtype, device=row.device)
    new = torch.cat([row[:pos], masks, row[pos + 1 :]])
    return new[:max_length]


@torch.no_grad()
def daedal_generate(
    model_fn: ModelFn,
    prompts: Sequence[Tensor] | Tensor,
    mask_id: int,
    eos_id: int,
    cfg: DaedalConfig = DaedalConfig(),
    *,
    prompt_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> GenerationOutput:
    """DAEDAL: variable-length denoising (paper Algorithm 1, as in the released code).

    Stage 1, :func:`initial_length_adjustment`, picks L. Between the stages the canvas becomes
    ``[MASK] * L ++ [EOS] * eos_anchor`` (truncated at L_max). Stage 2 then loops, per row::

        logits = f(x);  a = argmax;  c_i = p_i[a_i];  conf_eos = eos_confidence(logits)
        Blk  = masked positions of the current block [cur, cur + block)   (all masked if not block_local)
        fill = {i in Blk : c_i > τ_high, a_i != MASK}   or, if empty, {argmax_{i in Blk} c_i}
        cand = {i in Blk \\ fill : c_i < τ_low}
        if conf_eos < τ_expand and L < L_max and cand:     # at most ONE insertion per step
            i* = argmin_{cand} c_i;  x[i*] -> [MASK] * E_factor;  L = min(L + E_factor - 1, L_max)
        cur advances by whole blocks past mask-free blocks; the row ends when cur >= L

    A row that reaches L_max is in "denoise-only" mode (no more insertions). A step that changes
    nothing stops the row (``stagnated``; the fallback fill makes this unreachable in practice).
    """
    p_ids, p_mask = left_pad_prompts(prompts, eos_id, prompt_mask)
    B, P = p_ids.shape
    per_call = 2 if cfg.cfg_scale > 0 else 1

    # ---- Stage 1: initial length adjustment ----
    if cfg.initial_length_adjustment:
        L1, nfe1 = initial_length_adjustment(model_fn, p_ids, p_mask, mask_id, eos_id, cfg)
    else:
        L1, nfe1 = torch.full((B,), cfg.initial_length, dtype=torch.long), torch.zeros(B, dtype=torch.long)

    # ---- between the stages: the EOS anchor of the released code ----
    dev = p_ids.device
    rows = [
        torch.cat(
            [
                torch.full((int(L1[b]),), mask_id, dtype=torch.long, device=dev),
                torch.full((cfg.anchor_length,), eos_id, dtype=torch.long, device=dev),
            ]
        )[: cfg.max_length]
        for b in range(B)
    ]

    # ---- Stage 2: iterative denoising with mask insertion ----
    cur = [0] * B
    n_ins = torch.zeros(B, dtype=torch.long)
    nfe2 = torch.zeros(B, dtype=torch.long)
    stagnated = torch.zeros(B, dtype=torch.bool)
    denoise_only = [False] * B
    active = [bool((r == mask_id).any()) for r in rows]
    for b in range(B):
        cur[b] = _advance(rows[b], 0, cfg.block_length, mask_id)
    p_attn, uncond = prompt_masks(p_mask, cfg.attend_prompt_padding, cfg.cfg_mask_prompt_padding)
    while any(active):
        x, attn = _canvas_batch(p_ids, p_attn, rows, eos_id)
        logits = _forward(model_fn, x, attn, uncond, mask_id, cfg.cfg_scale)
        lengths = torch.tensor([r.numel() for r in rows], device=dev)
        a_all = _sample(logits, cfg.temperature, generator)[:, P:]
        c_all = logits[:, P:].softmax(-1).gather(-1, a_all[..., None]).squeeze(-1)
        ceos = eos_confidence(logits, P, lengths, eos_id, cfg.eos_window, cfg.eos_conf_mode)
        for b in range(B):
            if not active[b]:
                continue
            nfe2[b] += per_call
            row = rows[b]
            if row.numel() >= cfg.max_length:
                denoise_only[b] = True
            new, _, inserted = denoise_step(
                row,
                cur[b],
                a_all[b, : row.numel()],
                c_all[b, : row.numel()],
                float(ceos[b]),
                cfg,
                mask_id,
                denoise_only[b],
                logits[b, P : P + row.numel()],
            )
            n_ins[b] += int(inserted is not None)
            if new.numel() == row.numel() and torch.equal(new, row):
                stagnated[b] = True
                active[b] = False
                continue
            rows[b] = new
            cur[b] = _advance(new, cur[b], cfg.block_length, mask_id) if cfg.block_local else 0
            if cur[b] >= new.numel() or not bool((new == mask_id).any()):
                active[b] = False
    lengths = torch.tensor([r.numel() for r in rows], dtype=torch.long)
    return GenerationOutput([r.cpu() for r in rows], lengths, L1, n_ins, nfe1 + nfe2, nfe1, stagnated)


def denoise_step(
    row: Tensor,
    cur: int,
    a: Tensor,
    c: Tensor,
    eos_conf: float,
    cfg: DaedalConfig,
    mask_id: int,
    denoise_only: bool = False,
    logits: Tensor | None = None,
) -> tuple[Tensor, Tensor, int | None]:
    """One stage-2 step of one row: threshold fill, then at most one mask insertion.

    row: the canvas [L]; cur: current block start; a, c: predictions a_i and confidences c_i [L];
    eos_conf: this step's :func:`eos_confidence`; logits [L, V]: only used by the MASK guard (when
    every prediction in the block is MASK). Returns (new canvas, filled positions [L] bool of the
    OLD canvas, insertion position in the old canvas or None).
    """
    L = row.numel()
    lo, hi = (cur, min(cur + cfg.block_length, L)) if cfg.block_local else (0, L)
    blk = torch.zeros(L, dtype=torch.bool, device=row.device)
    blk[lo:hi] = row[lo:hi] == mask_id
    ok = blk & (a != mask_id)
    fill = ok & (c > cfg.tau_high) if cfg.parallel_fill else torch.zeros_like(blk)
    a = a.clone()
    if not bool(fill.any()) and bool(blk.any()):
        if bool(ok.any()):  # fallback: always decode at least one token
            fill[torch.where(ok, c, torch.full_like(c, -1.0)).argmax()] = True
        else:  # every prediction is MASK: drop the MASK logit, re-softmax, take the best (pos, token)
            if logits is None:
                raise ValueError("every prediction in the block is MASK and no logits were given")
            pos, tok = _best_non_mask(logits[blk], mask_id)
            idx = int(blk.nonzero()[pos])
            a[idx] = tok
            fill[idx] = True
    new = torch.where(fill, a, row)
    cand = blk & ~fill & (c < cfg.tau_low)
    inserted = None
    if (
        cfg.mask_insertion
        and not denoise_only
        and L < cfg.max_length
        and eos_conf < cfg.tau_expand
        and bool(cand.any())
    ):
        inserted = int(torch.where(cand, c, torch.full_like(c, float("inf"))).argmin())
        new = insert_masks(new, inserted, cfg.expansion_factor, cfg.max_length, mask_id)
    return new, fill, inserted


def _advance(row: Tensor, cur: int, block: int, mask_id: int) -> int:
    """Move the block start past every block window that holds no MASK."""
    L = row.numel()
    while cur < L and not bool((row[cur : min(cur + block, L)] == mask_id).any()):
        cur += block
    return cur
