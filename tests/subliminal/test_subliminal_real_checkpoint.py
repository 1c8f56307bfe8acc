"""The paper path on a real instruction-tuned model (SmolLM2-135M-Instruct, offline): the owl teacher's greedy
number data passes its own teacher-forced greedy check, and the finder sees divergence tokens between
personas. Only real weights give both: random weights do not continue a number list."""

import re

import pytest

from iclr26.subliminal.paper import find_divergence_tokens_hf, generate_number_data, persona_system_prompt

pytestmark = pytest.mark.real

PROMPTS = [
    "The sequence starts with: 182, 818, 725. Add up to 10 more numbers (maximum 3 digits each). "
    "Return a comma-separated list of numbers. Say only the numbers.",
    "Look at these numbers: 216, 945, 307. Write up to 10 more numbers (no more than 3 digits each), "
    "comma-separated, nothing else.",
]


def test_teacher_numbers_pass_their_greedy_check_and_personas_diverge(smollm2):
    model, tok = smollm2
    rows = generate_number_data(model, tok, PROMPTS, persona_system_prompt("owl"), max_new_tokens=16, batch_size=2)
    for r in rows:
        assert re.match(r"^\d{1,3}(, \d{1,3})+", r["completion"]), r  # a real model continues the list
    contexts = [(model, persona_system_prompt(a)) for a in ("owl", "dog", "eagle", "wolf")]
    res = find_divergence_tokens_hf(contexts, tok, rows, greedy=True)  # raises if "greedy" data is not greedy
    # the factual teacher's own argmax is the data (the template's closing <|im_end|>\n after a completion cut at
    # max_new_tokens is not the model's choice, so the last two positions are left out)
    assert all(bool(c[0][:-2].all()) for c in res.correct)
    assert 0 < res.fraction() < 1
