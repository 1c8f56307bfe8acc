"""Relation models on ShapesSG: a PE-Net-like prototype head on frozen embeddings (B0), B0 + APT, controls.

Head (after PE-Net's prototype matching):

    h_s = MLP_s([v_s ; W_e·ê(c_s)]),  h_o = MLP_o([v_o ; W_e·ê(c_o)])
    r   = MLP_r([h_s ; h_o ; v_u ; geo]) ∈ R^W
    π_k = W_p·ê(pred_k)  (k = 1..R),  π_0 a learned background prototype
    z_k = τ·cos(r, π_k),  loss = CE(z, label)

Variants differ only in ê:

* ``b0``: ê = e (frozen table).                   * ``unfrozen`` (control): ê = E, a trainable table.
* ``adapter`` (control): ê = MLP(e), context-free, sized to APT's added parameters.
* ``apt``: entities ê = APT_D(c, v_s) (detection prompt); predicates ê_k = APT_R(k, [v_u; geo]) per pair.
* ``apt_d`` / ``apt_r``: only the entity / only the predicate side adapted (ablations, Table 4).
* ``noprompt`` (control): ``apt`` with the prompts fixed at zero (visual-conditioned MLP only).
* ``cgp`` (open vocabulary): predicates ê_k = CGP(e_k, [v_u; geo]) for every k (seen or not).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr26.apt.apt import CGP, APTEmbedding, apt_regularizers
from iclr26.apt.config import APTConfig, HeadConfig

__all__ = ["VARIANTS", "RelationModel", "adapter_hidden"]

VARIANTS = ("b0", "apt", "apt_d", "apt_r", "unfrozen", "adapter", "noprompt", "cgp")
GEO_DIM = 9


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


def adapter_hidden(target_params: int, dim: int, n_tables: int = 2) -> int:
    """Hidden width H of ``n_tables`` context-free adapters MLP(D -> H -> D) holding ~target_params parameters."""
    # n·(D·H + H + H·D + D) = target  ->  H = (target/n - D) / (2D + 1)
    return max(1, round((target_params / n_tables - dim) / (2 * dim + 1)))


class RelationModel(nn.Module):
    """One relation model; ``forward(batch)`` returns logits [B, 1 + R] (column 0 = background)."""

    def __init__(
        self,
        obj_table: Tensor,
        pred_table: Tensor,
        variant: str,
        apt: APTConfig | None = None,
        head: HeadConfig | None = None,
        feat_dim: int = 64,
        union_dim: int | None = None,
    ) -> None:
        super().__init__()
        apt, head = apt or APTConfig(), head or HeadConfig()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        self.variant, self.tau, self.reg_weights = variant, head.tau, apt.reg
        # pair context [v_u ; geo]: union features (plus the aligned channel when present, union_dim) and geometry
        d, w, pair_dim = obj_table.shape[1], head.width, (feat_dim if union_dim is None else union_dim) + GEO_DIM
        self.register_buffer("obj_static", obj_table.float().clone())
        self.register_buffer("pred_static", pred_table.float().clone())
        kw = dict(prompt_len=apt.prompt_len, per_class=apt.per_class, hidden=apt.hidden)
        self.obj_apt = self.pred_apt = self.cgp = self.obj_table = self.pred_table = None
        self.obj_adapter = self.pred_adapter = None
        if variant in ("apt", "apt_d", "noprompt"):
            self.obj_apt = APTEmbedding(obj_table, feat_dim, roles=("detection",), **kw)
        if variant in ("apt", "apt_r", "noprompt"):
            self.pred_apt = APTEmbedding(pred_table, pair_dim, roles=("relation",), **kw)
        if variant == "noprompt":
            for m in (self.obj_apt, self.pred_apt):
                for p in (m.prompt_det, m.prompt_rel):
                    if p is not None:
                        p.data.zero_()
                        p.requires_grad_(False)
        if variant == "cgp":
            self.cgp = CGP(
                d,
                pair_dim,
                num_basis=apt.num_basis,
                prompt_len=apt.cgp_prompt_len,
                gate=apt.gate,
                bps_layernorm=apt.bps_layernorm,
                rcg_hidden=apt.rcg_hidden,
                frf_hidden=apt.frf_hidden,
            )
        if variant == "unfrozen":
            self.obj_table = nn.Parameter(obj_table.float().clone())
            self.pred_table = nn.Parameter(pred_table.float().clone())
        if variant == "adapter":
            ref = RelationModel(obj_table, pred_table, "apt", apt, head, feat_dim, union_dim)
            h = adapter_hidden(ref.added_parameters(), d)
            self.obj_adapter, self.pred_adapter = _mlp(d, h, d), _mlp(d, h, d)
        self.w_e = nn.Linear(d, head.sem_dim)
        self.mlp_s = _mlp(feat_dim + head.sem_dim, w, w)
        self.mlp_o = _mlp(feat_dim + head.sem_dim, w, w)
        self.mlp_r = _mlp(2 * w + pair_dim, 2 * w, w)
        self.w_p = nn.Linear(d, w)
        self.bg = nn.Parameter(torch.randn(w) / w**0.5)

    def added_parameters(self) -> int:
        """Trainable parameters beyond B0's (APT modules, CGP, adapters or unfrozen tables)."""
        mods = [self.obj_apt, self.pred_apt, self.cgp, self.obj_adapter, self.pred_adapter]
        n = sum(p.numel() for m in mods if m is not None for p in m.parameters() if p.requires_grad)
        return n + sum(t.numel() for t in (self.obj_table, self.pred_table) if t is not None)

    # ------------------------------------------------------------------ semantics
    def entity_embedding(self, cls: Tensor, vis: Tensor) -> Tensor:
        """ê(c) per entity: [B, D]."""
        if self.obj_apt is not None:
            return self.obj_apt(cls, vis, "detection")
        if self.obj_table is not None:
            return self.obj_table[cls]
        e = self.obj_static[cls]
        return self.obj_adapter(e) if self.obj_adapter is not None else e

    def prototypes(self, pair_ctx: Tensor) -> Tensor:
        """π_k for k = 1..R: [R, W] shared by all pairs, or [B, R, W] when conditioned on the pair."""
        if self.pred_apt is not None:
            # π_k = W_p(W₂·relu(pre_k + pre_v) + b₂) = (W_p W₂)·relu(...) + W_p b₂ (exact; never builds [B, R, D])
            hid = F.relu(
                self.pred_apt.class_preactivation("general").unsqueeze(0)
                + self.pred_apt.visual_preactivation(pair_ctx).unsqueeze(1)
            )
            out = self.pred_apt.fusion[2]
            return hid @ (self.w_p.weight @ out.weight).T + (self.w_p.weight @ out.bias + self.w_p.bias)
        if self.cgp is not None:
            return self.w_p(self.cgp_embeddings(pair_ctx)[0])
        e = self.pred_table if self.pred_table is not None else self.pred_static
        if self.pred_adapter is not None:
            e = self.pred_adapter(e)
        return self.w_p(e)

    def cgp_embeddings(self, pair_ctx: Tensor) -> tuple[Tensor, Tensor]:
        """(ẽ_ov [B, R, D], gates [B, R, N]) from the CGP for every predicate and pair."""
        return self.cgp.forward_pairs(self.pred_static, pair_ctx)  # = cgp(e, v) on the [B, R] grid, exact

    # ------------------------------------------------------------------ forward / loss
    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        es = self.entity_embedding(batch["cls_s"], batch["vis_s"])
        eo = self.entity_embedding(batch["cls_o"], batch["vis_o"])
        h_s = self.mlp_s(torch.cat([batch["vis_s"], self.w_e(es)], -1))
        h_o = self.mlp_o(torch.cat([batch["vis_o"], self.w_e(eo)], -1))
        pair_ctx = torch.cat([batch["union"], batch["geo"]], -1)
        r = F.normalize(self.mlp_r(torch.cat([h_s, h_o, pair_ctx], -1)), dim=-1)  # [B, W]
        protos = F.normalize(self.prototypes(pair_ctx), dim=-1)
        bg = F.normalize(self.bg, dim=0)
        fg = torch.einsum("bw,rw->br", r, protos) if protos.dim() == 2 else torch.einsum("bw,brw->br", r, protos)
        return self.tau * torch.cat([(r @ bg).unsqueeze(1), fg], 1)  # z_k = τ·cos(r, π_k)

    def loss(self, batch: dict[str, Tensor], n_distill: int = 32) -> tuple[Tensor, dict[str, float]]:
        """CE + the Sec. 3.3 regularisers (distillation on the first ``n_distill`` pairs of the batch)."""
        ce = F.cross_entropy(self(batch), batch["label"])
        e_static = e_adapted = gates = None
        if self.obj_apt is not None:
            e_static = self.obj_static[batch["cls_s"][:n_distill]]
            e_adapted = self.obj_apt(batch["cls_s"][:n_distill], batch["vis_s"][:n_distill], "detection")
        if self.pred_apt is not None or self.cgp is not None:
            ctx = torch.cat([batch["union"], batch["geo"]], -1)[:n_distill]
            if self.pred_apt is not None:
                pe = self.pred_apt.all_classes(ctx, "general")
            else:
                pe, gates = self.cgp_embeddings(ctx)
            ps = self.pred_static.unsqueeze(0).expand_as(pe)
            e_static = (
                ps.reshape(-1, ps.shape[-1])
                if e_static is None
                else torch.cat([e_static, ps.reshape(-1, ps.shape[-1])])
            )
            e_adapted = (
                pe.reshape(-1, pe.shape[-1])
                if e_adapted is None
                else torch.cat([e_adapted, pe.reshape(-1, pe.shape[-1])])
            )
        if e_static is None and gates is None:
            return ce, {"ce": float(ce.detach())}
        reg = apt_regularizers(self, e_static, e_adapted, gates, self.reg_weights)
        logs = {
            "ce": float(ce.detach()),
            "reg": float(reg["total"].detach()),
            "distill": float(reg["distill"].detach()),
        }
        return ce + reg["total"], logs
