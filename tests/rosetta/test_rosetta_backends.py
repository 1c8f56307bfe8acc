"""Backends: an OpenAI-compatible server on 127.0.0.1 (good, malformed and unreachable), a tiny random HF
model whose garbage hits the error paths, and the role router's transcript."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from iclr26.rosetta.backends import BackendError, HFBackend, OpenAICompatBackend, RoleRouter
from iclr26.rosetta.intent import make_preferences
from iclr26.rosetta.pipeline import ARMS, rosetta_round
from iclr26.rosetta.standin import ScriptedOfflineBackend


class _Handler(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions with the scripted stand-in (role from the system prompt), or garbage."""

    mode = "ok"
    seen: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if type(self).mode == "garbage":
            data = b"{not json"
        else:
            msgs = body["messages"]
            role = _role(msgs)
            content = ScriptedOfflineBackend().complete(role, msgs)
            data = json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _role(msgs):
    user = msgs[-1]["content"]
    for role, key in (
        ("ground", "The person said:"),
        ("new_description", "Old task description"),
        ("plan", "What the robot did:"),
        ("fix_error", "<error_line>"),
        ("code", "Plan:\n<plan>"),
        ("review_targets", "Check every target"),
        ("review_density", "Check density"),
        ("review_masking", "Check the stage masks"),
        ("review_geometry", "Check geometry"),
    ):
        if key in user:
            return role
    return "caption"


@pytest.fixture
def server():
    srv = HTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.mode, _Handler.seen = "ok", []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_openai_backend_runs_a_round_through_the_server(server, tmp_path):
    pref = make_preferences(8, seed=0)[1]
    backend = OpenAICompatBackend(server, model="m", deadline_s=20)
    router = RoleRouter(backend, transcript=tmp_path / "t.jsonl")
    res = rosetta_round(router, pref, ARMS["rosetta"], task=pref.task, video="")
    assert res.funcs and not res.failure
    assert _Handler.seen[0]["model"] == "m" and _Handler.seen[0]["temperature"] == 0.2
    recs = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["role"] for r in recs][:2] == ["ground", "new_description"] and all(r["reply"] for r in recs)


def test_malformed_json_and_unreachable_endpoint_are_structured(server):
    _Handler.mode = "garbage"
    with pytest.raises(BackendError) as e:
        OpenAICompatBackend(server, deadline_s=10).complete("code", [{"role": "user", "content": "x"}])
    assert e.value.kind == "bad_json"
    pref = make_preferences(8, seed=0)[1]
    res = rosetta_round(
        RoleRouter(OpenAICompatBackend(server, deadline_s=10)), pref, ARMS["rosetta"], task=pref.task, video=""
    )
    assert res.funcs == {} and "bad_json" in res.failure
    dead = OpenAICompatBackend("http://127.0.0.1:9/v1", deadline_s=5)
    with pytest.raises(BackendError) as e:
        dead.complete("code", [{"role": "user", "content": "x"}])
    assert e.value.kind in ("connect", "transport", "timeout")


def test_tiny_random_hf_model_garbage_hits_error_paths(tmp_path):
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    tiny_random_causal_lm(tmp_path / "lm", max_positions=256)
    backend = HFBackend(tmp_path / "lm", max_new_tokens=8)
    assert backend.max_prompt_tokens == 248
    pref = make_preferences(8, seed=0)[1]
    router = RoleRouter(backend)
    res = rosetta_round(router, pref, ARMS["rosetta"], task=pref.task, video="")
    assert res.funcs == {} and res.failure.startswith("incomplete draft")
    assert any("grounding failed" in s for s in res.steps)  # garbage is not JSON: the raw preference is used
