"""Flow Expander: which model anchors each step, where gradients flow, and metrics on asymmetric inputs.

Gradient table:

| loss / step                                    | nonzero gradient     | exactly zero / none                 |
|------------------------------------------------|----------------------|-------------------------------------|
| flow matching ||v(x_t, t) - (x1 - x0)||^2      | the velocity model   | --                                  |
| adjoint matching ||(2/s)(v_fine - v_base)+s a||| v_fine               | v_base (frozen anchor), a (detached)|
| lean adjoint (VJP of the base drift)           | none (detached a_t)  | base and fine parameters            |
| expand / project anchors (pi_{k-1}, Q~_k, pre) | none (frozen copies) | every anchor parameter              |
"""

import importlib
import math

import numpy as np
import pytest
import torch
from scipy.special import digamma
from torch import nn

from iclr26.flow_expander.adjoint_matching import AMConfig, adjoint_matching, adjoint_matching_loss, lean_adjoint
from iclr26.flow_expander.expander import FEConfig, entropy_reward_grads, flow_expansion, model_score
from iclr26.flow_expander.flow import flow_matching_loss, sigma_t
from iclr26.flow_expander.metrics import grid_coverage, histogram_entropy, kl_entropy, rbf_kernel_median, vendi_score

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the package re-exports functions named like the modules: import the modules themselves
am_mod = importlib.import_module("iclr26.flow_expander.adjoint_matching")
fe_mod = importlib.import_module("iclr26.flow_expander.expander")


class Linear(nn.Module):
    """v(x, t) = a x + c (+ t · d): a tiny velocity model with a ``dim``."""

    def __init__(self, a=0.0, c=(0.0, 0.0), dim=2):
        super().__init__()
        self.dim = dim
        self.a = nn.Parameter(torch.tensor(float(a)))
        self.c = nn.Parameter(torch.tensor(c, dtype=torch.float32))

    def forward(self, x, t):
        return self.a * x + self.c


class HalfSquare(nn.Module):
    """v(x, t) = x^2 / 2: a nonlinear base whose drift Jacobian depends on x (2v = x^2 → J = 2x - k_t)."""

    dim = 1

    def forward(self, x, t):
        return 0.5 * x**2


# ---------------------------------------------------------------- references


def test_expand_reward_reads_the_previous_iterate_and_the_pretrained_score():
    prev, pre = Linear(0.5, (1.0, -2.0)), Linear(-0.3, (0.2, 0.7))
    cfg = FEConfig(beta=0.4, lambda_schedule="const", lambda_scale=1.5, lambda_cutoff=0.95, eps=0.02)
    grad_r, grad_f = entropy_reward_grads(cfg, 0.8, prev, pre)
    x = torch.tensor([[0.3, -1.0], [2.0, 0.5]])
    t = torch.tensor([0.4, 0.9])
    want = -0.8 * 1.5 * (model_score(prev, x, t) - 0.4 * model_score(pre, x, t))
    assert torch.allclose(grad_f(x, t), want, atol=1e-6)
    # terminal reward: grad f at 1 - eps, where lambda is cut off (0.98 > 0.95) → 0 for this schedule
    assert torch.equal(grad_r(x, torch.ones(2)), torch.zeros(2, 2))
    cfg1 = FEConfig(beta=0.4, lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0, eps=0.02)
    gr, _ = entropy_reward_grads(cfg1, 0.8, prev, pre)
    t98 = torch.full((2,), 0.98)
    assert torch.allclose(gr(x, torch.ones(2)), -0.8 * (model_score(prev, x, t98) - 0.4 * model_score(pre, x, t98)))


def _record_anchors(monkeypatch):
    """Replace the oracle by a recorder that moves pi by +1 per call and notes which anchor it was given."""
    calls = []

    def fake_am(fine, base, grad_r, grad_f, cfg, gen, optimizer=None, log=None):
        calls.append(
            {
                "base_a": float(base.a),
                "base_frozen": not any(p.requires_grad for p in base.parameters()),
                "base_is_fine": base is fine,
                "grad_f": grad_f,
            }
        )
        with torch.no_grad():
            fine.a.add_(1.0)
        return [0.0]

    monkeypatch.setattr(fe_mod, "adjoint_matching", fake_am)
    return calls


class _Verifier:
    def grad_log_soft(self, x):
        return torch.zeros_like(x)

    def grad_soft(self, x):
        return torch.zeros_like(x)


def test_expand_anchors_on_previous_iterate_and_project_on_the_expanded_snapshot(monkeypatch):
    calls = _record_anchors(monkeypatch)
    cfg = FEConfig(K=2, gamma=0.5, gamma_schedule="const", eta=1.0)
    res = flow_expansion(Linear(0.0), _Verifier(), cfg)
    # k = 1: expand vs pi_0 (a = 0); project vs Q~_1 (a = 1); k = 2: expand vs pi_1 (a = 2); project vs a = 3
    assert [c["base_a"] for c in calls] == [0.0, 1.0, 2.0, 3.0]
    assert all(c["base_frozen"] and not c["base_is_fine"] for c in calls)
    assert calls[0]["grad_f"] is not None and calls[1]["grad_f"] is None  # project: terminal reward only
    assert float(res.model.a.detach()) == 4.0


def test_official_projection_anchor_is_the_previous_iterate(monkeypatch):
    calls = _record_anchors(monkeypatch)
    cfg = FEConfig(K=2, gamma=0.5, gamma_schedule="const", eta=1.0, projection_anchor="previous")
    flow_expansion(Linear(0.0), _Verifier(), cfg)
    assert [c["base_a"] for c in calls] == [0.0, 0.0, 2.0, 2.0]


def test_adjoint_matching_samples_fine_and_solves_the_adjoint_of_base(monkeypatch):
    """On-policy data from v_fine; the lean adjoint with the *base* drift; the regression pairs x_t, t, a_t of one
    grid time."""
    fine, base = Linear(0.1), Linear(-0.2)
    seen = {}
    steps, n = 4, 3

    def fake_sample(model, n_traj, dim, st, gen):
        seen["sampled"] = model
        traj = torch.arange(st + 1, dtype=torch.float32)[:, None, None].expand(st + 1, n_traj, dim).clone()
        return traj, torch.linspace(0.0, 1.0, st + 1)

    def fake_adjoint(model, traj, times, grad_r, grad_f, clip, running_time):
        seen["adjoint"] = model
        return 10.0 * traj  # a_t tagged with its grid index

    def fake_loss(f, base_v, x, t, adj):
        seen.setdefault("batches", []).append((x.clone(), t.clone(), adj.clone(), base_v.clone()))
        return ((f(x, t) - base_v) ** 2).sum(-1).mean()

    monkeypatch.setattr(am_mod, "sample_memoryless", fake_sample)
    monkeypatch.setattr(am_mod, "lean_adjoint", fake_adjoint)
    monkeypatch.setattr(am_mod, "adjoint_matching_loss", fake_loss)
    cfg = AMConfig(n_traj=n, steps=steps, n_datasets=1, grad_steps=2, batch_size=5)
    adjoint_matching(fine, base, None, None, cfg, torch.Generator().manual_seed(0))
    assert seen["sampled"] is fine and seen["adjoint"] is base
    for x, t, adj, vb in seen["batches"]:
        i = x[:, 0]  # grid index of each pair
        assert bool(((i >= 1) & (i <= steps - 1)).all())  # interior times only (t = 0 and t = 1 excluded)
        assert torch.allclose(t, i / steps)
        assert torch.allclose(adj, 10.0 * x)
        assert torch.allclose(vb, base(x, t).detach())


def test_flow_matching_interpolates_from_noise_to_data():
    x1 = torch.tensor([[3.0, -1.0], [0.5, 2.0], [-2.0, 4.0]])
    seen = {}

    class Rec(nn.Module):
        def forward(self, x, t):
            seen["x"], seen["t"] = x.clone(), t.clone()
            return torch.zeros_like(x)

    loss = flow_matching_loss(Rec(), x1, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(x1.shape, generator=g)
    t = torch.rand(3, generator=g)
    assert torch.allclose(seen["t"], t)
    assert torch.allclose(seen["x"], t[:, None] * x1 + (1 - t[:, None]) * x0)
    assert float(loss) == pytest.approx(float(((x1 - x0) ** 2).sum(-1).mean()), rel=1e-6)


# ---------------------------------------------------------------- gradient flow / adjoint recursion


def test_lean_adjoint_recursion_hand_computed():
    """a_1 = -grad r; a_i = a_{i+1} + h (2 X_i - k_{t_i}) a_{i+1} - h grad f(X_i, s_i) for v = x^2 / 2."""
    T = 3
    h = 1.0 / T
    times = torch.linspace(0.0, 1.0, T + 1)
    traj = torch.tensor([[[0.5]], [[-1.0]], [[2.0]], [[0.7]]])  # (T + 1, B = 1, d = 1)
    c = 0.6

    def grad_r(x, t):
        return torch.full_like(x, c)

    def grad_f(x, t):
        return t.reshape(-1, 1) * 2.0 + x  # depends on both time and state

    for running_time, shift in (("t", 0.0), ("t+h", h)):
        got = lean_adjoint(HalfSquare(), traj, times, grad_r, grad_f, running_time=running_time)
        a = -c
        want = [a]
        for i in range(T - 1, -1, -1):
            x, t = float(traj[i, 0, 0]), float(times[i])
            a = a + h * (2 * x - 1.0 / (t + h)) * a - h * (2.0 * (t + shift) + x)
            want.append(a)
        assert torch.allclose(got[:, 0, 0], torch.tensor(want[::-1]), atol=1e-5), running_time
        assert not got.requires_grad


def test_adjoint_matching_loss_value_and_gradient_reach_fine_only():
    fine = Linear(0.3, (0.1, -0.2))
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    t = torch.tensor([0.25, 0.75])
    base_v = torch.tensor([[0.2, 0.1], [-0.4, 0.3]])
    adj = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    loss = adjoint_matching_loss(fine, base_v, x, t, adj)
    sig = torch.sqrt(2 * (1 - t) / t)[:, None]
    want = (((2 / sig) * (fine(x, t) - base_v) + sig * adj) ** 2).sum(-1).mean()
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-6)
    ga, gc = torch.autograd.grad(loss, [fine.a, fine.c])
    assert float(ga.abs()) > 0 and float(gc.abs().sum()) > 0


def test_adjoint_matching_moves_fine_and_leaves_the_base_untouched():
    torch.manual_seed(0)
    fine, base = Linear(0.0, (0.0, 0.0)), Linear(0.0, (0.0, 0.0))
    cfg = AMConfig(n_traj=16, steps=4, n_datasets=1, grad_steps=3, batch_size=16, lr=1e-2)
    adjoint_matching(fine, base, lambda x, t: torch.ones_like(x), None, cfg, torch.Generator().manual_seed(0))
    assert float(fine.c.detach().abs().sum()) > 0
    assert float(base.a) == 0.0 and torch.equal(base.c.detach(), torch.zeros(2))
    assert all(p.grad is None for p in base.parameters())
    assert not any(p.requires_grad for p in base.parameters())  # the oracle freezes its anchor
    # reward ascent: grad r = (1, 1) pushes the fine velocity's offset up
    assert bool((fine.c.detach() > 0).all())


# ---------------------------------------------------------------- metrics, hand-computed, asymmetric


def test_kl_entropy_hand_computed_1d():
    x = np.array([0.0, 1.0, 3.0, 7.0, 8.0])  # nearest-neighbour distances 1, 1, 2, 1, 1
    want = digamma(5) - digamma(1) + math.log(2.0) + np.mean(np.log([1, 1, 2, 1, 1]))
    assert kl_entropy(x, k=1) == pytest.approx(want, rel=1e-9)
    # k = 2: distances to the 2nd neighbour 3, 2, 3, 4, 5
    want2 = digamma(5) - digamma(2) + math.log(2.0) + np.mean(np.log([3, 2, 3, 4, 5]))
    assert kl_entropy(x, k=2) == pytest.approx(want2, rel=1e-9)


def test_histogram_entropy_plugin_hand_computed():
    x = np.array([0.1, 0.2, 0.3, 1.2])  # bins of width 0.5 on [0, 4): counts 3 (bin 0), 1 (bin 2)
    want = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) + math.log(0.5)
    assert histogram_entropy(x, bin_width=0.5, box=(0.0, 4.0), correction="none") == pytest.approx(want)
    mm = histogram_entropy(x, bin_width=0.5, box=(0.0, 4.0), correction="miller_madow")
    assert mm == pytest.approx(want + 1 / 8)


def test_grid_coverage_asymmetric():
    # 2 x 2 grid on [0, 2)^2 (cell 1); Omega = {x > 1}: cells (1, 0) and (1, 1)
    x = np.array([[1.5, 0.5], [1.6, 0.4]])  # both in cell (1, 0): one of Omega's two cells
    assert grid_coverage(x, lambda g: g[:, 0] > 1.0, cell=1.0, box=(0.0, 2.0)) == pytest.approx(0.5)
    # the transposed cell (0, 1) is outside Omega
    assert grid_coverage(x[:, ::-1], lambda g: g[:, 0] > 1.0, cell=1.0, box=(0.0, 2.0)) == 0.0


def test_vendi_score_block_kernel():
    k = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # eigenvalues of K / 3: 2/3, 1/3
    want = math.exp(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)))
    assert vendi_score(k) == pytest.approx(want, rel=1e-9)
    assert vendi_score(np.eye(3)) == pytest.approx(3.0)


def test_rbf_kernel_uses_the_median_distance():
    f = np.array([[0.0], [1.0], [4.0]])  # distances 1, 4, 3: median 3 (mean 8/3)
    k = rbf_kernel_median(f)
    b2 = 2 * 9.0
    want = np.array([[1, math.exp(-1 / b2), math.exp(-16 / b2)], [math.exp(-1 / b2), 1, math.exp(-9 / b2)], [0, 0, 1]])
    want[2, 0], want[2, 1] = want[0, 2], want[1, 2]
    assert np.allclose(k, want)


def test_sigma_t_is_the_memoryless_level():
    t = torch.tensor([0.25, 0.5])
    assert torch.allclose(sigma_t(t), torch.tensor([math.sqrt(6.0), math.sqrt(2.0)]))
