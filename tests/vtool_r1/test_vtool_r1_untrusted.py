"""Untrusted model output and an untrusted judge server: the parsers never raise on any string and run in
linear time; the judge turns every transport or parse failure into a counted heuristic fallback."""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iclr26.vtool_r1.hf_policy import VToolEnv
from iclr26.vtool_r1.model import VOCAB, answer_text, detokenize_round1
from iclr26.vtool_r1.parser import MAX_CODE_CHARS, ParsedAction, parse_action, trim_to_action_end
from iclr26.vtool_r1.reward import (
    JudgeClient,
    exact_match_reward,
    extract_final_answer,
    heuristic_reward,
    official_final_answer,
    refocus_score,
)

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _repeat(pieces):
    """Adversarial text: up to 12 runs of up to 5000 copies of a piece (quadratic code shows up here)."""
    return st.lists(st.tuples(st.sampled_from(pieces), st.integers(1, 5000)), max_size=12).map(
        lambda parts: "".join(p * n for p, n in parts)
    )


CODE_PIECES = [
    "```python\n",
    "```py\n",
    "```",
    "\n",
    " ",
    "-",
    "+",
    "~",
    "not ",
    "(",
    ")",
    "[",
    "]",
    "{",
    "lambda:",
    "display(",
    "image_1",
    "focus_on_columns_with_mask(",
    "columns_bbox",
    "x = ",
    "1",
    "'",
    '"',
    "\\",
    "if 1:\n",
    "    ",
    "\x00",
    "\ufeff",
    "f'{",
    "}'",
    "**",
    "async ",
    "yield",
    "#",
]
ANSWER_PIECES = [
    "FINAL ANSWER:",
    "ANSWER:",
    "TERMINATE",
    ". ",
    ".",
    " ",
    "\n",
    "\t",
    "\u00a0",
    "||",
    "|||",
    "1",
    "1e308",
    "-",
    ",",
    "%",
    "nan",
    "inf",
    "x",
]


# ------------------------------------------------------------------------------------------ parser
def test_deep_nesting_from_the_issue_is_a_failed_step_not_a_crash():
    deep = "-" * 3000 + "1"
    for text in (f"```python\nimg = {deep}\ndisplay(image_1)\n```", f"```python\ndisplay({deep})\n"):
        p = parse_action(text)
        assert p.kind == "failed" and p.error.startswith("RecursionError"), p.error
    assert parse_action(deep) == ParsedAction("notool")  # no fence: a direct answer
    long_code = "```python\ndisplay(image_1)\n" + "x = 1\n" * (MAX_CODE_CHARS // 6 + 1) + "```"
    p = parse_action(long_code)
    assert p.kind == "failed" and "longer than" in p.error and len(p.code) == MAX_CODE_CHARS
    ok = parse_action("```python\nimg = focus_on_columns_with_mask(image_1, ['a'], columns_bbox)\n```")
    assert ok.kind == "tool" and ok.code.endswith("display(img)\n")


@FUZZ
@given(st.one_of(st.text(max_size=3000), _repeat(CODE_PIECES)), st.sampled_from(["v1", "v2"]))
def test_round1_parser_never_raises(text, version):
    p = parse_action(text, version)
    assert p.kind in ("notool", "tool", "failed")
    if p.kind == "tool":
        compile(p.code, "<fuzz>", "exec", dont_inherit=True)  # only compilable code is handed on
    if p.kind == "failed":
        assert p.error
    t = trim_to_action_end(text)
    assert text.startswith(t)


@FUZZ
@given(st.lists(st.integers(0, len(VOCAB) - 1), max_size=40))
def test_tiny_model_detokenizer_and_parser_never_raise(tokens):
    text = detokenize_round1(tokens)
    assert isinstance(text, str) and isinstance(answer_text(tokens), str)
    assert parse_action(text).kind in ("notool", "tool", "failed")


# ------------------------------------------------------------------------------------------ answers
_OLD_FINAL = re.compile(r"FINAL ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)
_OLD_TERMINATE = re.compile(r"FINAL ANSWER:\s*(.*?)\s*TERMINATE", re.DOTALL)
_OLD_ANSWER = re.compile(r"ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)


def _regex_reference(text, version="v2"):
    """The extraction written with the three regexes (quadratic in places): the linear one must agree."""
    m = _OLD_FINAL.search(text)
    if m and m.group(1).strip():
        return re.sub(r"\s*TERMINATE\s*$", "", m.group(1).strip()).strip() or None
    if version == "v1":
        return None
    for pat in (_OLD_TERMINATE, _OLD_ANSWER):
        m = pat.search(text)
        if m and m.group(1).strip():
            return re.sub(r"\s*TERMINATE\s*$", "", m.group(1)).strip().rstrip(".") or None
    return text.strip() or None


@settings(max_examples=200, deadline=None)
@example("FINAL ANSWER:. x TERMINATE y TERMINATE", "v2")
@example("FINAL ANSWER:.\nANSWER: 3. TERMINATE.", "v2")
@example("ANSWER: 7 TERMINATE. FINAL ANSWER:", "v2")
@given(st.lists(st.sampled_from(ANSWER_PIECES), max_size=30).map("".join), st.sampled_from(["v1", "v2"]))
def test_final_answer_extraction_agrees_with_the_regex_version(text, version):
    assert extract_final_answer(text, version) == _regex_reference(text, version)


@FUZZ
@given(st.one_of(st.text(max_size=3000), _repeat(ANSWER_PIECES)), st.text(max_size=50), st.sampled_from(["v1", "v2"]))
def test_answer_extraction_and_scores_never_raise(text, gt, version):
    ans = extract_final_answer(text, version)
    assert ans is None or (isinstance(ans, str) and ans)
    for score in (exact_match_reward(ans, gt), heuristic_reward(ans, gt)):
        assert 0.0 <= score <= 1.0
    assert isinstance(refocus_score(text, gt), float)  # the official score is not bounded (see its tests)


_OFFICIAL_FINAL = re.compile(r"FINAL ANSWER:\s*(.*?)(?=\.\s|\.?$)")  # refocus.py: findall, no DOTALL


@settings(max_examples=300, deadline=None)
@example("FINAL ANSWER: x FINAL ANSWER:\n 7.5 T")  # the 2nd start skips the newline: it matches
@example("FINAL ANSWER: 3\n")  # $ before the final newline
@example("FINAL ANSWER: \u2028 3. ")  # a Unicode blank is a blank for both
@given(st.lists(st.sampled_from([*ANSWER_PIECES, "\n", "\r", "\u2028", "\u00a0", "\t"]), max_size=30).map("".join))
def test_official_answer_regex_agrees_with_the_linear_version(text):
    found = _OFFICIAL_FINAL.findall(text)
    assert official_final_answer(text) == (found[0] if found else None)


def test_official_answer_is_linear_on_many_failing_starts():
    text = "FINAL ANSWER:x" * 40_000 + "\nno answer"  # the regex rescans the line from every start
    t0 = time.perf_counter()
    assert official_final_answer(text) is None
    assert time.perf_counter() - t0 < 1.0


def test_answer_extraction_regressions():
    assert extract_final_answer("FINAL ANSWER: 42. TERMINATE") == "42"
    assert extract_final_answer("FINAL ANSWER:. " + " " * 200_000 + "x") is not None
    assert extract_final_answer("FINAL ANSWER:. " * 50_000) is not None
    assert extract_final_answer("FINAL ANSWER:. x \n" + " " * 200_000 + "TERMINATE") == ". x"  # as the regex
    assert extract_final_answer(None) is None and extract_final_answer(b"FINAL ANSWER: 1") is None


# ------------------------------------------------------------------------------------------ judge
class Stub:
    def __init__(self, behaviour):
        self.requests = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                outer.requests.append(
                    (
                        json.loads(self.rfile.read(int(self.headers["Content-Length"]))),
                        self.headers.get("Authorization"),
                    )
                )
                try:
                    behaviour(self)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(h, body: bytes, status=200, headers=()):
    h.send_response(status)
    for k, v in headers:
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _content(text):
    return json.dumps({"choices": [{"message": {"content": text}}]}).encode()


def _drip(h):  # 1000 bytes at one byte per 50 ms: under the body cap, far over the deadline
    h.send_response(200)
    h.send_header("Content-Length", "1000")
    h.end_headers()
    for _ in range(1000):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.05)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "behaviour, error",
    [
        (_drip, "timeout"),
        (lambda h: _reply(h, _content("1" * 5000)), "too_large"),
        (lambda h: _reply(h, b"", 307, [("Location", "http://localhost:9/v1/chat/completions")]), "redirect"),
        (lambda h: _reply(h, b"{oops"), "bad_json"),
        (lambda h: _reply(h, b'{"choices": [{"message": {}}]}'), "bad_schema"),
        (lambda h: _reply(h, _content("maybe")), "bad_reply"),
        (lambda h: _reply(h, b"overloaded", 503), "http_status"),
    ],
)
def test_judge_failures_fall_back_to_the_heuristic_and_are_counted(behaviour, error):
    with Stub(behaviour) as srv:
        judge = JudgeClient(srv.url, timeout_s=0.5, max_body_bytes=2000, api_key="sk-j")
        v = judge.verdict("q", "7", "7")
        assert not v.ok and v.error == error, v
        assert judge("q", "7", "7") == 1.0 and judge("q", "7", "8") == 0.0  # the heuristic's scores
        assert len(judge.failures) == 2 and judge.failures[0].startswith(error)
    assert srv.requests[0][1] == "Bearer sk-j" and "sk-j" not in repr(judge)


def test_judge_ok_unreachable_and_the_env_reward():
    with Stub(lambda h: _reply(h, _content("0"))) as srv:  # the judge says 0 where the heuristic says 1
        judge = JudgeClient(srv.url)
        assert judge.verdict("q", "7", "7").score == 0.0
        assert VToolEnv(judge=judge).reward("q", "FINAL ANSWER: 7.", "7") == 0.0 and judge.failures == []
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    dead = JudgeClient(f"http://127.0.0.1:{port}/v1", timeout_s=5)
    assert VToolEnv(judge=dead).reward("q", "FINAL ANSWER: 7.", "7") == 1.0
    assert dead.failures[0].startswith("connect")
    with pytest.raises(ValueError):
        JudgeClient("file:///etc/passwd")
