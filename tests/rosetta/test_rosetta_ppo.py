"""PPO pieces: finite-horizon GAE by hand, the clipped surrogate's sign, determinism of train_ppo."""

import numpy as np
import pytest
import torch

from iclr26.rosetta.env import EnvConfig, TabletopLite
from iclr26.rosetta.ppo import ActorCritic, PPOConfig, gae, ppo_update, train_ppo

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_gae_by_hand():
    r = torch.tensor([[1.0], [2.0]])
    v = torch.tensor([[0.5], [1.0]])
    d = torch.tensor([[0.0], [1.0]])
    adv, ret = gae(r, v, d, torch.tensor([9.0]), gamma=0.8, lam=0.9)
    d1 = 2.0 - 1.0  # terminal: nothing bootstrapped (not the 9.0)
    d0 = 1.0 + 0.8 * 1.0 - 0.5
    assert adv[1, 0].item() == pytest.approx(d1)
    assert adv[0, 0].item() == pytest.approx(d0 + 0.8 * 0.9 * d1)
    assert torch.allclose(ret, adv + v)


def test_update_raises_probability_of_positive_advantage_actions():
    torch.manual_seed(0)
    ac = ActorCritic(3, 2, hidden=16)
    obs = torch.randn(64, 3)
    with torch.no_grad():
        d = ac.dist(obs)
        act = d.mean + d.stddev * torch.randn(64, 2)
        logp = d.log_prob(act).sum(-1)
    adv = act[:, 0].clone()  # actions with a larger first coordinate are better
    batch = {"obs": obs, "act": act, "logp": logp, "adv": adv, "ret": torch.zeros(64)}
    opt = torch.optim.Adam(ac.parameters(), lr=1e-2)
    before = ac.mean(obs)[:, 0].mean().item()
    ppo_update(ac, opt, batch, PPOConfig(update_epochs=4, num_minibatches=1, target_kl=10.0), torch.Generator())
    assert ac.mean(obs)[:, 0].mean().item() > before + 1e-3


def test_train_ppo_is_seeded_and_rejects_bad_rewards():
    cfg = PPOConfig(total_steps=2 * 8 * 10, num_envs=8)
    make = lambda n: TabletopLite(n, EnvConfig(episode_len=10), 0)  # noqa: E731
    reward = lambda s, a: -np.linalg.norm(s["tcp_pos"] - s["red_cube_pos"], axis=1)  # noqa: E731
    a = train_ppo(make, reward, cfg, seed=3, episode_len=10)
    b = train_ppo(make, reward, cfg, seed=3, episode_len=10)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="shape"):
        train_ppo(make, lambda s, a: np.zeros(3), cfg, seed=0, episode_len=10)
    with pytest.raises(ValueError, match="non-finite"):
        train_ppo(make, lambda s, a: np.full(8, np.nan), cfg, seed=0, episode_len=10)
