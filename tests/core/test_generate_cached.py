"""generate(..., kv_cache=True): prefill + one-token decode steps over cached keys/values give the same
tokens, the same finished masks and (to float tolerance) the same step logits as re-running the sequence."""

import pytest
import torch

from iclr26.core.transformer import ResidualAdd, Transformer, TransformerConfig, generate

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V, EOS, PAD = 23, 3, 0


def _model(pos: str = "rope", seed: int = 0, scale: float = 8.0, **kw) -> Transformer:
    """Scaled-up weights: sharp attention, so a wrong position or a missing key changes the argmax."""
    torch.manual_seed(seed)
    m = Transformer(TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, max_len=32, pos=pos, **kw))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(scale)
    return m.eval()


def _both(model, prompt, n, **kw):
    """(uncached, cached) results and step logits with identically seeded generators."""
    out = []
    for cache in (False, True):
        steps: list = []
        seq, valid = generate(
            model, prompt, n, generator=torch.Generator().manual_seed(7), kv_cache=cache, step_logits=steps, **kw
        )
        out.append((seq, valid, steps))
    return out


@pytest.mark.parametrize("pos", ["rope", "learned", "none"])
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=0.8, top_k=5)])
def test_cached_tokens_equal_the_full_recompute(pos, sampling):
    model = _model(pos)
    for t0, b in ((1, 3), (4, 5), (11, 4)):
        prompt = torch.randint(0, V, (b, t0), generator=torch.Generator().manual_seed(t0))
        (ref, ref_valid, ref_steps), (got, got_valid, got_steps) = _both(
            model, prompt, 12, eos_id=EOS, pad_id=PAD, **sampling
        )
        assert torch.equal(ref, got) and torch.equal(ref_valid, got_valid)
        assert len(ref_steps) == len(got_steps) == ref.shape[1] - t0
        for a, c in zip(ref_steps, got_steps, strict=True):
            torch.testing.assert_close(c, a, atol=2e-3, rtol=1e-3)
        if pos != "none":
            assert len(set(ref[:, t0:].flatten().tolist())) > 2  # continuations depend on the context


def test_step_logits_equal_a_forward_over_the_generated_sequence():
    model = _model("rope", seed=1)
    prompt = torch.randint(0, V, (4, 6), generator=torch.Generator().manual_seed(0))
    steps: list = []
    seq, _ = generate(model, prompt, 8, generator=torch.Generator().manual_seed(2), kv_cache=True, step_logits=steps)
    with torch.no_grad():
        full = model(seq).logits
    assert len(steps) == 8
    for j, lg in enumerate(steps):
        torch.testing.assert_close(lg, full[:, 6 + j - 1], atol=1e-4, rtol=1e-4)


def test_eos_padding_and_early_stop_match():
    model = _model("learned", seed=2, scale=1.0)
    with torch.no_grad():
        model.tok_emb.weight[EOS] *= 30.0  # EOS likely under tied embeddings: rows finish at different steps
    prompt = torch.randint(4, V, (6, 5), generator=torch.Generator().manual_seed(3))
    (ref, ref_valid, _), (got, got_valid, _) = _both(model, prompt, 20, temperature=1.0, eos_id=EOS, pad_id=PAD)
    assert torch.equal(ref, got) and torch.equal(ref_valid, got_valid)
    assert not ref_valid.all() and ref_valid[:, 0].all()  # some row finished early


def test_zero_new_tokens_and_the_max_len_boundary():
    model = _model("learned")
    prompt = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(0))
    seq, valid = generate(model, prompt, 0, kv_cache=True)
    assert torch.equal(seq, prompt) and valid.shape == (2, 0)
    # 5 + 28 - 1 = 32 = max_len: the last forwarded token sits at position 31, the cache still applies
    (ref, _, _), (got, _, _) = _both(model, prompt, 28, temperature=1.0)
    assert torch.equal(ref, got) and got.shape[1] == 33
    # longer: the uncached path crops the context to max_len; the cached call falls back to it
    (ref, _, _), (got, _, _) = _both(model, prompt, 40, temperature=1.0)
    assert torch.equal(ref, got) and got.shape[1] == 45


def test_interventions_and_dropout_fall_back_to_the_full_recompute():
    model = _model("rope")
    prompt = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(1))
    plain = generate(model, prompt, 8, temperature=0.0, kv_cache=True)[0]
    steer = ResidualAdd(layer=1, vector=torch.randn(32, generator=torch.Generator().manual_seed(0)), alpha=40.0)
    with model.intervene(steer):
        (ref, _, _), (got, _, _) = _both(model, prompt, 8, temperature=0.0)
    assert torch.equal(ref, got) and not torch.equal(got, plain)  # the intervention was applied
    drop = _model("rope", dropout=0.3).train()
    torch.manual_seed(5)
    ref = generate(drop, prompt, 6, temperature=0.0)[0]
    torch.manual_seed(5)
    got = generate(drop, prompt, 6, temperature=0.0, kv_cache=True)[0]
    assert torch.equal(ref, got)


def test_bidirectional_model_is_refused():
    model = _model("rope", causal=False)
    with pytest.raises(ValueError, match="causal"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 2, kv_cache=True)
