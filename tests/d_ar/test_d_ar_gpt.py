"""The vanilla AR: parameter counts of the official presets, causality, loss, class dropout, CFG,
prefix control and the reversed-order baseline."""

import pytest
import torch
import torch.nn.functional as F

from iclr26.d_ar.gpt import (
    GPTConfig,
    LabelEmbedder,
    Transformer,
    cfg_schedule,
    generate,
    gpt_preset,
    guided_logits,
    reverse_tokens,
)
from iclr26.d_ar.train import all_shift_codes, ar_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = GPTConfig(dim=32, n_layer=2, n_head=4, multiple_of=16, num_classes=10, vocab_size=20, block_size=8, **kw)
    m = Transformer(cfg)
    torch.nn.init.normal_(m.output.weight, 0, 0.5)  # the official zero-init head would make every logit 0
    return m.eval()


@pytest.mark.parametrize("name,official", [("GPT-B", 111e6), ("GPT-L", 343e6), ("GPT-XL", 775e6), ("GPT-XXL", 1.4e9)])
def test_preset_parameter_counts(name, official):
    with torch.device("meta"):
        m = Transformer(gpt_preset(name))
    n = sum(p.numel() for p in m.parameters())
    assert abs(n / official - 1) < 0.02


def test_official_parameter_names():
    names = set(tiny().state_dict())
    for key in (
        "cls_embedding.embedding_table.weight",
        "tok_embeddings.weight",
        "layers.0.attention.wqkv.weight",
        "layers.0.attention.wo.weight",
        "layers.1.feed_forward.w1.weight",
        "layers.1.feed_forward.w2.weight",
        "layers.1.feed_forward.w3.weight",
        "layers.0.attention_norm.weight",
        "layers.0.ffn_norm.weight",
        "norm.weight",
        "output.weight",
    ):
        assert key in names
    assert tiny().cls_embedding.embedding_table.weight.shape[0] == 11  # + null class


def test_ffn_hidden_rounding():
    assert gpt_preset("GPT-L").ffn_hidden == 2816  # int(2 * 4096 / 3) = 2730 -> multiple of 256


def test_logits_invariant_to_later_tokens():
    m = tiny()
    z = torch.randint(0, 20, (3, 8))
    y = torch.tensor([1, 2, 3])
    a = m(z, y)
    z2 = z.clone()
    z2[:, 5:] = (z2[:, 5:] + 3) % 20
    b = m(z2, y)
    assert a.shape == (3, 9, 20)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-5)
    assert not torch.allclose(a[:, 6], b[:, 6], atol=1e-4)
    assert not torch.allclose(m(z, torch.tensor([4, 2, 3]))[0, 0], a[0, 0], atol=1e-4)  # class token matters


def test_loss_is_next_token_cross_entropy():
    m = tiny()
    z = torch.randint(0, 20, (4, 8))
    y = torch.randint(0, 10, (4,))
    logits = m(z[:, :-1], y)
    expected = F.cross_entropy(logits.reshape(-1, 20), z.reshape(-1))
    assert torch.allclose(m.loss(z, y), expected)
    nll = m.token_nll(z, y)
    assert nll.shape == (4, 8) and torch.allclose(nll.mean(), expected, atol=1e-5)


def test_class_dropout_maps_to_null_with_its_probability():
    emb = LabelEmbedder(10, 8, 0.1)
    labels = torch.randint(0, 10, (20000,))
    out = emb.token_drop(labels, torch.Generator().manual_seed(0))
    dropped = out == 10
    assert 0.09 < dropped.float().mean() < 0.11
    assert torch.equal(out[~dropped], labels[~dropped])
    assert not (LabelEmbedder(10, 8, 0.0).token_drop(labels) == 10).any()


def test_cfg_schedule_and_guidance():
    s = cfg_schedule(1.2, 8.0, 256)
    assert len(s) == 256 and abs(float(s[0]) - 1.2) < 1e-6 and abs(float(s[-1]) - 8.0) < 1e-5
    c, u = torch.randn(3, 20), torch.randn(3, 20)
    assert torch.equal(guided_logits(c, u, 1.0), c)
    assert torch.allclose(guided_logits(c, u, 3.0), u + 3.0 * (c - u))


def test_generation_with_scale_one_equals_plain_conditional_sampling():
    m = tiny()
    y = torch.tensor([0, 5, 9])
    a = generate(m, y, cfg_scale=(1.0, 1.0), generator=torch.Generator().manual_seed(3))
    b = generate(m, y, cfg_scale=(1.0, 1.0), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (3, 8)
    g = generate(m, y, cfg_scale=(4.0, 4.0), generator=torch.Generator().manual_seed(3))
    assert not torch.equal(a, g)  # guidance changes the samples


def test_greedy_guided_generation_follows_the_guided_logits():
    m = tiny()
    y = torch.tensor([2])
    seq = generate(m, y, cfg_scale=(2.0, 6.0), temperature=1e-6)
    null = torch.tensor([10])
    scales = cfg_schedule(2.0, 6.0, 8)
    for i in range(8):
        c = m(seq[:, :i], y)[:, -1]
        u = m(seq[:, :i], null)[:, -1]
        assert int(seq[0, i]) == int(guided_logits(c, u, float(scales[i])).argmax())


def test_prefix_is_kept():
    m = tiny()
    prefix = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = generate(m, torch.tensor([0, 1]), prefix=prefix, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[:, :3], prefix) and out.shape == (2, 8)
    with pytest.raises(ValueError):
        generate(m, torch.tensor([0]), prefix=torch.zeros(1, 9, dtype=torch.long))


def test_reversal_round_trip_and_same_rows_for_both_orders():
    z = torch.randint(0, 20, (5, 8))
    assert torch.equal(reverse_tokens(reverse_tokens(z)), z)
    assert torch.equal(reverse_tokens(z)[:, 0], z[:, -1])
    codes = torch.randint(0, 20, (9, 30, 8))
    labels = torch.randint(0, 10, (30,))
    fz, fy = ar_batch(codes, labels, 0, 7, 16, reverse=False)
    rz, ry = ar_batch(codes, labels, 0, 7, 16, reverse=True)
    assert torch.equal(ry, fy) and torch.equal(reverse_tokens(rz), fz)


def test_all_shift_codes_is_the_codes_of_each_translation():
    from iclr26.d_ar.config import small_tokenizer
    from iclr26.d_ar.tokenizer import VQModel

    tok = VQModel(small_tokenizer()).eval()
    x = torch.rand(5, 1, 8, 8) * 2 - 1
    table = all_shift_codes(tok, x, 1)
    assert table.shape == (9, 5, 16)
    assert torch.equal(table[4], tok.extract_code(x))  # (dy, dx) = (1, 1) is the identity
    shifted = torch.nn.functional.pad(x, (1, 1, 1, 1), value=-1.0)[:, :, 0:8, 2:10]
    assert torch.equal(table[2], tok.extract_code(shifted))


def test_bad_tokens_are_errors():
    m = tiny()
    with pytest.raises(ValueError):
        m(torch.full((1, 3), 20), torch.tensor([0]))
    with pytest.raises(ValueError):
        m(torch.zeros(1, 9, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError):
        gpt_preset("GPT-Z")
