"""PPO on core.ppo: the time-limit bootstrap by hand, the target-KL stop, the update direction, learning a
trivial reach task, determinism and bad rewards of train_ppo."""

import numpy as np
import pytest
import torch

from iclr26.rosetta.env import EnvConfig, TabletopLite
from iclr26.rosetta.ppo import ActorCritic, PPOConfig, approx_kl, rollout_policy, train_ppo, truncated_gae, update

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _FirstCoordinateCritic:
    """V(x) = x[:, 0]: the bootstrapped value is read off the observation handed in."""

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0]


def test_truncated_gae_bootstraps_the_value_of_the_final_observation():
    # official maniskill_ppo.py: at truncation final_values[t] = V(final_observation) enters δ_t
    r = torch.tensor([[1.0, 0.0], [2.0, 1.0]])
    v = torch.tensor([[0.5, 0.0], [1.0, 2.0]])
    nxt = torch.tensor([[9.0, 7.0], [-4.0, 3.0]])  # V(s_T) = 9 for env 0, -4 for env 1
    adv, ret = truncated_gae(_FirstCoordinateCritic(), r, v, nxt, gamma=0.8, lam=0.9)
    d1 = torch.tensor([2.0 + 0.8 * 9.0 - 1.0, 1.0 + 0.8 * -4.0 - 2.0])  # last step: bootstrapped, not 0
    d0 = torch.tensor([1.0 + 0.8 * 1.0 - 0.5, 0.0 + 0.8 * 2.0 - 0.0])  # no episode end inside the rollout
    torch.testing.assert_close(adv[1], d1)
    torch.testing.assert_close(adv[0], d0 + 0.8 * 0.9 * d1)
    torch.testing.assert_close(ret, adv + v)


def test_train_ppo_bootstraps_the_observation_after_the_last_step(monkeypatch):
    import iclr26.rosetta.ppo as ppo

    envs, seen = [], []
    real = ppo.truncated_gae

    def make(n):
        envs.append(TabletopLite(n, EnvConfig(episode_len=6), 0))
        return envs[-1]

    def spy(ac, r, v, nxt, gamma, lam):
        seen.append(torch.equal(nxt, torch.as_tensor(envs[0].obs())))  # the env after step T, time fraction 1
        return real(ac, r, v, nxt, gamma, lam)

    monkeypatch.setattr(ppo, "truncated_gae", spy)
    train_ppo(make, _reach, PPOConfig(total_steps=2 * 4 * 6, num_envs=4), seed=0, episode_len=6)
    assert seen == [True, True]


def _batch(ac, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 3, generator=g)
    with torch.no_grad():
        d = ac.dist(obs)
        act = d.mean + d.stddev * torch.randn(n, 2, generator=g)
        logp = d.log_prob(act).sum(-1)
    return {"obs": obs, "act": act, "logp": logp, "adv": act[:, 0].clone(), "ret": torch.zeros(n)}


def test_update_raises_the_mean_of_positive_advantage_actions():
    torch.manual_seed(0)
    ac = ActorCritic(3, 2, hidden=16)
    batch = _batch(ac)  # actions with a larger first coordinate have a larger advantage
    before = ac.mean(batch["obs"])[:, 0].mean().item()
    cfg = PPOConfig(lr=1e-2, update_epochs=4, num_minibatches=1, target_kl=None)
    stats = update(ac, torch.optim.Adam(ac.parameters(), lr=cfg.lr), batch, cfg, torch.Generator())
    assert ac.mean(batch["obs"])[:, 0].mean().item() > before + 1e-3
    assert stats["epochs"] == 4


def test_approx_kl_is_the_official_estimator():
    torch.manual_seed(0)
    ac = ActorCritic(3, 2, hidden=16)
    batch = _batch(ac)
    assert approx_kl(ac, batch) == pytest.approx(0.0, abs=1e-7)  # unchanged policy
    with torch.no_grad():
        ac.log_std.add_(0.3)
        lr = ac.dist(batch["obs"]).log_prob(batch["act"]).sum(-1) - batch["logp"]
    assert approx_kl(ac, batch) == pytest.approx(float(((lr.exp() - 1) - lr).mean()), rel=1e-5)
    assert approx_kl(ac, batch) > 0


@pytest.mark.parametrize(("target_kl", "epochs"), [(0.0, 1), (None, 5), (1e9, 5)])
def test_target_kl_stops_the_update_epochs(target_kl, epochs):
    torch.manual_seed(0)
    ac = ActorCritic(3, 2, hidden=16)
    cfg = PPOConfig(lr=1e-2, update_epochs=5, num_minibatches=2, target_kl=target_kl)
    stats = update(ac, torch.optim.Adam(ac.parameters(), lr=cfg.lr), _batch(ac), cfg, torch.Generator())
    assert stats["epochs"] == epochs


def _reach(s, a):
    return -np.linalg.norm(s["tcp_pos"] - s["red_cube_pos"], axis=1)


def _final_distance(ac) -> float:
    states, _ = rollout_policy(ac, TabletopLite(64, EnvConfig(episode_len=10), 5), 10)
    return float(np.linalg.norm(states[-1]["tcp_pos"] - states[-1]["red_cube_pos"], axis=1).mean())


def test_ppo_learns_to_reach_the_cube():
    make = lambda n: TabletopLite(n, EnvConfig(episode_len=10), 0)  # noqa: E731
    torch.manual_seed(0)
    untrained = _final_distance(ActorCritic(make(1).obs_dim, 4))
    ac = train_ppo(make, _reach, PPOConfig(total_steps=32 * 10 * 20, num_envs=32), seed=0, episode_len=10)
    assert untrained > 0.15
    assert _final_distance(ac) < 0.25 * untrained


def test_train_ppo_is_seeded_and_rejects_bad_rewards():
    cfg = PPOConfig(total_steps=2 * 8 * 10, num_envs=8)
    make = lambda n: TabletopLite(n, EnvConfig(episode_len=10), 0)  # noqa: E731
    a = train_ppo(make, _reach, cfg, seed=3, episode_len=10)
    b = train_ppo(make, _reach, cfg, seed=3, episode_len=10)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="shape"):
        train_ppo(make, lambda s, a: np.zeros(3), cfg, seed=0, episode_len=10)
    with pytest.raises(ValueError, match="non-finite"):
        train_ppo(make, lambda s, a: np.full(8, np.nan), cfg, seed=0, episode_len=10)
