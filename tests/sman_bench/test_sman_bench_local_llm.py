"""The LLM agent on a local model (agent=llm_local), end to end on the real SmolLM2-135M-Instruct: the chat
template is applied, the reply is words, and whatever it writes becomes an Action (never a crash)."""

import pytest
from test_sman_bench_llm import _obs

from iclr26.sman_bench.evaluate import ACTION_KINDS
from iclr26.sman_bench.llm_agent import LLMAgent, LocalChat, local_chat
from iclr26.sman_bench.paper import make_agent


def test_agent_needs_exactly_one_backend():
    with pytest.raises(ValueError):
        LLMAgent()
    with pytest.raises(ValueError, match="model_path"):
        make_agent("llm_local", None, {})


@pytest.mark.real
def test_local_model_acts_through_its_chat_template(smollm2_dir):
    chat = local_chat(str(smollm2_dir), max_tokens=32)
    assert local_chat(str(smollm2_dir), max_tokens=32) is chat  # loaded once per process
    reply = chat([{"role": "user", "content": "Say hello in one word."}])
    assert reply.ok and any(c.isalpha() for c in reply.content), reply
    agent = make_agent("llm_local", None, {"model_path": str(smollm2_dir), "max_tokens": 32})
    action = agent.act(_obs())
    assert action.kind in ACTION_KINDS and not agent.errors
    broken = LocalChat.__new__(LocalChat)
    broken.model, broken.tokenizer, broken.max_tokens, broken.device = chat.model, None, 8, "cpu"
    bad = broken([{"role": "user", "content": "x"}])
    assert not bad.ok and bad.error == "local_model"
    assert LLMAgent(chat_fn=broken).act(_obs()).kind == "invalid"
