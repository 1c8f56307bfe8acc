"""core.hf.generate_left_padded: pure greedy is the per-prompt argmax whatever the checkpoint's generation_config
carries, left padding does not change a prompt's continuation, EOS cuts, the same seed gives the same samples;
and the dishonesty paths (real and paper scale) decode through it."""

import pytest
import torch

from iclr26.core.hf import generate_left_padded, left_pad, tiny_random_causal_lm


@pytest.fixture(scope="module")
def penalised():
    pytest.importorskip("transformers")
    model, tok = tiny_random_causal_lm(arch="llama", seed=5)
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.top_k = 2
    return model, tok


def argmax_continuation(model, prompt, n):
    ids = torch.tensor([prompt])
    for _ in range(n):
        with torch.no_grad():
            nxt = model(ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
    return ids[0, len(prompt) :].tolist()


def test_left_pad_layout():
    ids, am = left_pad([[5, 6, 7], [9]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]] and am.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_greedy_is_the_argmax_of_each_prompt_despite_padding_and_config(penalised):
    model, _ = penalised
    prompts = [[72, 101, 108, 108, 111], [87, 111], [65, 66, 67, 68]]
    got = generate_left_padded(
        model, prompts, pad_id=256, eos_id=None, max_new_tokens=8, temperature=0.0, seed=0, batch_size=3
    )
    assert got == [argmax_continuation(model, p, 8) for p in prompts]


def test_eos_cuts_and_sampling_is_seeded(penalised):
    model, _ = penalised
    prompts = [[72, 101, 108], [87, 111, 114, 108, 100]]
    first = generate_left_padded(
        model, prompts, pad_id=256, eos_id=None, max_new_tokens=6, temperature=1.0, seed=3, batch_size=1
    )
    again = generate_left_padded(
        model, prompts, pad_id=256, eos_id=None, max_new_tokens=6, temperature=1.0, seed=3, batch_size=1
    )
    assert first == again
    eos = first[0][2]
    cut = generate_left_padded(
        model, prompts, pad_id=256, eos_id=eos, max_new_tokens=6, temperature=1.0, seed=3, batch_size=1
    )
    assert cut[0] == first[0][: first[0].index(eos) + 1]


def test_dishonesty_paper_scale_greedy_ignores_the_checkpoint_generation_config(penalised):
    from iclr26.dishonesty.paper_scale import hf_generate

    model, tok = penalised
    prompts = [[72, 101, 108, 108, 111], [87, 111]]
    got = hf_generate(model, tok, prompts, max_new_tokens=8, temperature=0.0, batch_size=2, pad_id=256, seed=0)
    want = [argmax_continuation(model, p, 8) for p in prompts]
    eos = tok.eos_token_id
    want = [w[: w.index(eos) + 1] if eos in w else w for w in want]
    assert got == want
