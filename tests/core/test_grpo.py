"""Tests of iclr26.core.grpo against hand-computed numbers (the arithmetic is written next to each value)."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from iclr26.core.grpo import (
    GRPOConfig,
    contiguous_group_keys,
    group_advantages,
    grpo_loss,
    kl_k3,
    masked_aggregate,
    policy_loss,
    token_logprobs,
)

F64 = torch.float64
SQRT_1_5 = 1.224744871391589  # sqrt(3/2)
INV_SQRT2 = 0.7071067811865475  # 1/sqrt(2)


def t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


# --------------------------------------------------------------------------------------------------
# group_advantages
# --------------------------------------------------------------------------------------------------

# group "a": rewards 1, 5, 3 -> mean 3, deviations -2, 2, 0; group "b": 20, 10, 30 -> mean 20, dev 0, -10, 10
KEYS = ["b", "a", "a", "b", "a", "b"]
REWARDS = [20.0, 1.0, 5.0, 10.0, 3.0, 30.0]


def test_advantages_two_interleaved_groups_sample_std():
    # sample std: a: sqrt((4+4+0)/2) = 2 ; b: sqrt((0+100+100)/2) = 10
    adv = group_advantages(t(REWARDS), KEYS, eps=0.0)
    torch.testing.assert_close(adv, t([0.0, -1.0, 1.0, -1.0, 0.0, 1.0]), rtol=0, atol=1e-12)


def test_advantages_population_std():
    # population std: a: sqrt(8/3), so 2/sqrt(8/3) = sqrt(3/2); b: sqrt(200/3), so 10/sqrt(200/3) = sqrt(3/2)
    adv = group_advantages(t(REWARDS), KEYS, eps=0.0, std="population")
    s = SQRT_1_5
    torch.testing.assert_close(adv, t([0.0, -s, s, -s, 0.0, s]), rtol=0, atol=1e-12)


def test_advantages_default_eps_is_added_to_std():
    # (r - mean) / (std + 1e-6): 2 / (2 + 1e-6) = 0.99999950000025 ; 10 / (10 + 1e-6) = 0.99999990000001
    adv = group_advantages(t(REWARDS), KEYS)
    a, b = 0.99999950000025, 0.99999990000001
    torch.testing.assert_close(adv, t([0.0, -a, a, -b, 0.0, b]), rtol=0, atol=1e-12)


def test_advantages_mean_only_and_none():
    adv = group_advantages(t(REWARDS), KEYS, normalize="mean")
    torch.testing.assert_close(adv, t([0.0, -2.0, 2.0, -10.0, 0.0, 10.0]), rtol=0, atol=1e-12)
    raw = group_advantages(t(REWARDS), KEYS, normalize="none")
    torch.testing.assert_close(raw, t(REWARDS), rtol=0, atol=0)


def test_advantages_tensor_keys_equal_list_keys():
    # the same grouping given as an integer tensor ("b" -> 7, "a" -> 3)
    adv = group_advantages(t(REWARDS), torch.tensor([7, 3, 3, 7, 3, 7]), eps=0.0)
    torch.testing.assert_close(adv, t([0.0, -1.0, 1.0, -1.0, 0.0, 1.0]), rtol=0, atol=1e-12)
    # 2-D tensor keys: each row is a key
    keys2d = torch.tensor([[0, 1], [0, 0], [0, 0], [0, 1], [0, 0], [0, 1]])
    adv2 = group_advantages(t(REWARDS), keys2d, eps=0.0)
    torch.testing.assert_close(adv2, t([0.0, -1.0, 1.0, -1.0, 0.0, 1.0]), rtol=0, atol=1e-12)


def test_equal_reward_group_is_exactly_zero():
    # 0.1 * 3 / 3 != 0.1 in floating point, so r - mean would leave a residue; the group must give exactly 0.
    # group 1: rewards 0.7, 0.2 -> mean 0.45, dev +-0.25, sample std sqrt(2 * 0.0625 / 1) = 0.3535.. -> +-1/sqrt2
    for dtype in (torch.float32, F64):
        r = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.2], dtype=dtype)
        adv = group_advantages(r, [0, 0, 0, 1, 1], eps=0.0)
        assert torch.isfinite(adv).all()
        assert adv.dtype == dtype
        assert (adv[:3] == 0).all()
        torch.testing.assert_close(adv[3:], torch.tensor([INV_SQRT2, -INV_SQRT2], dtype=dtype))
        assert (group_advantages(r, [0, 0, 0, 1, 1], normalize="mean")[:3] == 0).all()
    # a whole batch of equal rewards, eps=0: no 0/0
    adv = group_advantages(torch.ones(4), ["x"] * 4, eps=0.0)
    assert torch.equal(adv, torch.zeros(4))


def test_singleton_group_is_zero():
    # key 0 alone -> 0; group 1: 1, 3 -> mean 2, sample std sqrt(2) -> -+1/sqrt2
    adv = group_advantages(t([5.0, 1.0, 3.0]), [0, 1, 1], eps=0.0)
    assert adv[0] == 0
    torch.testing.assert_close(adv[1:], t([-INV_SQRT2, INV_SQRT2]), rtol=0, atol=1e-12)
    # population std of a singleton, eps=0: still 0, not nan
    assert torch.equal(group_advantages(t([5.0]), [0], eps=0.0, std="population"), t([0.0]))


def test_tuple_keys_env_agent_turn():
    keys = [(0, "coder", 1), (0, "tester", 1), (0, "coder", 1), (0, "tester", 1), (0, "coder", 2), (1, "coder", 1)]
    # (0,coder,1): 1, 3 -> -+1/sqrt2 ; (0,tester,1): 2, 6 -> mean 4, sample std sqrt(8) -> -+2/sqrt8 = -+1/sqrt2
    # (0,coder,2) and (1,coder,1) are singletons -> 0
    adv = group_advantages(t([1.0, 2.0, 3.0, 6.0, 9.0, 4.0]), keys, eps=0.0)
    s = INV_SQRT2
    torch.testing.assert_close(adv, t([-s, -s, s, s, 0.0, 0.0]), rtol=0, atol=1e-12)


def test_integer_rewards_and_no_grad():
    adv = group_advantages(torch.tensor([1, 0, 1, 1]), [0, 0, 1, 1], eps=0.0)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, torch.tensor([INV_SQRT2, -INV_SQRT2, 0.0, 0.0]))
    r = torch.tensor([1.0, 2.0], requires_grad=True)
    assert not group_advantages(r, [0, 0]).requires_grad


def test_advantages_bad_arguments():
    with pytest.raises(ValueError):
        group_advantages(t([1.0, 2.0]), [0])
    with pytest.raises(ValueError):
        group_advantages(t([1.0, 2.0]), [0, 0], normalize="zscore")
    with pytest.raises(ValueError):
        group_advantages(t([1.0, 2.0]), [0, 0], std="biased")
    with pytest.raises(ValueError):
        group_advantages(t([[1.0, 2.0]]), [0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.floats(-100, 100, allow_nan=False)), min_size=1, max_size=30),
    st.sampled_from(["sample", "population"]),
)
def test_advantages_property_zero_mean_per_group(items, std):
    keys = [k for k, _ in items]
    r = t([v for _, v in items])
    adv = group_advantages(r, keys, std=std)
    assert torch.isfinite(adv).all()
    for k in set(keys):
        sel = torch.tensor([kk == k for kk in keys])
        assert abs(float(adv[sel].sum())) < 1e-6 * max(1, int(sel.sum()))
        if bool((r[sel] == r[sel][0]).all()):
            assert bool((adv[sel] == 0).all())


def test_contiguous_group_keys():
    assert contiguous_group_keys(6, 3).tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError):
        contiguous_group_keys(5, 2)


# --------------------------------------------------------------------------------------------------
# policy_loss
# --------------------------------------------------------------------------------------------------

# 2x3 example, old_logp = 0 and logp = log(ratio); eps_low = 0.2, eps_high = 0.3 -> clip range [0.8, 1.3]
# row 0, A = +2, ratios 1.5, 1.0, 0.5:
#   r=1.5: min(3.0, 1.3*2=2.6) = 2.6 -> loss -2.6   (clipped high, no gradient)
#   r=1.0: min(2.0, 2.0)       = 2.0 -> loss -2.0
#   r=0.5: min(1.0, 0.8*2=1.6) = 1.0 -> loss -1.0   (not clipped: A > 0 and ratio low)
# row 1, A = -1, ratios 0.5, 1.2, 1.5:
#   r=0.5: min(-0.5, -0.8)     = -0.8 -> loss 0.8   (clipped low, no gradient)
#   r=1.2: min(-1.2, -1.2)     = -1.2 -> loss 1.2
#   r=1.5: min(-1.5, -1.3)     = -1.5 -> loss 1.5   (not clipped: A < 0 and ratio high)
RATIOS = [[1.5, 1.0, 0.5], [0.5, 1.2, 1.5]]
ADV = [2.0, -1.0]
ROW_SUMS = (-5.6, 3.5)  # -2.6-2.0-1.0 ; 0.8+1.2+1.5


def _example(mask=None, requires_grad=False):
    logp = torch.log(t(RATIOS)).requires_grad_(requires_grad)
    old = torch.zeros(2, 3, dtype=F64)
    m = torch.ones(2, 3, dtype=F64) if mask is None else t(mask)
    return logp, old, t(ADV), m


def test_policy_loss_hand_value_both_clip_sides():
    logp, old, adv, m = _example()
    loss, stats = policy_loss(logp, old, adv, m, clip_eps=0.2, clip_eps_high=0.3, agg="token_mean")
    assert loss.item() == pytest.approx(-0.35, abs=1e-12)  # (-5.6 + 3.5) / 6
    assert stats["clip_frac"] == pytest.approx(2 / 6)
    assert stats["clip_frac_high"] == pytest.approx(1 / 6)
    assert stats["clip_frac_low"] == pytest.approx(1 / 6)
    assert stats["ratio_mean"] == pytest.approx(6.2 / 6)  # (1.5+1+0.5+0.5+1.2+1.5)/6
    assert stats["ratio_max"] == pytest.approx(1.5)
    # mean of (r-1) - log r: 0.0945349, 0, 0.1931472, 0.1931472, 0.0176784, 0.0945349 -> 0.5930426/6
    assert stats["approx_kl"] == pytest.approx(0.0988404313516012, abs=1e-12)
    assert stats["n_tokens"] == 6


def test_policy_loss_aggregations_equal_lengths():
    logp, old, adv, m = _example()
    tok, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="token_mean")
    seq, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="seq_mean")
    seq_sum, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="seq_mean_token_sum")
    assert tok.item() == pytest.approx(-0.35, abs=1e-12)
    assert seq.item() == pytest.approx(-0.35, abs=1e-12)  # (-5.6/3 + 3.5/3) / 2
    assert seq_sum.item() == pytest.approx(-1.05, abs=1e-12)  # (-5.6 + 3.5) / 2


def test_policy_loss_aggregations_differ_for_unequal_lengths():
    # last token of row 1 masked: row sums -5.6 (3 tokens) and 0.8 + 1.2 = 2.0 (2 tokens)
    logp, old, adv, m = _example(mask=[[1, 1, 1], [1, 1, 0]])
    tok, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="token_mean")
    seq, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="seq_mean")
    seq_sum, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="seq_mean_token_sum")
    assert tok.item() == pytest.approx(-0.72, abs=1e-12)  # (-5.6 + 2.0) / 5
    assert seq.item() == pytest.approx(-13 / 30, abs=1e-12)  # (-5.6/3 + 2.0/2) / 2 = -0.4333..
    assert seq_sum.item() == pytest.approx(-1.8, abs=1e-12)  # (-5.6 + 2.0) / 2
    assert tok.item() != pytest.approx(seq.item())


def test_policy_loss_symmetric_clip_default():
    # clip_eps_high=None -> range [0.8, 1.2]: row 0 token 0 becomes min(3.0, 2.4) -> -2.4, the rest unchanged
    logp, old, adv, m = _example()
    loss, _ = policy_loss(logp, old, adv, m, clip_eps=0.2)
    assert loss.item() == pytest.approx((-2.4 - 2.0 - 1.0 + 3.5) / 6, abs=1e-12)


def test_policy_loss_gradient_zero_on_clipped_tokens():
    logp, old, adv, m = _example(requires_grad=True)
    loss, _ = policy_loss(logp, old, adv, m, 0.2, 0.3, agg="token_mean")
    loss.backward()
    # unclipped token: d/dlogp of -(r A)/6 = -r A / 6
    # row 0: clipped, -(1.0*2)/6, -(0.5*2)/6 ; row 1: clipped, -(1.2*-1)/6, -(1.5*-1)/6
    expected = t([[0.0, -1 / 3, -1 / 6], [0.0, 0.2, 0.25]])
    torch.testing.assert_close(logp.grad, expected, rtol=0, atol=1e-12)
    assert logp.grad[0, 0] == 0 and logp.grad[1, 0] == 0


def test_policy_loss_ratio_one_is_minus_mean_advantage():
    logp = t([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1], [-2.0, -0.1, -0.4]])
    adv = t([1.5, -0.5, 2.0])
    loss, stats = policy_loss(logp, logp.clone(), adv, torch.ones(3, 3))
    assert loss.item() == pytest.approx(-(1.5 - 0.5 + 2.0) / 3, abs=1e-12)  # = -mean(A) = -1
    assert stats["clip_frac"] == 0 and stats["approx_kl"] == 0 and stats["ratio_mean"] == 1


def test_policy_loss_masked_garbage_and_empty_mask():
    # huge / nan log-probs at masked positions must not reach the loss or the gradient
    logp = t([[-1.0, 500.0], [float("nan"), -1.0]]).requires_grad_(True)
    old = t([[-1.0, -1.0], [-1.0, -1.0]])
    mask = t([[1.0, 0.0], [0.0, 1.0]])
    for agg in ("token_mean", "seq_mean", "seq_mean_token_sum"):
        logp.grad = None
        loss, stats = policy_loss(logp, old, t([1.0, -1.0]), mask, agg=agg)
        loss.backward()
        assert loss.item() == pytest.approx(0.0, abs=1e-12)  # (-1 + 1) / 2, ratios 1
        assert torch.isfinite(logp.grad).all()
        assert all(math.isfinite(v) for v in stats.values())
    loss, stats = policy_loss(logp, old, t([1.0, -1.0]), torch.zeros(2, 2))
    assert loss.item() == 0 and stats["n_tokens"] == 0


def test_masked_aggregate_skips_empty_sequences():
    x = t([[1.0, 3.0], [5.0, 7.0]])
    m = t([[1.0, 1.0], [0.0, 0.0]])
    assert masked_aggregate(x, m, "seq_mean").item() == 2.0  # only row 0 counts: (1+3)/2
    assert masked_aggregate(x, m, "seq_mean_token_sum").item() == 4.0
    assert masked_aggregate(x, m, "token_mean").item() == 2.0
    with pytest.raises(ValueError):
        masked_aggregate(x, m, "mean")


# --------------------------------------------------------------------------------------------------
# KL and full loss
# --------------------------------------------------------------------------------------------------


def test_kl_k3_hand_values():
    logp = t([[-1.0, -2.0, -1.0]])
    # logp == ref -> exactly 0
    assert kl_k3(logp, logp.clone(), torch.ones(1, 3)).item() == 0.0
    # d = ref - logp = 0, 1, -1 -> e^d - d - 1 = 0, e - 2 = 0.7182818.., e^-1 = 0.3678794..
    ref = t([[-1.0, -1.0, -2.0]])
    kl = kl_k3(logp, ref, torch.ones(1, 3))
    assert kl.item() == pytest.approx(0.3620537565434958, abs=1e-12)  # (0.7182818 + 0.3678794) / 3
    assert kl.item() > 0
    # masking the last token: (0 + 0.7182818) / 2
    assert kl_k3(logp, ref, t([[1.0, 1.0, 0.0]])).item() == pytest.approx(0.7182818284590451 / 2, abs=1e-12)


def test_kl_k3_gradient_flows_through_logp_only():
    logp = t([[-2.0]]).requires_grad_(True)
    ref = t([[-1.0]]).requires_grad_(True)
    kl_k3(logp, ref, torch.ones(1, 1)).backward()
    # d/dlogp (e^{ref-logp} - (ref-logp) - 1) = -e^{1} + 1
    assert logp.grad.item() == pytest.approx(1 - math.e, abs=1e-12)
    assert ref.grad is None


def test_grpo_loss_combines_policy_and_kl():
    logp, old, adv, m = _example()
    ref = logp.detach() + t([[0.0, 1.0, -1.0], [0.0, 0.0, 0.0]])  # d = 0, 1, -1, 0, 0, 0
    loss, stats = grpo_loss(logp, old, ref, adv, m, clip_eps=0.2, clip_eps_high=0.3, kl_coef=0.1)
    kl = (0.7182818284590451 + 0.36787944117144233) / 6  # = 0.18102687827
    assert stats["kl"] == pytest.approx(kl, abs=1e-12)
    assert loss.item() == pytest.approx(-0.35 + 0.1 * kl, abs=1e-12)
    assert stats["loss"] == pytest.approx(loss.item())
    # kl_coef = 0: kl reported, not added
    loss0, stats0 = grpo_loss(logp, old, ref, adv, m, 0.2, 0.3, kl_coef=0.0)
    assert loss0.item() == pytest.approx(-0.35, abs=1e-12) and stats0["kl"] == pytest.approx(kl)
    # no reference model
    loss1, stats1 = grpo_loss(logp, old, None, adv, m, 0.2, 0.3)
    assert loss1.item() == pytest.approx(-0.35, abs=1e-12) and "kl" not in stats1
    with pytest.raises(ValueError):
        grpo_loss(logp, old, None, adv, m, kl_coef=0.1)


# --------------------------------------------------------------------------------------------------
# token_logprobs
# --------------------------------------------------------------------------------------------------


def test_token_logprobs_hand_value():
    # logits (0, log 3) -> softmax (1/4, 3/4)
    logits = t([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    lp = token_logprobs(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(lp, t([[math.log(0.75), math.log(0.25)]]), rtol=0, atol=1e-12)


def test_token_logprobs_matches_log_softmax_and_normalises():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g, dtype=F64) * 5
    tokens = torch.randint(0, 7, (2, 4), generator=g)
    ref = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, tokens), ref, rtol=0, atol=1e-12)
    # summing exp over every possible token gives 1 at each position
    total = sum(token_logprobs(logits, torch.full((2, 4), v)).exp() for v in range(7))
    torch.testing.assert_close(total, torch.ones(2, 4, dtype=F64), rtol=0, atol=1e-12)


def test_token_logprobs_stable_and_upcasts():
    lp = token_logprobs(torch.tensor([[[1000.0, 0.0]]]), torch.tensor([[1]]))
    assert lp.item() == pytest.approx(-1000.0)
    lp16 = token_logprobs(torch.tensor([[[2.0, 1.0, 0.5]]], dtype=torch.bfloat16), torch.tensor([[0]]))
    assert lp16.dtype == torch.float32 and torch.isfinite(lp16).all()
    with pytest.raises(ValueError):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))


# --------------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------------


def test_grpo_config():
    cfg = GRPOConfig(group_size=3, clip_eps_high=0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.group_size = 4  # type: ignore[misc]
    # contiguous blocks of 3: [1, 3, 5] -> -1, 0, 1 ; [0, 0, 0] -> 0
    adv = cfg.advantages(t([1.0, 3.0, 5.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(adv, t([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]), rtol=0, atol=1e-6)
    logp, old, a, m = _example()
    loss, _ = cfg.loss(logp, old, None, a, m)
    assert loss.item() == pytest.approx(-0.35, abs=1e-12)
    assert cfg.to_dict()["clip_eps_high"] == 0.3
    for bad in ({"group_size": 0}, {"agg": "mean"}, {"normalize": "z"}, {"kl_coef": -1.0}, {"std": "x"}):
        with pytest.raises(ValueError):
            GRPOConfig(**bad)


def test_dual_clip_bounds_negative_advantage_tokens_only():
    """ℓ ← min(ℓ, −c·A) where A < 0 (verl clip_ratio_c): hand values for a huge ratio."""
    from iclr26.core.grpo import policy_loss

    old = torch.zeros(2, 1)
    logp = torch.tensor([[math.log(5.0)], [math.log(5.0)]], requires_grad=True)  # ratio 5
    adv = torch.tensor([-1.0, 1.0])
    mask = torch.ones(2, 1)
    loss, st = policy_loss(logp, old, adv, mask, 0.2, 0.2, "token_mean", dual_clip=3.0)
    # A=-1: -min(5*-1, 1.2*-1) = 5, bounded by -c*A = 3; A=+1: -min(5, 1.2) = -1.2
    assert float(loss) == pytest.approx((3.0 - 1.2) / 2)
    assert st["clip_frac_dual"] == pytest.approx(0.5)
    loss_nodual, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2, "token_mean")
    assert float(loss_nodual) == pytest.approx((5.0 - 1.2) / 2)
    loss.backward()
    assert float(logp.grad[0, 0]) == 0.0  # the dual-clipped token carries no gradient
    with pytest.raises(ValueError):
        policy_loss(logp, old, adv, mask, dual_clip=0.5)


def test_kl_k3_clamp_matches_low_var_kl():
    from iclr26.core.grpo import kl_k3

    logp = torch.tensor([[0.0, -20.0]])
    ref = torch.tensor([[-1.0, 0.0]])
    mask = torch.ones(1, 2)
    d = ref - logp
    per = torch.exp(d) - d - 1
    assert float(kl_k3(logp, ref, mask)) == pytest.approx(float(per.mean()), rel=1e-5)
    assert float(kl_k3(logp, ref, mask, clamp=10.0)) == pytest.approx(float(per.clamp(max=10).mean()), rel=1e-5)
