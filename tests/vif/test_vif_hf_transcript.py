"""The paper path's chains: each agent reads the whole transcript of earlier answers by default (the paper's
multi-agent chains), the last ``max_msgs`` answers with ``data.context=window``; 0 means none."""

from types import SimpleNamespace

import pytest

from iclr26.vif.config import ViFConfig
from iclr26.vif.hf_run import run_chain


class _Recorder:
    def __init__(self):
        self.prompts = []

    def encode(self, prompt, image):
        self.prompts.append(prompt)
        return prompt

    def logit(self, inputs):
        return 1.0  # always "yes"


ROW = SimpleNamespace(error=None, answer="yes", question="Is there a dog?", image=None, index=0)


@pytest.mark.parametrize("max_msgs,seen_last", [(None, 5), (2, 2), (0, 0), (9, 5)])
def test_agent_reads_the_whole_transcript_or_the_window(max_msgs, seen_last):
    agent = _Recorder()
    correct = run_chain(agent, ROW, 6, ViFConfig(), use_vif=False, seeded=True, max_msgs=max_msgs)
    assert correct == [False, True, True, True, True, True]
    last = agent.prompts[-1]
    assert last.count("answered") == seen_last
    if seen_last:  # the oldest answer kept is the right one: agent 1's forced "no" only when nothing was cut
        assert ("answered: no." in last) == (seen_last == 5)
    assert [p.count("answered") for p in agent.prompts[:3]] == [0, min(1, seen_last), min(2, seen_last)]


@pytest.mark.parametrize("context,expected", [("transcript", None), ("window", 3)])
def test_paper_run_passes_the_context_to_the_chains(tmp_path, monkeypatch, context, expected):
    import json

    from iclr26.core.experiment import run_experiment
    from iclr26.vif import hf_run
    from iclr26.vif.experiment import EXPERIMENT

    seen = {}

    def fake_eval(agent, rows, turns, vcfg, rank=0, world=1, max_msgs="unset"):
        seen["max_msgs"] = max_msgs
        return {"failed": []}

    monkeypatch.setattr(hf_run, "_load_agent", lambda path, device: _Recorder())
    monkeypatch.setattr(hf_run, "evaluate_rows", fake_eval)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = tmp_path / "pope.jsonl"
    data.write_text(json.dumps({"question_id": 1, "image": "a.jpg", "text": "Is there a dog?", "label": "no"}) + "\n")
    opts = {"model_path": str(model), "data_path": str(data), "data.context": context, "data.max_msgs": "3"}
    run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    assert seen["max_msgs"] == expected


@pytest.mark.parametrize("max_msgs,most", [(None, 5), (2, 2)])
def test_evaluate_rows_passes_the_window_to_every_chain(monkeypatch, max_msgs, most):
    from iclr26.vif import hf_run

    monkeypatch.setattr(hf_run, "vif_logit", lambda agent, inputs, vcfg, index: agent.logit(inputs))
    agent = _Recorder()
    out = hf_run.evaluate_rows(agent, [ROW], 6, ViFConfig(), max_msgs=max_msgs)
    assert out["failed"] == [] and len(agent.prompts) == 4 * 6  # text/vif x seeded/natural
    assert max(p.count("answered") for p in agent.prompts) == most
