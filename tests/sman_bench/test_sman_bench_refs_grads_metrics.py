"""Scoring references, the BC scorer's gradient flow and hand-computed metrics of the SMAN benchmark."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from iclr26.sman_bench.agents import N_DENSE, N_HASH, TinyBCScorer
from iclr26.sman_bench.evaluate import char_f1, in_bounds, mean_metrics, released_direction

# ---- references: prediction vs ground truth, x vs y ----------------------------------------------


def test_char_f1_precision_over_prediction_recall_over_ground_truth():
    # pred "abcc" vs gt "abd": common 2, P = 2/4, R = 2/3
    p, r = 2 / 4, 2 / 3
    assert char_f1("abcc", "abd") == pytest.approx(2 * p * r / (p + r))
    assert char_f1("a b", "ab") == 1.0  # spaces ignored by default
    assert char_f1("a b", "ab", compat=True) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_in_bounds_reads_x_and_y_from_their_own_corners():
    area = [[0, 10], [5, 20]]  # x in [0, 5], y in [10, 20]
    assert in_bounds((2, 15), area) and not in_bounds((2, 4), area) and not in_bounds((6, 15), area)
    assert in_bounds((5, 10), area)  # closed ranges
    # released compat: open ranges and y compared with x2 < y < y2
    assert in_bounds((2, 7), area, compat=True) and not in_bounds((0, 15), area, compat=True)


def test_released_direction_up_is_positive_dy_and_ties_go_to_the_earlier_direction():
    assert released_direction((0, 0), (1, 3)) == "up"
    assert released_direction((0, 0), (-3, 1)) == "left"
    assert released_direction((0, 0), (1, 1)) == "up"  # tie up/right: up comes first
    assert released_direction((0, 0), (1, -1)) == "down"  # tie down/right: down comes first


# ---- gradient flow: BC scorer --------------------------------------------------------------------
# CE of the gold element: hashed weights get a gradient only on the features present on the page


def _page():
    rows, cols, vals = [0, 0, 1], [3, 7, 7], [2.0, 1.0, 1.0]  # element 0: feature 3 twice, feature 7 once
    hashed = sp.csr_matrix((vals, (rows, cols)), shape=(2, N_HASH), dtype=np.float32)
    dense = torch.zeros(2, N_DENSE)
    dense[1, 0] = 1.0
    return hashed, dense


def test_scores_weight_hashed_features_by_their_counts():
    m = TinyBCScorer()
    with torch.no_grad():
        m.emb.weight[3] = 0.5
        m.emb.weight[7] = -1.0
        m.dense.weight.zero_()
        m.dense.weight[0, 0] = 4.0
        m.dense.bias.zero_()
    s = m(*_page())
    assert s.tolist() == pytest.approx([2 * 0.5 - 1.0, -1.0 + 4.0])


def test_bc_gradient_only_on_the_pages_features():
    m = TinyBCScorer()
    s = m(*_page())
    loss = torch.nn.functional.cross_entropy(s[None], torch.tensor([0]))
    (g,) = torch.autograd.grad(loss, m.emb.weight)
    assert set(torch.nonzero(g[:, 0]).flatten().tolist()) <= {3, 7}  # features absent from the page: exactly 0
    assert abs(float(g[7, 0])) < 1e-6  # feature 7 is on both elements: its gradient cancels in the softmax
    assert g[3, 0] < 0  # descent raises the gold element's score


# ---- metrics -------------------------------------------------------------------------------------


def test_micro_and_macro_means_differ_on_unequal_episodes():
    rows = [
        {"action_acc": 1.0, "n_correct": 1, "n_steps": 1, "type_acc": 1.0, "n_type_ok": 1},
        {"action_acc": 0.25, "n_correct": 1, "n_steps": 4, "type_acc": 0.5, "n_type_ok": 2},
    ]
    macro, micro = mean_metrics(rows), mean_metrics(rows, micro=True)
    assert macro["action_acc"] == pytest.approx(0.625) and micro["action_acc"] == pytest.approx(2 / 5)
    assert micro["type_acc"] == pytest.approx(3 / 5)
