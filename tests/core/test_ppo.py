"""core.ppo: GAE against hand-computed values, and a PPO update that moves the policy the right way."""

import pytest
import torch

from iclr26.core.ppo import ActorCritic, PPOConfig, gae, ppo_update


def test_gae_hand_computed_with_an_episode_end():
    # T=3, one env; the episode ends after step 1 (no bootstrap across it)
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [1.0], [1.5]])
    d = torch.tensor([[0.0], [1.0], [0.0]])
    last = torch.tensor([2.0])
    g, lam = 0.9, 0.8
    d2 = 3.0 + g * 2.0 - 1.5
    d1 = 2.0 - 1.0  # terminal: no γ V(s_2)
    d0 = 1.0 + g * 1.0 - 0.5
    a2 = d2
    a1 = d1  # the trace is cut at the episode end
    a0 = d0 + g * lam * a1
    adv, ret = gae(r, v, d, last, g, lam)
    torch.testing.assert_close(adv[:, 0], torch.tensor([a0, a1, a2]))
    torch.testing.assert_close(ret, adv + v)


def test_gae_lambda_one_gamma_one_is_return_minus_value():
    r = torch.rand(5, 3)
    v = torch.rand(5, 3)
    adv, _ = gae(r, v, torch.zeros(5, 3), torch.zeros(3), 1.0, 1.0)
    mc = r.flip(0).cumsum(0).flip(0)
    torch.testing.assert_close(adv, mc - v)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_update_raises_the_likelihood_of_positive_advantage_actions(sign):
    torch.manual_seed(0)
    ac = ActorCritic(obs_dim=3, z_dim=0, act_dim=2, hidden=(16,), init_log_std=0.0)
    x = torch.randn(64, 3)
    a = torch.randn(64, 2)
    with torch.no_grad():
        logp_old = ac.dist(x).log_prob(a).sum(-1)
    adv = sign * torch.where(a[:, 0] > 0, 1.0, -1.0)  # reward actions whose first coordinate is positive
    cfg = PPOConfig(epochs=2, minibatches=1, lr=1e-2, ent_coef=0.0, vf_coef=0.0)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr)
    stats = ppo_update(ac, opt, x, a, logp_old, adv, torch.zeros(64), cfg, torch.Generator().manual_seed(0))
    with torch.no_grad():
        delta = ac.dist(x).log_prob(a).sum(-1) - logp_old
    assert float(delta[adv > 0].mean()) > 0 > float(delta[adv < 0].mean())
    assert set(stats) >= {"policy_loss", "value_loss", "entropy", "clip_frac", "approx_kl"}
