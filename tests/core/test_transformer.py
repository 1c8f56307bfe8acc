import math

import pytest
import torch

from iclr26.core.transformer import (
    AttentionReweight,
    ResidualAdd,
    Transformer,
    TransformerConfig,
    generate,
)


def tiny(**kw):
    cfg = TransformerConfig(vocab_size=37, d_model=32, n_layers=2, n_heads=4, max_len=24, **kw)
    return Transformer(cfg).eval()


@pytest.mark.parametrize("pos", ["rope", "learned", "none"])
def test_causal_output_ignores_future_tokens(pos):
    m = tiny(pos=pos, causal=True)
    x = torch.randint(0, 37, (2, 16))
    y = x.clone()
    y[:, 9:] = torch.randint(0, 37, (2, 7))
    a, b = m(x).logits, m(y).logits
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-3)


def test_bidirectional_sees_the_future():
    m = tiny(causal=False)
    x = torch.randint(0, 37, (1, 12))
    y = x.clone()
    y[0, -1] = (y[0, -1] + 1) % 37
    assert not torch.allclose(m(x).logits[:, 0], m(y).logits[:, 0], atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_attention_rows_sum_to_one_and_explicit_equals_sdpa(causal, pos):
    m = tiny(causal=causal, pos=pos)
    x = torch.randint(0, 37, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :5] = 0  # left padding
    for am in (None, mask):
        fast = m(x, attention_mask=am)
        slow = m(x, attention_mask=am, output_attentions=True, output_hidden_states=True)
        assert torch.allclose(fast.logits, slow.logits, atol=1e-5)
        assert len(slow.attentions) == 2 and len(slow.hidden_states) == 3
        for att in slow.attentions:
            assert att.shape == (3, 4, 20, 20)
            assert torch.allclose(att.sum(-1), torch.ones(3, 4, 20), atol=1e-5)
            if causal:
                assert torch.all(att.triu(1) == 0)
            if am is not None:
                assert torch.all(att[1, :, 5:, :5] == 0)  # real queries never look at padding


def test_padding_does_not_change_real_positions():
    m = tiny(causal=True, pos="rope")
    x = torch.randint(1, 37, (1, 10))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), x], 1)
    am = torch.cat([torch.zeros(1, 4), torch.ones(1, 10)], 1).long()
    pos = (am.cumsum(1) - 1).clamp(min=0)
    a = m(x).logits
    b = m(padded, attention_mask=am, position_ids=pos).logits[:, 4:]
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("pos,tie,bias", [("rope", True, True), ("learned", False, True), ("none", True, False)])
def test_parameter_count_formula(pos, tie, bias):
    cfg = TransformerConfig(
        vocab_size=101, d_model=48, n_layers=3, n_heads=6, d_ff=100, max_len=33, pos=pos, tie_embeddings=tie, bias=bias
    )
    assert Transformer(cfg).num_params() == cfg.num_params()
    # hand count for one case: V*d + L*(4d + 3d^2+3d + d^2+d + d*ff+ff + ff*d+d) + 2d
    if pos == "rope" and tie and bias:
        d, ff, V, L = 48, 100, 101, 3
        assert cfg.num_params() == V * d + L * (4 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * ff + ff + d) + 2 * d


def test_attention_reweight_matches_hand_renormalisation():
    m = tiny(causal=True)
    x = torch.randint(0, 37, (1, 12))
    keys = torch.zeros(12, dtype=torch.bool)
    keys[[1, 3]] = True
    base = m(x, output_attentions=True).attentions
    with m.intervene(AttentionReweight(layers=(0,), key_mask=keys, factor=3.0, heads=(1,))):
        out = m(x, output_attentions=True)
        fast = m(x)
    p = base[0][0, 1]  # layer 0, head 1: its inputs are unchanged by the edit
    w = torch.ones(12)
    w[keys] = 3.0
    expected = p * w
    expected = expected / expected.sum(-1, keepdim=True)
    assert torch.allclose(out.attentions[0][0, 1], expected, atol=1e-5)
    assert torch.allclose(out.attentions[0][0, 0], base[0][0, 0], atol=1e-6)  # other heads untouched
    assert torch.allclose(out.logits, fast.logits, atol=1e-5)  # SDPA path gets the same bias
    assert not torch.allclose(out.logits, m(x).logits, atol=1e-4)  # context exited -> back to normal


def test_residual_add_moves_hidden_state_exactly():
    m = tiny()
    x = torch.randint(0, 37, (2, 8))
    v = torch.randn(32)
    base = m(x, output_hidden_states=True).hidden_states
    with m.intervene(ResidualAdd(layer=1, vector=v, alpha=2.0)):
        hs = m(x, output_hidden_states=True).hidden_states
    assert torch.allclose(hs[0], base[0])
    assert torch.allclose(hs[1], base[1] + 2.0 * v, atol=1e-6)
    pos = torch.zeros(8, dtype=torch.bool)
    pos[-1] = True
    with m.intervene(ResidualAdd(layer=2, vector=v, positions=pos)):
        hs = m(x, output_hidden_states=True).hidden_states
    assert torch.allclose(hs[2][:, :-1], base[2][:, :-1], atol=1e-6)
    assert torch.allclose(hs[2][:, -1], base[2][:, -1] + v, atol=1e-6)


def test_generate_greedy_is_argmax_and_stops_at_eos():
    m = tiny(causal=True)
    prompt = torch.randint(0, 37, (2, 4))
    seq, valid = generate(m, prompt, 5, temperature=0)
    ref = prompt
    for _ in range(5):
        ref = torch.cat([ref, m(ref).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(seq, ref) and valid.all()
    eos = int(seq[0, 4])
    seq2, valid2 = generate(m, prompt, 5, temperature=0, eos_id=eos, pad_id=0)
    assert valid2[0, 0] and not valid2[0, 1:].any()


def test_config_errors():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(vocab_size=5, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="max_len"):
        tiny()(torch.zeros(1, 25, dtype=torch.long))
    with pytest.raises(ValueError, match="factor"):
        AttentionReweight(layers=(0,), key_mask=torch.ones(3, dtype=torch.bool), factor=0.0)
    assert math.isfinite(tiny().num_params())
