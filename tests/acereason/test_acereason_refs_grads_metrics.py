"""References, gradient flow and metrics of AceReason's strict on-policy GRPO and its entropy/filters,
on tiny hand-made logits and rewards."""

import math

import pytest
import torch

from iclr26.acereason.entropy import temperature_adjusted_entropy, token_entropy
from iclr26.acereason.rl import (
    OnPolicyGRPOConfig,
    apply_overlong_filter,
    onpolicy_grpo_loss,
    pass_rate_filter,
    solved_by_all_filter,
    zero_advantage_fraction,
)

T = 0.7


def _batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 4, generator=g, dtype=torch.float64)
    tokens = torch.tensor([[1, 3], [0, 2], [2, 2]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)  # row 1 is one token long
    return logits, tokens, mask


# ---- references + gradient flow ---------------------------------------------------------------------
# d loss / d logits[b, t] = -A_b / N * (onehot(o_bt) - softmax(z_bt / T)) / T on response tokens, 0 elsewhere;
# the ratio's denominator is sg[pi_theta] (rho = 1): without the stop-gradient the gradient would vanish.


def test_gradient_is_advantage_weighted_score_of_the_temperature_policy():
    logits, tokens, mask = _batch()
    logits.requires_grad_(True)
    rewards = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)  # one group of 3: asymmetric advantages
    loss, stats = onpolicy_grpo_loss(logits, tokens, rewards, mask, T, OnPolicyGRPOConfig(group_size=3))
    (g,) = torch.autograd.grad(loss, logits)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # sample std of (1, 0, 0)
    adv = torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=torch.float64) / (std + 1e-6)
    p = torch.softmax(logits.detach() / T, -1)
    onehot = torch.nn.functional.one_hot(tokens, 4).to(p)
    expect = -(adv[:, None, None] / mask.sum()) * (onehot - p) / T * mask[..., None]
    assert torch.allclose(g, expect, atol=1e-9)
    assert loss.item() == pytest.approx(-(adv[:, None] * mask).sum().item() / mask.sum().item(), abs=1e-9)
    assert stats["reward"] == pytest.approx(1 / 3)


def test_swapping_rewards_flips_the_gradient_direction():
    logits, tokens, mask = _batch()
    logits.requires_grad_(True)
    cfg = OnPolicyGRPOConfig(group_size=3)
    (g1,) = torch.autograd.grad(onpolicy_grpo_loss(logits, tokens, torch.tensor([1.0, 0, 0]), mask, T, cfg)[0], logits)
    (g2,) = torch.autograd.grad(onpolicy_grpo_loss(logits, tokens, torch.tensor([0.0, 1, 1]), mask, T, cfg)[0], logits)
    assert torch.allclose(g1, -g2, atol=1e-6)
    # gradient descent raises the log-prob of the rewarded response's tokens
    lp = torch.log_softmax(logits.detach() / T, -1).gather(-1, tokens[..., None])[0, :, 0]
    lp_after = torch.log_softmax((logits.detach() - 0.1 * g1) / T, -1).gather(-1, tokens[..., None])[0, :, 0]
    assert torch.all(lp_after > lp)


def test_entropy_stat_is_the_temperature_policys_on_response_tokens():
    logits, tokens, mask = _batch()
    _, stats = onpolicy_grpo_loss(logits, tokens, torch.tensor([1.0, 0, 0]), mask, T, OnPolicyGRPOConfig(group_size=3))
    p = torch.softmax(logits / T, -1)
    h = -(p * torch.log(p)).sum(-1)
    assert stats["entropy"] == pytest.approx(float((h * mask).sum() / mask.sum()), abs=1e-9)


# ---- metrics and filters ----------------------------------------------------------------------------


def test_token_mean_and_seq_mean_entropy_on_unequal_lengths():
    z = torch.log(torch.tensor([[[0.5, 0.5], [1.0, 1e-12]], [[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    h = token_entropy(z)
    assert h[0, 0].item() == pytest.approx(math.log(2)) and h[0, 1].item() == pytest.approx(0.0, abs=1e-9)
    ln2 = math.log(2)
    assert temperature_adjusted_entropy(z, 1.0, mask).item() == pytest.approx(2 * ln2 / 3)  # 3 tokens
    assert temperature_adjusted_entropy(z, 1.0, mask, "seq-mean").item() == pytest.approx((ln2 / 2 + ln2) / 2)


def test_zero_advantage_fraction_counts_all_equal_groups():
    assert zero_advantage_fraction(torch.tensor([1.0, 1, 0, 1, 0, 0]), 2) == pytest.approx(2 / 3)


def test_overlong_filter_masks_or_zeroes_only_the_truncated_rows():
    rewards, mask = torch.tensor([1.0, 1.0]), torch.ones(2, 3)
    trunc = torch.tensor([False, True])
    r_on, m_on = apply_overlong_filter(rewards, mask, trunc, True)
    assert r_on.tolist() == [1.0, 1.0] and m_on.tolist() == [[1, 1, 1], [0, 0, 0]]
    r_off, m_off = apply_overlong_filter(rewards, mask, trunc, False)
    assert r_off.tolist() == [1.0, 0.0] and m_off.tolist() == [[1, 1, 1], [1, 1, 1]]


def test_data_filters_at_their_boundaries():
    assert pass_rate_filter(torch.tensor([0, 6, 7, 16])).tolist() == [True, True, False, False]
    assert solved_by_all_filter(torch.tensor([1.0, 1, 1, 0, 0, 0]), 3).tolist() == [False, True]
