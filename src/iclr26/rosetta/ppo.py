"""PPO with GAE on TabletopLite with a generated reward called through a sandboxed reward function.

The settings follow the official short-horizon learner (ManiSkill's PPO baseline as configured in
``short_horizon_learning/maniskill_ppo.py``: gamma 0.8, GAE lambda 0.9, clip 0.2, value coefficient 0.5,
entropy 0, gradient-norm clip 0.5, target KL 0.1, finite-horizon GAE), scaled to a CPU budget
(64 envs, 2x64 MLP, a few 1e5 steps; the paper uses 1024 GPU envs and 2e7-4e8 steps).

GAE with a finite horizon (time-limit truncation, the episode's last value bootstraps nothing):

    δ_t = r_t + γ (1 − d_t) V(s_{t+1}) − V(s_t),     Â_t = δ_t + γ λ (1 − d_t) Â_{t+1},    R_t = Â_t + V(s_t)

PPO-clip:  L = −E[min(ρ Â, clip(ρ, 1 − ε, 1 + ε) Â)] + c_v E[(V − R)²] − c_e E[H],  ρ = π_θ / π_old;
an epoch stops early when the approximate KL exceeds ``target_kl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

__all__ = ["ActorCritic", "PPOConfig", "gae", "ppo_update", "train_ppo"]


@dataclass(frozen=True)
class PPOConfig:
    """PPO settings (official short-horizon values where they exist; sizes for a CPU budget).

    total_steps: environment steps per training run.
    num_envs: parallel environments.
    hidden: hidden width of the 2-layer actor and critic MLPs.
    lr: Adam learning rate (official: 3e-4 at 1024 envs and 2e7+ steps; 3e-3 for the 2e5-step budget).
    gamma (γ): discount (official 0.8).
    gae_lambda (λ): GAE parameter (official 0.9).
    clip (ε): ratio clip (official 0.2).
    update_epochs: passes over each rollout (official: 8).
    num_minibatches: minibatches per pass (official: 32).
    vf_coef (c_v): value-loss weight (official 0.5).
    ent_coef (c_e): entropy weight (official 0).
    max_grad_norm: gradient-norm clip (official 0.5).
    target_kl: stop the update epochs when the approximate KL exceeds this (official 0.1).
    init_log_std: initial log standard deviation of the Gaussian policy.
    reward_scale: rewards are multiplied by this before GAE.
    squash_mean: tanh-bound the policy mean (off: the official unbounded mean, actions clipped by the env).
    """

    total_steps: int = 200_000
    num_envs: int = 64
    hidden: int = 64
    lr: float = 3e-3
    gamma: float = 0.8
    gae_lambda: float = 0.9
    clip: float = 0.2
    update_epochs: int = 8
    num_minibatches: int = 4
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    target_kl: float = 0.1
    init_log_std: float = 0.0
    reward_scale: float = 1.0
    squash_mean: bool = False


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, o))


class ActorCritic(nn.Module):
    """Gaussian actor (tanh-bounded mean, state-independent log std) and a critic; 2 hidden layers each."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int = 64, init_log_std: float = 0.0, squash_mean: bool = False
    ) -> None:
        super().__init__()
        self.squash = squash_mean
        self.actor, self.critic = _mlp(obs_dim, hidden, act_dim), _mlp(obs_dim, hidden, 1)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        with torch.no_grad():
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Policy mean; with ``squash_mean`` tanh-bounded so that it stays inside the action box."""
        m = self.actor(x)
        return torch.tanh(m) if self.squash else m

    def dist(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.mean(x), self.log_std.exp().expand(x.shape[0], -1))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a [T, N] rollout; ``dones[t]``: the episode ended after step t."""
    adv, last = torch.zeros_like(rewards), torch.zeros_like(last_value)
    for t in reversed(range(rewards.shape[0])):
        nxt = last_value if t == rewards.shape[0] - 1 else values[t + 1]
        keep = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * keep * nxt - values[t]  # δ_t
        last = delta + gamma * lam * keep * last  # Â_t
        adv[t] = last
    return adv, adv + values


def ppo_update(
    ac: ActorCritic, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], cfg: PPOConfig, gen: torch.Generator
) -> dict[str, float]:
    """Clipped-surrogate update over a flat batch (obs, act, logp, adv, ret); advantages normalised per minibatch."""
    n = batch["obs"].shape[0]
    mb = max(1, n // cfg.num_minibatches)
    stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0}
    count = 0
    for _ in range(cfg.update_epochs):
        perm, kls = torch.randperm(n, generator=gen), []
        for i in range(0, n, mb):
            idx = perm[i : i + mb]
            d = ac.dist(batch["obs"][idx])
            logp = d.log_prob(batch["act"][idx]).sum(-1)
            log_ratio = logp - batch["logp"][idx]
            ratio = log_ratio.exp()
            ad = batch["adv"][idx]
            ad = (ad - ad.mean()) / (ad.std() + 1e-8)
            pl = -torch.min(ratio * ad, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * ad).mean()
            vl = ((ac.value(batch["obs"][idx]) - batch["ret"][idx]) ** 2).mean()
            ent = d.entropy().sum(-1).mean()
            loss = pl + cfg.vf_coef * vl - cfg.ent_coef * ent
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm)
            opt.step()
            with torch.no_grad():
                kl = float(((ratio - 1) - log_ratio).mean())  # k3 estimator of KL(old || new)
                kls.append(kl)
                for key, v in (("policy_loss", pl), ("value_loss", vl), ("entropy", ent)):
                    stats[key] += float(v)
                stats["clip_frac"] += float(((ratio - 1).abs() > cfg.clip).float().mean())
                stats["approx_kl"] += kl
            count += 1
        if cfg.target_kl is not None and np.mean(kls) > cfg.target_kl:
            break
    return {k: v / max(count, 1) for k, v in stats.items()}


def train_ppo(
    make_env: Callable[[int], object],
    reward_fn: Callable[[dict, np.ndarray], np.ndarray],
    cfg: PPOConfig,
    seed: int,
    episode_len: int,
    log: Callable[..., None] | None = None,
) -> ActorCritic:
    """Train on ``make_env(num_envs)`` (TabletopLite-like) with ``reward_fn(state, action) -> float[N]``.

    Every rollout is ``episode_len`` steps of all envs (one full episode), then the envs reset.
    A non-finite or wrongly shaped reward raises ValueError (the caller records it).
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    env = make_env(cfg.num_envs)
    ac = ActorCritic(env.obs_dim, 4, cfg.hidden, cfg.init_log_std, cfg.squash_mean)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr, eps=1e-5)
    iters = max(1, cfg.total_steps // (cfg.num_envs * episode_len))
    T, N = episode_len, cfg.num_envs
    for it in range(iters):
        obs_b, act_b, logp_b = torch.zeros(T, N, env.obs_dim), torch.zeros(T, N, 4), torch.zeros(T, N)
        rew_b, val_b = torch.zeros(T, N), torch.zeros(T, N)
        obs = torch.as_tensor(env.reset())
        for t in range(T):
            with torch.no_grad():
                d = ac.dist(obs)
                a = d.mean + d.stddev * torch.randn(d.mean.shape, generator=gen)
                obs_b[t], act_b[t], logp_b[t], val_b[t] = obs, a, d.log_prob(a).sum(-1), ac.value(obs)
            nxt = env.step(a.numpy())
            r = np.asarray(reward_fn(env.state(), a.numpy()), dtype=np.float64)
            if r.shape != (N,) or not np.all(np.isfinite(r)):
                raise ValueError(f"reward has shape {r.shape} or non-finite values")
            rew_b[t] = torch.as_tensor(r * cfg.reward_scale, dtype=torch.float32)
            obs = torch.as_tensor(nxt)
        dones = torch.zeros(T, N)
        dones[-1] = 1.0  # finite horizon: nothing is bootstrapped past the time limit
        adv, ret = gae(rew_b, val_b, dones, torch.zeros(N), cfg.gamma, cfg.gae_lambda)
        batch = {
            "obs": obs_b.reshape(T * N, -1),
            "act": act_b.reshape(T * N, 4),
            "logp": logp_b.reshape(-1),
            "adv": adv.reshape(-1),
            "ret": ret.reshape(-1),
        }
        stats = ppo_update(ac, opt, batch, cfg, gen)
        if log is not None:
            log(it, reward=float(rew_b.sum(0).mean()), **stats)
    return ac


@torch.no_grad()
def rollout_policy(ac: ActorCritic, env, episode_len: int) -> tuple[list[dict], list[np.ndarray]]:
    """Deterministic (mean-action) rollout: (states t = 0..T, actions)."""
    obs = torch.as_tensor(env.reset())
    states, acts = [env.state()], []
    for _ in range(episode_len):
        a = ac.mean(obs).numpy()
        obs = torch.as_tensor(env.step(a))
        states.append(env.state())
        acts.append(a)
    return states, acts
