"""ROSETTA: where the PPO actor-critic's gradients flow, which tensors the GAE bootstrap and KL estimate
compare, and the reward-evaluation metrics (AUROC, stage completions, monotonicity) on asymmetric inputs.

Gradient-flow table (``ActorCritic``):

===============================  =================  ================  ============
term                             actor MLP          log_std           critic MLP
===============================  =================  ================  ============
log pi(a|s) (policy term)        nonzero            nonzero           exactly 0
V(s) (value term)                exactly 0          exactly 0         nonzero
GAE advantages / returns         constants (no graph, bootstrap under no_grad)
approx_kl                        no graph (no_grad)
===============================  =================  ================  ============
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iclr26.rosetta.ppo import ActorCritic, approx_kl, truncated_gae
from iclr26.rosetta.scoring import auroc, monotone_at_completions


def _ac() -> ActorCritic:
    torch.manual_seed(0)
    ac = ActorCritic(6, 4, hidden=8, init_log_std=-0.5)
    with torch.no_grad():
        ac.actor[-1].weight.normal_(0, 0.5)
    return ac


def _groups(ac: ActorCritic) -> dict[str, list[torch.nn.Parameter]]:
    return {"actor": list(ac.actor.parameters()), "log_std": [ac.log_std], "critic": list(ac.critic.parameters())}


def _nonzero(out: torch.Tensor, params: list[torch.nn.Parameter]) -> list[bool]:
    gs = torch.autograd.grad(out, params, allow_unused=True, retain_graph=True)
    return [g is not None and float(g.abs().max()) > 0 for g in gs]


def test_actor_critic_gradient_table():
    ac = _ac()
    x = torch.randn(5, 6)
    a = torch.randn(5, 4)
    logp = ac.dist(x).log_prob(a).sum()
    v = ac.value(x).sum()
    g = _groups(ac)
    assert all(_nonzero(logp, g["actor"])) and all(_nonzero(logp, g["log_std"]))
    assert not any(_nonzero(logp, g["critic"]))
    assert all(_nonzero(v, g["critic"]))
    assert not any(_nonzero(v, g["actor"] + g["log_std"]))
    # squashed mean: still a gradient into the actor, the mean stays inside (-1, 1)
    sq = ActorCritic(6, 4, hidden=8, squash_mean=True)
    with torch.no_grad():
        sq.actor[-1].weight.normal_(0, 5.0)
    assert float(sq.mean(10 * x).abs().max()) <= 1.0
    assert all(_nonzero(sq.dist(x).log_prob(a).sum(), list(sq.actor.parameters())))


def test_truncated_gae_bootstraps_from_the_observation_after_the_last_step():
    """One step: A = r + gamma V(s_T) - V(s_0), R = A + V(s_0); no gradient into the critic."""
    ac = _ac()
    s0, sT = torch.randn(1, 6), torch.randn(1, 6)
    with torch.no_grad():
        v0, vT = ac.value(s0), ac.value(sT)
    assert abs(float(v0 - vT)) > 1e-4
    rew = torch.tensor([[0.7]])
    adv, ret = truncated_gae(ac, rew, v0[None], sT, gamma=0.9, lam=0.95)
    assert float(adv) == pytest.approx(float(0.7 + 0.9 * vT - v0), rel=1e-5)
    assert float(ret) == pytest.approx(float(0.7 + 0.9 * vT), rel=1e-5)
    assert not adv.requires_grad and not ret.requires_grad
    # two steps: lambda-weighted, the middle value comes from the rollout's values
    vals = torch.tensor([[0.2], [0.5]])
    adv2, _ = truncated_gae(ac, torch.tensor([[1.0], [0.0]]), vals, sT, gamma=0.9, lam=0.5)
    d1 = 0.0 + 0.9 * float(vT) - 0.5
    d0 = 1.0 + 0.9 * 0.5 - 0.2
    assert adv2[:, 0].tolist() == pytest.approx([d0 + 0.9 * 0.5 * d1, d1], rel=1e-5)


def test_approx_kl_is_kl_old_to_new_hand_computed():
    """E[(rho - 1) - log rho] with log rho = log pi_theta - log pi_old: not symmetric in the shift."""
    ac = _ac()
    x, a = torch.randn(4, 6), torch.randn(4, 4)
    with torch.no_grad():
        cur = ac.dist(x).log_prob(a).sum(-1)
    shift = torch.tensor([0.5, -0.3, 0.0, 1.0])
    kl = approx_kl(ac, {"obs": x, "act": a, "logp": cur - shift})  # log rho = +shift
    want = float((torch.exp(shift) - 1 - shift).mean())
    other = float((torch.exp(-shift) - 1 + shift).mean())
    assert kl == pytest.approx(want, rel=1e-5)
    assert abs(want - other) > 0.05


def test_auroc_hand_computed_with_a_tie():
    # positives {0.9, 0.4}, negatives {0.4, 0.1}: 3 wins and 1 tie of 4 pairs
    assert auroc(np.array([0.9, 0.4, 0.4, 0.1]), np.array([1, 1, 0, 0])) == pytest.approx(3.5 / 4)
    # three negatives, one positive ranked second: 2 of 3
    assert auroc(np.array([0.3, 0.8, 0.5, 0.1]), np.array([0, 0, 1, 0])) == pytest.approx(2 / 3)
    assert auroc(np.array([0.3, 0.8]), np.array([0, 0])) == 0.5


def test_monotone_at_completions_compares_with_the_step_before_completion():
    """Row t-1 holds r_t. A completion at t_c = 3 must not drop below r_2 until the next completion."""
    steps = np.array([[3]])
    ok = np.array([[0.0], [1.0], [1.5], [2.0], [2.0]])
    assert monotone_at_completions(ok, steps)
    drop = np.array([[0.0], [1.0], [0.5], [2.0], [2.0]])  # r_3 = 0.5 < r_2 = 1
    assert not monotone_at_completions(drop, steps)
    late_drop = np.array([[0.0], [1.0], [1.2], [1.1], [0.9]])  # r_5 = 0.9 < r_2 (no later completion)
    assert not monotone_at_completions(late_drop, steps)
    # a second completion at t = 5 bounds the first window at t = 4; r_5 compares with r_4 (1.15 >= 1.1);
    # a completion at t = 4 instead needs r_4 >= r_3 (1.1 < 1.2)
    two = np.array([[0.0], [1.0], [1.2], [1.1], [1.15]])
    assert monotone_at_completions(two, np.array([[3], [5]]))
    assert not monotone_at_completions(two, np.array([[3], [4]]))
    # a completion at t = 1 has no reward before it: nothing to compare (not the last row)
    assert monotone_at_completions(np.array([[0.5], [0.6], [0.7], [2.0]]), np.array([[1]]))
