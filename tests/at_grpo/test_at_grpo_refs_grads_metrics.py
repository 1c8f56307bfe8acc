"""AT-GRPO: old vs current vs reference log-probs, where the clipped update's gradient flows, and the
grouping / trajectory advantages on asymmetric, hand-computed cases.

Gradient table of one policy update (PPO-clip, eps = 0.2, dual clip c = 3, token mean; verl actor defaults):

| token case                                   | gradient w.r.t. log pi_theta          |
|----------------------------------------------|---------------------------------------|
| A > 0, rho inside [0.8, 1.2]                 | -A rho / n_tok (nonzero)              |
| A > 0, rho > 1.2 (clipped)                   | exactly 0                             |
| A < 0, rho < 0.8 (clipped)                   | exactly 0                             |
| A < 0, rho > 3 (dual clip)                   | exactly 0                             |
| A < 0, rho inside                            | -A rho / n_tok (nonzero)              |
| masked token                                 | exactly 0                             |
| KL term beta * k3(pi_theta, pi_ref)          | pi_theta only; pi_ref: none           |
| policy of an agent with no samples this step | parameters unchanged                  |
"""

import math

import numpy as np
import pytest
import torch

from iclr26.at_grpo.at_grpo import ATGRPOConfig, Batch, _accumulate, compute_advantages, update_policies
from iclr26.at_grpo.rollout import Rollout, SampleChunk, Workflow
from iclr26.core.grpo import group_advantages

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TablePolicy(torch.nn.Module):
    """log pi(token | obs) = theta[obs, position]: every token's log-prob is its own parameter."""

    def __init__(self, n, T, init=None):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(n, T) if init is None else init.clone())
        self.roles = []

    def logprobs(self, obs, role, toks):
        self.roles.append(role)
        return self.theta[obs][:, : toks.shape[1]]


RHO = torch.tensor([[1.5, 1.1, 1.0], [0.5, 4.0, 1.1]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.float32)
ADV = torch.tensor([1.0, -1.0])


def _data():
    old = -RHO.log()  # current log-probs are 0, so rho = exp(0 - old)
    return torch.arange(2), torch.zeros(2, 3, dtype=torch.long), old, MASK.clone(), ADV.clone()


# ---------------------------------------------------------------- gradient flow / old-policy reference


def test_clipped_update_gradient_table():
    pol = TablePolicy(2, 3)
    cfg = ATGRPOConfig()
    _accumulate(pol, None, "plan", _data(), n_tok_total=5.0, cfg=cfg)
    want = torch.zeros(2, 3)
    want[0, 1] = -1.0 * 1.1 / 5  # A > 0, rho inside the clip range
    want[1, 2] = 1.0 * 1.1 / 5  # A < 0, rho inside
    assert torch.allclose(pol.theta.grad, want, atol=1e-6)


def test_micro_batches_weighted_by_tokens_match_one_batch_on_uneven_masks():
    g = []
    for mbs in (0, 1):
        pol = TablePolicy(2, 3)
        _accumulate(pol, None, "plan", _data(), 5.0, ATGRPOConfig(micro_batch_size=mbs))
        g.append(pol.theta.grad.clone())
    assert torch.allclose(g[0], g[1], atol=1e-7)


def test_kl_term_reads_the_frozen_reference_and_only_moves_the_policy():
    ref_theta = torch.tensor([[-0.5, 0.3, 0.0], [0.2, -0.1, 0.4]])
    pol, ref = TablePolicy(2, 3), TablePolicy(2, 3, ref_theta)
    obs, toks, _, msk, adv = _data()
    old = torch.zeros(2, 3)  # rho = 1: the policy term alone is -A / n per token
    st = _accumulate(pol, ref, "plan", (obs, toks, old, msk, adv), 5.0, ATGRPOConfig(kl_coef=0.5))
    d = ref_theta  # log pi_ref - log pi_theta with log pi_theta = 0
    k3 = (d.exp() - d - 1) * MASK
    assert st["kl"] == pytest.approx(float(k3.sum() / 5), rel=1e-5)
    # d/dtheta of 0.5 * mean(k3) = 0.5 * (1 - e^d) / 5 per unmasked token
    want = (-adv[:, None] / 5 + 0.5 * (1 - d.exp()) / 5) * MASK
    assert torch.allclose(pol.theta.grad, want, atol=1e-6)
    assert ref.theta.grad is None


def _batch_two_agents():
    def chunk(agent, rows):
        old = torch.zeros(rows, 2)
        return SampleChunk(
            agent=agent,
            turn=0,
            env=np.arange(rows),
            branch=np.zeros(rows, dtype=np.int64),
            obs=torch.arange(rows),
            tokens=torch.zeros(rows, 2, dtype=torch.long),
            mask=torch.ones(rows, 2),
            logp=old,
            local=np.zeros(rows),
            team=np.zeros(rows),
            reward=np.zeros(rows),
        )

    c = chunk("tool", 2)
    return Batch([c], [np.arange(2)], [np.array([1.0, -1.0])], 1, 2)


def test_update_touches_only_the_policy_of_the_acting_agent():
    wf = Workflow(agents=("tool", "plan"), roles=("tool_role", "plan_role"))
    pt, pp = TablePolicy(2, 2), TablePolicy(2, 2)
    opts = {n: torch.optim.SGD(p.parameters(), lr=1.0) for n, p in (("pt", pt), ("pp", pp))}
    update_policies(_batch_two_agents(), wf, {"pt": pt, "pp": pp}, {"tool": "pt", "plan": "pp"}, opts, ATGRPOConfig())
    assert float(pt.theta.detach().abs().sum()) > 0
    assert torch.equal(pp.theta.detach(), torch.zeros(2, 2)) and pp.theta.grad is None
    assert pt.roles == ["tool_role"] and pp.roles == []  # the agent's role, not its name


# ---------------------------------------------------------------- references in grouping / advantages


def _chunk(agent, turn, env, branch, reward):
    n = len(env)
    return SampleChunk(
        agent=agent,
        turn=turn,
        env=np.asarray(env),
        branch=np.asarray(branch),
        obs=torch.zeros(n, 1),
        tokens=torch.zeros(n, 1, dtype=torch.long),
        mask=torch.ones(n, 1),
        logp=torch.zeros(n, 1),
        local=np.zeros(n),
        team=np.zeros(n),
        reward=np.asarray(reward, dtype=np.float64),
    )


def test_trajectory_advantage_sums_every_agent_of_the_trajectory():
    env, br = [0, 0, 1, 1], [0, 1, 0, 1]
    ro = Rollout(
        [_chunk("tool", 0, env, br, [1.0, 0.5, 2.0, 0.0]), _chunk("plan", 0, env, br, [0.0, 2.0, 1.0, 3.0])], 2, 2
    )
    b = compute_advantages(ro, ATGRPOConfig(rollout_mode="no_tree", K=2))
    R = torch.tensor([1.0, 2.5, 3.0, 3.0])  # R_k summed over both agents: (e0 b0, e0 b1, e1 b0, e1 b1)
    A = group_advantages(R, [0, 0, 1, 1]).numpy()
    for adv in b.adv:
        assert np.allclose(adv, A, atol=1e-6)
    assert A[0] < 0 < A[1] and A[2] == A[3] == 0.0  # env 1's trajectories tie in total, not per agent


def test_official_last_turn_mode_keeps_each_envs_last_turn_only():
    ro = Rollout(
        [
            _chunk("plan", 0, [0, 0, 1, 1], [0, 1, 0, 1], [5.0, 0.0, 5.0, 0.0]),
            _chunk("plan", 1, [0, 0], [0, 1], [1.0, 0.0]),  # env 1 ended after turn 0
        ],
        2,
        2,
    )
    b = compute_advantages(ro, ATGRPOConfig(rollout_mode="no_tree", K=2, traj_samples="last_turn"))
    assert [r.tolist() for r in b.rows] == [[2, 3], [0, 1]]
    assert b.adv[1][0] > 0 > b.adv[1][1] and b.adv[0][0] > 0 > b.adv[0][1]
    assert b.n_groups == 2


def test_groups_never_span_two_policies():
    """group_key (env, turn) without the agent: the two agents still form separate groups when they map to
    different policies (the official trainer splits the batch by policy first)."""
    ro = Rollout([_chunk("tool", 0, [0, 0], [0, 1], [1.0, 0.0]), _chunk("plan", 0, [0, 0], [0, 1], [5.0, 7.0])], 1, 2)
    cfg = ATGRPOConfig(K=2, group_key=("env", "turn"))
    split = compute_advantages(ro, cfg, {"tool": "a", "plan": "b"})
    a = 1 / math.sqrt(2)  # two samples: (r - mean) / sample std = ±0.5 / sqrt(0.5) = ±1 / sqrt(2)
    assert np.allclose(split.adv[0], [a, -a], atol=1e-5)
    assert np.allclose(split.adv[1], [-a, a], atol=1e-5)
    assert split.n_groups == 2
    shared = compute_advantages(ro, cfg, {"tool": "a", "plan": "a"})  # one policy: one group of four
    assert shared.n_groups == 1 and shared.adv[1][0] > 0 and shared.adv[0][0] < 0
