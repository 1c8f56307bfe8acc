"""Eq. 6's L1 term: the paper's norm sums over the horizon; ``l1_reduction="mean"`` (smoke/small, as measured)
divides it by H. Paper scale scores and trains on every hourly window (stride 1, the benchmark loaders')."""

import math

import pytest
import torch
from test_protots_model import CARDS, NCON, H, L, _model

from iclr26.protots.config import config_for
from iclr26.protots.data import Windows
from iclr26.protots.model import protots_loss
from iclr26.protots.training import _protots_loss_fn


def test_l1_sum_is_the_norm_over_the_horizon():
    f = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    y_hat, y = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 4.0]])
    ent = (math.log(2) + 0) / 2
    assert float(protots_loss(y_hat, y, f, 0.3, "sum")) == pytest.approx((3 + 4) / 2 + 0.3 * ent, abs=1e-6)
    assert float(protots_loss(y_hat, y, f, 0.3)) == pytest.approx((3 + 4) / 2 + 0.3 * ent, abs=1e-6)  # default
    assert float(protots_loss(y_hat, y, f, 0.3, "mean")) == pytest.approx(7 / 4 + 0.3 * ent, abs=1e-6)
    with pytest.raises(ValueError):
        protots_loss(y_hat, y, f, 0.3, "max")


def test_scales_pick_the_reduction_and_the_paper_stride():
    assert config_for("paper").model.l1_reduction == "sum"
    assert config_for("small").model.l1_reduction == "mean" and config_for("smoke").model.l1_reduction == "mean"
    data = config_for("paper").data
    assert (data.train_stride, data.eval_stride) == (1, 1)


def _windows(B=4):
    g = torch.Generator().manual_seed(3)
    return Windows(
        y_hist=torch.randn(B, L, generator=g),
        x_dis=torch.stack([torch.randint(0, c, (B, L + H), generator=g) for c in CARDS], -1),
        x_con=torch.randn(B, L + H, NCON, generator=g),
        y=torch.randn(B, H, generator=g),
        start=torch.arange(B),
        regime=torch.zeros(B, dtype=torch.long),
        festival=torch.zeros(B, dtype=torch.bool),
    )


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_training_loss_uses_the_models_reduction(reduction):
    m = _model(l1_reduction=reduction)
    w = _windows()
    loss, _ = _protots_loss_fn(m.cfg.lam, m.cfg.l1_reduction)(m, w)
    y_hat, f = m(w.y_hist, w.x_dis, w.x_con)
    assert float(loss) == pytest.approx(float(protots_loss(y_hat, w.y, f, m.cfg.lam, reduction)), rel=1e-6)
    other = "mean" if reduction == "sum" else "sum"
    assert float(loss) != pytest.approx(float(protots_loss(y_hat, w.y, f, m.cfg.lam, other)), rel=1e-3)


def test_stage_training_passes_the_reduction(monkeypatch):
    """_fit_protots hands fit_windows a loss with the model's reduction (not a fixed one)."""
    import iclr26.protots.training as training

    seen = {}

    def fake_fit(model, train, val, stage, loss_fn, predict, **kw):
        seen["loss_fn"] = loss_fn
        return {}

    monkeypatch.setattr(training, "fit_windows", fake_fit)
    m = _model(l1_reduction="sum")
    w = _windows()
    training._fit_protots(m, w, w, config_for("smoke").stage1)
    loss, _ = seen["loss_fn"](m, w)
    y_hat, f = m(w.y_hist, w.x_dis, w.x_con)
    assert float(loss) == pytest.approx(float(protots_loss(y_hat, w.y, f, m.cfg.lam, "sum")), rel=1e-6)
