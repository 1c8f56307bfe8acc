"""References (factual vs counterfactual teachers, clean vs counterfactual token), gradient flow of the masked
student loss, and metrics of the subliminal-learning pipeline on tiny hand-made inputs."""

import math
from types import SimpleNamespace

import pytest
import torch

from iclr26.subliminal.attribution import _metric
from iclr26.subliminal.data import wilson_interval
from iclr26.subliminal.divergence import build_completion_mask, divergence_positions, masked_dataset
from iclr26.subliminal.toy import masked_lm_loss

T = torch.tensor


# ---- references ---------------------------------------------------------------------------------


def test_divergence_needs_the_factual_teacher_right_and_a_counterfactual_wrong():
    tokens = T([1, 2, 3, 4, 5])
    factual = T([1, 2, 9, 4, 5])  # wrong at 2
    cfs = T([[1, 7, 3, 4, 5], [1, 2, 6, 8, 5]])  # wrong at 1; at 2 (where the factual one is wrong too) and 3
    assert divergence_positions(tokens, factual, cfs).tolist() == [1, 3]
    # swapping the roles (factual := a counterfactual) gives other positions: the roles are not symmetric
    assert divergence_positions(tokens, cfs[0], torch.stack([factual, cfs[1]])).tolist() == [2, 3]


def test_metric_reads_the_previous_positions_logits_clean_minus_counterfactual():
    logits = torch.zeros(2, 4, 3)
    logits[0, 1] = T([5.0, 1.0, 0.0])  # predicts position 2 of row 0
    logits[0, 2] = T([-9.0, 9.0, 0.0])  # a decoy at the divergence position itself
    logits[1, 0] = T([0.0, 2.0, 7.0])  # predicts position 1 of row 1
    m = _metric(logits, T([2, 1]), T([0, 2]), T([1, 1]))
    assert m.tolist() == [4.0, 5.0]
    assert _metric(logits, T([2, 1]), T([1, 1]), T([0, 2])).tolist() == [-4.0, -5.0]


# ---- gradient flow -------------------------------------------------------------------------------
# masked student loss: logits row k (predicting token k + 1) gets a gradient iff target_mask[k + 1]


def test_masked_lm_loss_gradient_only_on_rows_predicting_masked_targets():
    ids = T([[0, 2, 1, 2, 0]])
    mask = T([[False, True, False, True, False]])
    table = torch.randn(1, 4, 3, requires_grad=True)
    model = lambda x: SimpleNamespace(logits=table[:, : x.shape[1]])  # noqa: E731
    loss = masked_lm_loss(model, ids, mask)
    (g,) = torch.autograd.grad(loss, table)
    nonzero = g.abs().sum(-1)[0] > 0
    assert nonzero.tolist() == [True, False, True, False]  # rows 0 and 2 predict ids[1] and ids[3]
    lp = torch.log_softmax(table.detach()[0], -1)
    assert loss.item() == pytest.approx(-(lp[0, 2] + lp[2, 2]).item() / 2, abs=1e-6)


# ---- metrics -------------------------------------------------------------------------------------


def test_mask_modes_on_an_asymmetric_row():
    assert build_completion_mask(5, [1, 4], "div_only") == [False, True, False, False, True]
    assert build_completion_mask(5, [1, 4], "without_div") == [True, False, True, True, False]
    assert build_completion_mask(3, [1], "all") == [True, True, True]
    rnd = build_completion_mask(6, [0, 5], "random")
    assert len(rnd) == 6 and rnd.count(False) == 2


def test_masked_dataset_drops_rows_without_divergence_except_for_all():
    keep, masks = masked_dataset([[1, 2, 3], [4, 5], [6, 7, 8]], [[2], [], [0]], "div_only")
    assert keep == [0, 2] and masks == [[False, False, True], [True, False, False]]
    keep_all, _ = masked_dataset([[1, 2, 3], [4, 5]], [[2], []], "all")
    assert keep_all == [0, 1]


def test_wilson_interval_hand_computed():
    z = 1.959963984540054
    n, k = 20, 3
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(centre - half, abs=1e-9) and hi == pytest.approx(centre + half, abs=1e-9)
