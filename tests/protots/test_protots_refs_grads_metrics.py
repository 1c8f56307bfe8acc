"""References, gradient flow and metrics of ProtoTS (Eqs. 4-6, Sec. 3.5) on tiny hand-made inputs."""

import math

import pytest
import torch

from iclr26.protots.config import ProtoTSConfig
from iclr26.protots.model import ProtoTS, assignment_entropy, protots_loss, prototype_weights, select_split
from iclr26.protots.training import _protots_loss_fn, set_trainable

pytestmark = pytest.mark.usefixtures("one_torch_thread")

L, H, CARDS, NCON = 4, 3, (3,), 1


def _model(**kw):
    return ProtoTS(CARDS, NCON, L, H, ProtoTSConfig(d=4, d_bottle=2, n_roots=2, **kw), seed=0)


def _batch(B=5):
    g = torch.Generator().manual_seed(1)
    y_hist = torch.randn(B, L, generator=g)
    x_dis = torch.randint(0, 3, (B, L + H, 1), generator=g)
    x_con = torch.randn(B, L + H, NCON, generator=g)
    return y_hist, x_dis, x_con, torch.randn(B, H, generator=g)


# ---- references ---------------------------------------------------------------------------------


def test_weights_favour_the_nearer_prototype_and_depend_on_which_is_z():
    z = torch.tensor([[0.0, 0.0]])
    mus = torch.tensor([[1.0, 0.0], [3.0, 0.0]])
    f = prototype_weights(z, mus)
    # Eq. 4: exp(-1) / (exp(-1) + exp(-3)) for the nearer one (plain distance, +eps inside the sqrt)
    assert f[0, 0].item() == pytest.approx(math.exp(-1) / (math.exp(-1) + math.exp(-3)), abs=1e-4)
    fsq = prototype_weights(z, mus, squared=True)
    assert fsq[0, 0].item() == pytest.approx(math.exp(-1) / (math.exp(-1) + math.exp(-9)), abs=1e-5)
    # moving z onto the far prototype flips the preference
    assert prototype_weights(torch.tensor([[3.0, 0.0]]), mus)[0, 1] > 0.5


def test_loss_entropy_term_uses_the_root_weights_and_penalises_spread():
    y, y_hat = torch.zeros(1, 2), torch.tensor([[1.0, 2.0]])
    one_hot, uniform = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.5]])
    assert protots_loss(y_hat, y, one_hot, 0.5).item() == pytest.approx(3.0, abs=1e-5)  # L1 summed over H
    assert protots_loss(y_hat, y, one_hot, 0.5, "mean").item() == pytest.approx(1.5, abs=1e-5)
    assert protots_loss(y_hat, y, uniform, 0.5).item() == pytest.approx(3.0 + 0.5 * math.log(2), abs=1e-5)


def test_forward_mixes_root_curves_with_root_weights_and_split_root_uses_children():
    m = _model()
    yh, xd, xc, _ = _batch()
    with torch.no_grad():
        m.roots[0].p.copy_(torch.tensor([1.0, 2.0, 3.0]))
        m.roots[1].p.copy_(torch.tensor([-5.0, 0.0, 5.0]))
        y_hat, f = m(yh, xd, xc)
        expect = f[:, :1] * m.roots[0].p + f[:, 1:] * m.roots[1].p
        assert torch.allclose(y_hat, expect, atol=1e-5)
        m.split_prototype("0", M=2, eps=0.5, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(m(yh, xd, xc)[0], y_hat, atol=1e-5)  # function-preserving split
        m.roots[0].kids[1].p.copy_(torch.tensor([10.0, 10.0, 10.0]))
        m.roots[0].p.fill_(-100.0)  # the split parent's own curve is no longer used
        z = m.encode(yh, xd, xc)
        w = prototype_weights(z, torch.stack([k.mu for k in m.roots[0].kids]))
        child = w[:, :1] * m.roots[0].kids[0].p + w[:, 1:] * m.roots[0].kids[1].p
        y2, f2 = m(yh, xd, xc)
        assert torch.allclose(y2, f2[:, :1] * child + f2[:, 1:] * m.roots[1].p, atol=1e-4)


# ---- gradient flow -------------------------------------------------------------------------------
# stage     | encoder + pool | root mu | leaf p | split parent's p | children mu, p
# all       | nonzero        | nonzero | nonzero| none (frozen)    | nonzero
# children  | none           | none    | none   | none             | nonzero


def _grads(m):
    loss, _ = _protots_loss_fn(0.1, "sum")(m, _Win(*_batch()))
    loss.backward()
    return {n: (None if p.grad is None else float(p.grad.abs().sum())) for n, p in m.named_parameters()}


class _Win:
    def __init__(self, y_hist, x_dis, x_con, y):
        self.y_hist, self.x_dis, self.x_con, self.y = y_hist, x_dis, x_con, y


def test_gradient_table_all_stage():
    m = _model()
    m.split_prototype("0", M=2, eps=0.5, generator=torch.Generator().manual_seed(0))
    set_trainable(m, "all")
    g = _grads(m)
    assert g["pool"] and g["roots.1.mu"] and g["roots.1.p"] and g["roots.0.mu"]
    assert g["roots.0.kids.0.mu"] and g["roots.0.kids.1.p"]
    assert any(g[n] for n in g if n.startswith("embed.")) and any(g[n] for n in g if n.startswith("mixer."))
    assert g["roots.0.p"] is None  # the split parent's curve is frozen


def test_gradient_table_children_stage():
    m = _model()
    m.split_prototype("1", M=2, eps=0.5, generator=torch.Generator().manual_seed(0))
    set_trainable(m, "children")
    g = _grads(m)
    kids = {n for n in g if n.startswith("roots.1.kids.")}
    assert kids and all(g[n] for n in kids)
    assert all(g[n] is None for n in g if n not in kids)


def test_root_mu_gets_gradient_from_the_entropy_term_alone():
    m = _model()
    yh, xd, xc, y = _batch()
    y_hat, f = m(yh, xd, xc)
    ent = assignment_entropy(f).mean()
    g_mu, g_p = torch.autograd.grad(ent, [m.roots[0].mu, m.roots[0].p], allow_unused=True)
    assert g_mu.abs().sum() > 0 and g_p is None  # entropy depends on mu (weights), not on the curves


# ---- metrics -------------------------------------------------------------------------------------


def test_select_split_by_mean_associated_mae_on_asymmetric_leaves():
    assign = torch.tensor([0, 0, 1, 2, 2, 2])
    mae = torch.tensor([1.0, 3.0, 5.0, 0.0, 0.0, 9.0])  # means: a=2, b=5, c=3 (sum ranks c above a, mean does not)
    assert select_split(["a", "b", "c", "d"], assign, mae, 0.5) == ["b", "c"]  # ceil(0.5 * 4) = 2; d has none
    assert select_split(["a", "b", "c", "d"], assign, mae, 0.25) == ["b"]
    assert select_split(["a", "b", "c", "d"], assign, mae, 1.0) == ["b", "c", "a"]


def test_assignment_entropy_hand_computed():
    f = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]])
    e = assignment_entropy(f)
    assert e[0].item() == pytest.approx(0.0, abs=1e-6)
    assert e[1].item() == pytest.approx(-(0.5 * math.log(0.5) + 0.5 * math.log(0.25)), abs=1e-6)


def test_loss_gradient_reaches_both_the_forecast_and_the_root_weights():
    y_hat = torch.tensor([[1.0, -2.0]], requires_grad=True)
    f = torch.tensor([[0.7, 0.3]], requires_grad=True)
    g_y, g_f = torch.autograd.grad(protots_loss(y_hat, torch.zeros(1, 2), f, 0.5), [y_hat, f])
    assert torch.allclose(g_y, torch.tensor([[1.0, -1.0]]))  # sign of the error, summed over H
    # d/df_i of lam * (-sum f log f) = -lam * (log f_i + 1)
    assert torch.allclose(g_f, -0.5 * (torch.log(torch.tensor([[0.7, 0.3]])) + 1), atol=1e-5)
