"""Exact finite-state FE (spec 8.6): expand/project formulas, limits, Thm 5.1 bound, fixed points."""

import numpy as np
import pytest

from iclr26.flow_expander.discrete import discrete_expand, discrete_flow_expansion, discrete_project, entropy

rng = np.random.default_rng(0)
P_PRE = rng.dirichlet(np.ones(12) * 0.5)
V = np.array([1] * 8 + [0] * 4, dtype=float)  # Omega_v = first 8 states


def test_expand_and_project_hand_computed():
    p = np.array([0.5, 0.25, 0.25])
    pt = discrete_expand(p, p, gamma=0.5, beta=0.0)  # ∝ sqrt(p)
    assert np.allclose(pt, np.sqrt(p) / np.sqrt(p).sum())
    assert np.allclose(discrete_project(p, np.array([1.0, 1.0, 0.0]), None), [2 / 3, 1 / 3, 0.0])
    assert np.allclose(discrete_project(p, np.array([1.0, 0.5, 0.5]), 1.0), [2 / 3, 1 / 6, 1 / 6])


def test_gfe_converges_to_uniform_on_valid_set():
    p = discrete_flow_expansion(P_PRE, V, gamma=0.5, beta=0.0, eta=None, K=40)[-1]
    assert np.allclose(p, V / V.sum(), atol=1e-6)
    # the entropy increases monotonically and ends at log |Omega_v|
    hs = [entropy(q) for q in discrete_flow_expansion(P_PRE, V, 0.5, 0.0, None, 10)[1:]]
    assert all(b >= a - 1e-12 for a, b in zip(hs, hs[1:]))


def test_lfe_converges_to_tempered_pre_on_valid_set():
    beta = 0.4
    p = discrete_flow_expansion(P_PRE, V, gamma=0.5, beta=beta, eta=None, K=60)[-1]
    target = P_PRE**beta * V
    assert np.allclose(p, target / target.sum(), atol=1e-6)


def test_soft_verifier_fixed_point():
    v = rng.uniform(0.1, 1.0, size=12)
    beta, gamma, eta = 0.5, 0.4, 0.2
    p = discrete_flow_expansion(P_PRE, v, gamma, beta, eta, K=200)[-1]
    target = P_PRE**beta * v ** (eta / gamma)
    assert np.allclose(p, target / target.sum(), atol=1e-6)


def test_theorem_5_1_bound_with_gamma_one_over_lambda_star():
    """L(Q*) - L(Q_K) <= lambda* KL(Q* || Q_pre) / K with gamma = 1 / lambda* (lambda* = 1 here)."""
    beta = 0.0
    p_star = V / V.sum()
    kl = float(np.sum(p_star[p_star > 0] * np.log(p_star[p_star > 0] / P_PRE[p_star > 0])))
    ps = discrete_flow_expansion(P_PRE, V, gamma=1.0, beta=beta, eta=None, K=5)
    for k, p in enumerate(ps[1:], start=1):
        assert entropy(p_star) - entropy(p) <= kl / k + 1e-9


def test_reductions_and_errors():
    nse = discrete_flow_expansion(P_PRE, V, 0.3, 0.0, 0.0, 3)[-1]
    assert np.allclose(nse, discrete_flow_expansion(P_PRE, np.ones(12), 0.3, 0.0, None, 3)[-1])
    constr = discrete_flow_expansion(P_PRE, V, 0.0, 0.0, None, 3)[-1]
    assert np.allclose(constr, P_PRE * V / (P_PRE * V).sum())
    with pytest.raises(ValueError):
        discrete_flow_expansion(np.array([0.5, 0.6]), np.ones(2), 0.1, 0.0, None, 1)
    with pytest.raises(ValueError):
        discrete_project(np.array([0.5, 0.5]), np.zeros(2), None)
