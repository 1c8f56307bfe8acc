"""PPO with GAE for continuous control, written once for every paper that trains a policy with PPO
(RGSD's skill-conditioned π_θ(a | s, z), V(s, z); any policy on an input x = [s, z] or x = s).

GAE (Schulman et al., 2016), with d_t = 1 when the episode ended after step t:

    δ_t = r_t + γ (1 − d_t) V(s_{t+1}) − V(s_t),    Â_t = δ_t + γ λ (1 − d_t) Â_{t+1},    R_t = Â_t + V(s_t).

PPO-clip: L = −E[min(ρ Â, clip(ρ, 1 − ε, 1 + ε) Â)] + c_v E[(V − R)²] − c_e E[H(π)], ρ = π/π_old.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

__all__ = ["ActorCritic", "PPOConfig", "gae", "mlp", "ppo_update"]


def mlp(sizes: Sequence[int], act: type[nn.Module] = nn.ELU) -> nn.Sequential:
    """Linear layers of the given widths with ``act`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class PPOConfig:
    """PPO settings (common defaults for small locomotion tasks; papers override what they state).

    n_envs: parallel environments.
    n_steps: rollout length per iteration.
    iterations: PPO iterations per arm.
    hidden: widths of the actor and critic MLPs.
    lr: Adam learning rate.
    gamma (γ): discount.
    lam (λ): GAE parameter.
    clip (ε): PPO ratio clip.
    epochs: passes over each rollout.
    minibatches: minibatches per pass.
    vf_coef (c_v): value-loss weight.
    ent_coef (c_e): entropy bonus weight.
    max_grad_norm: gradient-norm clip.
    init_log_std: initial log standard deviation of the Gaussian policy.
    episode_len: time limit of an episode in steps.
    """

    n_envs: int = 128
    n_steps: int = 40
    iterations: int = 100
    hidden: tuple[int, ...] = (128, 128)
    lr: float = 1e-3
    gamma: float = 0.99
    lam: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    minibatches: int = 4
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 1.0
    init_log_std: float = -1.5
    episode_len: int = 80


class ActorCritic(nn.Module):
    """Gaussian actor (state-independent log std) and critic on the input x (e.g. [s, z]; ``z_dim`` may be 0)."""

    def __init__(
        self, obs_dim: int, z_dim: int, act_dim: int, hidden: Sequence[int] = (128, 128), init_log_std: float = -1.0
    ):
        super().__init__()
        self.actor = mlp([obs_dim + z_dim, *hidden, act_dim])
        self.critic = mlp([obs_dim + z_dim, *hidden, 1])
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        with torch.no_grad():
            self.actor[-1].weight.mul_(0.01)
            self.actor[-1].bias.zero_()

    def dist(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.actor(x), self.log_std.exp().expand(x.shape[0], -1))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    @torch.no_grad()
    def act(
        self, x: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean = self.actor(x)
        if deterministic:
            a = mean
        else:
            a = mean + self.log_std.exp() * torch.randn(mean.shape, generator=generator)
        logp = torch.distributions.Normal(mean, self.log_std.exp()).log_prob(a).sum(-1)
        return a, logp, self.value(x)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for [T, N] rollouts; ``dones[t]`` means the episode ended after step t."""
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(last_value)
    for t in reversed(range(T)):
        nxt = last_value if t == T - 1 else values[t + 1]
        nonterm = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * nonterm * nxt - values[t]
        last = delta + gamma * lam * nonterm * last
        adv[t] = last
    return adv, adv + values


def ppo_update(
    ac: ActorCritic,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    a: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    ret: torch.Tensor,
    cfg: PPOConfig,
    gen: torch.Generator,
    grad_hook=None,
) -> dict[str, float]:
    """Clipped-surrogate PPO over flattened samples; advantages normalised per minibatch.

    ``grad_hook(module)`` runs after each backward (e.g. averaging gradients over torchrun ranks).
    """
    n = x.shape[0]
    mb = max(1, n // cfg.minibatches)
    stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0}
    count = 0
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, mb):
            idx = perm[i : i + mb]
            d = ac.dist(x[idx])
            logp = d.log_prob(a[idx]).sum(-1)
            ratio = (logp - logp_old[idx]).exp()
            ad = adv[idx]
            ad = (ad - ad.mean()) / (ad.std() + 1e-8)
            pl = -torch.min(ratio * ad, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * ad).mean()
            vl = ((ac.value(x[idx]) - ret[idx]) ** 2).mean()
            ent = d.entropy().sum(-1).mean()
            loss = pl + cfg.vf_coef * vl - cfg.ent_coef * ent
            opt.zero_grad()
            loss.backward()
            if grad_hook is not None:
                grad_hook(ac)
            nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm)
            opt.step()
            with torch.no_grad():
                stats["policy_loss"] += float(pl)
                stats["value_loss"] += float(vl)
                stats["entropy"] += float(ent)
                stats["clip_frac"] += float(((ratio - 1).abs() > cfg.clip).float().mean())
                stats["approx_kl"] += float((logp_old[idx] - logp).mean())
            count += 1
    return {k: v / count for k, v in stats.items()}
