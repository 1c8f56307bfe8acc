"""The LLM agent against a tiny OpenAI-compatible server on 127.0.0.1 started by the test."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from sman_helpers import tiny_corpus, tiny_task

from iclr26.sman_bench.corpus import UIElement
from iclr26.sman_bench.evaluate import Action, Observation, multi_path_episode, single_path_episode
from iclr26.sman_bench.llm_agent import LLMAgent, LLMConfig, build_prompt, parse_action


class _Server:
    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append((self.path, json.loads(self.rfile.read(n)), self.headers.get("Authorization")))
                r = outer.replies.pop(0) if outer.replies else "Action: back()"
                if r == "HTTP500":
                    self.send_response(500)
                    self.end_headers()
                    return
                body = (
                    r.encode()
                    if r.startswith("RAW:")
                    else json.dumps({"choices": [{"message": {"role": "assistant", "content": r}}]}).encode()
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = HTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _obs():
    els = [
        UIElement("click", "Red Lamp", ((0, 0), (10, 10))),
        UIElement("input", "Filter", None),
        UIElement("scroll", "list", ((0, 0), (100, 100))),
        UIElement("click", "Home", ((0, 0), (5, 5))),
    ]
    return Observation("Open the Red Lamp.", "Select Red Lamp.", els, "r", "r", qa_slots=["item"])


def test_parse_action_valid_and_malformed():
    o = _obs()
    assert parse_action("Observation: x\nThought: y\nAction: click(c2)\nSummary: z", o) == Action("click", 3)
    assert parse_action('Action: input(i1, "red")', o) == Action("input", 1, text="red")
    assert parse_action('Action: scroll(s1, "up")', o) == Action("scroll", 2, direction="up")
    assert parse_action("Action: back()", o) == Action("back")
    assert parse_action('Action: ask("item")', o) == Action("ask", text="item")
    for bad in (
        "",
        "Action: click(c9)",
        "Action: tap(c1)",
        "Action: input(i1)",
        'Action: scroll(s1, "diag")',
        "no action here",
        None,
        42,
        "Action: click(",
        "Action: ask()",
    ):
        assert parse_action(bad, o).kind == "invalid", bad
    p = build_prompt(o)
    assert 'c1: click "Red Lamp"' in p and "i1: input" in p and "s1: scroll" in p and "Current step" in p


def test_llm_agent_against_local_server():
    replies = [
        "Action: click(c1)",
        "garbage without an action",
        "RAW:not json at all",
        "HTTP500",
        "Action: click(c1)",
        "Action: click(c1)",
    ]
    with _Server(replies) as srv:
        agent = LLMAgent(LLMConfig(srv.url, model="tiny", api_key="k", timeout_s=5))
        c, t = tiny_corpus(), tiny_task()
        r = multi_path_episode(c, t, agent, max_rounds=6)
        assert r["n_actions"] == 6 and 0 <= r["step_reward"] <= 1
        assert r["errors"] >= 3  # malformed text, non-JSON body and HTTP 500 became invalid actions
        path, body, auth = srv.requests[0]
        assert path == "/v1/chat/completions" and body["model"] == "tiny" and body["temperature"] == 0.0
        assert body["max_tokens"] == 300 and auth == "Bearer k"
        assert body["messages"][0]["role"] == "system" and "Open A, X and Z." in body["messages"][1]["content"]
        assert len(agent.errors) == 2
        # a perfect script through the server: click A (c1 on r), X (c1 on r_0), Z (c1 on r_0_3)
        srv.replies[:] = ["Action: click(c1)"] * 3
        assert single_path_episode(c, t, agent)["success"] == 1.0


def test_llm_agent_unreachable_and_bad_url():
    agent = LLMAgent(LLMConfig("http://127.0.0.1:9/v1", timeout_s=1))  # closed local port
    a = agent.act(_obs())
    assert a.kind == "invalid" and agent.errors
    with pytest.raises(ValueError):
        LLMConfig("ftp://127.0.0.1/v1")
