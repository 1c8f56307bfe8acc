"""Strict on-policy GRPO (via core.grpo), overlong filtering and the prompt filters."""

import pytest
import torch

from iclr26.acereason.rl import (
    OnPolicyGRPOConfig,
    apply_overlong_filter,
    onpolicy_grpo_loss,
    overlong_filter_mask,
    pass_rate_filter,
    solved_by_all_filter,
    zero_advantage_fraction,
)


def _batch(b=4, l=5, v=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, l, v, generator=g, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, v, (b, l), generator=g)
    return logits, tokens


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_gradient_equals_reinforce_with_group_advantages_and_logits_over_t():
    """At θ = θ_old the clipped loss's gradient is that of -Σ_i A_i Σ_t log π_T(o_it) / Σ|o_i|."""
    logits, tokens = _batch()
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    t = 0.7
    loss, stats = onpolicy_grpo_loss(logits, tokens, rewards, mask, t, OnPolicyGRPOConfig(group_size=4))
    # hand advantages: mean 0.25, sample std 0.5 -> (1.5, -0.5, -0.5, -0.5)
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=torch.float64) * (0.5 / (0.5 + 1e-6))
    logp = torch.log_softmax(logits / t, -1).gather(-1, tokens[..., None]).squeeze(-1)
    ref = -(adv[:, None] * logp * mask).sum() / mask.sum()
    assert torch.allclose(_grad(loss, logits), _grad(ref, logits), atol=1e-10)
    assert stats["clip_frac"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)
    assert "kl" not in stats  # no KL term, no reference policy
    assert stats["reward"] == 0.25 and stats["zero_adv_frac"] == 0.0


def test_all_equal_groups_give_zero_gradient():
    logits, tokens = _batch(b=8)
    mask = torch.ones(8, 5, dtype=torch.float64)
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0])
    loss, stats = onpolicy_grpo_loss(logits, tokens, rewards, mask, 1.0, OnPolicyGRPOConfig(group_size=4))
    assert torch.count_nonzero(_grad(loss, logits)) == 0
    assert stats["zero_adv_frac"] == 1.0


def test_token_mean_weights_a_longer_response_more():
    """Doubling a correct response's length doubles its share of the gradient (token mean), not under seq mean."""
    logits, tokens = _batch(b=2, l=4)
    tokens[0, 2:] = tokens[0, :2]  # row 0 repeats its first two tokens
    logits.data[0, 2:] = logits.data[0, :2]
    tokens[1], logits.data[1] = tokens[0], logits.data[0]  # every token has the same |∇| per unit advantage
    rewards = torch.tensor([1.0, 0.0])
    short = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.float64)
    long = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)
    cfg = OnPolicyGRPOConfig(group_size=2)

    def share(mask, agg):
        c = OnPolicyGRPOConfig(group_size=2, agg=agg)
        g = _grad(onpolicy_grpo_loss(logits, tokens, rewards, mask, 1.0, c)[0], logits)
        return float(g[0].abs().sum() / g.abs().sum())

    s_short, s_long = share(short, cfg.agg), share(long, cfg.agg)
    assert s_short == pytest.approx(0.5, abs=1e-9) and s_long == pytest.approx(2 / 3, abs=1e-9)
    assert share(long, "seq_mean") == pytest.approx(0.5, abs=1e-9)


def test_overlong_filter_on_masks_and_drops_from_the_denominator():
    logits, tokens = _batch(b=4)
    mask = torch.ones(4, 5, dtype=torch.float64)
    truncated = torch.tensor([False, True, False, False])
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    r_on, m_on = apply_overlong_filter(rewards, mask, truncated, True)
    assert torch.equal(m_on[1], torch.zeros(5, dtype=torch.float64)) and torch.equal(m_on[[0, 2, 3]], mask[[0, 2, 3]])
    assert torch.equal(r_on, rewards)
    cfg = OnPolicyGRPOConfig(group_size=4)
    loss, stats = onpolicy_grpo_loss(logits, tokens, r_on, m_on, 1.0, cfg)
    assert stats["n_tokens"] == 15.0
    g = _grad(loss, logits)
    assert torch.count_nonzero(g[1]) == 0 and torch.count_nonzero(g[0]) > 0
    r_off, m_off = apply_overlong_filter(rewards, mask, truncated, False)
    assert torch.equal(m_off, mask) and r_off.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert torch.equal(overlong_filter_mask(mask, truncated, enabled=False), mask)
    none = torch.zeros(4, dtype=torch.bool)
    assert torch.equal(overlong_filter_mask(mask, none), mask)  # finished responses unaffected
    with pytest.raises(ValueError):
        overlong_filter_mask(mask, torch.zeros(3, dtype=torch.bool))


def test_pass_rate_filter_drops_exactly_above_six_of_sixteen():
    passes = torch.arange(17)
    keep = pass_rate_filter(passes)
    assert keep.tolist() == [True] * 7 + [False] * 10
    with pytest.raises(ValueError):
        pass_rate_filter(torch.tensor([17]))


def test_solved_by_all_filter_and_zero_advantage_share():
    r = torch.tensor([1.0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0])
    assert solved_by_all_filter(r, 4).tolist() == [False, True, True]
    assert zero_advantage_fraction(r, 4) == pytest.approx(2 / 3)
