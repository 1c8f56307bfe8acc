"""ViF's method: reallocation, temperature, morphology, relay selection, f, relay positions, HS."""

import math

import numpy as np
import pytest
import scipy.signal
import torch

from iclr26.vif import (
    FALL,
    INACTIVE,
    RISE,
    UNIMODAL,
    Reallocation,
    ReallocStats,
    RelayBlock,
    ViFConfig,
    classify,
    hs_score,
    hs_term,
    official_code,
    reallocate,
    relay_positions,
    select_relay,
    temperature,
)

# hand-built 6-token row: [sys, v1 (inactive), v2, v3 (active), i1, i2]
ROW = torch.tensor([0.1, 0.1, 0.3, 0.1, 0.2, 0.2])
VISION = torch.tensor([0, 1, 1, 1, 0, 0], dtype=torch.bool)
ACTIVE = torch.tensor([0, 0, 1, 1, 0, 0], dtype=torch.bool)
INSTR = torch.tensor([0, 0, 0, 0, 1, 1], dtype=torch.bool)


def _p(row):
    return row.view(1, 1, 1, -1).clone()


def test_middle_band_hand_values_proportional():
    collect = (VISION & ~ACTIVE) | INSTR
    new, c, moved = reallocate(_p(ROW), collect, ACTIVE, 0.1)
    # C = 0.1 * (0.1 + 0.2 + 0.2) = 0.05; receivers v2:v3 = 3:1 get 0.0375 and 0.0125
    want = torch.tensor([0.1, 0.09, 0.3375, 0.1125, 0.18, 0.18])
    torch.testing.assert_close(new.flatten(), want)
    assert float(c) == pytest.approx(0.05) and float(moved) == pytest.approx(0.05)


def test_middle_band_hand_values_uniform():
    collect = (VISION & ~ACTIVE) | INSTR
    new, _, _ = reallocate(_p(ROW), collect, ACTIVE, 0.1, rule="uniform")
    want = torch.tensor([0.1, 0.09, 0.325, 0.125, 0.18, 0.18])
    torch.testing.assert_close(new.flatten(), want)


def test_deep_band_hand_values():
    new, _, _ = reallocate(_p(ROW), VISION, INSTR, 0.3)
    # C = 0.3 * 0.5 = 0.15 to i1:i2 = 1:1
    want = torch.tensor([0.1, 0.07, 0.21, 0.07, 0.275, 0.275])
    torch.testing.assert_close(new.flatten(), want)


def _random_attention(B=3, H=2, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, H, T, T, generator=g)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return s, s.softmax(-1)


def test_reallocation_conserves_rows_moves_alpha_keeps_receiver_ratios():
    _, p = _random_attention()
    T = p.shape[-1]
    collect = torch.zeros(T, dtype=torch.bool)
    collect[[1, 2, 6, 7]] = True
    receive = torch.zeros(T, dtype=torch.bool)
    receive[[3, 4, 5]] = True
    new, c, moved = reallocate(p, collect, receive, 0.25)
    torch.testing.assert_close(new.sum(-1), torch.ones_like(new.sum(-1)))
    assert (new >= 0).all()
    ok = (p[..., receive].sum(-1) > 0) & (p[..., collect].sum(-1) > 0)
    lost = (p - new)[..., collect].sum(-1)
    gain = (new - p)[..., receive].sum(-1)
    want = 0.25 * p[..., collect].sum(-1)
    torch.testing.assert_close(lost[ok], want[ok])
    torch.testing.assert_close(gain[ok], want[ok])
    # proportional: the ratio between receivers is unchanged (rows where all three are visible)
    rows = p[..., 5] > 0
    torch.testing.assert_close((new[..., 3] / new[..., 4])[rows], (p[..., 3] / p[..., 4])[rows])
    # other keys are untouched
    other = ~(collect | receive)
    torch.testing.assert_close(new[..., other], p[..., other])


def test_reallocate_rejects_overlapping_sets():
    with pytest.raises(ValueError, match="overlap"):
        reallocate(_p(ROW), VISION, ACTIVE, 0.1)


def test_temperature_equals_softmax_of_scaled_scores():
    s, p = _random_attention(seed=1)
    torch.testing.assert_close(temperature(p, 0.8), (s / 0.8).softmax(-1), atol=1e-6, rtol=1e-5)
    assert temperature(p, 1.0) is p


def _entropy(p):
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def test_hook_bands_shallow_untouched_middle_sharpened_deep_moved():
    _, p = _random_attention(B=1, T=9, seed=2)
    T = p.shape[-1]
    vision = torch.zeros(1, T, dtype=torch.bool)
    vision[:, 1:5] = True
    active = vision.clone()
    active[:, 1] = False
    instr = torch.zeros(1, T, dtype=torch.bool)
    instr[:, 5:8] = True
    stats = ReallocStats()
    hook = Reallocation((2, 3), (4, 5), vision, active, instr, tau=0.5, alpha_mid=0.0, alpha_deep=0.0, stats=stats)
    assert torch.equal(hook(0, p), p) and torch.equal(hook(1, p), p)
    assert (_entropy(hook(2, p))[..., 1:] < _entropy(p)[..., 1:]).all()
    torch.testing.assert_close(hook(4, p), p)  # τ only in the middle band (paper)
    official = Reallocation(
        (2, 3), (4, 5), vision, active, instr, tau=0.5, alpha_mid=0.0, alpha_deep=0.0, tau_bands="middle_deep"
    )
    assert (_entropy(official(4, p))[..., 1:] < _entropy(p)[..., 1:]).all()
    # with α: the middle band moves mass toward active vision, the deep band toward the instruction
    hook = Reallocation((2, 3), (4, 5), vision, active, instr, tau=1.0, alpha_mid=0.1, alpha_deep=0.3, stats=stats)
    mid, deep = hook(2, p), hook(4, p)
    rows = slice(5, None)
    assert (mid[..., rows, :][..., active[0]].sum(-1) > p[..., rows, :][..., active[0]].sum(-1)).all()
    assert (deep[..., rows, :][..., instr[0]].sum(-1) > p[..., rows, :][..., instr[0]].sum(-1)).all()
    assert stats.max_row_err < 1e-6 and stats.max_move_err < 1e-6 and stats.rows > 0
    # the middle band collects from inactive vision tokens (column 1) as well as from the instruction
    torch.testing.assert_close(mid[..., 2:, 1], 0.9 * p[..., 2:, 1])
    torch.testing.assert_close(mid[..., 6:, 5:8], 0.9 * p[..., 6:, 5:8])


def test_stats_catch_a_wrong_move():
    _, p = _random_attention(B=1, seed=3)
    stats = ReallocStats()
    collect = torch.zeros(1, p.shape[-1], dtype=torch.bool)
    collect[:, 1] = True
    receive = torch.zeros_like(collect)
    receive[:, 2] = True
    new, _, _ = reallocate(p, collect, receive, 0.2)
    stats.update(p, new, collect, receive, 0.1)  # claims α = 0.1 was moved: must show an error
    assert stats.max_move_err > 1e-3


# ------------------------------------------------------------------ morphology


def _curves():
    """Tokens (L = 6, middle band {2, 3}): flat-low, rising, falling, middle bump (salience 0.5),
    shallow bump, and three mid-level fillers that set the quartiles."""
    rows = [
        [0.010, 0.010, 0.011, 0.011, 0.010, 0.010],  # inactive
        [0.10, 0.20, 0.30, 0.40, 0.50, 0.60],  # rise
        [0.60, 0.50, 0.40, 0.30, 0.20, 0.10],  # fall
        [0.25, 0.40, 0.50, 0.45, 0.30, 0.25],  # unimodal, salience (0.5 - 0.25) / 0.5 = 0.5
        [0.20, 0.60, 0.30, 0.20, 0.20, 0.20],  # peak in the shallow band
        [0.30, 0.35, 0.30, 0.35, 0.30, 0.35],
        [0.40, 0.30, 0.40, 0.30, 0.40, 0.30],
        [0.20, 0.25, 0.20, 0.25, 0.20, 0.25],
    ]
    return torch.tensor([rows])


def test_classifier_on_synthetic_curves():
    m = classify(_curves(), (2, 3), omega=0.3)
    kind = m.kind[0].tolist()
    assert kind[:4] == [INACTIVE, RISE, FALL, UNIMODAL]
    assert kind[4] != UNIMODAL
    assert m.salience[0, 3].item() == pytest.approx(0.5)
    assert classify(_curves(), (2, 3), omega=0.6).kind[0, 3] != UNIMODAL


def test_salience_is_normalised_scipy_prominence():
    g = torch.Generator().manual_seed(0)
    curves = torch.rand(1, 40, 6, generator=g)
    m = classify(curves, (2, 3), omega=0.0, mono_tol=10.0)  # tolerance so every middle peak qualifies
    for j in range(40):
        c = curves[0, j].numpy().astype(np.float64)
        arg = int(c.argmax())
        if arg in (2, 3):
            prom = scipy.signal.peak_prominences(c, [arg])[0][0]
            assert m.salience[0, j].item() == pytest.approx(prom / c.max(), abs=1e-5)
            assert m.kind[0, j] == UNIMODAL


def test_select_relay_top_unimodal_and_cap():
    m = classify(_curves(), (2, 3), omega=0.3)
    idx, valid = select_relay(m, 2)
    assert valid.tolist() == [[True, False]]  # min(#unimodal = 1, n = 2)
    assert idx[0, 0].item() == 3
    m.kind[0, 5] = UNIMODAL
    m.salience[0, 5], m.peak[0, 5] = 0.9, 0.9
    idx, valid = select_relay(m, 2)
    assert idx[0].tolist() == [5, 3] and valid.all()
    idx, valid = select_relay(m, 1)
    assert idx[0].tolist() == [5]


# ------------------------------------------------------------------ f and positions


def test_relay_block_length_depends_on_instruction_permutation_invariant():
    torch.manual_seed(0)
    f = RelayBlock(16, n_layers=2, n_heads=4).eval()
    R, instr = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    out = f(R, instr)
    assert out.shape == (2, 3, 16)
    assert not torch.allclose(out, f(R, torch.randn(2, 5, 16)))
    torch.testing.assert_close(out, f(R, instr[:, torch.randperm(5)]), atol=1e-5, rtol=1e-5)


def test_relay_positions_1d_and_mrope():
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    idx = torch.tensor([[2, 0], [3, 1]])
    assert relay_positions(src, idx).tolist() == [[7, 5], [12, 10]]
    t, h, w = torch.zeros(2, 4, dtype=torch.long), torch.tensor([[0, 0, 1, 1]] * 2), torch.tensor([[0, 1, 0, 1]] * 2)
    trip = torch.stack([t, h, w])  # [3, B, m]
    out = relay_positions(trip, idx)
    assert out.shape == (3, 2, 2)
    assert out[:, 0, 0].tolist() == [0, 1, 0] and out[:, 1, 0].tolist() == [0, 1, 1]
    with pytest.raises(ValueError):
        relay_positions(torch.zeros(4), idx)


# ------------------------------------------------------------------ HS (Eq. 7)


def test_hs_example_and_properties():
    assert hs_term(10, 10, 10, 100) == pytest.approx(9.933, abs=1e-3)
    ok = torch.ones(2, 8, dtype=torch.bool)
    assert hs_score(ok).tolist() == [0.0, 0.0]
    short = ok.clone()
    short[:, 0] = False  # dies at once: d = 0
    longer = ok.clone()
    longer[:, :4] = False  # d = 3
    full = torch.zeros(1, 8, dtype=torch.bool)  # reaches the end: d = D = 7
    assert hs_score(short)[0] < hs_score(longer)[0] < hs_score(full)[0]
    assert hs_score(full)[0].item() == pytest.approx(100 / 8 / (1 + math.exp(-3.5)), rel=1e-5)
    assert hs_score(short)[0].item() == pytest.approx(100 / 8 / (1 + math.exp(3.5)), rel=1e-5)
    two = ok.clone()
    two[0, [0, 4]] = False  # two separate hallucinations that die at once
    assert hs_score(two)[0].item() == pytest.approx(2 * hs_score(short)[0].item(), rel=1e-5)


def test_official_code_preset():
    o = official_code()
    assert (o.alpha_mid, o.alpha_deep, o.redistribute, o.tau_bands, o.selection) == (
        0.2,
        0.1,
        "uniform",
        "middle_deep",
        "keynorm",
    )
    d = ViFConfig()
    assert (d.omega, d.tau, d.alpha_mid, d.alpha_deep, d.redistribute) == (0.3, 0.8, 0.1, 0.3, "proportional")
    with pytest.raises(ValueError):
        ViFConfig(tau=0.0)
