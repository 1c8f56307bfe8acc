"""Temperature-adjusted entropy and the temperature calibrator."""

import math

import pytest
import torch

from iclr26.acereason.entropy import (
    calibrate_temperature,
    select_from_grid,
    temperature_adjusted_entropy,
    token_entropy,
)


def _hand_entropy(z: torch.Tensor, t: float) -> torch.Tensor:
    p = torch.softmax(z.double() / t, -1)
    return -(p * p.log()).sum(-1)


@pytest.mark.parametrize("t", [0.3, 0.6, 1.0, 2.5])
def test_constant_logits_give_log_v(t):
    logits = torch.full((2, 3, 7), 1.7)
    assert float(temperature_adjusted_entropy(logits, t)) == pytest.approx(math.log(7), abs=1e-6)


def test_vanishes_as_t_goes_to_zero_for_unique_argmax():
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    hs = [float(temperature_adjusted_entropy(z, t)) for t in (1.0, 0.3, 0.1, 0.02)]
    assert hs[-1] < 1e-6 and all(a > b for a, b in zip(hs, hs[1:], strict=False))


def test_strictly_increasing_in_t_and_equal_to_hand_value():
    torch.manual_seed(0)
    z = torch.randn(4, 5, 11) * 3
    ts = [0.3, 0.5, 0.85, 1.0, 1.3, 2.0]
    hs = [float(temperature_adjusted_entropy(z, t)) for t in ts]
    assert all(a < b for a, b in zip(hs, hs[1:], strict=False))
    for t, h in zip(ts, hs, strict=True):
        assert h == pytest.approx(float(_hand_entropy(z, t).mean()), rel=1e-5)
    # temperature-adjusted differs from the raw-logit entropy when T != 1
    raw = float(_hand_entropy(z, 1.0).mean())
    assert abs(float(temperature_adjusted_entropy(z, 0.6)) - raw) > 0.05


def test_masked_positions_are_ignored():
    torch.manual_seed(1)
    z = torch.randn(2, 4, 6)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    z2 = z.clone()
    z2[mask == 0] = torch.randn(int((mask == 0).sum()), 6) * 50  # garbage under the mask
    h = temperature_adjusted_entropy(z, 0.8, mask)
    assert float(h) == pytest.approx(float(temperature_adjusted_entropy(z2, 0.8, mask)), abs=1e-6)
    hand = _hand_entropy(z, 0.8)
    assert float(h) == pytest.approx(float((hand[0, 0] + hand[0, 1] + hand[1, 0]) / 3), rel=1e-5)


def test_token_mean_versus_seq_mean_on_unequal_lengths():
    # row 0: 3 tokens of entropy log 4 (uniform over 4); row 1: 1 token of entropy ~0
    z = torch.zeros(2, 3, 4)
    z[1, 0] = torch.tensor([50.0, 0.0, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    tok = float(temperature_adjusted_entropy(z, 1.0, mask, "token-mean"))
    seq = float(temperature_adjusted_entropy(z, 1.0, mask, "seq-mean"))
    assert tok == pytest.approx(3 * math.log(4) / 4, abs=1e-5)
    assert seq == pytest.approx(math.log(4) / 2, abs=1e-5)
    per_tok = temperature_adjusted_entropy(z, 1.0, mask, "none")
    assert per_tok.shape == (2, 3) and float(per_tok[1, 1]) == 0.0


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        token_entropy(torch.zeros(3), 0.0)
    with pytest.raises(ValueError):
        temperature_adjusted_entropy(torch.zeros(2, 3, 4), 1.0, torch.ones(2, 4))


def _stub(z):
    return lambda t: float(temperature_adjusted_entropy(z, t))


def test_calibrator_hits_target_on_fixed_logits():
    torch.manual_seed(2)
    z = torch.randn(8, 6, 10) * 4
    f = _stub(z)
    for target in (0.3, 0.6, 1.0):
        res = calibrate_temperature(f, target, (0.1, 3.0), tol=0.005)
        assert abs(res.entropy - target) <= 0.005 and res.clamped is None
        assert abs(f(res.temperature) - target) <= 0.005
        assert res.history[0][0] == 0.1 and res.history[1][0] == 3.0


def test_calibrator_clamps_to_the_range_ends():
    torch.manual_seed(3)
    z = torch.randn(4, 5, 10) * 4
    f = _stub(z)
    low = calibrate_temperature(f, f(0.5) * 0.5, (0.5, 1.5), tol=0.001)
    assert low.temperature == 0.5 and low.clamped == "low"
    high = calibrate_temperature(f, f(1.5) + 0.5, (0.5, 1.5), tol=0.001)
    assert high.temperature == 1.5 and high.clamped == "high"
    with pytest.raises(ValueError):
        calibrate_temperature(f, 0.3, (1.5, 0.5))


def test_select_from_grid_prefers_the_trajectory_in_band():
    traj = {0.6: [0.15, 0.12, 0.1], 0.85: [0.26, 0.3, 0.38], 1.0: [0.4, 0.3, 0.22]}
    assert select_from_grid(traj) == 0.85
