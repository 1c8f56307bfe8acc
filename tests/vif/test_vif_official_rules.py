"""The official code's middle-band receivers and relay selection (utils/reallocation.py, utils/selection.py),
as the official_code() preset's values, with hand-computed rows."""

import pytest
import torch

from iclr26.vif import (
    Reallocation,
    ReallocStats,
    ViFConfig,
    keynorm_signal,
    official_code,
    select_relay_keynorm,
)
from iclr26.vif.agent import agent_turn, empty_relay
from iclr26.vif.config import ModelConfig
from iclr26.vif.tiny import TinyVLM

# one query row over 7 keys: [sys, v_active, v_inactive, i1, i2, out, future (causally masked, p = 0)]
ROW = torch.tensor([0.1, 0.2, 0.1, 0.3, 0.2, 0.1, 0.0])
VISION = torch.tensor([[0, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
ACTIVE = torch.tensor([[0, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
INSTR = torch.tensor([[0, 0, 0, 1, 1, 0, 0]], dtype=torch.bool)


def _hook(vcfg, stats=None):
    return Reallocation.from_config(vcfg, (1,), (2,), VISION, ACTIVE, INSTR, stats)


def test_official_preset_spreads_middle_mass_over_every_non_collected_key():
    # collected: α (0.1 + 0.3 + 0.2) = 0.2 · 0.6 = 0.12; visible non-collected keys: sys, v_active, out
    # (the causally masked key gets nothing): + 0.04 each (uniform); τ = 1 to keep the numbers by hand
    stats = ReallocStats()
    new = _hook(official_code(ViFConfig(tau=1.0)), stats)(1, ROW.view(1, 1, 1, -1))
    want = torch.tensor([0.14, 0.24, 0.08, 0.24, 0.16, 0.14, 0.0])
    torch.testing.assert_close(new.flatten(), want)
    assert stats.max_row_err < 1e-6 and stats.max_move_err < 1e-6


def test_paper_rule_moves_middle_mass_to_active_vision_only():
    cfg = ViFConfig(tau=1.0, alpha_mid=0.2, redistribute="uniform")
    assert cfg.mid_receivers == "active_vision"
    new = _hook(cfg)(1, ROW.view(1, 1, 1, -1))
    torch.testing.assert_close(new.flatten(), torch.tensor([0.1, 0.32, 0.08, 0.24, 0.16, 0.1, 0.0]))
    # proportional with the official receivers: 0.12 split 0.1 : 0.2 : 0.1 over sys, v_active, out
    prop = _hook(ViFConfig(tau=1.0, alpha_mid=0.2, mid_receivers="non_collected"))(1, ROW.view(1, 1, 1, -1))
    torch.testing.assert_close(prop.flatten(), torch.tensor([0.13, 0.26, 0.08, 0.24, 0.16, 0.13, 0.0]))


def test_official_preset_values_and_bad_names():
    o = official_code()
    assert (o.mid_receivers, o.relay_rule, o.relay_ratio) == ("non_collected", "keynorm_topk", 0.02)
    d = ViFConfig()
    assert (d.mid_receivers, d.relay_rule) == ("active_vision", "morphology")
    with pytest.raises(ValueError, match="mid_receivers"):
        ViFConfig(mid_receivers="everything")
    with pytest.raises(ValueError, match="relay_rule"):
        ViFConfig(relay_rule="best")
    with pytest.raises(ValueError, match="relay_ratio"):
        ViFConfig(relay_ratio=0.0)


def test_official_relay_count_is_max_one_int_two_percent():
    o = official_code()
    assert [o.relay_count(m) for m in (16, 49, 50, 100, 576)] == [1, 1, 1, 2, 11]
    assert ViFConfig(relay_n=3).relay_count(576) == 3


def test_keynorm_topk_by_hand():
    # key norms [B=1, m=4, L=4], middle band (1, 2): means 2.0, 5.0, 3.0, 4.5
    kn = torch.tensor([[[9.0, 1.0, 3.0, 0.0], [0.0, 6.0, 4.0, 0.0], [0.0, 3.0, 3.0, 9.0], [1.0, 4.0, 5.0, 1.0]]])
    sig = keynorm_signal(kn, (1, 2))
    torch.testing.assert_close(sig, torch.tensor([[2.0, 5.0, 3.0, 4.5]]))
    idx, valid = select_relay_keynorm(sig, 0.02)  # k = max(1, int(0.08)) = 1
    assert idx.tolist() == [[1]] and valid.all()
    idx, valid = select_relay_keynorm(sig, 0.5)  # k = 2, best first
    assert idx.tolist() == [[1, 3]] and valid.all()
    big = torch.arange(100.0).flip(0)[None]  # m = 100 -> k = 2: tokens 0 and 1
    assert select_relay_keynorm(big, 0.02)[0].tolist() == [[0, 1]]
    with pytest.raises(ValueError):
        select_relay_keynorm(sig[0], 0.02)


def test_agent_turn_relays_the_top_keynorm_token_under_the_official_rule():
    torch.manual_seed(0)
    mcfg = ModelConfig(d_model=16, n_layers=4, n_heads=2, shallow=(0,), middle=(1, 2), deep=(3,), enc_hidden=16)
    vcfg = official_code(ViFConfig(f_heads=2))
    model = TinyVLM(mcfg, vcfg).eval()
    B = 3
    pat = torch.rand(B, 16, 192)
    instr = torch.randint(1, 8, (B, 5))
    with torch.no_grad():
        turn = agent_turn(model, pat, instr, empty_relay(model, B, 1), vcfg, use_vif=True)
        probe = model(pat, instr, empty_relay(model, B, 1), output_attentions=True)
    want = probe.key_norms[:, probe.layout["vision"]][..., [1, 2]].mean(-1).argmax(-1)
    assert turn.relay.tokens.shape[1] == 1 and turn.relay.valid.all()
    assert torch.equal(turn.relay.positions[:, 0], probe.layout["positions"][0, 2 + want])


def test_official_relay_reads_the_probe_pass_key_norms(monkeypatch):
    # the official wrapper ranks tokens on the base model's key states, before reallocation: the key norms
    # handed to make_relay must be the probe pass's (the first forward), not the reallocated pass's
    import iclr26.vif.agent as agent_mod

    torch.manual_seed(1)
    mcfg = ModelConfig(d_model=16, n_layers=4, n_heads=2, shallow=(0,), middle=(1, 2), deep=(3,), enc_hidden=16)
    vcfg = official_code(ViFConfig(f_heads=2))
    model = TinyVLM(mcfg, vcfg).eval()
    outs, seen = [], []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: outs.append(forward(*a, **k)) or outs[-1])
    make_relay = agent_mod.make_relay
    monkeypatch.setattr(
        agent_mod,
        "make_relay",
        lambda *a, **k: seen.append(k.get("key_norms", a[5] if len(a) > 5 else None)) or make_relay(*a, **k),
    )
    with torch.no_grad():
        agent_turn(model, torch.rand(2, 16, 192), torch.randint(1, 8, (2, 5)), empty_relay(model, 2, 1), vcfg, True)
    assert len(outs) == 2 and seen[0] is outs[0].key_norms and seen[0] is not outs[1].key_norms


def test_keynorm_topk_count_truncates():
    # int, not round: 0.02 · 75 = 1.5 -> 1, 0.02 · 149 = 2.98 -> 2
    assert select_relay_keynorm(torch.rand(2, 75), 0.02)[0].shape == (2, 1)
    assert select_relay_keynorm(torch.rand(2, 149), 0.02)[0].shape == (2, 2)
    assert official_code().relay_count(149) == 2
