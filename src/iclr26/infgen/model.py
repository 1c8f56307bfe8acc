"""The InfGen / SceneStreamer model: a map encoder and one decoder over the scene token stream.

Decoder layer (pre-LN)::

    h1 = x  + CrossAttn(LN(x),  MAP)            every token sees every <MAP> token
    h2 = h1 + SelfAttn(LN(h1))                   group-causal mask, see group_mask()
    h3 = h2 + MLP(LN(h2))                        4x width

(``official_residual=True`` reproduces the official code's quirk of adding each sub-block's output to the
layer *input*: h2 = x + SelfAttn(LN(h1)), h3 = x + MLP(LN(h2)).)

Attention logits carry a relative-pose bias (a CPU stand-in for the official query-centric edge
features): for a query with pose (x_q, y_q, psi_q) at step t_q and a key (x_k, y_k, psi_k, t_k)::

    (l_x, l_y) = R(-psi_q)(p_k - p_q) / 50,  d = |p_k - p_q| / 50,  n = exp(-5 d)  (= exp(-dist / 10 m))
    e_qk = [l_x, l_y, cos(psi_k - psi_q), sin(psi_k - psi_q), d, (t_q - t_k) / W, has_pose_q, has_pose_k,
            n, 5 l_x n, 5 l_y n]
    score_qk = q . k / sqrt(d_h) + f_rel(e_qk)[head]

``f_rel`` is linear (``rel_hidden = 0``, the CPU default: a dense MLP over all L^2 pairs costs ~5x the rest of
the model) or an MLP with ``rel_hidden`` units.

Heads (a LayerNorm before each; the last layer of the TL and MO heads is zero-initialised):
TL (4 states) and MO (n x n actions) predict the *next* step's token; SOA -> type (vehicle, pedestrian,
cyclist, EOS); TYPE -> map segment (a pointer over the encoded <MAP> tokens, masked to valid segments);
MS -> the Relative-State head, a small causal transformer with AdaLN conditioned on the decoder output at MS
that emits the 8 RS fields autoregressively (81 bins each).

Loss = CE(MO) + CE(type) + CE(MS) + CE(RS fields) + CE(TL), each averaged over its valid targets (full
teacher forcing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr26.infgen.tokenizer import EOS, IGNORE, MO, MS, PAD, RS, SOA, SOS, TL, TYPE, TokenSeq


@dataclass(frozen=True)
class InfGenConfig:
    """Model sizes and switches.

    d_model: width (64 for the official *-small configs, 128 for *-large / *-xl).
    n_heads: attention heads.
    n_enc_layers: map-encoder self-attention layers.
    n_dec_layers: decoder layers.
    n_actions: motion vocabulary (motion-grid bins squared: 33 x 33 = 1089).
    n_slots: agent-id embedding slots (128 in the paper).
    max_segments: size of the map-id embedding table.
    max_lights: size of the light-id embedding table.
    rs_bins: bins per RS field (81).
    rs_layers: layers of the Relative-State head.
    point_hidden: PointNet hidden width of the map encoder.
    window: context window W in steps: keys with t_k <= t_q - W are masked (official: a growing KV cache).
        See the README.
    rel_hidden: hidden width of the relative-pose bias MLP (0: a linear map of the features).
    rel_bias: use the relative-pose attention bias.
    abs_pose: also add an absolute pose embedding to every posed token (our addition, on by default).
    official_residual: the official residual quirk (see module docstring); default False (standard pre-LN).
    as_sees_own_motion: <AS> tokens of an agent also attend to that agent's motion tokens at every earlier step
        (official: True, from the force mask); False = only the motion tokens of the previous step.
    mo_sees_all_block_ends: motion tokens attend to the sos/eos of every <AS> block up to their step
        (official: True); False = only of the blocks that hold their agent.
    sparse_attn: compute self-attention only over the keys the mask allows (per-query key lists): the same
        function as the dense path (False: every [Lq, Lk] pair gets relative features, a bias and a softmax
        entry), several times faster to train; tested equal to the dense path.
    """

    d_model: int = 64
    n_heads: int = 4
    n_enc_layers: int = 1
    n_dec_layers: int = 2
    n_actions: int = 1089
    n_slots: int = 32
    max_segments: int = 512
    max_lights: int = 64
    rs_bins: int = 81
    rs_layers: int = 1
    point_hidden: int = 32
    window: int = 8
    rel_hidden: int = 0
    rel_bias: bool = True
    abs_pose: bool = True
    official_residual: bool = False
    as_sees_own_motion: bool = True
    mo_sees_all_block_ends: bool = True
    sparse_attn: bool = True

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} not divisible by n_heads={self.n_heads}")
        if self.window < 2 or self.n_dec_layers < 1:
            raise ValueError(f"bad InfGenConfig: window={self.window}, n_dec_layers={self.n_dec_layers}")

    @classmethod
    def paper(cls, size: str = "large", **kw) -> InfGenConfig:
        """The official full-{small,large,xl} shapes (d 64/128/128, heads 4/4/8, enc 2/2/3, dec 4/4/6),
        128 agent slots, 3000 map segments, 64 lights, growing context (window 91 steps)."""
        shapes = {"small": (64, 4, 2, 4), "large": (128, 4, 2, 4), "xl": (128, 8, 3, 6)}
        if size not in shapes:
            raise ValueError(f"size must be one of {sorted(shapes)}, got {size!r}")
        d, h, e, n = shapes[size]
        base = dict(
            d_model=d,
            n_heads=h,
            n_enc_layers=e,
            n_dec_layers=n,
            n_slots=128,
            max_segments=3000,
            max_lights=64,
            rs_layers=3,
            point_hidden=64,
            window=91,
            rel_hidden=64,
        )
        base.update(kw)
        return cls(**base)


# --------------------------------------------------------------------------------------------------
# The group-causal mask
# --------------------------------------------------------------------------------------------------


def group_mask(
    q: dict[str, Tensor],
    k: dict[str, Tensor],
    window: int,
    *,
    as_sees_own_motion: bool = True,
    mo_sees_all_block_ends: bool = True,
) -> Tensor:
    """Allowed attention [B, Lq, Lk] between query and key tokens, from their metadata
    (``kind``, ``t``, ``uid``, ``light``, ``seq`` tensors of shape [B, Lq] / [B, Lk]).

    * TL_t  -> all TL at t; the same light at earlier steps; all MO at t-1.
    * AS_t  -> earlier-or-same AS tokens of the block (sequence order); all TL at t; all MO at t-1;
      the same agent's AS tokens (all four kinds) at earlier steps; earlier blocks' sos/eos; with
      ``as_sees_own_motion`` also the same agent's MO at every earlier step.
    * MO_t  -> all MO at t; all TL at t; the same agent's AS tokens at <= t; the sos/eos of every block at
      <= t (``mo_sees_all_block_ends``) or only of the blocks that hold the agent (False); the same
      agent's MO at < t.
    * only keys with t_k > t_q - window; padding never attended (a padding query sees itself only).

    The defaults are the official attention: the union of ``_build_all_tokens_mask`` and
    ``_build_all_force_mask`` (``scenestreamer_model.py``), which ``relation.compute_relation_for_scenestreamer``
    ORs together (the force mask is not restricted to the causal one). The force mask is what gives an agent's
    <AS> tokens its four earlier <AS> tokens (the causal mask alone keeps only the same position) and its own
    motion history; motion tokens see the sos/eos of every block up to their step.
    """
    qk, kk = q["kind"][:, :, None], k["kind"][:, None, :]
    qt, kt = q["t"][:, :, None], k["t"][:, None, :]
    quid, kuid = q["uid"][:, :, None], k["uid"][:, None, :]
    same_uid = (quid == kuid) & (quid >= 0)
    k_agent_as = (kk == SOA) | (kk == TYPE) | (kk == MS) | (kk == RS)
    k_se = (kk == SOS) | (kk == EOS)
    k_tl, k_mo = kk == TL, kk == MO
    m_tl = (
        (k_tl & (kt == qt))
        | (k_tl & (k["light"][:, None, :] == q["light"][:, :, None]) & (kt < qt))
        | (k_mo & (kt == qt - 1))
    )
    k_as = k_agent_as | k_se
    m_as = (
        (k_as & (kt == qt) & (k["seq"][:, None, :] <= q["seq"][:, :, None]))
        | (k_tl & (kt == qt))
        | (k_mo & (kt == qt - 1))
        | (k_agent_as & same_uid & (kt < qt))
        | (k_se & (kt < qt))
    )
    if as_sees_own_motion:
        m_as = m_as | (k_mo & same_uid & (kt < qt))
    if mo_sees_all_block_ends:
        hb = torch.ones_like(m_as)
    else:  # sos/eos of the blocks that contain the query agent: steps where it has agent-AS keys
        own = (k_agent_as & same_uid).float()  # [B, Lq, Lk]
        n_steps = int(torch.clamp(torch.cat([q["t"].flatten(), k["t"].flatten()]).max(), min=0)) + 2
        onehot = F.one_hot(k["t"].clamp(min=0), n_steps).float()  # [B, Lk, S]
        has_block = torch.bmm(own, onehot) > 0  # [B, Lq, S]
        hb = torch.gather(has_block, 2, k["t"].clamp(min=0)[:, None, :].expand(-1, has_block.shape[1], -1))
    m_mo = (
        (k_mo & (kt == qt))
        | (k_tl & (kt == qt))
        | (k_agent_as & same_uid & (kt <= qt))
        | (k_se & (kt <= qt) & hb)
        | (k_mo & same_uid & (kt < qt))
    )
    q_as = (qk >= SOS) & (qk <= EOS)
    m = torch.where(qk == TL, m_tl, torch.where(q_as, m_as, torch.where(qk == MO, m_mo, torch.zeros_like(m_tl))))
    m = m & (kt > qt - window) & (kk != PAD)
    self_pad = (qk == PAD) & (q["seq"][:, :, None] == k["seq"][:, None, :])
    return m | self_pad


def pair_features(
    qp: Tensor, qh: Tensor, qt: Tensor | None, kp: Tensor, kh: Tensor, kt: Tensor | None, window: int
) -> Tensor:
    """Relative pose features e_qk [..., N_REL] of query / key pairs given as broadcastable tensors
    (poses [..., 3], has-pose flags and steps [...]); see the module docstring."""
    dx = kp[..., 0] - qp[..., 0]
    dy = kp[..., 1] - qp[..., 1]
    c, s = torch.cos(qp[..., 2]), torch.sin(qp[..., 2])
    lx, ly = (c * dx + s * dy) / 50, (-s * dx + c * dy) / 50
    dpsi = kp[..., 2] - qp[..., 2]
    dist = torch.sqrt(dx * dx + dy * dy + 1e-6) / 50
    hq = qh.float().expand_as(dx)
    hk = kh.float().expand_as(dx)
    both = hq * hk
    near = torch.exp(-5 * dist) * both  # exp(-d / 10 m)
    dtt = ((qt - kt).float().expand_as(dx) / window) if qt is not None else torch.zeros_like(dx)
    return torch.stack(
        [
            lx * both,
            ly * both,
            torch.cos(dpsi) * both,
            torch.sin(dpsi) * both,
            dist * both,
            dtt,
            hq,
            hk,
            near,
            lx * near * 5,
            ly * near * 5,
        ],
        -1,
    )


def rel_features(
    qp: Tensor, qh: Tensor, qt: Tensor | None, kp: Tensor, kh: Tensor, kt: Tensor | None, window: int
) -> Tensor:
    """Relative pose features of every query / key pair, [B, Lq, Lk, N_REL] (see module docstring)."""
    return pair_features(
        qp[:, :, None],
        qh[:, :, None],
        qt[:, :, None] if qt is not None else None,
        kp[:, None],
        kh[:, None],
        kt[:, None] if kt is not None else None,
        window,
    )


def neighbours(allowed: Tensor) -> tuple[Tensor, Tensor]:
    """The keys each query may attend to, as padded index lists: ``allowed`` [B, Lq, Lk] bool ->
    (idx [B, Lq, K] key positions in increasing order, valid [B, Lq, K]), K = the most keys any query sees.
    Padded entries point at key 0 and are not valid."""
    B, Lq, _ = allowed.shape
    count = allowed.sum(-1)
    K = max(1, int(count.max()))
    pos = allowed.long().cumsum(-1) - 1
    b, q, k = allowed.nonzero(as_tuple=True)
    idx = torch.zeros(B, Lq, K, dtype=torch.long, device=allowed.device)
    idx[b, q, pos[b, q, k]] = k
    valid = torch.arange(K, device=allowed.device) < count[..., None]
    return idx, valid


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------


class MHA(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h, self.dh = h, d // h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.dh).transpose(1, 2)

    def kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.split(self.k(x)), self.split(self.v(x))

    def forward(self, x: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """x [B, Lq, d]; k, v [B, H, Lk, dh]; bias [B, H, Lq, Lk] additive (-inf where masked)."""
        q = self.split(self.q(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        B, _, L, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(B, L, -1))

    def forward_sparse(self, x: Tensor, k: Tensor, v: Tensor, idx: Tensor, bias: Tensor) -> Tensor:
        """The same attention restricted to listed keys: idx [B, Lq, K] key positions per query, bias
        [B, H, Lq, K] additive (-inf at padded entries). Scores of all pairs come from one matrix product;
        the softmax runs over the K listed keys only, and its weights are scattered back for the product with
        the values, so no [Lq, Lk] bias, mask or softmax is formed."""
        q = self.split(self.q(x) * (1.0 / math.sqrt(self.dh)))
        B, H, Lq, _ = q.shape
        ix = idx[:, None].expand(B, H, Lq, idx.shape[-1])
        scores = torch.matmul(q, k.transpose(-1, -2))
        p = torch.softmax(scores.gather(-1, ix) + bias, -1)
        weights = torch.zeros_like(scores).scatter_add(-1, ix, p)
        out = torch.matmul(weights, v)
        return self.o(out.transpose(1, 2).reshape(B, Lq, -1))


def mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Module:
    if d_hidden == 0:
        return nn.Linear(d_in, d_out)
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))


N_REL = 11


class MapEncoder(nn.Module):
    """PointNet over each segment's points (in the segment frame), + type and map-id embeddings, then
    self-attention layers over segments with the relative-pose bias."""

    def __init__(self, cfg: InfGenConfig):
        super().__init__()
        d, ph = cfg.d_model, cfg.point_hidden
        self.pre = nn.Linear(4, ph)
        self.point = mlp(ph, ph, ph)
        self.proj = nn.Linear(ph, d)
        self.type_emb = nn.Embedding(8, d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(dict(ln1=nn.LayerNorm(d), attn=MHA(d, cfg.n_heads), ln2=nn.LayerNorm(d), ff=mlp(d, 4 * d, d)))
            for _ in range(cfg.n_enc_layers)
        )
        self.rel = mlp(N_REL, cfg.rel_hidden, cfg.n_heads * max(1, cfg.n_enc_layers))
        self.cfg = cfg

    def forward(self, pts: Tensor, pose: Tensor, stype: Tensor, valid: Tensor, id_emb: nn.Embedding) -> Tensor:
        B, M, P, _ = pts.shape
        c, s = torch.cos(pose[..., 2])[..., None], torch.sin(pose[..., 2])[..., None]
        dx, dy = pts[..., 0] - pose[..., None, 0], pts[..., 1] - pose[..., None, 1]
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        d = torch.diff(torch.stack([lx, ly], -1), dim=2, prepend=torch.stack([lx, ly], -1)[:, :, :1])
        f = torch.cat([torch.stack([lx, ly], -1) / 10, d], -1)
        h = self.point(F.relu(self.pre(f))).max(2).values
        ids = torch.arange(M, device=pts.device).clamp(max=id_emb.num_embeddings - 1)
        x = self.proj(h) + self.type_emb(stype.clamp(0, 7)) + id_emb(ids)[None]
        bias_all = self.rel(rel_features(pose, valid, None, pose, valid, None, 1)).permute(0, 3, 1, 2)
        keymask = torch.where(valid[:, None, None, :], 0.0, float("-inf"))
        H = self.cfg.n_heads
        for i, layer in enumerate(self.layers):
            bias = bias_all[:, i * H : (i + 1) * H] + keymask
            y = layer["ln1"](x)
            k, v = layer["attn"].kv(y)
            x = x + layer["attn"](y, k, v, bias)
            x = x + layer["ff"](layer["ln2"](x))
        return x * valid[..., None]


class AdaLN(nn.Module):
    """LayerNorm without affine, modulated by a condition c: (1 + scale(c)) * LN(x) + shift(c)."""

    def __init__(self, d: int):
        super().__init__()
        self.ln = nn.LayerNorm(d, elementwise_affine=False)
        self.mod = nn.Linear(d, 2 * d)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        scale, shift = self.mod(c).unsqueeze(1).chunk(2, -1)
        return (1 + scale) * self.ln(x) + shift


class RelativeStateHead(nn.Module):
    """Autoregressive head over the 8 RS fields: input j is the embedding of field j-1's bin (a start
    embedding for j = 0) plus a field embedding; causal self-attention + MLP with AdaLN(c), c = decoder output
    at the MS token; output j = logits over field j's 81 bins."""

    def __init__(self, cfg: InfGenConfig):
        super().__init__()
        d, nb = cfg.d_model, cfg.rs_bins
        self.nb = nb
        self.val_emb = nn.Embedding(8 * (nb + 1), d)
        self.field_emb = nn.Embedding(8, d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(dict(n1=AdaLN(d), attn=MHA(d, cfg.n_heads), n2=AdaLN(d), ff=mlp(d, 4 * d, d)))
            for _ in range(cfg.rs_layers)
        )
        self.out_norm = AdaLN(d)
        self.out = nn.Linear(d, nb)
        self.cond = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))

    def forward(self, c: Tensor, prev_bins: Tensor) -> Tensor:
        """c [N, d]; prev_bins [N, J] bins of fields 0..J-2 shifted right (J <= 8) -> logits [N, J, nb]."""
        N, J = prev_bins.shape
        c = self.cond(c)
        fields = torch.arange(J, device=c.device)
        prev_field = (fields - 1).clamp(min=0)
        idx = torch.where(fields[None] == 0, torch.full_like(prev_bins, self.nb), prev_bins.clamp(0, self.nb - 1))
        x = self.val_emb(prev_field[None] * (self.nb + 1) + idx) + self.field_emb(fields)[None]
        causal = torch.full((J, J), float("-inf"), device=c.device).triu(1)
        for layer in self.layers:
            y = layer["n1"](x, c)
            k, v = layer["attn"].kv(y)
            x = x + layer["attn"](y, k, v, causal)
            x = x + layer["ff"](layer["n2"](x, c))
        return self.out(self.out_norm(x, c))

    def targets_to_inputs(self, bins: Tensor) -> Tensor:
        """Teacher forcing: inputs are the targets shifted right (field 0's input is the start embedding)."""
        return torch.cat([torch.zeros_like(bins[:, :1]), bins[:, :-1]], 1)


@dataclass
class MapContext:
    """Encoded map of a batch: tokens [B, M, d], poses [B, M, 3], valid [B, M]."""

    tokens: Tensor
    pose: Tensor
    valid: Tensor


@dataclass
class KVCache:
    """Per-layer keys/values and key metadata of the tokens fed so far (batch size 1, generation)."""

    keys: list[Tensor] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)
    meta: dict[str, Tensor] = field(default_factory=dict)
    cross: list[tuple[Tensor, Tensor]] | None = None

    def __len__(self) -> int:
        return 0 if not self.meta else int(self.meta["kind"].shape[1])

    def truncate(self, n: int) -> None:
        """Drop every key after the first ``n`` (roll back a rejected sample)."""
        self.keys = [k[:, :, :n] for k in self.keys]
        self.values = [v[:, :, :n] for v in self.values]
        self.meta = {k: v[:, :n] for k, v in self.meta.items()}

    def prune(self, t_min: int) -> None:
        """Drop keys of steps < t_min (outside every future query's window; outputs do not change)."""
        if not self.meta:
            return
        keep = self.meta["t"][0] >= t_min
        if bool(keep.all()):
            return
        self.keys = [k[:, :, keep] for k in self.keys]
        self.values = [v[:, :, keep] for v in self.values]
        self.meta = {k: v[:, keep] for k, v in self.meta.items()}


META = ("kind", "t", "uid", "light", "seq", "pose", "has_pose")


class InfGenModel(nn.Module):
    """Map encoder + group-causal decoder + heads. ``forward(batch)`` for teacher forcing;
    ``extend(batch, map_ctx, cache)`` appends tokens incrementally (generation)."""

    def __init__(self, cfg: InfGenConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.map_id = nn.Embedding(cfg.max_segments, d)
        self.encoder = MapEncoder(cfg)
        self.kind_emb = nn.Embedding(9, d)  # kinds 0..7, 8 = pad
        self.slot_emb = nn.Embedding(cfg.n_slots + 1, d)
        self.atype_emb = nn.Embedding(4, d)
        self.tl_state_emb = nn.Embedding(4, d)
        self.light_emb = nn.Embedding(cfg.max_lights, d)
        self.action_emb = nn.Embedding(cfg.n_actions + 1, d)
        self.rs_feat = mlp(8, d, d)
        self.mo_feat = mlp(8, d, d)
        self.pose_emb = mlp(4, d, d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln_c=nn.LayerNorm(d),
                    cross=MHA(d, cfg.n_heads),
                    ln_s=nn.LayerNorm(d),
                    self_=MHA(d, cfg.n_heads),
                    ln_f=nn.LayerNorm(d),
                    ff=mlp(d, 4 * d, d),
                )
            )
            for _ in range(cfg.n_dec_layers)
        )
        H, n = cfg.n_heads, cfg.n_dec_layers
        self.rel_self = mlp(N_REL, cfg.rel_hidden, H * n)
        self.rel_cross = mlp(N_REL, cfg.rel_hidden, H * n)
        self.ln_out = nn.LayerNorm(d)
        self.tl_head = mlp(d, d, 4)
        self.mo_head = mlp(d, d, cfg.n_actions)
        self.type_head = nn.Linear(d, 4)
        self.ms_head = mlp(d, d, d)
        self.rs_head = RelativeStateHead(cfg)
        for head in (self.tl_head, self.mo_head):
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)

    # -- map --------------------------------------------------------------------------------------
    def encode_map(self, mb: dict[str, Tensor]) -> MapContext:
        tok = self.encoder(mb["seg_points"], mb["seg_pose"], mb["seg_type"], mb["seg_valid"], self.map_id)
        return MapContext(tok, mb["seg_pose"], mb["seg_valid"])

    # -- tokens -----------------------------------------------------------------------------------
    def embed(self, b: dict[str, Tensor], mc: MapContext) -> Tensor:
        kind = b["kind"]
        x = (
            self.kind_emb(torch.where(kind < 0, 8, kind))
            + self.slot_emb(b["slot"] + 1)
            + self.atype_emb(b["atype"] + 1)
        )
        val = b["val"]
        is_tl, is_ms, is_rs, is_mo = kind == TL, kind == MS, kind == RS, kind == MO
        maxseg = self.cfg.max_segments - 1
        tl_term = (
            self.tl_state_emb(torch.where(is_tl, val, 0).clamp(0, 3))
            + self.light_emb(b["light"].clamp(0, self.cfg.max_lights - 1))
            + self.map_id(b["tlseg"].clamp(0, maxseg))
        )
        seg = torch.where(is_ms, val, 0).clamp(0, mc.tokens.shape[1] - 1)
        ms_term = self.map_id(seg.clamp(max=maxseg)) + torch.gather(
            mc.tokens, 1, seg[..., None].expand(-1, -1, mc.tokens.shape[-1])
        )
        mo_term = self.action_emb(torch.where(is_mo, val, 0).clamp(0, self.cfg.n_actions)) + self.mo_feat(b["feat"])
        x = (
            x
            + is_tl[..., None] * tl_term
            + is_ms[..., None] * ms_term
            + is_rs[..., None] * self.rs_feat(b["feat"])
            + is_mo[..., None] * mo_term
        )
        if self.cfg.abs_pose:
            p = b["pose"]
            pf = torch.stack([p[..., 0] / 50, p[..., 1] / 50, torch.cos(p[..., 2]), torch.sin(p[..., 2])], -1)
            x = x + b["has_pose"][..., None] * self.pose_emb(pf)
        return x

    def _bias(self, mlp_: nn.Module, q: dict, k: dict, with_t: bool) -> Tensor:
        if not self.cfg.rel_bias:
            B, Lq, Lk = q["kind"].shape[0], q["kind"].shape[1], k["pose"].shape[1]
            return torch.zeros(B, self.cfg.n_heads * self.cfg.n_dec_layers, Lq, Lk, device=q["pose"].device)
        e = rel_features(
            q["pose"],
            q["has_pose"],
            q["t"] if with_t else None,
            k["pose"],
            k["has_pose"],
            k["t"] if with_t else None,
            self.cfg.window,
        )
        return mlp_(e).permute(0, 3, 1, 2)

    def allowed(self, q: dict[str, Tensor], k: dict[str, Tensor]) -> Tensor:
        """The group-causal mask of this model's settings (see :func:`group_mask`)."""
        cfg = self.cfg
        return group_mask(
            q,
            k,
            cfg.window,
            as_sees_own_motion=cfg.as_sees_own_motion,
            mo_sees_all_block_ends=cfg.mo_sees_all_block_ends,
        )

    def _sparse_bias(self, q: dict, k: dict, idx: Tensor, valid: Tensor) -> Tensor:
        """Self-attention bias [B, H * n_layers, Lq, K] for the listed keys only (-inf at padding)."""
        B, Lq, K = idx.shape
        neg = torch.where(valid, 0.0, float("-inf"))[:, None]
        if not self.cfg.rel_bias:
            return neg.expand(B, self.cfg.n_heads * self.cfg.n_dec_layers, Lq, K)
        bi = torch.arange(B, device=idx.device)[:, None, None]
        e = pair_features(
            q["pose"][:, :, None],
            q["has_pose"][:, :, None],
            q["t"][:, :, None],
            k["pose"][bi, idx],
            k["has_pose"][bi, idx],
            k["t"][bi, idx],
            self.cfg.window,
        )
        return self.rel_self(e).permute(0, 3, 1, 2) + neg

    def extend(self, b: dict[str, Tensor], mc: MapContext, cache: KVCache | None = None) -> Tensor:
        """Run the decoder on new tokens ``b`` ([B, Lq] fields) attending to ``cache`` + themselves.
        Returns the final hidden states [B, Lq, d]; appends the new keys/values to ``cache`` if given."""
        cfg = self.cfg
        H = cfg.n_heads
        x = self.embed(b, mc)
        qmeta = {k: b[k] for k in META}
        if cache is not None and len(cache):
            kmeta = {k: torch.cat([cache.meta[k], qmeta[k]], 1) for k in META}
        else:
            kmeta = qmeta
        if cfg.sparse_attn and "nbr_idx" in b and kmeta is qmeta:  # key lists precomputed per sequence
            idx, nb_valid = b["nbr_idx"], b["nbr_valid"]
            bias_self = self._sparse_bias(qmeta, kmeta, idx, nb_valid)
        else:
            allowed = self.allowed(qmeta, kmeta)
            if cfg.sparse_attn:
                idx, nb_valid = neighbours(allowed)
                bias_self = self._sparse_bias(qmeta, kmeta, idx, nb_valid)
            else:
                neg = torch.where(allowed, 0.0, float("-inf"))[:, None]
                bias_self = self._bias(self.rel_self, qmeta, kmeta, True)
        mapk = {"pose": mc.pose, "has_pose": mc.valid}
        bias_cross = self._bias(self.rel_cross, qmeta, mapk, False)
        cross_mask = torch.where(mc.valid, 0.0, float("-inf"))[:, None, None, :]
        if cache is not None and cache.cross is None:
            cache.cross = [layer["cross"].kv(mc.tokens) for layer in self.layers]
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            sl = slice(i * H, (i + 1) * H)
            ck, cv = cache.cross[i] if cache is not None else layer["cross"].kv(mc.tokens)
            h1 = x + layer["cross"](layer["ln_c"](x), ck, cv, bias_cross[:, sl] + cross_mask)
            y = layer["ln_s"](h1)
            k, v = layer["self_"].kv(y)
            new_k.append(k)
            new_v.append(v)
            if cache is not None and len(cache):
                k, v = torch.cat([cache.keys[i], k], 2), torch.cat([cache.values[i], v], 2)
            base = x if cfg.official_residual else h1
            if cfg.sparse_attn:
                h2 = base + layer["self_"].forward_sparse(y, k, v, idx, bias_self[:, sl])
            else:
                h2 = base + layer["self_"](y, k, v, bias_self[:, sl] + neg)
            base = x if cfg.official_residual else h2
            x = base + layer["ff"](layer["ln_f"](h2))
        if cache is not None:
            if len(cache):
                cache.keys = [torch.cat([a, b_], 2) for a, b_ in zip(cache.keys, new_k, strict=True)]
                cache.values = [torch.cat([a, b_], 2) for a, b_ in zip(cache.values, new_v, strict=True)]
            else:
                cache.keys, cache.values = new_k, new_v
            cache.meta = kmeta
        return self.ln_out(x)

    def forward(self, b: dict[str, Tensor], mb: dict[str, Tensor]) -> tuple[Tensor, MapContext]:
        """Teacher-forced pass over whole sequences: hidden [B, L, d] and the map context."""
        mc = self.encode_map(mb)
        return self.extend(b, mc, None), mc

    # -- heads ------------------------------------------------------------------------------------
    def ms_logits(self, h: Tensor, mc: MapContext, batch_index: Tensor | None = None) -> Tensor:
        """Pointer logits over map segments for hidden states h [N, d] (rows of batch ``batch_index``)."""
        bi = batch_index if batch_index is not None else torch.zeros(h.shape[0], dtype=torch.long)
        keys = mc.tokens[bi]  # [N, M, d]
        logits = torch.einsum("nd,nmd->nm", self.ms_head(h), keys) / math.sqrt(h.shape[-1])
        return logits.masked_fill(~mc.valid[bi], float("-inf"))

    def loss(self, b: dict[str, Tensor], mb: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Sum of the five cross-entropies (each a mean over valid targets)."""
        h, mc = self(b, mb)
        return self.loss_from_hidden(h, mc, b)

    def loss_from_hidden(self, h: Tensor, mc: MapContext, b: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """The loss given decoder outputs (so a DDP-wrapped forward can be used for ``h``)."""
        kind, tgt = b["kind"], b["tgt"]
        terms = {}

        def ce(sel: Tensor, logits_fn, targets: Tensor) -> Tensor:
            if not bool(sel.any()):
                return h.sum() * 0.0
            return F.cross_entropy(logits_fn(sel), targets[sel])

        valid = tgt != IGNORE
        terms["mo"] = ce((kind == MO) & valid, lambda s: self.mo_head(h[s]), tgt)
        terms["tl"] = ce((kind == TL) & valid, lambda s: self.tl_head(h[s]), tgt)
        terms["type"] = ce((kind == SOA) & valid, lambda s: self.type_head(h[s]), tgt)
        sel_ms = (kind == TYPE) & valid
        if bool(sel_ms.any()):
            bi = torch.nonzero(sel_ms)[:, 0]
            terms["ms"] = F.cross_entropy(self.ms_logits(h[sel_ms], mc, bi), tgt[sel_ms])
        else:
            terms["ms"] = h.sum() * 0.0
        sel_rs = (kind == MS) & (b["rs_tgt"][..., 0] != IGNORE)
        if bool(sel_rs.any()):
            bins = b["rs_tgt"][sel_rs]
            logits = self.rs_head(h[sel_rs], self.rs_head.targets_to_inputs(bins))
            terms["rs"] = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), bins.reshape(-1))
        else:
            terms["rs"] = h.sum() * 0.0
        total = sum(terms.values())
        return total, {k: float(v.detach()) for k, v in terms.items()}


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------


def collate(seqs: list[TokenSeq], device: str | torch.device = "cpu", seq_offset: int = 0) -> dict[str, Tensor]:
    """Pad token sequences into a batch of tensors (``seq`` = position + offset; padding kind = PAD)."""
    L = max(1, max(len(s) for s in seqs))
    B = len(seqs)
    out = {
        "kind": np.full((B, L), PAD),
        "t": np.zeros((B, L), np.int64),
        "uid": np.full((B, L), -1),
        "slot": np.full((B, L), -1),
        "light": np.full((B, L), -1),
        "val": np.zeros((B, L), np.int64),
        "atype": np.full((B, L), -1),
        "feat": np.zeros((B, L, 8), np.float32),
        "pose": np.zeros((B, L, 3), np.float32),
        "has_pose": np.zeros((B, L), bool),
        "tgt": np.full((B, L), IGNORE),
        "rs_tgt": np.full((B, L, 8), IGNORE),
        "tlseg": np.zeros((B, L), np.int64),
    }
    for i, s in enumerate(seqs):
        n = len(s)
        for k in TokenSeq.FIELDS:
            out[k][i, :n] = getattr(s, k)
        tl = s.kind == TL
        out["tlseg"][i, :n][tl] = s.map.light_seg[s.light[tl]]
    res = {k: torch.as_tensor(v, device=device) for k, v in out.items()}
    for k in ("kind", "t", "uid", "slot", "light", "val", "atype", "tgt", "rs_tgt", "tlseg"):
        res[k] = res[k].long()
    res["feat"], res["pose"] = res["feat"].float(), res["pose"].float()
    res["seq"] = (torch.arange(L, device=device) + seq_offset)[None].expand(B, L).contiguous()
    return res


def collate_maps(maps: list, device: str | torch.device = "cpu") -> dict[str, Tensor]:
    """Pad maps (MapData) into [B, M, ...] tensors."""
    M = max(m.num_segments for m in maps)
    P = maps[0].seg_points.shape[1]
    B = len(maps)
    pts = np.zeros((B, M, P, 2), np.float32)
    pose = np.zeros((B, M, 3), np.float32)
    stype = np.zeros((B, M), np.int64)
    valid = np.zeros((B, M), bool)
    for i, m in enumerate(maps):
        n = m.num_segments
        pts[i, :n], pose[i, :n], stype[i, :n], valid[i, :n] = m.seg_points, m.seg_pose, m.seg_type, True
    t = torch.as_tensor
    return {
        "seg_points": t(pts, device=device),
        "seg_pose": t(pose, device=device),
        "seg_type": t(stype, device=device),
        "seg_valid": t(valid, device=device),
    }


def seq_neighbours(model: InfGenModel, seq: TokenSeq) -> np.ndarray:
    """The keys each token of one sequence may attend to under ``model``'s mask: [L, K] int32 positions,
    -1 after the last (the same lists :func:`neighbours` gives inside the model; precomputed once per
    training sequence because the mask depends on token metadata only)."""
    b = collate([seq])
    meta = {k: b[k] for k in META}
    idx, valid = neighbours(model.allowed(meta, meta))
    return np.where(valid[0].numpy(), idx[0].numpy(), -1).astype(np.int32)


def attach_neighbours(b: dict[str, Tensor], lists: list[np.ndarray]) -> dict[str, Tensor]:
    """Add per-sequence key lists (:func:`seq_neighbours`) to a collated batch as ``nbr_idx`` / ``nbr_valid``
    [B, L, K]; a padding query lists only itself, as the mask lets it."""
    B, L = b["kind"].shape
    K = max(1, max(x.shape[1] for x in lists))
    idx = np.zeros((B, L, K), np.int64)
    valid = np.zeros((B, L, K), bool)
    for i, x in enumerate(lists):
        n, k = x.shape
        idx[i, :n, :k] = np.maximum(x, 0)
        valid[i, :n, :k] = x >= 0
        idx[i, n:, 0] = np.arange(n, L)
        valid[i, n:, 0] = True
    dev = b["kind"].device
    return {**b, "nbr_idx": torch.as_tensor(idx, device=dev), "nbr_valid": torch.as_tensor(valid, device=dev)}
