"""DAEDAL: which tensor feeds each step, where the LLaDA SFT gradient flows, metrics on asymmetric inputs.

Gradient table (LLaDA SFT, the only training in the reproduction; DAEDAL itself is training-free):

| loss term                                   | nonzero gradient                  | exactly zero                   |
|---------------------------------------------|-----------------------------------|--------------------------------|
| Σ_masked CE(x_i, f(x_t)_i) / t / canvas_len | logits at masked canvas positions | logits at prompt positions and |
|                                             |                                   | at unmasked canvas positions   |
| decoding (eos_confidence, denoise_step)     | none (no_grad)                    | everything                     |
"""

import math
import types
from dataclasses import replace

import pytest
import torch

from iclr26.daedal import tasks as T
from iclr26.daedal.generate import DaedalConfig, _forward, denoise_step, eos_confidence
from iclr26.daedal.metrics import effective_length, effective_token_stats
from iclr26.daedal.model import TinyMDMConfig, llada_sft_loss, train_tiny_mdm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EOS_ID = 2


def _logits_of(probs):
    return torch.tensor(probs).log()


# ---------------------------------------------------------------- references


def test_cfg_combines_conditional_and_unconditional_passes_in_that_order():
    """l = l_u + (s + 1)(l_c - l_u), l_u from the prompt positions selected by ``uncond`` set to MASK."""
    V, P, mask_id = 4, 3, 9

    def model_fn(ids, attn):
        n_masked = (ids[:, :P] == mask_id).sum(1).float()  # 0 for the conditional pass
        base = torch.arange(ids.shape[1]).float()[None, :, None] + torch.zeros(ids.shape[0], 1, V)
        return base + n_masked[:, None, None] * (torch.arange(V).float() + 1.0)

    x = torch.tensor([[5, 6, 7, 1, 1], [5, 6, 7, 1, 1]])
    attn = torch.ones_like(x, dtype=torch.bool)
    uncond = torch.tensor([[True, True, True], [False, True, False]])  # row 1: one real prompt token
    s = 1.5
    out = _forward(model_fn, x, attn, uncond, mask_id, s)
    base = torch.arange(5).float()[None, :, None].expand(2, 5, V)
    n = torch.tensor([3.0, 1.0])[:, None, None]
    expect = base - s * n * (torch.arange(V).float() + 1.0)  # l_u + (s+1)(l_c - l_u) = base - s·n·(v+1)
    assert torch.allclose(out, expect)
    assert torch.equal(_forward(model_fn, x, attn, uncond, mask_id, 0.0), model_fn(x, attn))


def test_sft_loss_feeds_the_noised_canvas_and_scores_the_clean_tokens():
    ids = torch.tensor([[10, 11, 3, 4, EOS_ID], [10, 12, 5, 6, EOS_ID]])
    gen = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 1, 1, 0]], dtype=torch.bool)
    batch = {"ids": ids, "attn": torch.ones_like(gen), "gen": gen, "canvas_len": torch.tensor([3, 2])}
    t = torch.tensor([0.5, 0.8])
    noise = torch.tensor([[0.0, 0.0, 0.2, 0.9, 0.1], [0.0, 0.0, 0.7, 0.3, 0.1]])
    # masked: row 0 at 2 and 4 (noise < 0.5), row 1 at 2 and 3 (noise < 0.8; position 4 is not canvas)
    table = torch.nn.Parameter(torch.randn(2, 5, 16))
    seen = {}

    def model(x, attention_mask):
        seen["x"] = x.clone()
        return types.SimpleNamespace(logits=table)

    loss = llada_sft_loss(model, batch, t, noise)
    want_x = ids.clone()
    want_x[0, 2] = want_x[0, 4] = want_x[1, 2] = want_x[1, 3] = T.MASK
    assert torch.equal(seen["x"], want_x)
    lp = torch.log_softmax(table.detach(), -1)
    r0 = -(lp[0, 2, 3] + lp[0, 4, EOS_ID]) / 0.5 / 3
    r1 = -(lp[1, 2, 5] + lp[1, 3, 6]) / 0.8 / 2
    assert float(loss.detach()) == pytest.approx(float((r0 + r1) / 2), rel=1e-5)
    # gradient flow: only the masked canvas positions' logits
    (g,) = torch.autograd.grad(loss, [table])
    nonzero = g.abs().sum(-1) > 0
    want = torch.zeros(2, 5, dtype=torch.bool)
    want[0, 2] = want[0, 4] = want[1, 2] = want[1, 3] = True
    assert torch.equal(nonzero, want)


def test_sft_loss_reaches_every_parameter_of_the_tiny_mdm():
    from iclr26.daedal.model import build_model

    cfg = TinyMDMConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=40, train_max_canvas=12)
    model = build_model(cfg, seed=0)
    ids = torch.randint(0, 20, (2, 10))
    gen = torch.zeros(2, 10, dtype=torch.bool)
    gen[:, 4:] = True
    batch = {"ids": ids, "attn": torch.ones_like(gen), "gen": gen, "canvas_len": gen.sum(1)}
    llada_sft_loss(model, batch, torch.tensor([0.9, 0.9]), torch.zeros(2, 10)).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or float(p.grad.abs().sum()) == 0]
    assert missing == []


def test_insertion_goes_at_the_least_confident_low_confidence_position():
    cfg = replace(DaedalConfig(), block_length=8, expansion_factor=2, max_length=64)
    M = T.MASK
    row = torch.full((6,), M)
    a = torch.tensor([1, 1, 1, 1, 1, 1])
    c = torch.tensor([0.95, 0.05, 0.5, 0.02, 0.08, 0.3])
    new, fill, ins = denoise_step(row, 0, a, c, eos_conf=0.0, cfg=cfg, mask_id=M)
    assert torch.equal(fill, torch.tensor([True, False, False, False, False, False]))
    assert ins == 3  # candidates (c < 0.1): 1, 3, 4; the least confident is 3
    assert new.tolist() == [1, M, M, M, M, M, M]
    # with the EOS signal confident, no insertion
    _, _, ins2 = denoise_step(row, 0, a, c, eos_conf=0.95, cfg=cfg, mask_id=M)
    assert ins2 is None


# ---------------------------------------------------------------- metrics, hand-computed, asymmetric


def _eos_case():
    e = 1e-6
    row0 = [
        [0.3, 0.3, 0.4],  # prompt position (ignored)
        [0.1, 0.1, 0.8],  # EOS argmax, p .8
        [0.7, 0.1, 0.2],  # not EOS argmax, p .2
        [0.2, 0.2, 0.6],  # EOS, .6
        [0.05, 0.05, 0.9],  # EOS, .9
        [e, e, 1 - 2 * e],  # beyond L = 4: ignored
    ]
    row1 = [
        [0.3, 0.3, 0.4],
        [0.1, 0.1, 0.8],  # EOS, .8
        [0.7, 0.1, 0.2],  # not EOS, .2
        [e, e, 1 - 2 * e],  # beyond L = 2
        [e, e, 1 - 2 * e],
        [e, e, 1 - 2 * e],
    ]
    return _logits_of([row0, row1]), torch.tensor([4, 2])


def test_eos_confidence_code_mode_hand_computed():
    logits, L = _eos_case()
    c3 = eos_confidence(logits, 1, L, EOS_ID, window=3, mode="code")
    assert torch.allclose(c3, torch.tensor([(0.9 + 0.6 + 0.8) / 3, 0.8 / 3]), atol=1e-5)
    c2 = eos_confidence(logits, 1, L, EOS_ID, window=2, mode="code")  # the last two EOS positions only
    assert torch.allclose(c2, torch.tensor([(0.9 + 0.6) / 2, 0.8 / 2]), atol=1e-5)


def test_eos_confidence_window_mean_hand_computed():
    logits, L = _eos_case()
    w3 = eos_confidence(logits, 1, L, EOS_ID, window=3, mode="window_mean")
    assert torch.allclose(w3, torch.tensor([(0.2 + 0.6 + 0.9) / 3, (0.8 + 0.2) / 2]), atol=1e-5)


def test_effective_length_count_vs_trailing():
    seq = [5, EOS_ID, 7, EOS_ID, EOS_ID]
    assert effective_length(seq, EOS_ID, "count") == 2
    assert effective_length(seq, EOS_ID, "trailing") == 3
    assert effective_length([EOS_ID, 5, 7], EOS_ID, "trailing") == 3  # leading EOS is not padding


def test_e_ratio_is_a_ratio_of_totals_not_a_mean_of_ratios():
    outs = [[5, 6], [5, 6, 7, EOS_ID, EOS_ID, EOS_ID]]  # E 2 of 2, 3 of 6
    st = effective_token_stats(outs, EOS_ID, "count")
    assert st["E_ratio"] == pytest.approx(100 * 5 / 8)
    assert st["E_tok"] == 2.5 and st["N_tok"] == 4.0
    assert not math.isclose(st["E_ratio"], 75.0)


# ---------------------------------------------------------------- per-step training log


def test_train_tiny_mdm_logs_its_training_curve():
    rows = []
    cfg = TinyMDMConfig(
        d_model=16, n_layers=1, n_heads=2, d_ff=32, steps=20, batch_size=4, warmup_steps=1, tasks=("rep4",)
    )
    _, losses = train_tiny_mdm(cfg, seed=0, log=lambda step, **kw: rows.append((step, kw)))
    assert len(losses) == 20
    # core.train.fit logs every log_every (10) steps: loss, lr, grad_norm
    assert [s for s, _ in rows] == [10, 20]
    assert [kw["loss"] for _, kw in rows] == pytest.approx([losses[9], losses[19]])
    assert all({"lr", "grad_norm"} <= set(kw) for _, kw in rows)
