"""The teacher's "greedy" number data is pure greedy (the argmax at each step), as the official script passes
it: nothing from the model's generation_config (here a repetition penalty and an n-gram ban) may change it."""

import pytest
import torch

from iclr26.subliminal.paper import generate_number_data

TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_greedy_teacher_data_is_the_argmax_whatever_the_generation_config():
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(arch="llama", seed=5)
    tok.chat_template = TEMPLATE
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.eos_token_id = None
    prompts = ["1, 2, 3", "seven"]
    rows = generate_number_data(model, tok, prompts, "sys", strategy="greedy", max_new_tokens=10, batch_size=2)
    for p, row in zip(prompts, rows, strict=True):
        text = tok.apply_chat_template(
            [{"role": "system", "content": "sys"}, {"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        for _ in range(10):
            with torch.no_grad():
                ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
        want = tok.decode(ids[0, -10:], skip_special_tokens=True)
        assert row["completion"] == want
