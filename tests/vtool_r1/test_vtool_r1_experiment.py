"""End to end: the smoke scale, the paper-scale text path with a stub policy, the judge client."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from PIL import Image

from iclr26.core.config import ConfigError, config_docs, flatten, format_config
from iclr26.core.experiment import ExperimentError, RunContext, run_experiment
from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.config import RunConfig, config_for
from iclr26.vtool_r1.experiment import EXPERIMENT
from iclr26.vtool_r1.hf_policy import VToolEnv, load_refocus, two_round_rollout
from iclr26.vtool_r1.reward import JudgeClient


def test_smoke_run_writes_every_claim(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    for c in res["claims"]:
        assert c["measured"] is not None and isinstance(c["passed"], bool)
    acc = res["metrics"]["accuracy_pct"]
    assert set(acc) == {"pure", "prompted", "text_grpo", "vtool"}
    assert all(0 <= acc[a]["mean"] <= 100 for a in acc)
    for name in ("accuracy_vs_steps", "tool_rate_by_type", "example_rollout"):
        assert (rec.out_dir / f"{name}.png").exists()
    gate = res["metrics"]["gate"]
    read = gate["read_tallest_on_I2_pct"]
    assert len(read["per_seed"]) == 1 and 0 <= read["mean"] <= 100 and gate["min_pct"] == 80.0
    assert gate["passed"] == (read["mean"] >= 80.0)
    assert ("Gate PASSED" if gate["passed"] else "Gate FAILED") in (rec.out_dir / "report.md").read_text()


def test_gate_is_the_mean_over_seeds_against_the_threshold():
    from iclr26.vtool_r1.experiment import _gate

    sc = config_for("small")
    assert _gate(sc, [{"gate_read_I2_max": v} for v in (0.9, 0.7, 0.85)])["passed"]  # mean 81.7
    assert not _gate(sc, [{"gate_read_I2_max": v} for v in (0.9, 0.7, 0.78)])["passed"]  # mean 79.3
    assert _gate(sc, [{"gate_read_I2_max": 0.8}])["passed"]


@pytest.mark.slow
def test_small_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.results["claims"]) == 4


def _rows(tmp_path):
    s = make_chart(np.random.default_rng(0), "VAL")
    Image.fromarray(s.image).save(tmp_path / "c.png")
    row = {
        "figure_path": "c.png",
        "question": s.question,
        "answer": s.answer,
        "metadata": json.dumps({"type": "v_bar", "x_values_bbox": s.bboxes}),
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    return s


def test_paper_path_with_a_stub_policy(tmp_path):
    s = _rows(tmp_path)
    rows = load_refocus(tmp_path / "d.jsonl")
    assert rows[0]["metadata"]["columns_bbox"] == rows[0]["metadata"]["rows_bbox"] == s.bboxes
    seen = []

    def policy(messages):
        seen.append(messages)
        if len(messages) == 1:  # round 1: call the tool
            return (
                "THOUGHT 0: focus.\nACTION 0:\n```python\n"
                f"img = focus_on_columns_with_mask(image_1, ['{s.args[0]}'], columns_bbox)\n```"
            )
        return f"ANSWER: it is {s.answer}. FINAL ANSWER: {s.answer}. TERMINATE"

    out = two_round_rollout(policy, rows[0], VToolEnv(version="v2"))
    assert out["kind"] == "tool" and out["tool_ok"] and out["reward"] == 1.0
    last = seen[-1]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    edited = [c["image"] for c in last[2]["content"] if c["type"] == "image"][0]
    assert (np.asarray(edited) != s.image).any()
    # hostile round-1 code: a failed tool step, v2 still answers in round 2
    hostile = "```python\nimport os\ndisplay(image_1)\n```"
    out2 = two_round_rollout(lambda m: hostile if len(m) == 1 else "FINAL ANSWER: 0.", rows[0], VToolEnv(version="v2"))
    assert out2["kind"] == "tool" and not out2["tool_ok"] and out2["reward"] == 0.0


def test_paper_scale_needs_local_paths(tmp_path):
    ctx = RunContext(scale="paper", seeds=(0,), out_dir=tmp_path, show_progress=False, cfg=config_for("paper"))
    with pytest.raises(ExperimentError, match="paper.model_path"):
        EXPERIMENT.run(ctx)
    with pytest.raises(ExperimentError, match="no such file"):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path,
            show_progress=False,
            options={"paper.model_path": str(tmp_path / "nope"), "paper.data_path": str(tmp_path / "d.jsonl")},
        )


def test_judge_client_against_a_stub_server():
    got = {}

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.update(body)
            text = "1" if "Student answer: 7" in body["messages"][1]["content"] else "0"
            data = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        judge = JudgeClient(f"http://127.0.0.1:{srv.server_port}/v1")
        assert judge("q", "7", "7") == 1.0 and judge("q", "7", "8") == 0.0 and judge("q", "7", None) == 0.0
        assert got["temperature"] == 0.0 and got["max_tokens"] == 10
    finally:
        srv.shutdown()


def test_v1_recipe_through_the_typed_config(tmp_path):
    opts = {"rl.version": "v1", "rl.round2_temperature": "0.5", "rl.group_size": "5", "rl.steps": "1"}
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options=opts)
    cfg = rec.results["metrics"]["config"]["rl"]
    assert (cfg["version"], cfg["round2_temperature"], cfg["group_size"], cfg["steps"]) == ("v1", 0.5, 5, 1)
    assert json.loads((rec.out_dir / "config.json").read_text())["config"]["rl"]["version"] == "v1"
    for bad in ({"rl.version": "v3"}, {"version": "v1"}, {"rl.steps": "many"}, {"sft.call_dims": "[1]"}):
        with pytest.raises(ConfigError):
            run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options=bad)


def test_every_setting_is_documented_once():
    """--show-config prints a documentation line for every leaf of the tree, at every scale."""
    import dataclasses

    def undocumented(node, prefix=""):
        docs = config_docs(type(node))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                yield from undocumented(value, f"{prefix}{f.name}.")
            elif not docs.get(f.name):
                yield prefix + f.name

    for scale in ("smoke", "small", "paper"):
        cfg = config_for(scale)
        assert isinstance(cfg, RunConfig) and list(undocumented(cfg)) == []
        assert len(format_config(cfg).splitlines()) == len(list(flatten(cfg)))
    smoke, small = config_for("smoke"), config_for("small")
    assert (smoke.rl.steps, smoke.sft.pure_steps, smoke.n_train) == (3, 60, 400)
    assert (small.rl.steps, small.rl.n_prompts, small.sft.tool_steps, small.n_test) == (136, 16, 800, 600)


def test_batched_rollout_equals_one_by_one_and_runs_the_paper_eval(tmp_path, monkeypatch):
    import iclr26.vtool_r1.hf_policy as H

    s = _rows(tmp_path)
    rows = load_refocus(tmp_path / "d.jsonl") * 3
    rows[1] = dict(rows[1], question="Is it there?")  # a direct answer
    rows[2] = dict(rows[2], question="Break it")  # a failed tool step

    def policy(messages):
        q = next(c["text"] for c in messages[0]["content"] if c["type"] == "text")
        if len(messages) == 1 and "Is it there" in q:
            return f"ACTION 0: No action needed. FINAL ANSWER: {s.answer}. TERMINATE"
        if len(messages) == 1 and "Break it" in q:
            return "```python\nimg = focus_on_columns_with_mask(image_1, [\n```"
        if len(messages) == 1:
            call = f"img = focus_on_columns_with_mask(image_1, ['{s.args[0]}'], columns_bbox)"
            return f"```python\n{call}\ndisplay(img)\n```"
        return f"FINAL ANSWER: {s.answer}. TERMINATE"

    calls = []

    def batch(chats):
        calls.append(len(chats))
        return [policy(c) for c in chats]

    for version in ("v1", "v2"):
        env = VToolEnv(version=version)
        one = [two_round_rollout(policy, r, env) for r in rows]
        assert H.two_round_rollout_batch(batch, rows, env) == one
    assert calls == [3, 1, 3, 2]  # v1: no round 2 after the failed call; v2: round 2 for both calls

    class Stub:
        def __init__(self, *a, **k):
            pass

        def batch(self, chats):
            return batch(chats)

    monkeypatch.setattr(H, "HFPolicy", Stub)
    (tmp_path / "m").mkdir()
    rec = run_experiment(
        EXPERIMENT,
        "paper",
        out_root=tmp_path,
        show_progress=False,
        options={"paper.model_path": str(tmp_path / "m"), "paper.data_path": str(tmp_path / "d.jsonl")},
    )
    assert rec.results["metrics"]["n"] == 1 and rec.results["metrics"]["accuracy_pct"]["tool_use"]["mean"] == 100.0


def test_parquet_rows_in_the_released_format(tmp_path):
    """Rows as the released ReFocus chart parquet holds them: ``images`` = [{"bytes", "path"}], a JSON
    ``metadata`` string with ``x_values_bbox``; read through pyarrow like the jsonl rows."""
    import io

    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    s = _rows(tmp_path)
    buf = io.BytesIO()
    Image.fromarray(s.image).save(buf, format="PNG")
    row = {
        "images": [{"bytes": buf.getvalue(), "path": None}],
        "prompt": s.question,
        "answer": s.answer,
        "metadata": json.dumps({"type": "v_bar", "x_values_bbox": s.bboxes}),
    }
    pq.write_table(pa.Table.from_pylist([row, row]), tmp_path / "d.parquet")
    got, want = load_refocus(tmp_path / "d.parquet", limit=1), load_refocus(tmp_path / "d.jsonl")
    assert len(got) == 1 and got[0]["question"] == s.question and got[0]["answer"] == s.answer
    assert got[0]["metadata"] == want[0]["metadata"] and (np.asarray(got[0]["image"]) == s.image).all()
