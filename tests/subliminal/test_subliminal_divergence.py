"""Finder, masks, ablations and teacher mixing on hand-built argmax tables (official
modify_dataset_divergence_tokens_system_prompt.py and run_finetuning.py semantics, derived by hand)."""

import random

import pytest
import torch

from iclr26.subliminal.divergence import (
    build_completion_mask,
    divergence_positions,
    from_predictions,
    masked_dataset,
    select_decision_points,
    teacher_mixing,
)

T = torch.tensor


def test_finder_only_factual_correct_and_some_counterfactual_wrong():
    tokens = T([5, 6, 7, 8, 9])
    factual = T([5, 6, 0, 8, 9])  # position 2: factual argmax wrong -> excluded even though a cf differs
    cfs = T(
        [
            [5, 1, 1, 8, 9],  # differs at 1 and 2
            [5, 6, 7, 8, 2],
        ]
    )  # differs at 4
    assert divergence_positions(tokens, factual, cfs).tolist() == [1, 4]


def test_identical_counterfactuals_give_no_divergence():
    tokens = T([3, 1, 4, 1, 5])
    assert divergence_positions(tokens, tokens.clone(), tokens.repeat(4, 1)).numel() == 0


def test_single_counterfactual_differing_once_returns_that_position():
    tokens = T([3, 1, 4, 1, 5, 9])
    cf = tokens.clone()
    cf[3] = 7
    assert divergence_positions(tokens, tokens.clone(), cf).tolist() == [3]


def test_finder_matches_official_correct_matrix_rule():
    # official: decision_points = nonzero(correct[target] & ((~correct).sum(0) > 0)), target row inside the matrix
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 4, (30,), generator=g)
    preds = torch.randint(0, 4, (13, 30), generator=g)
    preds[0, ::2] = tokens[::2]
    correct = preds == tokens
    official = torch.nonzero(correct[0] & ((~correct).sum(0) > 0)).squeeze(1).tolist()
    assert divergence_positions(tokens, preds[0], preds[1:]).tolist() == official
    res = from_predictions([tokens.tolist()], [preds])
    assert res.decision_points == [official]
    assert res.fraction() == pytest.approx(len(official) / 30)


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="shape mismatch"):
        divergence_positions(T([1, 2, 3]), T([1, 2]), T([[1, 2, 3]]))


def test_div_only_and_without_div_partition_the_mask_and_drop_the_same_rows():
    comps = [[1] * 6, [2] * 5, [3] * 4]
    dps = [[0, 3], [], [2]]
    k1, m1 = masked_dataset(comps, dps, "div_only")
    k2, m2 = masked_dataset(comps, dps, "without_div")
    assert k1 == k2 == [0, 2]  # the zero-divergence row is dropped in both
    for a, b, i in zip(m1, m2, k1, strict=True):
        assert len(a) == len(comps[i])
        assert all(x != y for x, y in zip(a, b, strict=True))  # disjoint, union = full mask
    assert m1[0] == [True, False, False, True, False, False]
    k_all, m_all = masked_dataset(comps, dps, "all")
    assert k_all == [0, 1, 2] and all(all(m) for m in m_all)


def test_random_mask_removes_as_many_tokens_as_the_row_has_divergences():
    comps = [[1] * 20] * 50
    rng = random.Random(0)
    dps = [sorted(rng.sample(range(20), rng.randint(1, 6))) for _ in comps]
    keep, masks = masked_dataset(comps, dps, "random", seed=3)
    assert keep == list(range(50))
    assert [20 - sum(m) for m in masks] == [len(d) for d in dps]
    _, without = masked_dataset(comps, dps, "without_div", seed=3)
    assert masks != without  # random positions, not the divergence ones


def test_mask_rejects_out_of_range_points_and_unknown_mode():
    with pytest.raises(ValueError, match="out of range"):
        build_completion_mask(4, [4], "div_only")
    with pytest.raises(ValueError, match="unknown mask mode"):
        build_completion_mask(4, [1], "inverse")


def test_ratio_and_subset_ablations():
    dp = [1, 4, 6, 9, 12]
    assert select_decision_points(dp, subset="first_only") == [1]
    assert len(select_decision_points(dp, ratio=0.4, rng=random.Random(0))) == 2  # int(5 * 0.4)
    assert select_decision_points(dp, ratio=0.1) == dp  # int(0.5) = 0 < 1: unchanged (official)
    assert select_decision_points([7], subset="first_half") == [7]  # subsets apply only when n > 1
    assert select_decision_points([1, 2, 3, 4], subset="first_half") == [1, 2]
    assert select_decision_points([1, 2, 3, 4], subset="second_half") == [3, 4]
    odd = select_decision_points(dp, subset="first_half", rng=random.Random(1))
    assert odd in ([1, 4], [1, 4, 6])
    sub = select_decision_points(dp, ratio=0.6, rng=random.Random(2))
    assert set(sub) <= set(dp) and sub == sorted(sub)


DIGITS = list(range(10, 20))  # ids 10..19 are digits in this table; 5 is a comma


def test_teacher_mixing_replaces_digits_and_deletes_non_digits():
    tokens = [11, 12, 5, 13, 14, 15]
    preds = T(
        [
            tokens,  # factual row
            [11, 17, 5, 13, 5, 15],  # position 1 -> digit 17, position 4 -> comma (delete)
            [11, 12, 5, 13, 5, 15],
        ]
    )
    out = teacher_mixing(tokens, [1, 4], preds, DIGITS, mix_ratio=1.0, rng=random.Random(0))
    assert out == [11, 17, 5, 13, 15]
    assert teacher_mixing(tokens, [1, 4], preds, DIGITS, only_first=True) == [11, 17, 5, 13, 14, 15]
    assert teacher_mixing(tokens, [], preds, DIGITS, only_first=True) == tokens


def test_teacher_mixing_offsets_after_a_deletion():
    tokens = [11, 12, 13, 14]
    preds = T([tokens, [5, 12, 18, 14]])  # delete at 0, then position 2 (now index 1) becomes 18
    assert teacher_mixing(tokens, [0, 2], preds, DIGITS, mix_ratio=1.0) == [12, 18, 14]
    with pytest.raises(ValueError):
        teacher_mixing(tokens, [0], preds, DIGITS)
