"""The paper path's entropy measurement on the real SmolLM2-135M-Instruct (offline): H_T of the model's own
rollouts rises with the sampling temperature and is far below log|V| at low T (a trained model's peaked
distribution; random weights sit near log|V| = 10.8 at every T)."""

import pytest

from iclr26.acereason.paper import _prompt_text, hf_rollout_entropy

pytestmark = pytest.mark.real


def test_entropy_rises_with_temperature_on_the_real_model(smollm2):
    model, tok = smollm2
    prompts = [_prompt_text(tok, "What is 12 + 7?")]
    assert prompts[0].startswith("<|im_start|>system")  # the chat template was applied
    low, high = (hf_rollout_entropy(model, tok, prompts, t, 2, 8, 0) for t in (0.3, 1.5))
    assert low < 1.0 < high, (low, high)
