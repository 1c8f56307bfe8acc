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


def test_gae_bootstraps_a_truncated_env_from_its_final_observation():
    # T=2, two envs; env 0 is truncated after step 0 (time limit, V(s_final) = 4), env 1 terminates there
    r = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    v = torch.tensor([[0.5, 0.5], [1.0, 1.0]])
    d = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    fv = torch.tensor([[4.0, 0.0], [0.0, 0.0]])
    last = torch.tensor([3.0, 3.0])
    g, lam = 0.9, 0.8
    adv, _ = gae(r, v, d, last, g, lam, final_values=fv)
    a1 = 2.0 + g * 3.0 - 1.0  # the new episode's step bootstraps from the rollout's last value
    torch.testing.assert_close(adv[1], torch.tensor([a1, a1]))
    # truncated: r + γ V(s_final) − V, and the trace does not cross into the next episode
    torch.testing.assert_close(adv[0], torch.tensor([1.0 + g * 4.0 - 0.5, 1.0 - 0.5]))
    torch.testing.assert_close(gae(r, v, d, last, g, lam)[0][0, 1], adv[0, 1])  # terminal env unchanged
    with pytest.raises(ValueError, match="final_values"):
        gae(r, v, d, last, g, lam, final_values=torch.zeros(2))


def _batch(seed=0):
    torch.manual_seed(seed)
    ac = ActorCritic(obs_dim=3, z_dim=0, act_dim=2, hidden=(16,), init_log_std=0.0)
    x, a = torch.randn(64, 3), torch.randn(64, 2)
    with torch.no_grad():
        logp_old = ac.dist(x).log_prob(a).sum(-1)
    return ac, x, a, logp_old, torch.where(a[:, 0] > 0, 1.0, -1.0)


def test_target_kl_stops_before_the_step_of_the_first_minibatch_above_it():
    ac, x, a, logp_old, adv = _batch()
    before = [p.detach().clone() for p in ac.parameters()]
    # k3 is 0 on the first minibatch (pi = pi_old), so a negative target stops before any step
    cfg = PPOConfig(epochs=3, minibatches=2, lr=1e-2, target_kl=-1.0)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr)
    st = ppo_update(ac, opt, x, a, logp_old, adv, torch.zeros(64), cfg, torch.Generator().manual_seed(0))
    assert st["stopped_early"] == 1.0
    assert all(torch.equal(p, q) for p, q in zip(before, ac.parameters()))
    # a loose target never binds: every epoch runs, and k3 = E[(ρ−1) − log ρ] >= 0 is reported
    ac, x, a, logp_old, adv = _batch()
    cfg = PPOConfig(epochs=3, minibatches=2, lr=1e-2, target_kl=1e9)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr)
    st = ppo_update(ac, opt, x, a, logp_old, adv, torch.zeros(64), cfg, torch.Generator().manual_seed(0))
    assert st["stopped_early"] == 0.0 and st["kl_k3"] > 0
    assert opt.state[next(iter(ac.parameters()))]["step"] == 6  # 3 epochs x 2 minibatches


def test_target_kl_stops_mid_update_once_the_policy_has_moved():
    ac, x, a, logp_old, adv = _batch()
    cfg = PPOConfig(epochs=50, minibatches=1, lr=5e-2, target_kl=0.01)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr)
    st = ppo_update(ac, opt, x, a, logp_old, adv, torch.zeros(64), cfg, torch.Generator().manual_seed(0))
    steps = int(opt.state[next(iter(ac.parameters()))]["step"])
    assert st["stopped_early"] == 1.0 and 1 <= steps < 50
    with torch.no_grad():  # the last step taken left the policy above the target (that is what stopped it)
        lr_ = ac.dist(x).log_prob(a).sum(-1) - logp_old
        assert float((lr_.exp() - 1 - lr_).mean()) > 0.01


def test_actor_critic_activation_is_configurable():
    ac = ActorCritic(obs_dim=3, z_dim=0, act_dim=2, hidden=(8, 8), act=torch.nn.Tanh)
    assert [type(m).__name__ for m in ac.actor] == ["Linear", "Tanh", "Linear", "Tanh", "Linear"]
    assert isinstance(ActorCritic(3, 0, 2, hidden=(8,)).critic[1], torch.nn.ELU)
