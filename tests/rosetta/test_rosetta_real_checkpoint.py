"""ROSETTA's LLM roles on the real SmolLM2-135M-Instruct (``backend.kind=hf``): the chat template is applied, greedy
decoding answers a factual question as only a trained model does, and the whole paper path (annotator CSV ->
grounding, plan, code) runs end to end and ends in a structured failure or functions, never a crash. The 135M
model writes poor reward code: that is expected; the pipeline must fail cleanly."""

import json

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.rosetta import paper
from iclr26.rosetta.backends import HFBackend, RoleRouter
from iclr26.rosetta.config import BackendConfig
from iclr26.rosetta.experiment import EXPERIMENT

HEADER = '"Timestamp","Score","What\'s your name?","Which video?","Describe the video","Give feedback."\n'
ROW = '1/15/2025 21:05:10,4,demo,-SphereAndBins-aa,"Put the red cube into bin1.",Put it in the other bin.\n'


def test_hf_path_takes_a_registered_name_and_refuses_a_missing_folder(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(paper, "HFBackend", lambda path, max_new_tokens: seen.append(path) or object())
    monkeypatch.setattr("iclr26.core.checkpoints.local_checkpoint", lambda name: str(tmp_path))
    paper.make_router(BackendConfig(kind="hf", hf_path="smollm2-135m-instruct"))
    assert seen == [str(tmp_path)]  # the name resolved to its folder before any existence check
    for bad in ("", str(tmp_path / "missing")):
        with pytest.raises(ExperimentError, match="backend.hf_path"):
            paper.make_router(BackendConfig(kind="hf", hf_path=bad))


@pytest.mark.real
def test_real_model_answers_through_its_chat_template(smollm2):
    model, tok = smollm2
    backend = HFBackend(model=model, tokenizer=tok, max_new_tokens=12)
    prompt = backend._prompt([{"role": "user", "content": "What is the capital of France?"}])
    assert prompt.startswith("<|im_start|>") and prompt.rstrip().endswith("<|im_start|>assistant")
    assert "Paris" in backend.complete("caption", [{"role": "user", "content": "What is the capital of France?"}])


@pytest.mark.real
def test_paper_path_end_to_end_on_the_real_model_fails_cleanly(smollm2, smollm2_dir, monkeypatch, tmp_path):
    model, tok = smollm2
    loaded = []

    def shared_backend(path, max_new_tokens):  # the session's model, not a second load; the path is checked
        loaded.append(path)
        return HFBackend(model=model, tokenizer=tok, max_new_tokens=max_new_tokens)

    monkeypatch.setattr(paper, "HFBackend", shared_backend)
    monkeypatch.setattr("iclr26.core.checkpoints.local_checkpoint", lambda name: str(smollm2_dir))
    (tmp_path / "preference.csv").write_text(HEADER + ROW, encoding="utf-8")
    opts = {
        "feedback_csv": str(tmp_path / "preference.csv"),
        "backend.kind": "hf",
        "backend.hf_path": "smollm2-135m-instruct",
        "backend.max_new_tokens": "16",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    assert loaded == [str(smollm2_dir)]
    (row,) = [json.loads(x) for x in (rec.out_dir / "rewards.jsonl").read_text().splitlines()]
    # 16 tokens cannot hold both reward functions: a structured failure with its reason, the run completes
    assert row["functions"] == {} and row["failure"].startswith("incomplete draft")
    calls = [json.loads(x) for x in (rec.out_dir / "transcript.jsonl").read_text().splitlines()]
    replies = [c for c in calls if "reply" in c]
    assert [c["role"] for c in replies] == ["ground", "new_description", "plan", "code"]
    assert all(c["error"] is None and c["reply"].strip() for c in replies)
    reply = {c["role"]: c["reply"] for c in replies}
    # what a trained model does and a random one does not: JSON when asked for JSON, Python when asked for code
    assert reply["ground"].lstrip().startswith("{")
    assert any(k in reply["code"].split() for k in ("import", "def", "return")), reply["code"]
    metrics = rec.results["metrics"]
    assert metrics["usable_rewards"] == 0 and metrics["rows"] == 1


def test_router_records_a_failing_local_model_as_a_failed_call():
    class Broken:
        name = "hf:broken"

        def complete(self, role, messages):
            raise RuntimeError("CUDA out of memory")

    router = RoleRouter(Broken())
    with pytest.raises(Exception, match="RuntimeError"):
        router.complete("code", [{"role": "user", "content": "x"}])
    assert router.records[-1]["error"]["kind"] == "RuntimeError"


def test_hf_backend_is_pure_greedy_whatever_the_checkpoints_generation_config():
    """A checkpoint's generation_config (repetition penalty, n-gram ban, top-k) must not change the greedy reply."""
    torch = pytest.importorskip("torch")
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(arch="llama", seed=3)
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.top_k = 3
    model.generation_config.eos_token_id = None
    backend = HFBackend(model=model, tokenizer=tok, max_new_tokens=12)
    messages = [{"role": "user", "content": "Hello"}]
    ids = tok(backend._prompt(messages), return_tensors="pt", add_special_tokens=not backend._templated)["input_ids"]
    out = ids
    for _ in range(12):  # the argmax at every step
        with torch.no_grad():
            out = torch.cat([out, model(out).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert backend.complete("code", messages) == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
