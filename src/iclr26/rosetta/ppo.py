"""PPO on TabletopLite with a generated reward called through a sandboxed reward function.

GAE and the clipped update are :mod:`iclr26.core.ppo` (``gae``, ``ppo_update``, ``mlp``); this file adds
what the official short-horizon learner (``short_horizon_learning/maniskill_ppo.py``) does around them:
Tanh MLPs, a target-KL stop of the update epochs, and the value of the final observation bootstrapped at
the time limit. Settings: gamma 0.8, GAE lambda 0.9, clip 0.2, value coefficient 0.5, entropy 0,
gradient-norm clip 0.5, target KL 0.1, scaled to a CPU budget (64 envs, 2x64 MLP, 2e5 steps; the paper
uses 1024 GPU envs and 2e7-4e8 steps).

Every rollout is one whole episode of all envs (``episode_len`` steps, no early termination, then a
reset), so the time limit truncates the last step of the rollout and nothing inside it. The official
learner stores ``final_values = V(final_observation)`` for a truncated env; with whole-episode rollouts
that is GAE with no ``done`` inside the rollout and ``last_value = V(s_T)``:

    δ_t = r_t + γ V(s_{t+1}) − V(s_t)   (V(s_T): the observation after the last step),
    Â_t = δ_t + γ λ Â_{t+1},   Â_T = 0,   R_t = Â_t + V(s_t).

PPO-clip (core): L = −E[min(ρ Â, clip(ρ, 1 − ε, 1 + ε) Â)] + c_v E[(V − R)²] − c_e E[H],  ρ = π_θ / π_old,
advantages normalised per minibatch; the epochs stop once an epoch leaves the batch's approximate KL
E[(ρ − 1) − log ρ] above ``target_kl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn as nn

from iclr26.core.ppo import PPOConfig as CorePPOConfig
from iclr26.core.ppo import gae, mlp, ppo_update

__all__ = ["ActorCritic", "PPOConfig", "approx_kl", "rollout_policy", "train_ppo", "truncated_gae", "update"]


@dataclass(frozen=True)
class PPOConfig:
    """PPO settings (official short-horizon values where they exist; sizes for a CPU budget).

    total_steps: environment steps per training run.
    num_envs: parallel environments.
    hidden: hidden width of the 2-layer actor and critic MLPs.
    lr: Adam learning rate (official: 3e-4 at 1024 envs and 2e7+ steps; 3e-3 for this CPU budget).
    gamma (γ): discount (official 0.8).
    gae_lambda (λ): GAE parameter (official 0.9).
    clip (ε): ratio clip (official 0.2).
    update_epochs: passes over each rollout (official: 8).
    num_minibatches: minibatches per pass (official: 32).
    vf_coef (c_v): value-loss weight (official 0.5 on half the squared error; core's loss has no 0.5).
    ent_coef (c_e): entropy weight (official 0).
    max_grad_norm: gradient-norm clip (official 0.5).
    target_kl: stop the update epochs when the batch's approximate KL after an epoch exceeds this (official 0.1).
    init_log_std: initial log standard deviation of the Gaussian policy (ours 0.0, the claims' setting;
        official ``actor_logstd`` starts at -0.5).
    reward_scale: rewards are multiplied by this before GAE.
    squash_mean: tanh-bound the policy mean (off: the official unbounded mean, actions clipped by the env).
    reward_action: the action the reward function receives: "clipped" to the action box [-1, 1] (official:
        ``envs.step(clip_action(action))``, so the env's reward sees the clipped action) or "raw" (the Gaussian
        sample; the log-probability is always that of the raw sample).
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
    target_kl: float | None = 0.1
    init_log_std: float = 0.0
    reward_scale: float = 1.0
    squash_mean: bool = False
    reward_action: Literal["clipped", "raw"] = "clipped"

    def core_epoch(self) -> CorePPOConfig:
        """The settings of one update epoch as ``core.ppo.PPOConfig`` (the epoch loop stays here, for target_kl)."""
        return CorePPOConfig(
            lr=self.lr,
            gamma=self.gamma,
            lam=self.gae_lambda,
            clip=self.clip,
            epochs=1,
            minibatches=self.num_minibatches,
            vf_coef=self.vf_coef,
            ent_coef=self.ent_coef,
            max_grad_norm=self.max_grad_norm,
            init_log_std=self.init_log_std,
        )


class ActorCritic(nn.Module):
    """Gaussian actor (state-independent log std) and a critic; 2 Tanh hidden layers each (official: Tanh)."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int = 64, init_log_std: float = 0.0, squash_mean: bool = False
    ) -> None:
        super().__init__()
        self.squash = squash_mean
        self.actor = mlp([obs_dim, hidden, hidden, act_dim], nn.Tanh)
        self.critic = mlp([obs_dim, hidden, hidden, 1], nn.Tanh)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        with torch.no_grad():
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Policy mean; with ``squash_mean`` tanh-bounded so that it stays inside the action box."""
        m = self.actor(x)
        return torch.tanh(m) if self.squash else m

    def dist(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.mean(x), self.log_std.exp().expand(x.shape[0], -1), validate_args=False)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)


def truncated_gae(
    ac: ActorCritic, rewards: torch.Tensor, values: torch.Tensor, next_obs: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a [T, N] whole-episode rollout cut by the time limit.

    ``next_obs`` is the observation after the last step; its value is bootstrapped (official
    ``final_values[t] = V(final_observation)`` at truncation), and no step inside the rollout ends an episode.
    """
    with torch.no_grad():
        last_value = ac.value(next_obs)
    return gae(rewards, values, torch.zeros_like(rewards), last_value, gamma, lam)


@torch.no_grad()
def approx_kl(ac: ActorCritic, batch: dict[str, torch.Tensor]) -> float:
    """KL(π_old || π_θ) over the batch by the official estimator E[(ρ − 1) − log ρ] (non-negative)."""
    log_ratio = ac.dist(batch["obs"]).log_prob(batch["act"]).sum(-1) - batch["logp"]
    return float(((log_ratio.exp() - 1) - log_ratio).mean())


def update(
    ac: ActorCritic, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], cfg: PPOConfig, gen: torch.Generator
) -> dict[str, float]:
    """Up to ``update_epochs`` epochs of ``core.ppo.ppo_update`` over a flat batch (obs, act, logp, adv, ret).

    Stops after an epoch that leaves the batch's approximate KL (:func:`approx_kl`) above ``target_kl``
    (official: the same estimator, checked per minibatch); ``stats["epochs"]`` is the number of epochs run.
    """
    one = cfg.core_epoch()
    runs: list[dict[str, float]] = []
    for _ in range(cfg.update_epochs):
        runs.append(
            ppo_update(ac, opt, batch["obs"], batch["act"], batch["logp"], batch["adv"], batch["ret"], one, gen)
        )
        kl = approx_kl(ac, batch)
        runs[-1]["kl_k3"] = kl
        if cfg.target_kl is not None and kl > cfg.target_kl:
            break
    stats = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    stats["epochs"] = float(len(runs))
    return stats


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
    if cfg.reward_action not in ("clipped", "raw"):
        raise ValueError(f"reward_action must be 'clipped' or 'raw', got {cfg.reward_action!r}")
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
            clipped = np.clip(a.numpy(), -1.0, 1.0)
            nxt = env.step(clipped)
            r = np.asarray(reward_fn(env.state(), clipped if cfg.reward_action == "clipped" else a.numpy()), np.float64)
            if r.shape != (N,) or not np.all(np.isfinite(r)):
                raise ValueError(f"reward has shape {r.shape} or non-finite values")
            rew_b[t] = torch.as_tensor(r * cfg.reward_scale, dtype=torch.float32)
            obs = torch.as_tensor(nxt)
        adv, ret = truncated_gae(ac, rew_b, val_b, obs, cfg.gamma, cfg.gae_lambda)
        batch = {
            "obs": obs_b.reshape(T * N, -1),
            "act": act_b.reshape(T * N, 4),
            "logp": logp_b.reshape(-1),
            "adv": adv.reshape(-1),
            "ret": ret.reshape(-1),
        }
        stats = update(ac, opt, batch, cfg, gen)
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
