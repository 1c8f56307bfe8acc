"""DAEDAL decoding: exact reductions, EOS confidence, insertion mechanics, progress, batching."""

import math

import pytest
import torch
from daedal_helpers import EOS, MASK, V, length_aware_fn, logits_from, prompts, random_fn

from iclr26.daedal import (
    DaedalConfig,
    daedal_generate,
    denoise_step,
    eos_confidence,
    get_num_transfer_tokens,
    initial_length_adjustment,
    insert_masks,
    llada_fixed_generate,
)


def cfg_(**kw):
    base = dict(initial_length=8, max_length=40, block_length=8, expansion_factor=4, eos_window=8, eos_anchor=4)
    base.update(kw)
    return DaedalConfig(**base)


# --------------------------------------------------------------------------------------------------
# exact reductions
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_reduces_to_llada_fixed_length(seed):
    """τ_eos = 0, τ_expand = 0, τ_high > 1, no anchor, L_init = L: token-identical to LLaDA (steps = L)."""
    fn = random_fn(seed)
    ids, mask = prompts(5, seed)
    L = 24
    cfg = cfg_(initial_length=L, max_length=64, tau_eos=0.0, tau_expand=0.0, tau_high=1.1, eos_anchor=0)
    out = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask)
    ref = llada_fixed_generate(fn, ids, L, L, 8, MASK, EOS, prompt_mask=mask)
    for a, b in zip(out.sequences, ref.sequences, strict=True):
        assert torch.equal(a, b)
    assert (out.lengths == L).all() and (out.n_insertions == 0).all()
    assert (out.nfe_stage1 == 1).all() and (out.nfe == 1 + L).all() and (ref.nfe == L).all()
    assert not any((s == MASK).any() for s in out.sequences)


def test_reduction_detects_a_wrong_block_grid():
    """The same comparison fails when the block grid differs (the test can fail)."""
    fn = random_fn(0)
    ids, mask = prompts(4, 0)
    cfg = cfg_(
        initial_length=24, max_length=64, tau_eos=0.0, tau_expand=0.0, tau_high=1.1, eos_anchor=0, block_length=4
    )
    out = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask)
    ref = llada_fixed_generate(fn, ids, 24, 24, 24, MASK, EOS, prompt_mask=mask)
    assert any(not torch.equal(a, b) for a, b in zip(out.sequences, ref.sequences, strict=True))


def test_no_insertion_equals_fixed_threshold_decoding():
    """τ_expand = 0: final length = stage-1 length + anchor; with no anchor the canvas decodes exactly
    like fixed-length threshold decoding (the "baseline + threshold fill" control) of that length."""
    ids, mask = prompts(4, 3)
    fn = random_fn(3, scripted=length_aware_fn(lambda n: 3 * n), scale=0.3)
    out = daedal_generate(fn, ids, MASK, EOS, cfg_(tau_expand=0.0, expansion_factor=8), prompt_mask=mask)
    assert torch.equal(out.lengths, (out.stage1_lengths + 4).clamp(max=40))
    assert all((s[-4:] == EOS).all() for s in out.sequences)
    assert (out.n_insertions == 0).all()
    out0 = daedal_generate(fn, ids, MASK, EOS, cfg_(tau_expand=0.0, expansion_factor=8, eos_anchor=0), prompt_mask=mask)
    assert len(set(out0.stage1_lengths.tolist())) > 1  # rows really have different lengths
    for b in range(4):
        L1 = int(out0.stage1_lengths[b])
        ref = llada_fixed_generate(fn, ids[b : b + 1], L1, L1, 8, MASK, EOS, prompt_mask=mask[b : b + 1], tau_high=0.9)
        assert torch.equal(out0.sequences[b], ref.sequences[0])
        assert int(out0.nfe[b] - out0.nfe_stage1[b]) == int(ref.nfe[0])


@pytest.mark.parametrize("l_init,l_max,E", [(8, 40, 4), (8, 41, 4), (5, 64, 8), (16, 16, 8)])
def test_stage1_forced_to_cap(l_init, l_max, E):
    """τ_eos > 1 is never met: stage 1 grows to exactly L_max in ceil((L_max - L_init) / E) passes."""
    fn = random_fn(0)
    ids, mask = prompts(3, 1)
    cfg = cfg_(initial_length=l_init, max_length=l_max, expansion_factor=E, tau_eos=1.01)
    L, nfe = initial_length_adjustment(fn, ids, mask, MASK, EOS, cfg)
    assert (L == l_max).all()
    assert (nfe == math.ceil((l_max - l_init) / E)).all()


def test_stage1_stops_at_hand_computed_length():
    """Scripted model: EOS (p=0.97) at positions >= 13. Code-mode conf = 0.97 k / 8 with k = #EOS
    positions (<= 8) in the canvas; >= 0.5 needs k >= 5, so L = 8 + 4m first reaches 13 + 5 at L = 20."""
    fn = length_aware_fn(13)
    ids, mask = prompts(2, 0)
    L, nfe = initial_length_adjustment(fn, ids, mask, MASK, EOS, cfg_())
    assert L.tolist() == [20, 20] and nfe.tolist() == [4, 4]
    # the Table 4 pattern: same result for L_init in {a, a + E, a + 2E} below the stop length
    for l_init in (4, 12, 16):
        L2, _ = initial_length_adjustment(fn, ids, mask, MASK, EOS, cfg_(initial_length=l_init))
        assert L2.tolist() == [20, 20]


# --------------------------------------------------------------------------------------------------
# EOS confidence
# --------------------------------------------------------------------------------------------------


def _conf_logits(tokens, conf):
    return logits_from(torch.tensor([tokens]), torch.tensor([conf]))


def test_eos_confidence_all_eos_is_one():
    lg = logits_from(torch.full((1, 12), EOS), torch.full((1, 12), 1.0 - 1e-6))
    for mode in ("code", "window_mean"):
        assert eos_confidence(lg, 0, [12], EOS, 8, mode).item() == pytest.approx(1.0, abs=1e-4)


def test_eos_confidence_no_eos_is_zero():
    lg = logits_from(torch.arange(10)[None] % 5, torch.full((1, 10), 0.9))
    assert eos_confidence(lg, 0, [10], EOS, 4, "code").item() == 0.0


def test_eos_confidence_divides_by_window_not_count():
    # 3 EOS predictions (p = 0.9, 0.8, 0.6) at the end, W = 8: (0.9 + 0.8 + 0.6) / 8, not their mean
    lg = _conf_logits([1, 2, 3, EOS, EOS, EOS], [0.9, 0.9, 0.9, 0.9, 0.8, 0.6])
    assert eos_confidence(lg, 0, [6], EOS, 8, "code").item() == pytest.approx(2.3 / 8, abs=1e-5)


def test_eos_confidence_code_skips_non_eos_and_scans_back_window_does_not():
    toks = [EOS, EOS, 1, EOS, 2, EOS]
    conf = [0.5, 0.6, 0.9, 0.7, 0.9, 0.8]
    lg = _conf_logits(toks, conf)
    # code, W = 3: the last three EOS-argmax positions 5, 3, 1 -> (0.8 + 0.7 + 0.6) / 3
    assert eos_confidence(lg, 0, [6], EOS, 3, "code").item() == pytest.approx(2.1 / 3, abs=1e-5)
    # window_mean, W = 3: positions 3, 4, 5 -> p(EOS) = 0.7, 0.1/14, 0.8
    other = 0.1 / (V - 2)
    assert eos_confidence(lg, 0, [6], EOS, 3, "window_mean").item() == pytest.approx((0.7 + other + 0.8) / 3, abs=1e-5)


def test_eos_confidence_reads_only_the_row_region():
    toks = [7, 7, EOS, EOS, EOS, EOS]  # 2 prompt positions, canvas of 3, one padding position
    lg = _conf_logits(toks, [0.9, 0.9, 0.5, 0.5, 0.5, 1.0])
    assert eos_confidence(lg, 2, [3], EOS, 3, "code").item() == pytest.approx(0.5, abs=1e-5)
    assert eos_confidence(lg, 2, [2], EOS, 4, "code").item() == pytest.approx(0.25, abs=1e-5)


# --------------------------------------------------------------------------------------------------
# insertion mechanics
# --------------------------------------------------------------------------------------------------


def test_insert_masks_shape_and_shift():
    row = torch.tensor([1, 2, MASK, 3, 4, EOS])
    new = insert_masks(row, 2, 4, 100, MASK)
    assert new.tolist() == [1, 2, MASK, MASK, MASK, MASK, 3, 4, EOS]  # +E-1, later tokens shift by E-1
    assert insert_masks(row, 2, 4, 7, MASK).tolist() == [1, 2, MASK, MASK, MASK, MASK, 3]  # truncated at L_max
    with pytest.raises(ValueError):
        insert_masks(row, 1, 4, 100, MASK)


def test_denoise_step_fill_and_single_argmin_insertion():
    cfg = cfg_(max_length=64)
    row = torch.tensor([5, MASK, MASK, MASK, MASK, MASK, MASK, MASK, MASK, MASK, EOS])
    a = torch.tensor([5, 1, 2, 3, 4, 5, 6, 7, 8, 9, EOS])
    c = torch.tensor([1.0, 0.95, 0.05, 0.5, 0.02, 0.08, 0.99, 0.3, 0.01, 0.03, 1.0])
    new, fill, ins = denoise_step(row, 0, a, c, eos_conf=0.2, cfg=cfg, mask_id=MASK)
    # block [0, 8): fill = c > 0.9 among masked -> 1, 6; candidates c < 0.1 in the block: 2, 4, 5;
    # position 8 (c = 0.01) is outside the block; argmin of the candidates is 4
    assert fill.nonzero().flatten().tolist() == [1, 6]
    assert ins == 4
    assert new.tolist() == [5, 1, MASK, MASK, MASK, MASK, MASK, MASK, MASK, 6, MASK, MASK, MASK, EOS]
    # no insertion when EOS confidence is high, when at L_max, in denoise-only mode or disabled
    for kw in (dict(eos_conf=0.95), dict(eos_conf=0.2, denoise_only=True)):
        n2, _, i2 = denoise_step(row, 0, a, c, cfg=cfg, mask_id=MASK, **kw)
        assert i2 is None and n2.numel() == row.numel()
    n3, _, i3 = denoise_step(row, 0, a, c, 0.2, cfg_(max_length=11), MASK)
    assert i3 is None and n3.numel() == 11
    n4, _, i4 = denoise_step(row, 0, a, c, 0.2, cfg_(max_length=64, mask_insertion=False), MASK)
    assert i4 is None


def test_denoise_step_fallback_and_mask_guard():
    cfg = cfg_(max_length=64)
    row = torch.tensor([MASK, MASK, MASK])
    a = torch.tensor([3, 4, 5])
    c = torch.tensor([0.3, 0.6, 0.2])
    new, fill, ins = denoise_step(row, 0, a, c, 0.99, cfg, MASK)
    assert fill.tolist() == [False, True, False] and new.tolist() == [MASK, 4, MASK]
    # every prediction is MASK: the MASK logit is dropped and the best (position, token) is taken
    logits = torch.full((3, V), -5.0)
    logits[:, MASK] = 10.0
    logits[2, 7] = 3.0
    new, fill, _ = denoise_step(row, 0, torch.full((3,), MASK), torch.ones(3), 0.99, cfg, MASK, logits=logits)
    assert new.tolist() == [MASK, MASK, 7]


def test_paper_mode_candidates_come_from_all_masked_positions():
    row = torch.tensor([MASK] * 12)
    a = torch.arange(12) % 10
    c = torch.full((12,), 0.5)
    c[10] = 0.01
    _, _, ins_code = denoise_step(row, 0, a, c, 0.1, cfg_(max_length=64), MASK)
    _, _, ins_paper = denoise_step(row, 0, a, c, 0.1, cfg_(max_length=64, block_local=False), MASK)
    assert ins_code is None and ins_paper == 10


def test_insertions_capped_at_lmax_then_denoise_only():
    """A flat model (every c_i ~ 1/14 < τ_low, EOS conf ~ 0) inserts once per step until L_max."""

    def flat(x, attn):
        lg = torch.zeros(*x.shape, V)
        lg[..., MASK] = -1e9
        return lg

    ids, mask = prompts(2, 0)
    cfg = cfg_(initial_length_adjustment=False, initial_length=8, max_length=30, eos_anchor=0)
    out = daedal_generate(flat, ids, MASK, EOS, cfg, prompt_mask=mask)
    # 8 -> 11 -> ... -> 29 -> 30 (truncated): ceil(22 / 3) = 8 insertions, one per step
    assert out.lengths.tolist() == [30, 30]
    assert out.n_insertions.tolist() == [8, 8]
    assert (out.nfe - out.nfe_stage1 >= out.n_insertions).all()
    assert not any((s == MASK).any() for s in out.sequences) and not out.stagnated.any()


# --------------------------------------------------------------------------------------------------
# progress, batching, baseline schedule
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_progress_guarantee_and_bounds(seed):
    ids, mask = prompts(4, seed)
    fn = random_fn(seed, scripted=length_aware_fn(lambda n: 2 * n + 3), scale=0.5)
    cfg = cfg_(tau_low=0.3, tau_expand=1.0)
    out = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask)
    for b, s in enumerate(out.sequences):
        assert not (s == MASK).any()
        L = int(out.lengths[b])
        assert L == s.numel() and L <= cfg.max_length and L >= int(out.stage1_lengths[b])
        # every step fills >= 1 token: stage-2 passes <= initial masks + inserted masks
        masks0 = min(int(out.stage1_lengths[b]), cfg.max_length)
        assert int(out.nfe[b] - out.nfe_stage1[b]) <= masks0 + 3 * int(out.n_insertions[b])
    assert not out.stagnated.any()


def test_batch_equals_single_calls():
    ids, mask = prompts(4, 5)
    fn = random_fn(5, scripted=length_aware_fn(lambda n: 3 * n, p_content=0.3), scale=0.5)
    cfg = cfg_(tau_low=0.5, tau_expand=1.0, max_length=36)
    out = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask)
    assert len(set(out.stage1_lengths.tolist())) > 1 and out.n_insertions.sum() > 0
    for b in range(4):
        one = daedal_generate(fn, ids[b : b + 1], MASK, EOS, cfg, prompt_mask=mask[b : b + 1])
        assert torch.equal(one.sequences[0], out.sequences[b])
        for f in ("lengths", "stage1_lengths", "n_insertions", "nfe", "nfe_stage1"):
            assert getattr(one, f)[0] == getattr(out, f)[b], f
    ref = llada_fixed_generate(fn, ids, 16, 16, 8, MASK, EOS, prompt_mask=mask)
    for b in range(4):
        one = llada_fixed_generate(fn, ids[b : b + 1], 16, 16, 8, MASK, EOS, prompt_mask=mask[b : b + 1])
        assert torch.equal(one.sequences[0], ref.sequences[b])


def test_list_prompts_are_left_padded():
    ids, mask = prompts(3, 2)
    fn = random_fn(2)
    listed = [ids[b][mask[b]] for b in range(3)]
    a = llada_fixed_generate(fn, listed, 8, 8, 8, MASK, EOS)
    assert all(s.numel() == 8 and not (s == MASK).any() for s in a.sequences)


def test_get_num_transfer_tokens():
    m = torch.zeros(2, 8, dtype=torch.bool)
    m[0, :7] = True
    m[1, :] = True
    out = get_num_transfer_tokens(m, 3)
    assert out.tolist() == [[3, 2, 2], [3, 3, 2]]
    assert (out.sum(1) == m.sum(1)).all()


def test_baseline_one_token_per_step_when_steps_equal_length():
    calls = []
    fn0 = random_fn(1)

    def fn(x, attn):
        calls.append(int((x == MASK).sum()))
        return fn0(x, attn)

    ids, mask = prompts(1, 0)
    out = llada_fixed_generate(fn, ids, 16, 16, 8, MASK, EOS, prompt_mask=mask)
    assert calls == list(range(16, 0, -1)) and int(out.nfe[0]) == 16


def test_bad_inputs_raise():
    fn = random_fn(0)
    ids, mask = prompts(1, 0)
    with pytest.raises(ValueError):
        llada_fixed_generate(fn, ids, 12, 12, 8, MASK, EOS)
    with pytest.raises(ValueError):
        DaedalConfig(initial_length=64, max_length=32)
    with pytest.raises(ValueError):
        DaedalConfig(eos_conf_mode="mean")

    def bad(x, attn):
        return torch.zeros(x.shape[0], x.shape[1] + 1, V)

    with pytest.raises(ValueError):
        daedal_generate(bad, ids, MASK, EOS, cfg_(), prompt_mask=mask)

    def nan(x, attn):
        return torch.full((*x.shape, V), float("nan"))

    with pytest.raises(FloatingPointError):
        daedal_generate(nan, ids, MASK, EOS, cfg_(), prompt_mask=mask)


def test_temperature_sampling_is_seeded():
    ids, mask = prompts(2, 0)
    fn = random_fn(0, scripted=length_aware_fn(10), scale=0.3)
    cfg = cfg_(temperature=1.0)
    a = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask, generator=torch.Generator().manual_seed(1))
    b = daedal_generate(fn, ids, MASK, EOS, cfg, prompt_mask=mask, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a.sequences, b.sequences, strict=True))


def test_cfg_counts_two_passes():
    ids, mask = prompts(1, 0)
    fn = random_fn(0)
    out = llada_fixed_generate(fn, ids, 8, 8, 8, MASK, EOS, prompt_mask=mask, cfg_scale=1.0)
    assert int(out.nfe[0]) == 16
