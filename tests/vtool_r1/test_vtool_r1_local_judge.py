"""The LLM judge on a local causal LM (``paper.judge_model_path``), end to end on the real SmolLM2-135M-Instruct:
the chat template is applied and the reply is the digit the prompt asks for; failures fall back to the heuristic
and are counted; decoding is pure greedy whatever the checkpoint's generation_config says."""

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.vtool_r1 import hf_policy
from iclr26.vtool_r1.experiment import EXPERIMENT
from iclr26.vtool_r1.reward import LocalJudge, judge_messages


@pytest.mark.real
def test_real_model_judges_with_a_digit(smollm2):
    model, tok = smollm2
    judge = LocalJudge(model=model, tokenizer=tok, max_tokens=10)
    v = judge.verdict("How many bars are above 50?", "3", "3")
    # a trained model answers the instruction "Reply with a single digit" with a digit first (random weights do not)
    assert v.ok and v.reply.lstrip()[:1] in ("0", "1"), v
    assert judge("How many bars are above 50?", "3", "3") == v.score and judge.failures == []
    broken = LocalJudge(model=model, tokenizer=tok)
    broken.tokenizer = None
    assert broken("q", "7", "7") == 1.0 and broken.failures[0].startswith("local_model")  # heuristic, counted


def test_local_judge_is_pure_greedy_whatever_the_generation_config(penalised_chat_lm):
    torch = pytest.importorskip("torch")
    model, tok = penalised_chat_lm
    enc = tok.apply_chat_template(
        judge_messages("q", "7", "7"), add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    ids = start = enc["input_ids"]
    for _ in range(6):  # the argmax at every step
        with torch.no_grad():
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    want = tok.decode(ids[0, start.shape[1] :], skip_special_tokens=True)
    assert LocalJudge(model=model, tokenizer=tok, max_tokens=6).verdict("q", "7", "7").reply == want


def test_paper_scale_builds_the_local_judge_from_a_registered_name(monkeypatch, tmp_path):
    data = tmp_path / "refocus.jsonl"
    data.write_text("")
    monkeypatch.setattr("iclr26.core.checkpoints.local_checkpoint", lambda name: str(tmp_path))
    seen = []

    class Stop(Exception):
        pass

    def fake_judge(path, device="cpu"):
        seen.append(path)
        raise Stop

    monkeypatch.setattr(hf_policy, "LocalJudge", fake_judge)
    opts = {"paper.model_path": str(tmp_path), "paper.data_path": str(data)}
    with pytest.raises(Stop):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path / "runs",
            show_progress=False,
            options={**opts, "paper.judge_model_path": "smollm2-135m-instruct"},
        )
    assert seen == [str(tmp_path)]
    with pytest.raises(ExperimentError, match="set one judge"):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path / "runs",
            show_progress=False,
            options={**opts, "paper.judge_model_path": "x", "paper.judge_api_base": "http://127.0.0.1:9/v1"},
        )
