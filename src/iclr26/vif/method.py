"""ViF's method, independent of any model: attention reallocation, token morphology, relay selection,
the relay block f, relay position ids and the Hallucination Snowballing score.

Notation (paper Sec. 3-4): an agent's sequence is ``[system][V][R̂][I][output]``; ``A_l ∈ R^{T×T}`` is
the post-softmax attention of layer l (per head); ``c_j(l) = Σ_i A_l(i, j)`` is vision token j's
layer curve (Eq. 5-6, column mass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

# token morphology classes (App. B.1)
OTHER, INACTIVE, RISE, FALL, UNIMODAL = 0, 1, 2, 3, 4
MORPHOLOGY = {OTHER: "random", INACTIVE: "inactive", RISE: "rise", FALL: "fall", UNIMODAL: "unimodal"}


# --------------------------------------------------------------------------------------------------
# Attention reallocation (Sec. 4.3)
# --------------------------------------------------------------------------------------------------


def temperature(p: Tensor, tau: float) -> Tensor:
    """Sharpen post-softmax rows: ``p_j^{1/τ} / Σ_k p_k^{1/τ}`` = ``softmax(S/τ)`` (masked keys stay 0)."""
    if tau == 1.0:
        return p
    q = p.clamp_min(0.0).pow(1.0 / tau)
    return q / q.sum(-1, keepdim=True).clamp_min(1e-30)


def _keys(mask: Tensor, p: Tensor) -> Tensor:
    """Key mask [B, Tk] (or [Tk]) -> float [B, 1, 1, Tk] broadcastable to p [B, H, Tq, Tk]."""
    m = mask.to(device=p.device)
    if m.dim() == 1:
        m = m[None]
    return m[:, None, None, :].to(p.dtype)


def reallocate(
    p: Tensor, collect: Tensor, receive: Tensor, alpha: float, rule: str = "proportional"
) -> tuple[Tensor, Tensor, Tensor]:
    """Move α of each row's mass on ``collect`` keys to ``receive`` keys (Sec. 4.3).

    .. math::

        C_i = α Σ_{j ∈ collect} A(i,j),\\quad A'(i,j) = (1-α) A(i,j)\\ (j ∈ collect),\\quad
        A'(i,j) = A(i,j) + C_i \\frac{A(i,j)}{Σ_{k ∈ receive} A(i,k)}\\ (j ∈ receive)

    ``rule="uniform"`` (official utils/reallocation.py) gives every visible receiver ``C_i / |receive_i|``.
    A row with no receiver mass (proportional) or no visible receiver (uniform) is left unchanged, so
    rows always sum to what they summed to before. Returns (new p, collected C [B,H,Tq], moved [B,H,Tq]).
    """
    if rule not in ("proportional", "uniform"):
        raise ValueError(f"rule must be 'proportional' or 'uniform', got {rule!r}")
    c_m, r_m = _keys(collect, p), _keys(receive, p)
    if bool(((c_m > 0) & (r_m > 0)).any()):
        raise ValueError("collect and receive key sets overlap")
    if alpha == 0.0:
        zero = p.new_zeros(p.shape[:-1])
        return p, zero, zero
    collected = alpha * (p * c_m).sum(-1)  # C_i
    if rule == "proportional":
        weight = p * r_m
    else:
        weight = r_m * (p > 0).to(p.dtype)  # visible receivers (causal / padding keys have p = 0)
    total = weight.sum(-1)
    ok = (total > 0).to(p.dtype)  # rows that can receive
    share = weight / total.clamp_min(1e-30)[..., None]
    moved = collected * ok
    new = p - alpha * p * c_m * ok[..., None] + moved[..., None] * share
    return new, collected * ok, moved


@dataclass
class ReallocStats:
    """Checks accumulated over every reallocated forward (claim C1).

    max_row_err: max |Σ_j Â(i,j) - 1| over reallocated rows. max_move_err: over rows where mass moved,
    max of |gained by receivers - α·collect mass| and |removed from collect keys - α·collect mass|.
    rows: rows checked.
    """

    max_row_err: float = 0.0
    max_move_err: float = 0.0
    rows: int = 0

    def update(self, old: Tensor, new: Tensor, collect: Tensor, receive: Tensor, alpha: float) -> None:
        """old/new: attention before/after one reallocation; collect/receive: key masks [B, T]."""
        sums = new.sum(-1)
        live = sums > 0.5  # rows that attend to anything at all
        if live.any():
            self.max_row_err = max(self.max_row_err, float((sums[live] - 1).abs().max()))
        c_m, r_m = _keys(collect, old), _keys(receive, old)
        gained = ((new - old) * r_m).sum(-1)
        removed = ((old - new) * c_m).sum(-1)
        ok = gained.abs() > 0  # rows where a move happened
        if ok.any():
            want = alpha * (old * c_m).sum(-1)
            err = torch.maximum((gained - want).abs(), (removed - want).abs())[ok]
            self.max_move_err = max(self.max_move_err, float(err.max()))
        self.rows += int(live.sum())


@dataclass
class Reallocation:
    """ViF's post-softmax attention hook for one batch (Sec. 4.3).

    Middle band: temperature τ, then α₁ of the (inactive vision ∪ instruction) mass goes to active vision
    (which includes relay tokens; ``mid_receivers="active_vision"``, paper) or to every other visible key,
    system and output tokens included (``"non_collected"``, official ``reallocate_middle``). Deep band: α₂
    of the vision (∪ relay) mass goes to the instruction tokens. Shallow band: unchanged. Masks are [B, T]
    bools over key positions.
    """

    middle: tuple[int, ...]
    deep: tuple[int, ...]
    vision: Tensor
    active: Tensor
    instruction: Tensor
    tau: float = 0.8
    alpha_mid: float = 0.1
    alpha_deep: float = 0.3
    rule: str = "proportional"
    tau_bands: str = "middle"
    stats: ReallocStats | None = field(default=None)
    mid_receivers: str = "active_vision"

    def __post_init__(self) -> None:
        if self.mid_receivers not in ("active_vision", "non_collected"):
            raise ValueError(f"mid_receivers must be 'active_vision' or 'non_collected', got {self.mid_receivers!r}")

    @classmethod
    def from_config(
        cls,
        vcfg,
        middle: tuple[int, ...],
        deep: tuple[int, ...],
        vision: Tensor,
        active: Tensor,
        instruction: Tensor,
        stats: ReallocStats | None = None,
    ) -> Reallocation:
        """The hook with every method setting taken from a :class:`~iclr26.vif.config.ViFConfig`."""
        return cls(
            middle,
            deep,
            vision,
            active,
            instruction,
            vcfg.tau,
            vcfg.alpha_mid,
            vcfg.alpha_deep,
            vcfg.redistribute,
            vcfg.tau_bands,
            stats,
            vcfg.mid_receivers,
        )

    def __call__(self, layer: int, p: Tensor) -> Tensor:
        if layer in self.middle:
            p = temperature(p, self.tau)
            collect = (self.vision & ~self.active) | self.instruction
            # official: every key outside the collect set receives (masked / future keys have p = 0 and
            # are skipped by both rules, so causality holds)
            receive = self.active if self.mid_receivers == "active_vision" else ~collect
            new, _, _ = reallocate(p, collect, receive, self.alpha_mid, self.rule)
            if self.stats is not None:
                self.stats.update(p, new, collect, receive, self.alpha_mid)
            return new
        if layer in self.deep:
            if self.tau_bands == "middle_deep":
                p = temperature(p, self.tau)
            new, _, _ = reallocate(p, self.vision, self.instruction, self.alpha_deep, self.rule)
            if self.stats is not None:
                self.stats.update(p, new, self.vision, self.instruction, self.alpha_deep)
            return new
        return p


@dataclass
class DropKeys:
    """Post-softmax hook that blocks attention to chosen keys in chosen layers and renormalises (Table 1)."""

    layers: tuple[int, ...]
    keys: Tensor  # [B, T] bool

    def __call__(self, layer: int, p: Tensor) -> Tensor:
        if layer not in self.layers:
            return p
        q = p * (1 - _keys(self.keys, p))
        return q / q.sum(-1, keepdim=True).clamp_min(1e-30)


# --------------------------------------------------------------------------------------------------
# Token morphology and relay selection (App. B.1)
# --------------------------------------------------------------------------------------------------


def layer_curves(attentions: list[Tensor], cols: slice | Tensor, rows: Tensor | None = None) -> Tensor:
    """``c_j(l) = Σ_i A_l(i, j)`` averaged over heads, for key columns ``cols``; -> [B, m, L].

    rows: optional bool [B, T] of query rows to sum over (default all rows).
    """
    out = []
    for a in attentions:
        a = a.mean(1)  # heads -> [B, Tq, Tk]
        if rows is not None:
            a = a * rows[:, :, None].to(a.dtype)
        out.append(a.sum(1)[:, cols])
    return torch.stack(out, -1)


@dataclass
class Morphology:
    """Per vision token: ``kind`` (OTHER/INACTIVE/RISE/FALL/UNIMODAL), ``salience`` and ``peak``; [B, m]."""

    kind: Tensor
    salience: Tensor
    peak: Tensor


def classify(
    curves: Tensor, middle: tuple[int, ...], omega: float = 0.3, inactive_var: float = 0.2, mono_tol: float = 0.05
) -> Morphology:
    """Classify vision-token layer curves [B, m, L] (App. B.1; operational definitions are ours).

    * inactive: below the lower quartile of the example's vision tokens in every layer, and
      ``(max_l c - min_l c) / max_l c <= inactive_var``;
    * unimodal: argmax in the middle band, non-decreasing before and non-increasing after the peak
      (violations up to ``mono_tol · peak``), and salience ``(peak - max(min_left, min_right)) / peak``
      (the normalised prominence, as scipy.signal.peak_prominences) at least ω;
    * rise: non-decreasing with its peak in the last layer; fall: non-increasing with its peak in layer 0;
    * other ("random"): everything else.
    """
    B, m, L = curves.shape
    peak, arg = curves.max(-1)
    safe = peak.clamp_min(1e-30)
    q25 = torch.quantile(curves, 0.25, dim=1, keepdim=True)  # [B, 1, L] over vision tokens
    flat = (peak - curves.min(-1).values) / safe <= inactive_var
    inactive = (curves <= q25).all(-1) & flat
    diff = curves[..., 1:] - curves[..., :-1]  # [B, m, L-1]
    tol = mono_tol * peak[..., None]
    step = torch.arange(L - 1, device=curves.device)
    before = step[None, None] < arg[..., None]  # steps leading up to the peak
    up_ok = torch.where(before, diff >= -tol, diff <= tol).all(-1)
    idx = torch.arange(L, device=curves.device)[None, None]
    big = torch.finfo(curves.dtype).max
    left_min = torch.where(idx <= arg[..., None], curves, big).min(-1).values
    right_min = torch.where(idx >= arg[..., None], curves, big).min(-1).values
    salience = (peak - torch.maximum(left_min, right_min)) / safe
    mid = torch.zeros(L, dtype=torch.bool, device=curves.device)
    mid[list(middle)] = True
    unimodal = mid[arg] & up_ok & (salience >= omega) & ~inactive
    rise = (diff >= -tol).all(-1) & (arg == L - 1) & ~inactive & ~unimodal
    fall = (diff <= tol).all(-1) & (arg == 0) & ~inactive & ~unimodal & ~rise
    kind = torch.full((B, m), OTHER, dtype=torch.long, device=curves.device)
    kind[inactive], kind[rise], kind[fall], kind[unimodal] = INACTIVE, RISE, FALL, UNIMODAL
    return Morphology(kind, salience, peak)


def select_relay(
    morph: Morphology, n: int, generator: torch.Generator | None = None, random: bool = False
) -> tuple[Tensor, Tensor]:
    """Relay set R ⊂ V: the top-n unimodal tokens by salience × peak (Sec. 4.2).

    Fewer than n unimodal tokens: all of them (possibly none). Returns (indices [B, n], valid [B, n]);
    invalid slots point at token 0 and must be masked. ``random=True`` (ablation) picks n tokens
    uniformly at random among all vision tokens, all valid.
    """
    B, m = morph.kind.shape
    n_eff = min(n, m)
    if random:
        noise = torch.rand(B, m, generator=generator, device=morph.kind.device)
        idx = noise.topk(n_eff, -1).indices
        return idx, torch.ones_like(idx, dtype=torch.bool)
    score = torch.where(morph.kind == UNIMODAL, morph.salience * morph.peak, torch.full_like(morph.peak, -1.0))
    top = score.topk(n_eff, -1)
    valid = top.values >= 0
    return torch.where(valid, top.indices, torch.zeros_like(top.indices)), valid


def keynorm_signal(key_norms: Tensor, middle: tuple[int, ...]) -> Tensor:
    """One key norm per vision token: ``‖K_j‖`` [B, m, L] averaged over the middle-band layers -> [B, m]."""
    if key_norms.dim() != 3:
        raise ValueError(f"key_norms must be [B, m, L], got shape {tuple(key_norms.shape)}")
    return key_norms[..., list(middle)].mean(-1)


def select_relay_keynorm(signal: Tensor, ratio: float = 0.02) -> tuple[Tensor, Tensor]:
    """Official relay rule (utils/selection.py): the top-k vision tokens by one aggregated key norm,
    ``k = max(1, int(ratio · m))``, no morphology filter (the official z-score and sigmoid are monotone,
    so they do not change the ranking). signal [B, m] -> (indices [B, k], valid [B, k], all True)."""
    if signal.dim() != 2:
        raise ValueError(f"signal must be [B, m], got shape {tuple(signal.shape)}")
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    m = signal.shape[1]
    k = min(m, max(1, int(ratio * m)))
    idx = signal.topk(k, -1).indices
    return idx, torch.ones_like(idx, dtype=torch.bool)


# --------------------------------------------------------------------------------------------------
# Visual flow: the relay block f and relay positions (Sec. 4.2, Eq. for R̂)
# --------------------------------------------------------------------------------------------------


class RelayBlock(nn.Module):
    """``R̂ = f(R ⊕ I)[:n]``: a light pre-norm Transformer encoder (GELU, MLP ratio 4, no dropout, no
    positional encoding), the only new parameterised module (official models/vif_block.py shape)."""

    def __init__(self, d_model: int, n_layers: int = 2, n_heads: int = 8):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model,
            n_heads,
            dim_feedforward=4 * d_model,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(
        self,
        relay: Tensor,
        instruction: Tensor,
        relay_valid: Tensor | None = None,
        instruction_valid: Tensor | None = None,
    ) -> Tensor:
        """relay R [B, n, d], instruction I [B, k, d] -> R̂ [B, n, d]; ``*_valid`` [B, ·] masks padding."""
        n = relay.shape[1]
        if n == 0:
            return relay
        x = torch.cat([relay, instruction], 1)
        pad = None
        if relay_valid is not None or instruction_valid is not None:
            rv = (
                relay_valid
                if relay_valid is not None
                else torch.ones(relay.shape[:2], dtype=torch.bool, device=relay.device)
            )
            iv = (
                instruction_valid
                if instruction_valid is not None
                else torch.ones(instruction.shape[:2], dtype=torch.bool, device=relay.device)
            )
            keep = torch.cat([rv, iv], 1)
            keep = keep | ~keep.any(1, keepdim=True)  # a row with nothing valid: attend to all (then masked)
            pad = ~keep
        return self.encoder(x, src_key_padding_mask=pad)[:, :n]


def relay_positions(src_positions: Tensor, idx: Tensor) -> Tensor:
    """Position ids of relay tokens = the source patches' ids in the previous agent (Sec. 4.2).

    1-D RoPE: ``src_positions`` [B, m] -> [B, n]. M-RoPE (Qwen2-VL): ``src_positions`` [3, B, m]
    (t, h, w) -> [3, B, n], the triples copied.
    """
    if src_positions.dim() == 2:
        return src_positions.gather(1, idx)
    if src_positions.dim() == 3:
        return src_positions.gather(2, idx[None].expand(src_positions.shape[0], -1, -1))
    raise ValueError(f"src_positions must be [B, m] or [3, B, m], got shape {tuple(src_positions.shape)}")


# --------------------------------------------------------------------------------------------------
# Hallucination Snowballing score (Eq. 7)
# --------------------------------------------------------------------------------------------------


def hs_term(d: float, D: float, N: int, h: float = 100.0) -> float:
    """One hallucination's contribution ``σ(d - D/2) · h / N``."""
    return h / N / (1.0 + math.exp(-(d - D / 2)))


def hs_score(correct: Tensor, h: float = 100.0) -> Tensor:
    """Per-episode ``HS = (1/N) Σ_i σ(d_i - D/2) h_i`` from correct [E, T] answers (bool).

    A hallucination starts at a wrong turn whose predecessor was right (or turn 1); d_i is the number of
    later agents that repeat it (the rest of its run of wrong answers); D = T - 1 later agents; N = T.
    """
    wrong = ~correct.bool()
    E, T = wrong.shape
    # run length to the right: r_t = wrong_t * (1 + r_{t+1})
    run = torch.zeros(E, T + 1, dtype=torch.float32)
    for t in range(T - 1, -1, -1):
        run[:, t] = wrong[:, t].float() * (1.0 + run[:, t + 1])
    prev_right = torch.cat([torch.ones(E, 1, dtype=torch.bool), correct.bool()[:, :-1]], 1)
    start = wrong & prev_right
    d = run[:, :T] - 1.0
    D = float(T - 1)
    w = torch.sigmoid(d - D / 2) * h / T
    return (w * start.float()).sum(1)
