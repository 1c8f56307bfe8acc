"""APT: subject vs object inputs, where gradients flow (frozen tables, prompts, distillation), the regularisers
and the SGG metrics on asymmetric hand-computed inputs.

Gradient-flow table (``RelationModel.loss``, small synthetic tables):

==========================  ===========  ===========  ===========  ============
parameter                   b0           apt          noprompt     unfrozen
==========================  ===========  ===========  ===========  ============
static tables (buffers)     none         none         none         (absent)
trainable tables            (absent)     (absent)     (absent)     nonzero
detection / relation P      (absent)     nonzero      frozen 0     (absent)
f_theta, phi (APT)          (absent)     nonzero      nonzero      (absent)
head (mlp_s/o/r, w_e, w_p)  nonzero      nonzero      nonzero      nonzero
==========================  ===========  ===========  ===========  ============

The distillation term E||e~ - e_static||^2 sends gradient into the APT modules only (the static table is a
buffer), with e_static the frozen vector of the same class.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from iclr26.apt.apt import RegWeights, apt_regularizers, gate_entropy, orthogonality
from iclr26.apt.config import APTConfig, HeadConfig
from iclr26.apt.models import GEO_DIM, RelationModel
from iclr26.apt.sgg_metrics import ImageGraph, f_at_k, mean_recall_at_k, per_predicate_recall, recall_at_k

FEAT, C, R, D = 12, 5, 4, 10


def _model(variant: str, reg: RegWeights | None = None) -> RelationModel:
    torch.manual_seed(0)
    obj, pred = torch.randn(C, D), torch.randn(R, D)
    apt = APTConfig(hidden=16, rcg_hidden=8, frf_hidden=8, prompt_len=3)
    if reg is not None:
        apt = APTConfig(**{**apt.__dict__, "reg": reg})
    return RelationModel(obj, pred, variant, apt, HeadConfig(width=16, sem_dim=8), FEAT)


def _batch(n: int = 6, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "cls_s": torch.randint(0, C, (n,), generator=g),
        "cls_o": torch.randint(0, C, (n,), generator=g),
        "vis_s": torch.randn(n, FEAT, generator=g),
        "vis_o": torch.randn(n, FEAT, generator=g),
        "union": torch.randn(n, FEAT, generator=g),
        "geo": torch.randn(n, GEO_DIM, generator=g),
        "label": torch.tensor([0, 1, 2, 3, 4, 1])[:n],
    }


# ---------------------------------------------------------------- subject / object references


def test_subject_and_object_branches_get_their_own_class_and_feature():
    m = _model("apt")
    b = _batch()
    b["cls_o"] = (b["cls_s"] + 1) % C  # subject and object differ in class and feature
    seen = {}
    m.mlp_s.register_forward_hook(lambda mod, inp, out: seen.__setitem__("s", inp[0].detach()))
    m.mlp_o.register_forward_hook(lambda mod, inp, out: seen.__setitem__("o", inp[0].detach()))
    m(b)
    with torch.no_grad():
        es = m.obj_apt(b["cls_s"], b["vis_s"], "detection")
        eo = m.obj_apt(b["cls_o"], b["vis_o"], "detection")
        assert torch.allclose(seen["s"], torch.cat([b["vis_s"], m.w_e(es)], -1), atol=1e-6)
        assert torch.allclose(seen["o"], torch.cat([b["vis_o"], m.w_e(eo)], -1), atol=1e-6)
    # the relation is ordered: swapping subject and object changes the logits
    sw = dict(b, cls_s=b["cls_o"], cls_o=b["cls_s"], vis_s=b["vis_o"], vis_o=b["vis_s"])
    with torch.no_grad():
        assert not torch.allclose(m(sw), m(b), atol=1e-4)


def test_entity_embedding_uses_the_visual_context_of_the_same_entity():
    m = _model("apt")
    b = _batch()
    v = b["vis_s"].clone().requires_grad_(True)
    e = m.entity_embedding(b["cls_s"], v)
    (g,) = torch.autograd.grad(e[2].sum(), v)
    assert float(g[2].abs().max()) > 0
    assert float(g[[0, 1, 3, 4, 5]].abs().max()) == 0.0


# ---------------------------------------------------------------- gradient flow


def _grads(m: RelationModel, out: torch.Tensor) -> dict[str, float]:
    named = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    gs = torch.autograd.grad(out, [p for _, p in named], allow_unused=True, retain_graph=True)
    return {n: (0.0 if g is None else float(g.abs().max())) for (n, _), g in zip(named, gs)}


@pytest.mark.parametrize("variant", ["b0", "apt", "noprompt", "unfrozen"])
def test_gradient_table(variant):
    m = _model(variant)
    b = _batch()
    loss, _ = m.loss(b)
    g = _grads(m, loss)
    assert all(v > 0 for v in g.values()), [n for n, v in g.items() if v == 0]
    names = set(g)
    assert "obj_static" not in names and "pred_static" not in names
    assert not any(n.endswith("static") for n, _ in m.named_parameters())
    has_prompts = any("prompt_" in n for n in names)
    assert has_prompts == (variant == "apt")
    if variant == "noprompt":
        assert float(m.obj_apt.prompt_det.abs().sum()) == 0 and not m.obj_apt.prompt_det.requires_grad
    assert ("obj_table" in names) == (variant == "unfrozen")


def test_distillation_pulls_the_apt_embedding_towards_its_own_static_vector():
    """With only lambda_d on, loss - CE = lambda_d * E||e~ - e_static||^2 over the subject entities and every
    predicate; it has a gradient into the APT modules (no detach) and is the hand-computed value."""
    reg = RegWeights(lambda_p=0, lambda_pd=0, lambda_pr=0, lambda_d=1.0, lambda_orth=0, beta=0, gamma=0)
    m = _model("apt", reg)
    b = _batch()
    loss, logs = m.loss(b)
    ce = torch.nn.functional.cross_entropy(m(b), b["label"])
    extra = loss - ce
    with torch.no_grad():
        es = m.obj_static[b["cls_s"]]
        ea = m.obj_apt(b["cls_s"], b["vis_s"], "detection")
        ctx = torch.cat([b["union"], b["geo"]], -1)
        pe = m.pred_apt.all_classes(ctx, "general")  # [B, R, D]
        ps = m.pred_static.unsqueeze(0).expand_as(pe)
        d2 = torch.cat([(ea - es).pow(2).sum(-1), (pe - ps).pow(2).sum(-1).reshape(-1)])
    assert float(extra) == pytest.approx(float(d2.mean()), rel=1e-5)
    assert logs["distill"] == pytest.approx(float(d2.mean()), rel=1e-5)
    g = _grads(m, extra)
    for prefix in ("obj_apt.fusion", "obj_apt.prompt_det", "pred_apt.fusion", "pred_apt.prompt_rel"):
        assert max(v for n, v in g.items() if n.startswith(prefix)) > 1e-4, prefix
    for prefix in ("mlp_s", "mlp_o", "mlp_r", "w_e", "w_p", "bg"):  # CE - CE: rounding only
        assert max(v for n, v in g.items() if n.startswith(prefix)) < 1e-6, prefix


# ---------------------------------------------------------------- regularisers, hand-computed


def test_gate_entropy_and_prior_kl_hand_computed():
    w = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    h = [
        -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)),
        -(2 * 0.1 * math.log(0.1) + 0.8 * math.log(0.8)),
    ]
    assert float(gate_entropy(w)) == pytest.approx(sum(h) / 2, rel=1e-6)
    terms = apt_regularizers(torch.nn.Linear(1, 1), gates=w)
    wbar = [0.4, 0.15, 0.45]
    kl = sum(p * math.log(p * 3) for p in wbar)
    assert float(terms["kl_prior"]) == pytest.approx(kl, rel=1e-5)


def test_orthogonality_counts_each_pair_of_different_bases_once():
    b = torch.zeros(3, 1, 2)
    b[0, 0] = torch.tensor([1.0, 0.0])
    b[1, 0] = torch.tensor([2.0, 1.0])
    b[2, 0] = torch.tensor([0.0, 3.0])
    # <b0,b1>^2 = 4, <b0,b2>^2 = 0, <b1,b2>^2 = 9; the diagonal (self terms) is left out
    assert float(orthogonality(b)) == pytest.approx(13.0)


# ---------------------------------------------------------------- SGG metrics, hand-computed


def _images():
    # image A: 3 candidate pairs, 2 GT triplets; image B: 2 pairs, 1 GT triplet
    a = ImageGraph(
        pairs=np.array([[0, 1], [1, 0], [0, 2]]),
        scores=np.array([[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.1, 0.3], [0.0, 0.1, 0.8, 0.1]]),
        gt=np.array([[0, 1, 1], [1, 0, 2]]),
    )
    b = ImageGraph(
        pairs=np.array([[0, 1], [1, 0]]),
        scores=np.array([[0.9, 0.05, 0.05, 0.0], [0.2, 0.3, 0.5, 0.0]]),
        gt=np.array([[0, 1, 2]]),
    )
    return [a, b]


def test_recall_and_mean_recall_hand_computed():
    ims = _images()
    # graph constraint, K = 2. A: top pairs by max fg score: (0,2) 0.8 -> pred 2, (0,1) 0.6 -> pred 1 => hit
    # (0,1,1), miss (1,0,2) -> 1/2. B: (1,0) 0.5 -> pred 2, (0,1) 0.05 -> pred 1 => miss (0,1,2) -> 0.
    assert recall_at_k(ims, 2) == pytest.approx(100 * (0.5 + 0.0) / 2)
    # K = 3 in A adds (1,0) -> pred 3 (0.3): still misses (1,0,2)
    assert recall_at_k(ims, 3) == pytest.approx(25.0)
    # per predicate: pred 1 in A hit (1.0); pred 2 in A miss (0) and in B miss (0)
    assert per_predicate_recall(ims, 2) == {1: pytest.approx(100.0), 2: pytest.approx(0.0)}
    assert mean_recall_at_k(ims, 2) == pytest.approx(50.0)
    assert mean_recall_at_k(ims, 2, classes=[1, 2, 3]) == pytest.approx(100 / 3)
    # no graph constraint, K = 3 in A: 0.8 (0,2,2), 0.6 (0,1,1), 0.3 (1,0,3); B, K = 3: 0.5 (1,0,2),
    # 0.3 (1,0,1), 0.05 (0,1,1) (stable order) -> still misses (0,1,2)
    assert recall_at_k(ims, 3, graph_constraint=False) == pytest.approx(25.0)
    # K = 4 in B reaches (0,1,2)
    assert recall_at_k(ims, 4, graph_constraint=False) == pytest.approx(100 * (0.5 + 1.0) / 2)
    assert f_at_k(60.0, 20.0) == pytest.approx(2 * 60 * 20 / 80)
