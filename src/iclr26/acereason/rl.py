"""Strict on-policy GRPO as used by AceReason-Nemotron (1.0 Sec. 3, reused by 1.1) and its data filters.

For each prompt ``q`` the current policy samples ``G`` responses ``o_i`` at temperature ``T``; binary
rewards ``r_i`` give the group-normalised advantage (verl's GRPO: sample std, eps 1e-6, all-equal
groups 0), the same for every token of ``o_i``:

.. math::

    A_i = \\frac{r_i - \\mathrm{mean}_j\\, r_j}{\\mathrm{std}_j\\, r_j + \\varepsilon}

and the token-level objective with exactly one gradient step per rollout batch (so the ratio
``ρ = π_θ / sg[π_θ]`` is identically 1 and the clip never binds), no KL and no entropy bonus:

.. math::

    \\mathcal{L}(θ) = -\\frac{1}{\\sum_i |o_i|} \\sum_i \\sum_t ρ_{i,t} A_i, \\qquad
    ∇\\mathcal{L} = -\\frac{1}{\\sum_i |o_i|} \\sum_i A_i \\sum_t ∇ \\log π_T(o_{i,t} \\mid q, o_{i,<t})

Log-probabilities (and the entropy) come from ``logits / T``: the optimised policy is the
temperature-scaled one that sampled the rollouts (verl ``dp_actor``). The clipped loss itself is
:func:`iclr26.core.grpo.policy_loss`; this module only wires the on-policy inputs.

Overlong filtering (1.1 Sec. 3.5, DAPO-style): a response truncated at the length budget (no EOS /
final answer) gets loss mask 0 and leaves the token-mean denominator; its reward is not used.
Off: it keeps mask 1 and gets reward 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from iclr26.core.grpo import contiguous_group_keys, group_advantages, policy_loss, token_logprobs

from .entropy import temperature_adjusted_entropy

__all__ = [
    "OnPolicyGRPOConfig",
    "apply_overlong_filter",
    "onpolicy_grpo_loss",
    "overlong_filter_mask",
    "pass_rate_filter",
    "solved_by_all_filter",
    "zero_advantage_fraction",
]


@dataclass(frozen=True)
class OnPolicyGRPOConfig:
    """GRPO settings of AceReason (1.0 Sec. 3.2; toy values set in the experiment config).

    group_size (G): responses per prompt (8 at the 8K stage, 16 later).
    adv_eps (ε): added to the group std (verl GRPO default 1e-6).
    std: "sample" (torch.std, verl) or "population" group std.
    agg: token aggregation of the loss ("token_mean": 1 / Σ_i |o_i|).
    clip_eps: PPO clip (never active on-policy; kept so the loss is the standard clipped one).
    overlong_filter: mask truncated responses out of the loss (True) or give them reward 0 (False).
    """

    group_size: int = 8
    adv_eps: float = 1e-6
    std: str = "sample"
    agg: str = "token_mean"
    clip_eps: float = 0.2
    overlong_filter: bool = True


def overlong_filter_mask(response_mask: Tensor, truncated: Tensor, enabled: bool = True) -> Tensor:
    """Loss mask after overlong filtering: rows with ``truncated[b]`` zeroed when ``enabled``, else unchanged.

    response_mask: ``[B, L]`` 1 on generated tokens. truncated: ``[B]`` bool, response hit the budget
    without finishing. Zeroed rows also drop out of the token-mean denominator ``Σ_i |o_i|``.
    """
    if truncated.shape != response_mask.shape[:1]:
        raise ValueError(f"truncated {tuple(truncated.shape)} must be [B] for mask {tuple(response_mask.shape)}")
    if not enabled:
        return response_mask
    return response_mask * (~truncated.bool()).to(response_mask.dtype)[:, None]


def apply_overlong_filter(
    rewards: Tensor, response_mask: Tensor, truncated: Tensor, enabled: bool
) -> tuple[Tensor, Tensor]:
    """``(rewards, loss_mask)`` for one rollout batch.

    enabled: truncated responses get loss mask 0 (their reward is kept only as a placeholder and
    never reaches the loss, since all their tokens are masked). Disabled: truncated responses get
    reward 0 and mask 1, and take part in the group normalisation like any wrong answer.
    """
    trunc = truncated.bool()
    if enabled:
        return rewards, overlong_filter_mask(response_mask, trunc, True)
    return torch.where(trunc, torch.zeros_like(rewards), rewards), response_mask


def onpolicy_grpo_loss(
    logits: Tensor,
    tokens: Tensor,
    rewards: Tensor,
    loss_mask: Tensor,
    temperature: float,
    cfg: OnPolicyGRPOConfig = OnPolicyGRPOConfig(),
) -> tuple[Tensor, dict[str, float]]:
    """Strict on-policy GRPO loss of one rollout batch laid out prompt by prompt (``G`` rows per prompt).

    logits: ``[B, L, V]`` predicting ``tokens`` ``[B, L]`` (the response tokens); ``loss_mask`` ``[B, L]``;
    rewards ``[B]``. Log-probs and entropy use ``logits / T``; ``old_logp`` is the same log-prob
    detached (one update per batch: ρ = 1). Returns ``(loss, stats)`` with core.grpo's stats plus
    ``entropy`` (H_T, token mean over the loss mask), ``reward``, ``zero_adv_frac``.
    """
    # log π_T(o_t) = log softmax(z_t / T)[o_t]
    logp = token_logprobs(logits / temperature, tokens)
    adv = group_advantages(
        rewards, contiguous_group_keys(rewards.shape[0], cfg.group_size), "mean_std", cfg.adv_eps, cfg.std
    )
    loss, stats = policy_loss(logp, logp.detach(), adv, loss_mask, clip_eps=cfg.clip_eps, agg=cfg.agg)
    with torch.no_grad():
        stats["entropy"] = float(temperature_adjusted_entropy(logits.detach(), temperature, loss_mask))
        stats["reward"] = float(rewards.float().mean())
        stats["zero_adv_frac"] = zero_advantage_fraction(rewards, cfg.group_size)
    return loss, stats


def zero_advantage_fraction(rewards: Tensor, group_size: int) -> float:
    """Share of groups whose G rewards are all equal (all right or all wrong): no learning signal."""
    r = rewards.reshape(-1, group_size)
    return float((r.amax(1) == r.amin(1)).float().mean())


def pass_rate_filter(passes: Tensor, n_samples: int = 16, max_passes: int = 6) -> Tensor:
    """Keep-mask of prompts for the hard math stage (1.0 Sec. 3.2): drop prompts with passes > 6 of 16.

    passes: ``[P]`` number of correct samples out of ``n_samples`` per prompt. Returns bool ``[P]``.
    """
    if (passes < 0).any() or (passes > n_samples).any():
        raise ValueError(f"passes must lie in [0, {n_samples}]")
    return passes <= max_passes


def solved_by_all_filter(rewards: Tensor, group_size: int) -> Tensor:
    """Keep-mask of prompts after an epoch (code stage II, math stage 4): drop prompts solved by every rollout.

    rewards: ``[P * G]`` laid out prompt by prompt (1 = solved). Returns bool ``[P]``.
    """
    r = rewards.reshape(-1, group_size)
    return ~(r >= 1).all(dim=1)
