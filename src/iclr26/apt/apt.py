"""APT's prompt modules: :class:`APTEmbedding` (core modulation), :class:`CGP` and :func:`apt_regularizers`.

Core modulation (Sec. 3.1): for a concept ``c`` with frozen embedding ``e_static(c) ∈ R^D`` and visual
context ``v``::

    ẽ(c) = f_θ( [ p̄(c) ; e_static(c) ; φ(v) ] ),   p̄(c) = mean_t P(c)_t,   P(c) ∈ R^{L×D}

``φ`` is a linear projector (visual_dim -> D), ``f_θ`` a 2-layer ReLU MLP (3D -> hidden -> D). Only P, φ and
f_θ train; the table is a buffer (never a parameter). Prompts per class (paper) or one shared prompt per
role (official ``adpative_modeling.py``, ``CoreModule``). Role ``"detection"`` uses the detection prompt
P_d; ``"subject"``, ``"object"`` and ``"general"`` use the relation prompt P_r (``CoreModule.forward``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["APTEmbedding", "CGP", "ContextualEmbedding", "RegWeights", "added_parameters", "apt_regularizers"]

Role = Literal["detection", "subject", "object", "general"]
ROLES: tuple[str, ...] = ("detection", "subject", "object", "general")


def _check_table(table: Tensor | nn.Embedding | nn.Parameter, freeze: bool) -> Tensor:
    weight = table.weight if isinstance(table, nn.Embedding) else table
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise ValueError(
            f"static table must be a 2-D tensor [num_classes, D], got {type(weight).__name__}"
            f" of shape {tuple(getattr(weight, 'shape', ()))}"
        )
    if weight.requires_grad and not freeze:
        raise ValueError(
            "static table is trainable (requires_grad=True); APT keeps it frozen: pass freeze=True "
            "to copy it as a frozen buffer"
        )
    out = weight.detach().clone().float()
    if not torch.isfinite(out).all():
        raise ValueError(f"static table [{out.shape[0]}, {out.shape[1]}] holds non-finite values")
    return out


def _check_ids(ids: Tensor, n: int) -> Tensor:
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"class ids must be an integer tensor, got {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise IndexError(f"class ids must lie in [0, {n}), got range [{int(ids.min())}, {int(ids.max())}]")
    return ids.long()


def _check_visual(visual: Tensor, width: int, lead: tuple[int, ...] | None = None) -> None:
    if visual.shape[-1] != width:
        want = (*lead, width) if lead is not None else ("...", width)
        raise ValueError(f"visual features must have shape {want}, got {tuple(visual.shape)}")
    if lead is not None and tuple(visual.shape[:-1]) != lead:
        raise ValueError(f"visual features must have shape {(*lead, width)}, got {tuple(visual.shape)}")


class APTEmbedding(nn.Module):
    """A frozen embedding table modulated by learnable prompts and visual context (Sec. 3.1).

    Args:
        static_table: [C, D] frozen word vectors (GloVe, MiniLM, CLIP-text...), a tensor, nn.Parameter
            or nn.Embedding. A trainable one is refused unless ``freeze=True`` (then copied, frozen).
        visual_dim: width of the visual context ``v`` (ROI, union or pair feature).
        prompt_len (L): prompt tokens per class (paper L_d = L_r = 6; official code 5).
        per_class: one prompt per class and role (paper) or one shared prompt per role (official code).
        hidden: hidden width of f_θ (official code 512).
        roles: which prompt sets exist: ``"detection"`` (P_d) and/or ``"relation"`` (P_r).
        freeze: accept a trainable table by copying it into a frozen buffer.
    """

    def __init__(
        self,
        static_table: Tensor | nn.Embedding | nn.Parameter,
        visual_dim: int,
        *,
        prompt_len: int = 6,
        per_class: bool = True,
        hidden: int = 512,
        roles: Sequence[str] = ("detection", "relation"),
        freeze: bool = False,
    ) -> None:
        super().__init__()
        table = _check_table(static_table, freeze)
        if visual_dim < 1 or prompt_len < 1 or hidden < 1:
            raise ValueError("visual_dim, prompt_len and hidden must be >= 1")
        bad = [r for r in roles if r not in ("detection", "relation")]
        if bad or not roles:
            raise ValueError(f"roles must be a non-empty subset of ('detection', 'relation'), got {tuple(roles)}")
        self.register_buffer("static", table)
        self.num_classes, self.dim = table.shape
        self.visual_dim, self.prompt_len, self.per_class, self.hidden = visual_dim, prompt_len, per_class, hidden
        shape = (self.num_classes, prompt_len, self.dim) if per_class else (prompt_len, self.dim)
        self.prompt_det = nn.Parameter(torch.empty(shape)) if "detection" in roles else None
        self.prompt_rel = nn.Parameter(torch.empty(shape)) if "relation" in roles else None
        self.visual_proj = nn.Linear(visual_dim, self.dim)  # φ
        self.fusion = nn.Sequential(nn.Linear(3 * self.dim, hidden), nn.ReLU(), nn.Linear(hidden, self.dim))  # f_θ
        for p in (self.prompt_det, self.prompt_rel):
            if p is not None:
                # Xavier-uniform over the [L, D] token matrix (official CoreModule._init_weights).
                bound = math.sqrt(6.0 / (prompt_len + self.dim))
                nn.init.uniform_(p, -bound, bound)

    # ------------------------------------------------------------------ prompts
    def prompt_for(self, role: str) -> nn.Parameter:
        """P_d for role "detection", P_r for "subject" / "object" / "general" (official CoreModule.forward)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        prompt = self.prompt_det if role == "detection" else self.prompt_rel
        if prompt is None:
            kind = "detection" if role == "detection" else "relation"
            raise ValueError(f"role {role!r} needs the {kind} prompt, which this module was built without")
        return prompt

    def pooled_prompt(self, role: str) -> Tensor:
        """p̄ = mean_t P_t: [C, D] per class, or [D] shared (aggregation A = mean pooling)."""
        return self.prompt_for(role).mean(dim=-2)

    # ------------------------------------------------------------------ forward
    def forward(self, ids: Tensor, visual: Tensor, role: str = "general") -> Tensor:
        """ẽ = f_θ([p̄(c) ; e_static(c) ; φ(v)]) for ``ids`` [...] and ``visual`` [..., visual_dim] -> [..., D]."""
        ids = _check_ids(ids, self.num_classes)
        _check_visual(visual, self.visual_dim, tuple(ids.shape))
        p_bar = self.pooled_prompt(role)
        p_bar = p_bar[ids] if self.per_class else p_bar.expand(*ids.shape, self.dim)
        x = torch.cat([p_bar, self.static[ids], self.visual_proj(visual)], dim=-1)
        return self.fusion(x)

    def all_classes(self, visual: Tensor, role: str = "general", classes: Tensor | None = None) -> Tensor:
        """ẽ(c | v) for every class c (or ``classes``) and every row of ``visual`` [B, V] -> [B, C, D].

        Exact rewrite of :meth:`forward` that never builds the [B, C, 3D] input: the first layer of f_θ
        is linear, W₁[p̄; e; φ(v)] = W₁ᵖ p̄(c) + W₁ᵉ e(c) + W₁ᵛ φ(v), so the class part is computed once
        per class and the visual part once per row.
        """
        pre = self.class_preactivation(role, classes)  # [C, H]
        hid = F.relu(pre.unsqueeze(0) + self.visual_preactivation(visual).unsqueeze(1))  # [B, C, H]
        return self.fusion[2](hid)

    def class_preactivation(self, role: str = "general", classes: Tensor | None = None) -> Tensor:
        """W₁ᵖ p̄(c) + W₁ᵉ e(c) + b₁ for every class (or ``classes``): [C, H]."""
        ids = (
            torch.arange(self.num_classes, device=self.static.device)
            if classes is None
            else _check_ids(classes, self.num_classes)
        )
        w1 = self.fusion[0].weight
        d = self.dim
        p_bar = self.pooled_prompt(role)
        p_bar = p_bar[ids] if self.per_class else p_bar.expand(len(ids), d)
        return p_bar @ w1[:, :d].T + self.static[ids] @ w1[:, d : 2 * d].T + self.fusion[0].bias

    def visual_preactivation(self, visual: Tensor) -> Tensor:
        """W₁ᵛ φ(v): [B, H] (no bias; it sits in :meth:`class_preactivation`)."""
        _check_visual(visual, self.visual_dim)
        return self.visual_proj(visual) @ self.fusion[0].weight[:, 2 * self.dim :].T

    # ------------------------------------------------------------------ paper-scale integration
    @classmethod
    def wrap(
        cls,
        model: nn.Module,
        paths: Sequence[str] | Mapping[str, str],
        visual_dim: int,
        *,
        freeze: bool = True,
        **kwargs,
    ) -> dict[str, ContextualEmbedding]:
        """Swap ``model``'s ``nn.Embedding`` tables (dotted attribute paths) for APT-modulated ones.

        ``paths`` is a list of attribute paths (role ``"general"``) or a mapping path -> role. Each table is
        copied into a frozen buffer (``freeze=True``: SGB's GloVe tables are trainable by default, APT's premise
        is a frozen table). Returns path -> :class:`ContextualEmbedding`; set its visual context with
        ``set_visual(v)`` before the model's forward reads the table.
        """
        items = dict(paths) if isinstance(paths, Mapping) else {p: "general" for p in paths}
        out: dict[str, ContextualEmbedding] = {}
        for path, role in items.items():
            parent_path, _, name = path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            old = getattr(parent, name, None)
            if not isinstance(old, nn.Embedding):
                raise TypeError(f"{path}: expected an nn.Embedding, found {type(old).__name__}")
            roles = ("detection",) if role == "detection" else ("relation",)
            apt = cls(old, visual_dim, freeze=freeze, roles=roles, **kwargs).to(old.weight.device)
            new = ContextualEmbedding(apt, role)
            setattr(parent, name, new)
            out[path] = new
        return out


class ContextualEmbedding(nn.Module):
    """An ``nn.Embedding`` look-alike: ``forward(ids)`` returns ẽ using the visual context set last.

    ``weight`` is the frozen table (code that reads ``embed.weight`` keeps working and sees static vectors).
    """

    def __init__(self, apt: APTEmbedding, role: str = "general") -> None:
        super().__init__()
        apt.prompt_for(role)
        self.apt, self.role = apt, role
        self._visual: Tensor | None = None

    @property
    def weight(self) -> Tensor:
        return self.apt.static

    @property
    def num_embeddings(self) -> int:
        return self.apt.num_classes

    @property
    def embedding_dim(self) -> int:
        return self.apt.dim

    def set_visual(self, visual: Tensor | None) -> None:
        """The visual context [..., visual_dim] matching the ids of the next forward (None clears it)."""
        self._visual = visual

    def forward(self, ids: Tensor) -> Tensor:
        if self._visual is None:
            raise RuntimeError("ContextualEmbedding: call set_visual(v) with the ROI/union features first")
        return self.apt(ids, self._visual, self.role)


# ---------------------------------------------------------------------------------------------- CGP
class CGP(nn.Module):
    """Compositional Generalization Prompter (Sec. 3.2): RCG gates -> BPS -> FRF.

    RCG: w = gate(MLP_gate([v ; e_static])) ∈ R^N (softmax in the official code, sigmoid in the paper).
    BPS: P_cgp = Σ_i w_i B_i, B ∈ R^{N×L×D}; p̄ = LN(mean_t P_cgp,t) (paper; official code: no LN).
    FRF: ẽ_ov = MLP_frf([p̄ ; e_static ; φ_v(v)]) (3D -> hidden -> D).
    No class-specific parameter: works for concept ids never seen in training.
    """

    def __init__(
        self,
        dim: int,
        visual_dim: int,
        *,
        num_basis: int = 16,
        prompt_len: int = 6,
        gate: Literal["softmax", "sigmoid"] = "softmax",
        bps_layernorm: bool = True,
        rcg_hidden: int = 256,
        frf_hidden: int = 512,
    ) -> None:
        super().__init__()
        if gate not in ("softmax", "sigmoid"):
            raise ValueError(f"gate must be 'softmax' or 'sigmoid', got {gate!r}")
        self.dim, self.visual_dim, self.num_basis, self.gate = dim, visual_dim, num_basis, gate
        self.rcg = nn.Sequential(nn.Linear(visual_dim + dim, rcg_hidden), nn.ReLU(), nn.Linear(rcg_hidden, num_basis))
        self.bases = nn.Parameter(torch.empty(num_basis, prompt_len, dim))
        nn.init.xavier_uniform_(self.bases)
        self.norm = nn.LayerNorm(dim) if bps_layernorm else None
        self.visual_proj = nn.Linear(visual_dim, dim)
        self.frf = nn.Sequential(nn.Linear(3 * dim, frf_hidden), nn.ReLU(), nn.Linear(frf_hidden, dim))

    def gates(self, e_static: Tensor, visual: Tensor) -> Tensor:
        """RCG: w = softmax|sigmoid(MLP_gate([v ; e])) -> [..., N]."""
        _check_visual(visual, self.visual_dim)
        if e_static.shape[-1] != self.dim:
            raise ValueError(f"e_static must have shape (..., {self.dim}), got {tuple(e_static.shape)}")
        logits = self.rcg(torch.cat([visual, e_static], dim=-1))
        return logits.softmax(-1) if self.gate == "softmax" else logits.sigmoid()

    def synthesize(self, w: Tensor, layernorm: bool = True) -> Tensor:
        """BPS: p̄ = LN(mean_t Σ_i w_i B_i) -> [..., D] (LN only when built with it and ``layernorm``)."""
        p_bar = w @ self.bases.mean(dim=1)  # mean_t Σ_i w_i B_i,t = Σ_i w_i mean_t B_i,t
        return self.norm(p_bar) if (self.norm is not None and layernorm) else p_bar

    def forward(self, e_static: Tensor, visual: Tensor) -> tuple[Tensor, Tensor]:
        """(ẽ_ov [..., D], gates w [..., N]) for frozen embeddings ``e_static`` and contexts ``visual``."""
        w = self.gates(e_static, visual)
        p_bar = self.synthesize(w)
        return self.frf(torch.cat([p_bar, e_static, self.visual_proj(visual)], dim=-1)), w

    def forward_pairs(self, e_static: Tensor, visual: Tensor) -> tuple[Tensor, Tensor]:
        """``forward`` for every (context, concept) pair: e_static [R, D], visual [B, V] -> ([B, R, D], [B, R, N]).

        Equal to ``forward(e.expand(B, R, D), v.expand(B, R, V))``, but the linear maps of v and of e run once
        per context and per concept: a first layer on a concatenation splits as
        W·[v ; e] = W_v·v + W_e·e, and φ_v(v) is the same for every concept.
        """
        _check_visual(visual, self.visual_dim)
        if e_static.dim() != 2 or e_static.shape[-1] != self.dim or visual.dim() != 2:
            raise ValueError(f"need e_static [R, {self.dim}] and visual [B, {self.visual_dim}]")
        v_dim, d = self.visual_dim, self.dim
        l1, l2 = self.rcg[0], self.rcg[2]
        pre = (visual @ l1.weight[:, :v_dim].T).unsqueeze(1) + (e_static @ l1.weight[:, v_dim:].T + l1.bias)
        logits = l2(F.relu(pre))  # [B, R, N]
        w = logits.softmax(-1) if self.gate == "softmax" else logits.sigmoid()
        p_bar = self.synthesize(w)  # [B, R, D]
        f1, f2 = self.frf[0], self.frf[2]
        hid = (
            p_bar @ f1.weight[:, :d].T
            + (e_static @ f1.weight[:, d : 2 * d].T + f1.bias)
            + (self.visual_proj(visual) @ f1.weight[:, 2 * d :].T).unsqueeze(1)
        )
        return f2(F.relu(hid)), w


# ---------------------------------------------------------------------------------------------- regularisers
@dataclass(frozen=True)
class RegWeights:
    """Weights of the training objective's regularisers (Sec. 3.3; values not printed: ours).

    lambda_p (λ_p): ‖B‖_F² on CGP bases.
    lambda_pd (λ_pd): ‖P_det‖_F² on detection prompts.
    lambda_pr (λ_pr): ‖P_rel‖_F² on relation prompts.
    lambda_d (λ_d): distillation E‖ẽ − e_static‖² (keeps ẽ near the frozen semantics).
    lambda_orth (λ_orth): Σ_{i<j}‖B_i B_jᵀ‖_F² (complementary bases).
    beta (β): weight of +H(w) per sample (the printed −β Σ w log w; sharpens gates).
    gamma (γ): KL(w̄ ‖ uniform) on the batch-mean gate (spreads basis usage).
    """

    lambda_p: float = 1e-4
    lambda_pd: float = 1e-4
    lambda_pr: float = 1e-4
    lambda_d: float = 0.05
    lambda_orth: float = 1e-3
    beta: float = 0.01
    gamma: float = 0.01


def orthogonality(bases: Tensor) -> Tensor:
    """Σ_{i<j} ‖B_i B_jᵀ‖_F²: inner products between the D-dim tokens of different bases (B: [N, L, D])."""
    flat = bases.reshape(bases.shape[0], -1, bases.shape[-1])
    gram = torch.einsum("ild,jmd->ijlm", flat, flat).pow(2).sum(dim=(-1, -2))  # [N, N]
    return torch.triu(gram, diagonal=1).sum()


def gate_entropy(w: Tensor) -> Tensor:
    """Mean over rows of H(w) = −Σ_i w_i log w_i (0 for one-hot, log N for uniform)."""
    return -(w * w.clamp_min(1e-12).log()).sum(-1).mean()


def _modules(module: nn.Module) -> Iterator[nn.Module]:
    yield from module.modules()


def apt_regularizers(
    module: nn.Module,
    e_static: Tensor | None = None,
    e_adapted: Tensor | None = None,
    gates: Tensor | None = None,
    weights: RegWeights | None = None,
) -> dict[str, Tensor]:
    """The Sec. 3.3 terms for every APTEmbedding / CGP inside ``module``; ``total`` is their weighted sum.

    L_reg = λ_p‖B‖² + λ_pd‖P_det‖² + λ_pr‖P_rel‖² + λ_d E‖ẽ − e‖² + λ_orth Σ_{i<j}‖B_i B_jᵀ‖²
            − β Σ_i w_i log w_i + γ KL(w̄ ‖ u)
    """
    ref = next(iter(module.parameters()), torch.zeros(()))
    zero = ref.new_zeros(())
    terms = {k: zero for k in ("prompt_det", "prompt_rel", "bases", "orth", "distill", "entropy", "kl_prior")}
    for m in _modules(module):
        if isinstance(m, APTEmbedding):
            if m.prompt_det is not None:
                terms["prompt_det"] = terms["prompt_det"] + m.prompt_det.pow(2).sum()
            if m.prompt_rel is not None:
                terms["prompt_rel"] = terms["prompt_rel"] + m.prompt_rel.pow(2).sum()
        elif isinstance(m, CGP):
            terms["bases"] = terms["bases"] + m.bases.pow(2).sum()
            terms["orth"] = terms["orth"] + orthogonality(m.bases)
    if (e_static is None) != (e_adapted is None):
        raise ValueError("give both e_static and e_adapted (or neither)")
    if e_static is not None:
        terms["distill"] = (e_adapted - e_static).pow(2).sum(-1).mean()
    if gates is not None:
        terms["entropy"] = gate_entropy(gates)
        w_bar = gates.mean(dim=tuple(range(gates.dim() - 1)))
        w_bar = w_bar / w_bar.sum()
        n = w_bar.shape[-1]
        terms["kl_prior"] = (w_bar * (w_bar.clamp_min(1e-12).log() + math.log(n))).sum()
    w = weights or RegWeights()
    terms["total"] = (
        w.lambda_pd * terms["prompt_det"]
        + w.lambda_pr * terms["prompt_rel"]
        + w.lambda_p * terms["bases"]
        + w.lambda_d * terms["distill"]
        + w.lambda_orth * terms["orth"]
        + w.beta * terms["entropy"]
        + w.gamma * terms["kl_prior"]
    )
    return terms


# ---------------------------------------------------------------------------------------------- budget
def added_parameters(
    num_classes: int | Sequence[int],
    dim: int,
    visual_dim: int,
    hidden: int,
    prompt_len: int,
    per_class: bool,
    n_prompt_sets: int = 2,
) -> int:
    """Parameters APT adds: prompts + φ (V·D + D) + f_θ (3D·H + H + H·D + D).

    Prompts: Σ_sets C_set·L·D per class, or n_sets·L·D shared. ``num_classes`` is one C for every prompt set
    or one per set (e.g. (150, 50): P_d over VG150 objects, P_r over its predicates).
    """
    sizes = [num_classes] * n_prompt_sets if isinstance(num_classes, int) else list(num_classes)
    prompts = sum(c * prompt_len * dim for c in sizes) if per_class else len(sizes) * prompt_len * dim
    return prompts + visual_dim * dim + dim + 3 * dim * hidden + hidden + hidden * dim + dim
