"""Tiny VLM, agent turn, training stages, data and MAS drivers."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.vif.agent import (
    agent_turn,
    empty_relay,
    make_relay,
    pretrain_loss,
    train_stage,
    training_batch,
    vif_loss,
)
from iclr26.vif.config import DataConfig, config_for
from iclr26.vif.data import N_CELLS, NONE, QUESTION0, cell_labels, make_scenes, patches, train_messages, view_masks
from iclr26.vif.mas import Episodes, parents, run_mas
from iclr26.vif.method import UNIMODAL, Morphology
from iclr26.vif.tiny import Relay, TinyVLM, freeze_for, type_masks

pytestmark = pytest.mark.usefixtures("one_torch_thread")
# the window context (four fixed message slots): the layouts below are written for it
CFG = replace(config_for("smoke"), data=replace(config_for("smoke").data, context="window"))


def _model(seed=0):
    torch.manual_seed(seed)
    return TinyVLM(CFG.model, CFG.vif).eval()


def _batch(n=4, seed=0):
    return training_batch(seed, "stage1", 0, n, CFG.data, 0.5)


def test_layout_relay_positions_and_mask():
    m, b = _model(), _batch()
    n = 2
    relay = Relay(torch.randn(4, n, CFG.model.d_model), torch.tensor([[3, 9]] * 4), torch.tensor([[True, False]] * 4))
    out = m(b["cur"], b["instr"], relay, output_attentions=True)
    lay = out.layout
    assert lay["vision"] == slice(2, 18) and lay["relay"] == slice(18, 20) and lay["instr"] == slice(20, 25)
    assert lay["T"] == 26  # [SYS][Q] V(16) R̂(2) I(5) [ASK]
    pos = lay["positions"][0]
    assert pos[18:20].tolist() == [3, 9]  # relay tokens reuse their source patches' position ids
    assert pos[:18].tolist() == list(range(18)) and pos[20:].tolist() == list(range(20, 26))
    a = out.attentions[0]
    others = torch.arange(26) != 19
    assert (a[:, :, others, 19] == 0).all()  # an empty relay slot is never attended (but by itself)
    causal = torch.ones(26, 26, dtype=torch.bool).triu(1)
    assert (a[..., causal] == 0).all()  # causal mask unchanged


def test_key_norms_equal_hand_computed_k_proj():
    m, b = _model(), _batch()
    out = m(b["cur"], b["instr"], output_attentions=True)
    block = m.lm.blocks[1]
    captured = {}
    h = block.ln1.register_forward_hook(lambda mod, i, o: captured.setdefault("x", o))
    m(b["cur"], b["instr"])
    h.remove()
    d = CFG.model.d_model
    k = captured["x"] @ block.attn.qkv.weight[d : 2 * d].T + block.attn.qkv.bias[d : 2 * d]
    torch.testing.assert_close(out.key_norms[..., 1], k.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_alpha0_tau1_no_relay_equals_plain_forward():
    m, b = _model(), _batch()
    ident = replace(CFG.vif, relay=False, alpha_mid=0.0, alpha_deep=0.0, tau=1.0)
    with torch.no_grad():
        plain = m(b["cur"], b["instr"]).logit
        vif = agent_turn(m, b["cur"], b["instr"], None, ident, use_vif=True).logit
        default = agent_turn(m, b["cur"], b["instr"], None, replace(CFG.vif, relay=False), use_vif=True).logit
    assert torch.equal(plain, vif)
    assert not torch.allclose(plain, default)


def test_make_relay_uses_selected_patches_and_source_positions():
    m, b = _model(), _batch()
    with torch.no_grad():
        out = m(b["cur"], b["instr"], output_attentions=True)
    kind = torch.zeros(4, N_CELLS, dtype=torch.long)
    kind[:, 7] = UNIMODAL
    morph = Morphology(kind, torch.full((4, N_CELLS), 0.5), torch.ones(4, N_CELLS))
    relay = make_relay(m, out, morph, CFG.vif)
    assert relay.tokens.shape == (4, CFG.vif.relay_n, CFG.model.d_model)
    assert relay.positions[:, 0].tolist() == [9] * 4  # patch 7 sits at position 2 + 7
    assert relay.valid[:, 0].all() and not relay.valid[:, 1].any()


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _changed(before, model, prefix):
    return any(not torch.equal(before[k], v) for k, v in model.state_dict().items() if k.startswith(prefix))


def test_freeze_pattern_per_stage_and_gradient_into_f():
    m = _model()
    tcfg = replace(CFG.stage1, steps=2, warmup_steps=0)
    b0 = _snapshot(m)
    train_stage(m, "stage1", tcfg, 0, 8, CFG.data, replace(CFG.vif, omega=0.0, mono_tol=10.0))
    assert _changed(b0, m, "projector.") and _changed(b0, m, "f.")
    assert not _changed(b0, m, "lm.") and not _changed(b0, m, "encoder.")
    b1 = _snapshot(m)
    train_stage(m, "stage2", tcfg, 0, 8, CFG.data, replace(CFG.vif, omega=0.0, mono_tol=10.0))
    assert _changed(b1, m, "lm.") and _changed(b1, m, "f.") and not _changed(b1, m, "encoder.")
    # f receives a non-zero gradient through the next agent's loss (the official stub's does not)
    freeze_for(m, "stage1")
    m.zero_grad()
    loss, _ = vif_loss(replace(CFG.vif, omega=0.0, mono_tol=10.0))(m, training_batch(1, "stage1", 0, 8, CFG.data, 0.5))
    loss.backward()
    assert sum(float(p.grad.abs().sum()) for p in m.f.parameters() if p.grad is not None) > 0
    with pytest.raises(ValueError):
        freeze_for(m, "stage3")


def test_training_batch_is_a_function_of_seed_and_step():
    a, b, c = _batch(seed=3), _batch(seed=3), _batch(seed=4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["cur"], c["cur"])


def test_data_questions_views_messages():
    rng = np.random.default_rng(0)
    dc = DataConfig()
    sc = make_scenes(rng, 2000, dc)
    assert 0.45 < sc.answer.mean() < 0.55
    pres = [{(c, s) for c, s in zip(sc.color[i], sc.shape[i], strict=True) if c >= 0} for i in range(len(sc))]
    for i in range(len(sc)):
        assert ((int(sc.q_color[i]), int(sc.q_shape[i])) in pres[i]) == bool(sc.answer[i])
    neg = np.flatnonzero(sc.answer == 0)
    adv = [i for i in neg if any(c == sc.q_color[i] or s == sc.q_shape[i] for c, s in pres[i])]
    assert len(adv) / len(neg) > 0.5
    lab = cell_labels(sc)
    assert ((lab > 0).sum(1) == (sc.cell >= 0).sum(1)).all()
    vis = view_masks(rng, 3, np.array([False, True, True]), 8)
    assert vis.sum(1).tolist() == [16, 8, 8]
    p = patches(sc.images[:3], vis)
    assert p.shape == (3, 16, 192) and (p[1][~vis[1]] == 0).all()
    msgs = train_messages(rng, sc.answer, dc)
    real = msgs != NONE
    truth = np.where(sc.answer == 1, 4, 5)[:, None]
    right = (msgs == truth)[real].mean()
    assert 0.75 < right < 0.92  # p_trust 0.9 lowered by the copy cascades
    assert not (np.diff(real.astype(int), axis=1) < 0).any()  # NONE-padded on the left


def test_parents_linear_and_circular():
    assert parents(0, "linear", 4) == ([], None)
    assert parents(6, "linear", 4) == ([2, 3, 4, 5], 5)
    assert parents(2, "circular", 4) == ([], None)
    assert parents(5, "circular", 4) == ([0, 1, 2, 3], 0)
    assert parents(4, "circular", 4) == ([0, 1, 2, 3], 3)
    with pytest.raises(ValueError):
        parents(1, "star", 4)


def test_run_mas_seeded_and_relay_pipeline():
    m = _model()
    ec = replace(CFG.eval, episodes=6, turns=3, batch=4)
    ep = Episodes.draw(0, "seeded", 6, 3, CFG.data, True)
    res = run_mas(m, ep, replace(CFG.vif, omega=0.0, mono_tol=10.0), ec, CFG.data, True, True)
    assert not res.correct[:, 0].any()
    assert res.unimodal.max() > 0 and res.stats.rows > 0 and res.stats.max_row_err < 1e-5
    assert res.summary()["hs"] > 0
    r = empty_relay(m, 2, 3)
    assert r.tokens.shape == (2, 3, CFG.model.d_model) and not r.valid.any()


def test_type_masks_relay_tokens_are_active_vision():
    m, b = _model(), _batch()
    relay = Relay(torch.randn(4, 2, CFG.model.d_model), torch.tensor([[3, 9]] * 4), torch.tensor([[True, False]] * 4))
    out = m(b["cur"], b["instr"], relay)
    inactive = torch.zeros(4, N_CELLS, dtype=torch.bool)
    inactive[:, :3] = True
    vision, active, instr = type_masks(out.layout, 4, ~inactive, relay.valid)
    assert vision[0, 2:20].all() and not vision[0, :2].any() and not vision[0, 20:].any()
    assert active[0, 18] and not active[0, 19]  # a valid relay token receives mass, an empty slot does not
    assert not active[0, 2:5].any() and active[0, 5:18].all()
    assert instr[0, 20:25].all() and not instr[0, 25]


def test_grounding_targets_and_vision_only_batches():
    b = training_batch(2, "pretrain", 3, 64, CFG.data, 0.0)
    q = b["instr"][:, 0] - QUESTION0  # colour * 3 + shape
    assert torch.equal(b["match"].bool(), b["cells"] == (1 + q)[:, None])
    assert torch.equal(b["match"].bool().any(1), b["y"].bool())  # full views: yes iff some cell shows it
    assert (b["instr"][:, 1:] != NONE).any()
    v = training_batch(2, "pretrain", 3, 64, CFG.data, 0.0, no_msgs=True)
    assert (v["instr"][:, 1:] == NONE).all() and (v["prev_instr"][:, 1:] == NONE).all() and not v["has_prev"].any()
    for k in ("cur", "cells", "match", "y"):  # same scenes and questions, only the messages go
        assert torch.equal(v[k], b[k])
    assert torch.equal(v["instr"][:, 0], b["instr"][:, 0])


def test_pretrain_curriculum_order(monkeypatch):
    seen = {}

    def fake_fit(model, loss_fn, get_batch, tcfg, log=None):
        seen["none"] = [bool((get_batch(s, 0, 1)["instr"][:, 1:] == NONE).all()) for s in range(tcfg.steps)]
        return type("R", (), {"losses": [0.0]})()

    monkeypatch.setattr("iclr26.vif.agent.fit", fake_fit)
    tcfg = replace(CFG.pretrain, steps=6, warmup_steps=0)
    train_stage(_model(), "pretrain", tcfg, 0, 32, CFG.data, ground_weight=1.0, vision_only_steps=4)
    assert seen["none"] == [True] * 4 + [False] * 2  # vision-only steps first, then messages
    with pytest.raises(ValueError):
        train_stage(_model(), "baseline", tcfg, 0, 32, CFG.data, vision_only_steps=4)


def test_grounding_loss_reads_the_last_shallow_block():
    m = _model()
    freeze_for(m, "pretrain")
    b = training_batch(0, "pretrain", 0, 16, CFG.data, 0.0)
    layer = CFG.model.shallow[-1]
    out = m(b["cur"], b["instr"], hidden_layer=layer)
    ref = m.lm(
        inputs_embeds=torch.cat(
            [m.lm.embed(torch.stack([torch.full((16,), 1), b["instr"][:, 0]], 1)), m.vision_tokens(b["cur"])]
            + [m.lm.embed(b["instr"]), m.lm.embed(torch.full((16, 1), 2))],
            1,
        ),
        output_hidden_states=True,
    ).hidden_states[layer + 1]
    assert torch.allclose(out.hidden, ref, atol=1e-6)
    grads = {}
    for w in (1.0, 0.0):
        m.zero_grad()
        loss, logs = pretrain_loss(w)(m, b)
        loss.backward()
        grads[w] = (loss, logs, {k: None if p.grad is None else p.grad.clone() for k, p in m.named_parameters()})
    (loss1, logs1, g1), (loss0, logs0, g0) = grads[1.0], grads[0.0]
    assert "ground_bce" in logs1 and "ground_bce" not in logs0 and loss0 < loss1
    assert float(g1["match_head.weight"].abs().sum()) > 0 and g0["match_head.weight"] is None
    # the grounding loss reaches the blocks up to the last shallow one, and none after it
    up_to = f"lm.blocks.{layer}.attn.qkv.weight"
    after = f"lm.blocks.{layer + 1}.attn.qkv.weight"
    assert float((g1[up_to] - g0[up_to]).abs().sum()) > 0
    assert torch.allclose(g1[after], g0[after], atol=1e-7)
    for stage in ("stage1", "stage2", "baseline"):  # the grounding head trains in pretraining only
        freeze_for(m, stage)
        assert not any(p.requires_grad for p in m.match_head.parameters())
