"""Forgetting: buffer vs population statistics in the right slots, where the ER loss's gradient flows, and the
diagnostics on asymmetric, hand-computed cases.

Gradient table of the ER loss (CE over stream + replay):

| setting            | nonzero gradient                                  | exactly zero                          |
|--------------------|---------------------------------------------------|---------------------------------------|
| CIL (single head)  | features and every head row                       | --                                    |
| TIL (multi-head)   | each sample's logits of its own task's classes    | its logits of other tasks' classes    |
| extract / probes   | none (no_grad; numpy features)                    | everything                            |
"""

import importlib
import math
import types

import numpy as np
import pytest
import torch

from iclr26.forgetting.lda import gaussian_stats, lda_counterfactuals, lda_fit
from iclr26.forgetting.models import ContinualNet, MLPFeatures
from iclr26.forgetting.neural_collapse import buffer_population_stats, nc_metrics
from iclr26.forgetting.probe import forgetting
from iclr26.forgetting.replay import ERConfig, batch_split, er_loss, shallow_accuracy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

lda_mod = importlib.import_module("iclr26.forgetting.lda")


# ---------------------------------------------------------------- references: buffer vs population


def test_lda_counterfactuals_put_each_statistic_in_its_slot(monkeypatch):
    rng = np.random.default_rng(0)
    z_pop = rng.normal(size=(40, 2)) + np.repeat([[0.0, 0.0], [3.0, 1.0]], 20, axis=0)
    y_pop = np.repeat([0, 1], 20)
    z_seen = rng.normal(size=(12, 2)) * np.array([0.3, 2.0]) + np.repeat([[1.0, -1.0], [3.0, 1.0]], 6, axis=0)
    y_seen = np.repeat([0, 1], 6)
    mu_p, cov_p = gaussian_stats(z_pop, y_pop, [0, 1])
    mu_b, cov_b = gaussian_stats(z_seen, y_seen, [0, 1])
    seen = []
    real_fit = lda_mod.lda_fit

    def rec(mu, cov, ridge, inverse):
        seen.append((mu, cov))
        return real_fit(mu, cov, ridge, inverse)

    monkeypatch.setattr(lda_mod, "lda_fit", rec)
    out = lda_counterfactuals(z_pop, y_pop, z_seen, y_seen, z_pop[:5], y_pop[:5], [0, 1])
    want = {
        "pop_mu+pop_cov": (mu_p, cov_p),
        "pop_mu+identity": (mu_p, None),
        "buf_mu+pop_cov": (mu_b, cov_p),
        "pop_mu+buf_cov": (mu_p, cov_b),
        "buf_mu+buf_cov": (mu_b, cov_b),
    }
    assert list(out) == list(want)
    for (name, (mu, cov)), (got_mu, got_cov) in zip(want.items(), seen):
        assert np.allclose(got_mu, mu), name
        assert (got_cov is None) if cov is None else np.allclose(got_cov, cov), name


def test_lda_fit_hand_computed():
    means = np.array([[1.0, 0.0], [0.0, 2.0]])
    cov = np.diag([2.0, 4.0])
    w, b = lda_fit(means, cov, ridge=0.0)
    assert np.allclose(w, [[0.5, 0.0], [0.0, 0.5]])
    assert np.allclose(b, [-0.25, -0.5])  # -1/2 mu^T Sigma^-1 mu
    w, b = lda_fit(means, cov, ridge=0.01)  # Sigma + 0.01 * tr/d * I = diag(2.03, 4.03)
    assert np.allclose(w, [[1 / 2.03, 0.0], [0.0, 2 / 4.03]])
    assert np.allclose(b, [-0.5 / 2.03, -0.5 * 4 / 4.03])


def test_pooled_covariance_is_class_balanced():
    z = np.array([[0.0], [2.0], [0.0], [1.0], [2.0], [3.0]])
    y = np.array([0, 0, 1, 1, 1, 1])
    means, cov = gaussian_stats(z, y, [0, 1])
    assert np.allclose(means, [[1.0], [1.5]])
    assert cov[0, 0] == pytest.approx((2.0 + 5.0 / 3.0) / 2)  # mean of the unbiased class variances


def test_buffer_population_stats_hand_computed():
    z_pop = np.array([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0], [5.0, 7.0]])
    y_pop = np.array([0, 0, 1, 1])
    z_buf = np.array([[0.0, 2.0], [5.0, 5.0]])
    y_buf = np.array([0, 1])
    st = buffer_population_stats(z_pop, y_pop, z_buf, y_buf, [0, 1])
    assert st["norm_pop"][0] == pytest.approx(1.0) and st["norm_buf"][0] == pytest.approx(2.0)
    assert st["shift"][0] == pytest.approx(math.sqrt(5.0))  # ||(0, 2) - (1, 0)||, not 2 - 1
    assert st["shift"][1] == pytest.approx(1.0)
    assert np.allclose(st["var_pop"], [2.0, 2.0]) and np.allclose(st["var_buf"], [0.0, 0.0])
    assert st["rank_pop"].tolist() == [1, 1] and st["rank_buf"].tolist() == [0, 0]
    assert st["n_buf"].tolist() == [1, 1] and st["n_pop"].tolist() == [2, 2]


# ---------------------------------------------------------------- gradient flow of the ER loss


def _net(multi_head):
    torch.manual_seed(0)
    return ContinualNet(MLPFeatures(3, hidden=(8,), d_feat=4), 4, [[0, 1], [2, 3]], multi_head=multi_head)


def test_til_loss_gradient_only_on_each_samples_own_task_logits():
    net = _net(True)
    table = torch.nn.Parameter(torch.randn(3, 4))

    def model(x):
        return table[x]

    batch = (torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0]), torch.tensor([0, 1, 0]))
    loss = er_loss(net, model, batch, "til")
    (g,) = torch.autograd.grad(loss, [table])
    nonzero = g.abs() > 0
    want = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    assert torch.equal(nonzero, want)
    # CIL: every logit of every sample
    (g2,) = torch.autograd.grad(er_loss(net, model, batch, "cil"), [table])
    assert bool((g2.abs() > 0).all())


def test_cil_loss_reaches_features_and_every_head_row():
    net = _net(False)
    x = torch.randn(6, 3)
    loss = er_loss(net, net, (x, torch.tensor([0, 1, 2, 3, 0, 2]), torch.tensor([0, 0, 1, 1, 0, 1])), "cil")
    loss.backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in net.parameters())


# ---------------------------------------------------------------- metrics, hand-computed, asymmetric


def test_forgetting_diagonal_and_max_references():
    nan = float("nan")
    acc = np.array([[0.9, nan, nan], [0.95, 0.8, nan], [0.6, 0.4, 0.7]])
    assert forgetting(acc) == pytest.approx(((0.9 - 0.6) + (0.8 - 0.4)) / 2)
    assert forgetting(acc, reference="max") == pytest.approx(((0.95 - 0.6) + (0.8 - 0.4)) / 2)
    assert forgetting(acc, final=1) == pytest.approx(0.9 - 0.95)


def _fake_data():
    # two tasks, classes {0, 1} and {2, 3}; test set of task 0: labels 1, 1; task 1: labels 3, 2
    return types.SimpleNamespace(
        task_indices=lambda t, split="train": np.array([0, 1]) if t == 0 else np.array([2, 3]),
        y_test=torch.tensor([1, 1, 3, 2]),
    )


def test_shallow_accuracy_masks_to_seen_classes_or_own_task():
    net = _net(False)
    logits = np.array(
        [
            [0.0, 1.0, 5.0, 0.0],  # class 2 wins unless only task 0's classes are allowed
            [2.0, 1.0, 0.0, 0.0],  # class 0 wins: wrong in any case
            [9.0, 0.0, 0.0, 1.0],  # class 0 wins in CIL after session 1; task 1's head gives 3 (right)
            [0.0, 0.0, 1.0, 0.5],
        ]
    )
    data = _fake_data()
    assert shallow_accuracy(net, data, logits, session=0, task=0, setting="cil") == 0.5
    assert shallow_accuracy(net, data, logits, session=1, task=0, setting="cil") == 0.0
    assert shallow_accuracy(net, data, logits, session=1, task=1, setting="cil") == 0.5
    assert shallow_accuracy(net, data, logits, session=1, task=1, setting="til") == 1.0


def test_equal_share_batch_split_hand_computed():
    cfg = ERConfig(buffer_size=100, batch_size=32, minibatch_size=32)
    assert batch_split(cfg, 0, 0) == (32, 0)
    assert batch_split(cfg, 1, 50) == (32, 32)
    assert batch_split(cfg, 2, 50) == (21, 43)
    assert batch_split(cfg, 2, 10) == (21, 10)


def _nc_case():
    z = np.array([[1.0, 0.1], [1.0, -0.1], [-1.0, 0.2], [-1.0, -0.2], [0.3, 3.0], [-0.3, 3.0]])
    y = np.array([1, 1, 2, 2, 3, 3])  # labels 1..3: the head's row 0 belongs to no class here
    head = np.array([[5.0, 5.0], [1.0, -1.0], [-2.0, -2.0], [0.0, 1.0]])
    return z, y, head


def test_nc_metrics_cil_hand_computed():
    z, y, head = _nc_case()
    m = nc_metrics(z, y, [1, 2, 3], head, [[0, 1], [2]], "cil")
    # class means (1, 0), (-1, 0), (0, 3); centred on (0, 1): (1, -1), (-1, -1), (0, 2)
    a = 1 / math.sqrt(2)
    assert m["nc2_within_offdiag"] == pytest.approx(0.0, abs=1e-12)  # classes 1, 2 (task 0)
    assert m["nc2_between_offdiag"] == pytest.approx(-a)
    assert m["beta"] == pytest.approx((2 + 2 + 4) / 3)
    assert m["within_var"] == pytest.approx((0.02 + 0.08 + 0.18) / 3)
    assert m["snr"] == pytest.approx((4 / 0.1 + 10 / 0.2 + 10 / 0.26) / 3)
    assert m["mean_norm"] == pytest.approx((1 + 1 + 3) / 3)
    assert m["nc3"] == pytest.approx(1.0)  # head rows 1..3 point along the centred means


def test_nc_metrics_til_centres_per_task():
    z, y, head = _nc_case()
    m = nc_metrics(z, y, [1, 2, 3], head, [[0, 1], [2]], "til")
    # task 0 centred on (0, 0): (1, 0), (-1, 0); task 1 (one class) centred to 0
    assert m["beta"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["nc2_within_offdiag"] == pytest.approx(-1.0)
