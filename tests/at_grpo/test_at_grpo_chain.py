"""Chain-MDP mechanism test: exact gradient, estimators, AT beats trajectory grouping in alignment."""

import numpy as np
import pytest

from iclr26.at_grpo.chain_mdp import (
    ChainMDPConfig,
    at_estimate,
    exact_gradient,
    gradient_alignment,
    trajectory_estimate,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def J(theta, w, a_star):
    z = np.exp(theta - theta.max(-1, keepdims=True))
    pi = z / z.sum(-1, keepdims=True)
    return float((w * np.take_along_axis(pi, a_star[..., None], -1)[..., 0]).sum())


def test_exact_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(3, 2, 4))
    w = rng.uniform(0.5, 1.5, (3, 2))
    a_star = rng.integers(0, 4, (3, 2))
    g = exact_gradient(theta, w, a_star)
    num = np.zeros_like(theta)
    h = 1e-6
    for idx in np.ndindex(theta.shape):
        tp, tm = theta.copy(), theta.copy()
        tp[idx] += h
        tm[idx] -= h
        num[idx] = (J(tp, w, a_star) - J(tm, w, a_star)) / (2 * h)
    np.testing.assert_allclose(g, num, atol=1e-7)


def test_estimators_have_the_right_shape_and_ascend_on_average():
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(4, 2, 4))
    w = np.ones((4, 2))
    a_star = rng.integers(0, 4, (4, 2))
    g = exact_gradient(theta, w, a_star)
    ga = np.mean([at_estimate(theta, w, a_star, 8, rng) for _ in range(200)], 0)
    gt = np.mean([trajectory_estimate(theta, w, a_star, 8, rng) for _ in range(200)], 0)
    assert ga.shape == gt.shape == theta.shape
    assert (ga * g).sum() > 0 and (gt * g).sum() > 0


def test_at_grouping_is_better_aligned_than_trajectory_grouping():
    res = gradient_alignment(ChainMDPConfig(trials=100), seed=0)
    assert res["cos_at"] > res["cos_traj"] + 0.1
    assert res["err_at"] < res["err_traj"]
    # one agent, one turn: both groupings see the same single node -> same estimator family, similar alignment
    one = gradient_alignment(ChainMDPConfig(n_agents=1, n_turns=1, trials=300), seed=0)
    assert abs(one["cos_at"] - one["cos_traj"]) < 0.1
