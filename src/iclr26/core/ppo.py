"""PPO with GAE for continuous control, written once for every paper that trains a policy with PPO
(RGSD's skill-conditioned π_θ(a | s, z), V(s, z); any policy on an input x = [s, z] or x = s).

GAE (Schulman et al., 2016), with d_t = 1 when the episode ended after step t:

    δ_t = r_t + γ (1 − d_t) V(s_{t+1}) − V(s_t),    Â_t = δ_t + γ λ (1 − d_t) Â_{t+1},    R_t = Â_t + V(s_t).

With a time limit (truncation, not termination), the bootstrap of a truncated env uses the value of its
final observation: ``final_values[t]`` = V(s_final) for envs truncated after step t (0 elsewhere, and d_t = 1
there), so δ_t = r_t + γ ((1 − d_t) V(s_{t+1}) + final_values[t]) − V(s_t), as ManiSkill's PPO does.

PPO-clip: L = −E[min(ρ Â, clip(ρ, 1 − ε, 1 + ε) Â)] + c_v E[(V − R)²] − c_e E[H(π)], ρ = π/π_old.
CleanRL/ManiSkill write the value term as 0.5 · vf_coef · MSE: their vf_coef = 0.5 is c_v = 0.25 here.
With ``target_kl``, each minibatch first measures k3 = E[(ρ − 1) − log ρ] and, above the target, stops
the update before that minibatch's step (ManiSkill's early stop); ``kl_k3`` is reported either way.
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
    target_kl: stop the update when a minibatch's k3 KL estimate exceeds it (None: never).
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
    target_kl: float | None = None


class ActorCritic(nn.Module):
    """Gaussian actor (state-independent log std) and critic on the input x (e.g. [s, z]; ``z_dim`` may be 0),
    MLPs with ``act`` between layers (ELU by default; ManiSkill's PPO uses Tanh)."""

    def __init__(
        self,
        obs_dim: int,
        z_dim: int,
        act_dim: int,
        hidden: Sequence[int] = (128, 128),
        init_log_std: float = -1.0,
        act: type[nn.Module] = nn.ELU,
    ):
        super().__init__()
        self.actor = mlp([obs_dim + z_dim, *hidden, act_dim], act)
        self.critic = mlp([obs_dim + z_dim, *hidden, 1], act)
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
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
    final_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for [T, N] rollouts; ``dones[t]`` means the episode ended after step t.

    ``final_values`` ([T, N], optional): V of the final observation of envs truncated after step t (with
    ``dones[t] = 1``), 0 elsewhere; it is the bootstrap of a time-limit end (see the module docstring).
    """
    T = rewards.shape[0]
    if final_values is not None and final_values.shape != rewards.shape:
        raise ValueError(f"final_values must have the rewards' shape {tuple(rewards.shape)}")
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(last_value)
    for t in reversed(range(T)):
        nxt = last_value if t == T - 1 else values[t + 1]
        nonterm = 1.0 - dones[t].float()
        boot = nonterm * nxt if final_values is None else nonterm * nxt + final_values[t]
        delta = rewards[t] + gamma * boot - values[t]
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

    ``grad_hook(module)`` runs after each backward (e.g. averaging gradients over torchrun ranks). With
    ``cfg.target_kl`` the update stops before the step of the first minibatch whose k3 KL exceeds it
    (``stopped_early`` = 1.0 in the returned stats).
    """
    n = x.shape[0]
    mb = max(1, n // cfg.minibatches)
    keys = ("policy_loss", "value_loss", "entropy", "clip_frac", "approx_kl", "kl_k3")
    stats = dict.fromkeys(keys, 0.0)
    count, stopped = 0, False
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, mb):
            idx = perm[i : i + mb]
            d = ac.dist(x[idx])
            logp = d.log_prob(a[idx]).sum(-1)
            log_ratio = logp - logp_old[idx]
            ratio = log_ratio.exp()
            with torch.no_grad():
                k3 = float(((ratio - 1) - log_ratio).mean())
            if cfg.target_kl is not None and k3 > cfg.target_kl:
                stopped = True
                break
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
                stats["kl_k3"] += k3
            count += 1
        if stopped:
            break
    out = {k: v / max(count, 1) for k, v in stats.items()}
    out["stopped_early"] = float(stopped)
    return out
