"""ViF: collect vs receive keys of the reallocation, previous vs current agent in the relay, where gradients
flow (relay selection without gradient, R-hat with gradient into the projector and f), and the diagnostics
(layer curves, morphology, HS score) on asymmetric hand-computed inputs.

Gradient-flow table (``vif_loss``, all parameters trainable, one batch with a previous agent):

===============================  ================================================
tensor / module                  gradient
===============================  ================================================
f (relay block)                  nonzero (R-hat enters the current agent's LM)
previous agent's patches         nonzero, only through R = projector(encoder(prev))
probe pass (selection, curves)   none (no_grad): the morphology is a constant
cell_head, match_head            exactly 0 (pretraining heads, unused)
===============================  ================================================
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from iclr26.vif.agent import training_batch, vif_loss
from iclr26.vif.config import config_for
from iclr26.vif.method import (
    FALL,
    RISE,
    UNIMODAL,
    classify,
    hs_score,
    layer_curves,
    reallocate,
    relay_positions,
    select_relay,
    temperature,
)
from iclr26.vif.tiny import TinyVLM

CFG = config_for("smoke")


# ---------------------------------------------------------------- reallocation: collect vs receive


def test_reallocate_moves_mass_from_collect_to_receive_proportionally():
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])[None, None, None]
    collect = torch.tensor([True, True, False, False])
    receive = torch.tensor([False, False, True, True])
    new, c, moved = reallocate(p, collect, receive, 0.5)
    # C = 0.5 * 0.3 = 0.15, split 3:4 between the receivers
    want = torch.tensor([0.05, 0.1, 0.3 + 0.15 * 3 / 7, 0.4 + 0.15 * 4 / 7])
    assert torch.allclose(new[0, 0, 0], want, atol=1e-6)
    assert float(c) == pytest.approx(0.15) and float(moved) == pytest.approx(0.15)
    # the reverse direction is another result
    back, _, _ = reallocate(p, receive, collect, 0.5)
    assert torch.allclose(back[0, 0, 0], torch.tensor([0.1 + 0.35 / 3, 0.2 + 0.35 * 2 / 3, 0.15, 0.2]), atol=1e-6)
    # uniform rule (official): equal shares to the visible receivers
    uni, _, _ = reallocate(p, collect, receive, 0.5, rule="uniform")
    assert torch.allclose(uni[0, 0, 0], torch.tensor([0.05, 0.1, 0.375, 0.475]), atol=1e-6)


def test_temperature_sharpens_hand_computed():
    p = torch.tensor([[0.2, 0.8, 0.0]])
    assert torch.allclose(temperature(p, 0.5), torch.tensor([[0.04 / 0.68, 0.64 / 0.68, 0.0]]))


# ---------------------------------------------------------------- diagnostics on asymmetric inputs


def test_layer_curves_sum_over_query_rows_for_each_key_column():
    # one layer, 2 heads, 3 query rows x 3 keys, asymmetric
    a = torch.tensor(
        [[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]]]]
    )
    c = layer_curves([a], slice(0, 3))
    # head mean rows: [1,0,0], [0.7,0.3,0], [0.1,0.15,0.75]; column sums
    assert torch.allclose(c[0, :, 0], torch.tensor([1.8, 0.45, 0.75]))
    rows = torch.tensor([[False, True, True]])
    assert torch.allclose(layer_curves([a], slice(1, 3), rows)[0, :, 0], torch.tensor([0.45, 0.75]))


def test_classify_and_select_on_asymmetric_curves():
    curves = torch.tensor(
        [
            [
                [0.2, 0.5, 1.0, 0.7, 0.6],  # unimodal at layer 2: salience (1 - max(0.2, 0.6)) / 1 = 0.4
                [0.1, 0.2, 0.3, 0.4, 0.5],  # rise
                [0.9, 0.8, 0.5, 0.3, 0.3],  # fall
                [0.1, 0.9, 0.6, 0.2, 0.05],  # unimodal at 1: (0.9 - max(0.1, 0.05)) / 0.9 = 8/9
            ]
        ]
    )
    m = classify(curves, middle=(1, 2, 3), omega=0.3, inactive_var=0.0)
    assert m.kind[0].tolist() == [UNIMODAL, RISE, FALL, UNIMODAL]
    assert m.salience[0, 0].item() == pytest.approx(0.4)
    assert m.salience[0, 3].item() == pytest.approx(8 / 9)
    # selection by salience x peak: token 3 (0.8) before token 0 (0.4); the third slot is invalid
    idx, valid = select_relay(m, 3)
    assert idx[0, :2].tolist() == [3, 0] and valid[0].tolist() == [True, True, False]
    # positions of the relay are the source patches' own
    src = torch.tensor([[2, 3, 4, 5]])
    assert relay_positions(src, idx[:, :2]).tolist() == [[5, 2]]


def test_hs_score_hand_computed():
    """T = 4 agents, D = 3, h = 100: sigma(d - 1.5) * 100 / 4 per hallucination start."""
    correct = torch.tensor(
        [
            [True, False, False, True],  # one start at turn 2, repeated by 1 later agent: d = 1
            [False, True, True, True],  # start at turn 1, d = 0
            [True, True, True, True],
            [True, False, False, False],  # start at turn 2, d = 2
        ]
    )
    s = lambda d: 25.0 / (1 + math.exp(-(d - 1.5)))  # noqa: E731
    assert hs_score(correct).tolist() == pytest.approx([s(1), s(0), 0.0, s(2)], rel=1e-6)


# ---------------------------------------------------------------- gradient flow of the ViF loss


def test_vif_loss_gradient_reaches_f_and_the_previous_agent_only_through_the_relay():
    torch.manual_seed(0)
    m = TinyVLM(CFG.model, CFG.vif).eval()
    vcfg = replace(CFG.vif, omega=0.0, mono_tol=10.0, inactive_var=-1.0)
    b = training_batch(1, "stage1", 0, 6, CFG.data, 0.5)
    b["has_prev"] = torch.ones_like(b["has_prev"])
    prev = b["prev"].clone().requires_grad_(True)
    b["prev"] = prev
    loss, _ = vif_loss(vcfg)(m, b)
    named = dict(m.named_parameters())
    grads = dict(zip(named, torch.autograd.grad(loss, [prev, *named.values()], allow_unused=True)[1:]))
    (g_prev,) = torch.autograd.grad(vif_loss(vcfg)(m, b)[0], prev)
    assert float(g_prev.abs().max()) > 0
    nz = {n: g is not None and float(g.abs().max()) > 0 for n, g in grads.items()}
    assert any(v for n, v in nz.items() if n.startswith("f."))
    assert any(v for n, v in nz.items() if n.startswith("projector."))
    assert not any(v for n, v in nz.items() if n.startswith(("cell_head.", "match_head.")))
    # without a previous agent (relay masked) nothing reaches the previous agent's patches
    b["has_prev"] = torch.zeros_like(b["has_prev"])
    (g0,) = torch.autograd.grad(vif_loss(vcfg)(m, b)[0], prev, allow_unused=True)
    assert g0 is None or float(g0.abs().max()) == 0.0
