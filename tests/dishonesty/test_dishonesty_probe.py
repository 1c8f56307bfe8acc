"""Probe, activations, threshold, streaming and steering (paper Section 5)."""

import numpy as np
import pytest
import torch

from iclr26.core.transformer import Transformer, TransformerConfig
from iclr26.dishonesty import (
    DeceptionProbe,
    SteeringHook,
    auroc,
    calibrate_threshold,
    gather_activations,
    masked_mean,
)


def _gaussians(seed=0, n=400, d=16, sep=3.0):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    scales = rng.uniform(0.5, 2.0, size=d)  # anisotropic, so raw vs standardized directions differ
    x0 = rng.normal(size=(n, d)) + 5.0
    x1 = rng.normal(size=(n, d)) + 5.0 + sep * u
    return np.vstack([x0, x1]), np.repeat([0, 1], n), u, scales


def test_probe_recovers_direction_without_intercept():
    X, y, u, _ = _gaussians()
    probe = DeceptionProbe(C=0.1).fit(X, y)
    v = probe.direction("raw")
    assert float(v @ u) > 0.95  # positive = dishonest class, raw-space direction recovered
    assert probe.intercept_ == 0.0
    s = probe.token_logits(X)
    assert auroc(s[y == 1], s[y == 0]) > 0.98


def test_probe_direction_is_w_over_sigma():
    X, y, u, scales = _gaussians(seed=1)
    X = X * scales  # different per-feature scales
    probe = DeceptionProbe(C=0.1).fit(X, y)
    raw = probe.coef_ / probe.sigma
    assert np.allclose(probe.direction("raw"), raw / np.linalg.norm(raw))
    assert not np.allclose(probe.direction("raw"), probe.direction("standardized"), atol=1e-3)


def test_standardisation_uses_training_statistics_only():
    X, y, _, _ = _gaussians(seed=2)
    probe = DeceptionProbe(C=0.1).fit(X, y)
    assert np.allclose(probe.mu, X.mean(0)) and np.allclose(probe.sigma, X.std(0))
    mu, sd, w = probe.mu.copy(), probe.sigma.copy(), probe.coef_.copy()
    H = np.random.default_rng(3).normal(size=(50, X.shape[1])) * 7 + 100  # very different test statistics
    s = probe.token_logits(H)
    assert np.allclose(probe.mu, mu) and np.allclose(probe.sigma, sd)  # scoring never refits
    # folding: ((h - mu)/sd) . w == h . (w/sd) - mu . (w/sd)
    assert np.allclose(s, H @ (w / sd) - mu @ (w / sd), rtol=1e-10, atol=1e-9)
    assert not np.allclose(s, ((H - H.mean(0)) / H.std(0)) @ w)


def test_unstandardised_probe_and_bad_inputs():
    X, y, _, _ = _gaussians(seed=4)
    p = DeceptionProbe(C=0.1, standardize=False).fit(X, y)
    assert np.allclose(p.mu, 0) and np.allclose(p.sigma, 1)
    with pytest.raises(ValueError):
        DeceptionProbe().fit(X, np.zeros(len(y)))
    with pytest.raises(RuntimeError):
        DeceptionProbe().token_logits(X)
    with pytest.raises(ValueError):
        p.token_logits(X[:, :3])


def test_score_response_is_masked_mean_of_token_logits():
    X, y, _, _ = _gaussians(seed=5, d=8)
    probe = DeceptionProbe(C=0.1).fit(X, y)
    rng = np.random.default_rng(6)
    acts = rng.normal(size=(3, 5, 8))
    mask = np.array([[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]], bool)
    got = probe.score_response(acts, mask)
    tl = probe.token_logits(acts)
    want = [tl[i][mask[i]].mean() for i in range(3)]
    assert np.allclose(got, want)
    # padding (masked-out positions) cannot change the score
    acts2 = acts.copy()
    acts2[~mask] = 1e6
    assert np.allclose(probe.score_response(acts2, mask), got)
    with pytest.raises(ValueError):
        masked_mean(torch.ones(2, 3), torch.tensor([[1, 0, 0], [0, 0, 0]]))


@pytest.mark.parametrize("n", [1, 7, 99, 100, 101, 350, 1000])
@pytest.mark.parametrize("fpr", [0.0, 0.01, 0.05, 0.2])
def test_threshold_calibration_bound(n, fpr):
    rng = np.random.default_rng(n)
    s = np.round(rng.normal(size=n), 1)  # with ties
    tau = calibrate_threshold(s, fpr)
    assert (s > tau).sum() <= int(np.ceil(fpr * n))
    assert (s > tau).sum() <= int(np.floor(fpr * n + 1e-9))
    # tau is a control score: nothing smaller works with the same bound on distinct scores
    assert tau in s


def test_threshold_bad_input():
    with pytest.raises(ValueError):
        calibrate_threshold([], 0.01)
    with pytest.raises(ValueError):
        calibrate_threshold([0.1, np.nan], 0.01)
    with pytest.raises(ValueError):
        calibrate_threshold([0.1], 1.5)


def _core_model(seed=0):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=20, d_model=16, n_layers=3, n_heads=2, max_len=16)).eval()


def test_gather_activations_core_matches_hidden_states():
    model = _core_model()
    ids = torch.randint(0, 20, (5, 9))
    am = torch.ones(5, 9, dtype=torch.long)
    am[1, 6:] = 0
    acts = gather_activations(model, ids, layers=[1, 3], attention_mask=am, batch_size=2)
    hs = model(ids, attention_mask=am, output_hidden_states=True).hidden_states
    for L in (1, 3):
        assert torch.allclose(acts[L], hs[L], atol=1e-6)
    assert not model.blocks[0]._forward_hooks  # hooks removed
    with pytest.raises(ValueError):
        gather_activations(model, ids, layers=[0])


def test_steering_hook_core_exact_and_removed():
    model = _core_model(1)
    ids = torch.randint(0, 20, (2, 7))
    base = model(ids, output_hidden_states=True)
    v = torch.randn(16)
    with SteeringHook(model, 2, v, alpha=0.0):
        same = model(ids).logits
    assert torch.equal(same, base.logits)  # alpha = 0: bit-identical
    with SteeringHook(model, 2, v, alpha=1.5):
        st = model(ids, output_hidden_states=True)
        acts = gather_activations(model, ids, layers=[2])[2]
    assert torch.allclose(st.hidden_states[2] - base.hidden_states[2], 1.5 * v.expand(2, 7, 16), atol=1e-5)
    assert torch.allclose(acts, st.hidden_states[2], atol=1e-6)
    assert torch.allclose(st.hidden_states[1], base.hidden_states[1])  # earlier layer untouched
    assert not torch.allclose(st.logits, base.logits)
    assert torch.equal(model(ids).logits, base.logits)  # gone after the context
    with pytest.raises(RuntimeError):
        with SteeringHook(model, 2, v, alpha=1.0):
            raise RuntimeError("boom")
    assert torch.equal(model(ids).logits, base.logits)  # gone after an exception too
    with pytest.raises(ValueError):
        SteeringHook(model, 4, v)


def test_hf_gather_and_steering():
    pytest.importorskip("transformers")
    from iclr26.core.hf import residual_stream_modules, tiny_random_causal_lm

    model, _ = tiny_random_causal_lm(hidden=16, layers=3, heads=2, seed=0)
    ids = torch.randint(0, 250, (3, 6))
    am = torch.ones_like(ids)
    with torch.no_grad():
        hs = model(input_ids=ids, attention_mask=am, output_hidden_states=True).hidden_states
        base = model(input_ids=ids, attention_mask=am).logits
    before = [set(b._forward_hooks) for b in residual_stream_modules(model)]  # transformers' own hooks
    acts = gather_activations(model, ids, layers=[1, 2], attention_mask=am)
    for L in (1, 2):  # HF hidden_states[L] = output of block L-1 (the last one is after ln_f in GPT-2)
        assert torch.allclose(acts[L], hs[L], atol=1e-5)
    v = torch.randn(16)
    with SteeringHook(model, 2, v, alpha=-0.7):
        st = gather_activations(model, ids, layers=[2], attention_mask=am)[2]
        with torch.no_grad():
            steered = model(input_ids=ids, attention_mask=am).logits
    assert torch.allclose(st - acts[2], -0.7 * v.expand(3, 6, 16), atol=1e-5)
    assert not torch.allclose(steered, base)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, attention_mask=am).logits, base)
    assert [set(b._forward_hooks) for b in residual_stream_modules(model)] == before
    with pytest.raises(ValueError):
        SteeringHook(model, 0, v)


def test_steering_layer0_core_uses_residual_add():
    model = _core_model(2)
    ids = torch.randint(0, 20, (2, 5))
    base = model(ids, output_hidden_states=True).hidden_states[0]
    v = torch.randn(16)
    with SteeringHook(model, 0, v, alpha=2.0):
        h0 = model(ids, output_hidden_states=True).hidden_states[0]
    assert torch.allclose(h0 - base, 2.0 * v.expand(2, 5, 16), atol=1e-6)
    assert not model.interventions


def test_stream_activations_match_gather_and_score_stream(tmp_path):
    """Streaming to disk (float16, probe layer only, forward stopped there) gives the selected tokens of
    gather_activations, and score_stream equals score_response."""
    from iclr26.dishonesty.probe import stream_activations

    model = _core_model(3)
    ids = torch.randint(0, 20, (5, 9))
    am = torch.ones(5, 9, dtype=torch.long)
    am[2, 7:] = 0
    mask = torch.zeros(5, 9, dtype=torch.bool)
    mask[:, 3:6] = True
    mask[0, 6:9] = True
    both = gather_activations(model, ids, layers=[1, 2], attention_mask=am)
    full = both[2]
    acts, off = stream_activations(model, ids, mask, layer=2, path=tmp_path / "a.npy", attention_mask=am, batch_size=2)
    assert acts.dtype == np.float16 and acts.shape == (int(mask.sum()), 16)
    assert off.tolist() == [0, 6, 9, 12, 15, 18]
    got16 = np.asarray(acts, dtype=np.float32)
    assert np.allclose(got16, full[mask].numpy(), atol=2e-3, rtol=2e-3)  # float16 rounding only
    err_right = np.abs(got16 - full[mask].numpy()).max()
    assert err_right < 0.1 * np.abs(got16 - both[1][mask].numpy()).max()  # layer 2, not layer 1
    assert not any(b._forward_hooks for b in model.blocks)  # hook removed
    X = np.random.default_rng(0).normal(size=(40, 16))
    probe = DeceptionProbe().fit(X, np.repeat([0, 1], 20))
    want = probe.score_response(full, mask)
    got = probe.score_stream(acts, off, chunk=4)
    assert np.allclose(got, want, atol=5e-2)
    exact = [probe.token_logits(np.asarray(acts[a:b], np.float64)).mean() for a, b in zip(off[:-1], off[1:])]
    assert np.allclose(got, exact, rtol=1e-9, atol=1e-12)  # the mean over each row's own tokens
    with pytest.raises(ValueError):
        probe.score_stream(acts, np.array([0, 3, 3]))


def test_encode_dialogues_excludes_the_same_last_tokens():
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_byte_tokenizer
    from iclr26.dishonesty.paper_scale import chat_prompt, encode_dialogues

    tok = tiny_byte_tokenizer()
    prompts = [chat_prompt(tok, "hi"), chat_prompt(tok, "hello there")]
    ids, am, mask = encode_dialogues(tok, prompts, ["abcdefgh", "xyz"], exclude_last=5, pad_id=tok.pad_token_id)
    assert mask[0].sum() == 3 and mask[1].sum() == 1  # 8 - 5, and at least one token kept
    p0 = len(prompts[0])
    assert mask[0].nonzero().flatten().tolist() == [p0, p0 + 1, p0 + 2]
    assert tok.decode(ids[0, mask[0]]) == "abc"
    assert am.sum(1).tolist() == [len(prompts[0]) + 8, len(prompts[1]) + 3]
