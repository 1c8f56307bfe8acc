"""core.hf.pure_generation_kwargs: greedy means the argmax at every step whatever the model's own
generation_config carries (a repetition penalty or an n-gram ban there changes 'greedy' tokens)."""

import pytest
import torch

from iclr26.core.hf import pure_generation_kwargs, tiny_random_causal_lm


def argmax_decode(model, ids, n):
    out = ids.clone()
    for _ in range(n):
        with torch.no_grad():
            nxt = model(out).logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], 1)
    return out[:, ids.shape[1] :]


@pytest.fixture(scope="module")
def penalised():
    pytest.importorskip("transformers")
    model, tok = tiny_random_causal_lm(arch="llama", seed=3)
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.top_k = 3
    model.generation_config.eos_token_id = None
    return model, tok


def test_pure_greedy_is_the_argmax_despite_the_models_generation_config(penalised):
    model, _ = penalised
    ids = torch.tensor([[72, 101, 108, 108, 111]])
    want = argmax_decode(model, ids, 12)
    got = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, **pure_generation_kwargs())
    assert torch.equal(got[:, ids.shape[1] :], want)
    # the model's config alone changes the tokens: what the explicit neutral values protect against
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert not torch.equal(plain[:, ids.shape[1] :], want)


def test_pure_sampling_has_no_truncation(penalised):
    kw = pure_generation_kwargs(do_sample=True, temperature=0.7)
    assert kw["top_k"] == 0 and kw["top_p"] == 1.0 and kw["temperature"] == 0.7 and kw["repetition_penalty"] == 1.0
    with pytest.raises(ValueError):
        pure_generation_kwargs(do_sample=True, temperature=0.0)
