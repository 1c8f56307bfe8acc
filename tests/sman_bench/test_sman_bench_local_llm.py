"""The LLM agent on a local model (agent=llm_local), end to end on the real SmolLM2-135M-Instruct: the chat
template is applied, greedy decoding answers as only a trained model does, and whatever it writes becomes an
Action (never a crash); decoding is pure greedy whatever the checkpoint's generation_config says."""

import pytest
from test_sman_bench_llm import _obs

from iclr26.sman_bench import llm_agent
from iclr26.sman_bench.evaluate import ACTION_KINDS
from iclr26.sman_bench.llm_agent import LLMAgent, LocalChat, local_chat
from iclr26.sman_bench.paper import make_agent


def test_agent_needs_exactly_one_backend():
    with pytest.raises(ValueError):
        LLMAgent()
    with pytest.raises(ValueError, match="model_path"):
        make_agent("llm_local", None, {})
    with pytest.raises(ValueError, match="LocalChat needs"):
        LocalChat()


def test_llm_local_loads_its_model_once_per_process(monkeypatch):
    made = []

    class Fake:
        def __init__(self, path, max_tokens, device):
            made.append((path, max_tokens, device))

    monkeypatch.setattr(llm_agent, "LocalChat", Fake)
    monkeypatch.setattr(llm_agent, "_LOCAL", {})
    a = make_agent("llm_local", None, {"model_path": "smollm2-135m-instruct", "max_tokens": 32})
    b = make_agent("llm_local", None, {"model_path": "smollm2-135m-instruct", "max_tokens": 32})
    assert made == [("smollm2-135m-instruct", 32, "cpu")] and a.chat_fn is b.chat_fn
    assert local_chat("smollm2-135m-instruct", 8) is not a.chat_fn  # another length: another entry


@pytest.mark.real
def test_local_model_acts_through_its_chat_template(smollm2):
    model, tok = smollm2
    chat = LocalChat(model=model, tokenizer=tok, max_tokens=12)
    reply = chat([{"role": "user", "content": "What is the capital of France?"}])
    assert reply.ok and "Paris" in reply.content, reply  # a trained model through its chat template
    agent = LLMAgent(chat_fn=LocalChat(model=model, tokenizer=tok, max_tokens=24))
    action = agent.act(_obs())
    assert action.kind in ACTION_KINDS and not agent.errors
    broken = LocalChat(model=model, tokenizer=tok, max_tokens=8)
    broken.tokenizer = None
    bad = broken([{"role": "user", "content": "x"}])
    assert not bad.ok and bad.error == "local_model"
    assert LLMAgent(chat_fn=broken).act(_obs()).kind == "invalid"


def test_local_chat_is_pure_greedy_whatever_the_generation_config(penalised_chat_lm):
    torch = pytest.importorskip("torch")
    model, tok = penalised_chat_lm
    messages = [{"role": "user", "content": "Hello"}]
    out = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = start = out["input_ids"]
    for _ in range(10):  # the argmax at every step
        with torch.no_grad():
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    want = tok.decode(ids[0, start.shape[1] :], skip_special_tokens=True)
    assert LocalChat(model=model, tokenizer=tok, max_tokens=10)([*messages]).content == want
