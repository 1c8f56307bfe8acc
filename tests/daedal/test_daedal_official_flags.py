"""The two batching differences from the official code, as flags (prompt padding, CFG's unconditional pass).

Official ``models/LLaDA_DAEDAL.py`` ``generate``: the attention mask is ``arange < P + L_b`` (the
prompt's left pads are attended to) and CFG's unconditional copy sets ``x[prompt_index] = MASK`` with
``prompt_index = x != MASK`` taken over the whole padded prompt (pads included). ``models/LLaDA.py``
calls the model with no mask at all and builds the same ``prompt_index``.
"""

from dataclasses import replace

import pytest
import torch
from daedal_helpers import EOS, MASK, P, prompts, random_fn

from iclr26.daedal import DaedalConfig, daedal_generate, llada_fixed_generate

CFG = DaedalConfig(initial_length=8, max_length=32, block_length=8, expansion_factor=4, eos_window=8, eos_anchor=4)


def recording(fn):
    """``fn`` that also records every (ids, attention mask) it is called with."""
    calls = []

    def rec(x, attn):
        calls.append((x.clone(), attn.clone()))
        return fn(x, attn)

    return rec, calls


def _decoders(cfg, mask, **fixed_kw):
    return {
        "daedal": lambda f, ids: daedal_generate(f, ids, MASK, EOS, cfg, prompt_mask=mask),
        "fixed": lambda f, ids: llada_fixed_generate(f, ids, 16, 16, 8, MASK, EOS, prompt_mask=mask, **fixed_kw),
    }


@pytest.mark.parametrize("which", ["daedal", "fixed"])
def test_attend_prompt_padding_shows_the_pads_to_the_model(which):
    ids, mask = prompts(5, seed=3)
    assert not mask.all()  # some rows are padded
    for official in (False, True):
        fn, calls = recording(random_fn(1))
        cfg = replace(CFG, attend_prompt_padding=official)
        kw = {"attend_prompt_padding": official}
        _decoders(cfg, mask, **kw)[which](fn, ids)
        for _, attn in calls:
            expect = torch.ones_like(mask) if official else mask
            assert torch.equal(attn[:, :P], expect)


@pytest.mark.parametrize("which", ["daedal", "fixed"])
def test_attend_prompt_padding_equals_an_unmasked_prompt_and_changes_padded_rows(which):
    """Official = the same call with every prompt position marked real; it differs from ours on padded rows."""
    ids, mask = prompts(6, seed=4)
    fn = random_fn(2)
    official = _decoders(replace(CFG, attend_prompt_padding=True), mask, attend_prompt_padding=True)[which](fn, ids)
    unmasked = _decoders(CFG, None)[which](fn, ids)
    ours = _decoders(CFG, mask)[which](fn, ids)
    for a, b in zip(official.sequences, unmasked.sequences, strict=True):
        assert torch.equal(a, b)
    padded = [i for i in range(len(ids)) if not mask[i].all()]
    assert any(not torch.equal(official.sequences[i], ours.sequences[i]) for i in padded)


@pytest.mark.parametrize("which", ["daedal", "fixed"])
def test_cfg_unconditional_pass_masks_pads_only_when_asked(which):
    ids, mask = prompts(4, seed=5)
    for official in (False, True):
        fn, calls = recording(random_fn(3))
        cfg = replace(CFG, cfg_scale=1.0, cfg_mask_prompt_padding=official)
        _decoders(cfg, mask, cfg_scale=1.0, cfg_mask_prompt_padding=official)[which](fn, ids)
        assert calls
        for x, _ in calls:
            B = x.shape[0] // 2
            cond, uncond = x[:B, :P], x[B:, :P]
            assert torch.equal(cond, ids[: cond.shape[0]])
            if official:
                assert (uncond == MASK).all()
            else:
                assert ((uncond == MASK) == mask).all() and (uncond[~mask] == EOS).all()
