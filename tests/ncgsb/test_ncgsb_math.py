"""Exact reductions and invariants of the contact geodesic term (Herglotz action, modes, Euler-Lagrange)."""

import math

import numpy as np
import pytest
import torch

from iclr26.ncgsb.bridge import (
    CWGBridge,
    conservative_geodesic_loss,
    discount_weights,
    discounted_action,
    discrete_geodesic,
    fisher_term,
    geodesic_loss,
    herglotz_euler,
    herglotz_exact,
    kde_score,
    phi_gamma,
    state_costs,
    step_costs,
)
from iclr26.ncgsb.config import CWGConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("gamma", [-2.0, 0.5, 3.0])
def test_herglotz_recursion_equals_discounted_sum(gamma):
    # z_K = gain·e^{-γ}/h · h Σ_k e^{γ t_k} L_k with gain = (1 - e^{-γh})/γ (exact integrator)
    torch.manual_seed(1)
    k, h = 12, 1 / 12
    lag = torch.rand(k, dtype=torch.float64) * 3
    z = herglotz_exact(lag, gamma, h)
    gain = (1 - math.exp(-gamma * h)) / gamma
    assert torch.allclose(z, gain * math.exp(-gamma) / h * discounted_action(lag, gamma, h), rtol=1e-12)


def test_herglotz_gamma0_is_plain_action():
    lag = torch.rand(7, dtype=torch.float64)
    assert torch.allclose(herglotz_exact(lag, 0.0, 1 / 7), lag.sum() / 7)
    assert torch.allclose(discounted_action(lag, 0.0, 1 / 7), lag.sum() / 7)


def test_herglotz_euler_converges_first_order():
    # L(t) = 1 + sin 3t on a grid; Euler's error against the exact integrator halves with h
    errs = []
    for k in (50, 100, 200):
        t = torch.arange(1, k + 1, dtype=torch.float64) / k
        lag = 1 + torch.sin(3 * t)
        errs.append(abs(float(herglotz_euler(lag, 2.0, 1 / k) - herglotz_exact(lag, 2.0, 1 / k))))
    assert errs[0] > errs[1] > errs[2] > 0
    assert 1.8 < errs[0] / errs[1] < 2.2 and 1.8 < errs[1] / errs[2] < 2.2


def test_discount_weights():
    w = discount_weights(2.0, 4)
    assert torch.allclose(w, torch.exp(2.0 * torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64)))


@pytest.mark.parametrize("mode", ["action", "jacobi"])
def test_gamma0_is_bitwise_conservative(mode):
    torch.manual_seed(0)
    steps, states = torch.rand(10), torch.rand(10)
    nc = geodesic_loss(steps, states, 0.0, mode, energy_level=1.7)
    assert torch.equal(nc, conservative_geodesic_loss(steps, states, mode, energy_level=1.7))
    assert not torch.equal(geodesic_loss(steps, states, 0.5, mode, 1.7), nc)


def test_gamma0_bridge_loss_is_bitwise_conservative():
    torch.manual_seed(0)
    bridge = CWGBridge(2, CWGConfig(n_blocks=5, hidden=8, gamma=0.0))
    for blk in bridge.blocks:
        torch.nn.init.normal_(blk[-1].weight, std=0.3)
    path = bridge(torch.randn(16, 2))
    steps = torch.stack([((b - a) ** 2).sum(-1).mean() for a, b in zip(path[:-1], path[1:])])
    ref = (steps / (2 * 0.2) + 0.2 * torch.zeros(5)).sum()
    assert torch.equal(bridge.geodesic(path), ref)


@pytest.mark.parametrize("gamma", [-2.0, 0.0, 1.5])
def test_modes_agree_without_potential(gamma):
    # U = B = 0: jacobi = 2hE₀ · action, so both have the same minimiser
    torch.manual_seed(0)
    steps, zero = torch.rand(8, dtype=torch.float64), torch.zeros(8, dtype=torch.float64)
    e0, h = 2.5, 1 / 8
    act = geodesic_loss(steps, zero, gamma, "action")
    jac = geodesic_loss(steps, zero, gamma, "jacobi", e0)
    assert torch.allclose(jac, 2 * h * e0 * act, rtol=1e-12)
    p_act = discrete_geodesic(gamma, 8, torch.zeros(2), torch.tensor([3.0, 1.0]), "action")
    p_jac = discrete_geodesic(gamma, 8, torch.zeros(2), torch.tensor([3.0, 1.0]), "jacobi", e0)
    assert torch.allclose(p_act, p_jac, atol=1e-10)


def test_action_mode_state_term_weight():
    # action: Σ_k e^{γt_k}[W_k/(2h) + h·F_k]; hand value for K = 2
    steps = torch.tensor([1.0, 2.0], dtype=torch.float64)
    states = torch.tensor([3.0, 5.0], dtype=torch.float64)
    g = 0.7
    want = math.exp(g * 0.5) * (1.0 / 1.0 + 0.5 * 3.0) + math.exp(g) * (2.0 / 1.0 + 0.5 * 5.0)
    assert abs(float(geodesic_loss(steps, states, g, "action")) - want) < 1e-12
    want_j = math.exp(g * 0.5) * (1.2 + 3.0) * 1.0 + math.exp(g) * (1.2 + 5.0) * 2.0
    assert abs(float(geodesic_loss(steps, states, g, "jacobi", 1.2)) - want_j) < 1e-12


@pytest.mark.parametrize("gamma", [-2.0, 0.0, 1.0, 3.0])
def test_discrete_euler_lagrange_damped_steps(gamma):
    k = 10
    path = discrete_geodesic(gamma, k, torch.tensor([0.0, 0.0]), torch.tensor([4.0, -1.0]))
    d = path[1:] - path[:-1]
    ratio = d[1:, 0] / d[:-1, 0]
    assert torch.allclose(ratio, torch.full_like(ratio, math.exp(-gamma / k)), atol=1e-9)
    share = (path[:, 0] / 4.0).numpy()
    assert np.allclose(share, phi_gamma(gamma, np.arange(k + 1) / k), atol=1e-9)


def test_phi_gamma_limits():
    t = np.linspace(0, 1, 11)
    assert np.allclose(phi_gamma(0.0, t), t)
    assert np.allclose(phi_gamma(1e-8, t), t, atol=1e-6)
    assert phi_gamma(3.0, 0.5) > 0.5 > phi_gamma(-3.0, 0.5)


def test_state_costs_with_potential_and_fisher():
    x = [torch.zeros(4, 2), torch.ones(4, 2), 2 * torch.ones(4, 2)]
    pot = lambda z: (z**2).sum(-1)
    c = state_costs(x, pot, 0.0)
    assert torch.allclose(c, torch.tensor([2.0, 8.0]))
    assert float(fisher_term(torch.randn(50, 2), 0.0)) == 0.0


def test_kde_score_points_to_mass():
    # the score of a Gaussian cloud at an outlying point points back toward the cloud
    torch.manual_seed(0)
    x = torch.cat([torch.randn(300, 2), torch.tensor([[3.0, 0.0]])])
    s = kde_score(x, bandwidth=0.5)
    assert s[-1, 0] < 0
    assert float(fisher_term(x, 1.0)) > 0


def test_step_costs_kinds():
    x0 = torch.randn(64, 2)
    path = [x0, x0 + torch.tensor([0.5, 0.0])]
    ind = step_costs(path, "induced")
    sk = step_costs(path, "sinkhorn", blur=0.02)
    assert abs(float(ind) - 0.25) < 1e-6
    assert abs(float(sk) - 0.25) < 0.02
    with pytest.raises(ValueError, match="step_cost"):
        step_costs(path, "emd")


def test_fisher_term_constant():
    # B̂ = σ⁴/8 · mean|ŝ|² (σ = 2 distinguishes σ⁴ from σ²)
    torch.manual_seed(0)
    x = torch.randn(100, 2)
    want = 2.0**4 / 8 * (kde_score(x) ** 2).sum(-1).mean()
    assert torch.allclose(fisher_term(x, 2.0), want)
