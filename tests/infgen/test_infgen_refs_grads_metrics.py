"""Which head reads which token kind, where the loss's gradient goes, and hand-computed metrics of InfGen."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr26.infgen.config import config_for
from iclr26.infgen.metrics import wasserstein1
from iclr26.infgen.model import InfGenModel
from iclr26.infgen.tokenizer import IGNORE, MO, PAD, SOA, TL

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _setup():
    torch.manual_seed(0)
    model = InfGenModel(config_for("smoke").model)
    with torch.no_grad():  # heads start at zero output (uniform logits): move them off it
        for head in (model.mo_head, model.tl_head, model.type_head):
            for p in head.parameters():
                p.normal_(0.0, 0.3)
    d = model.cfg.d_model
    h = torch.randn(1, 5, d, requires_grad=True)
    kind = torch.tensor([[MO, TL, SOA, MO, PAD]])
    tgt = torch.tensor([[1, 2, 3, IGNORE, IGNORE]])  # the second MO token has no target
    b = {"kind": kind, "tgt": tgt, "rs_tgt": torch.full((1, 5, 2), IGNORE)}
    return model, h, b


# ---- references: each head on its own token kind, targets of that token ---------------------------


def test_each_term_is_its_heads_cross_entropy_on_its_own_tokens():
    model, h, b = _setup()
    total, terms = model.loss_from_hidden(h, None, b)
    with torch.no_grad():
        mo = F.cross_entropy(model.mo_head(h[0, :1]), torch.tensor([1]))
        tl = F.cross_entropy(model.tl_head(h[0, 1:2]), torch.tensor([2]))
        ty = F.cross_entropy(model.type_head(h[0, 2:3]), torch.tensor([3]))
    assert terms["mo"] == pytest.approx(float(mo), abs=1e-5)
    assert terms["tl"] == pytest.approx(float(tl), abs=1e-5)
    assert terms["type"] == pytest.approx(float(ty), abs=1e-5)
    assert terms["ms"] == 0.0 and terms["rs"] == 0.0
    assert float(total.detach()) == pytest.approx(float(mo + tl + ty), abs=1e-4)


# ---- gradient flow -------------------------------------------------------------------------------
# term  | h at MO (with target) | h at MO (IGNORE) | h at TL | h at SOA | mo_head | tl_head | type_head
# mo    | nonzero               | 0                | 0       | 0        | nonzero | none    | none
# tl    | 0                     | 0                | nonzero | 0        | none    | nonzero | none
# type  | 0                     | 0                | 0       | nonzero  | none    | none    | nonzero


@pytest.mark.parametrize(
    ("term", "pos", "head"), [("mo", 0, "mo_head"), ("tl", 1, "tl_head"), ("type", 2, "type_head")]
)
def test_gradient_table(term, pos, head, monkeypatch):
    model, h, b = _setup()
    captured = {}
    orig = F.cross_entropy

    def spy(logits, targets, *a, **k):  # keep each term's graph (the method returns floats for the terms)
        out = orig(logits, targets, *a, **k)
        captured.setdefault("list", []).append(out)
        return out

    monkeypatch.setattr(F, "cross_entropy", spy)
    model.loss_from_hidden(h, None, b)
    order = {"mo": 0, "tl": 1, "type": 2}
    loss = captured["list"][order[term]]
    heads = {n: getattr(model, n) for n in ("mo_head", "tl_head", "type_head")}
    params = [p for m in heads.values() for p in m.parameters()]
    grads = torch.autograd.grad(loss, [h, *params], allow_unused=True)
    gh = grads[0][0].abs().sum(-1)
    assert gh[pos] > 0 and float(gh.sum() - gh[pos]) == 0.0
    i = 1
    for name, m in heads.items():
        n = len(list(m.parameters()))
        s = sum(0.0 if g is None else float(g.abs().sum()) for g in grads[i : i + n])
        assert (s > 0) == (name == head), (term, name, s)
        i += n


# ---- metrics -------------------------------------------------------------------------------------


def test_wasserstein1_hand_computed_on_unequal_samples():
    # quantile functions: a = 0 on [0, 1/2), 4 on [1/2, 1); b = 1 on [0, 1)  -> W1 = 1/2 * 1 + 1/2 * 3 = 2
    assert wasserstein1(np.array([4.0, 0.0]), np.array([1.0, 1.0, 1.0])) == pytest.approx(2.0)
    assert wasserstein1(np.array([0.0, 1.0]), np.array([])) == float("inf")
