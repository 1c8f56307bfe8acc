"""core.http against hostile local servers on 127.0.0.1: every failure is a ChatResult, never an exception."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iclr26.core.http import ERRORS, ChatClient, ChatResult, parse_chat_body

pytest.importorskip("httpx")

MSGS = [{"role": "user", "content": "hi"}]


def _ok_body(content="hello", finish="stop") -> bytes:
    return json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}]}
    ).encode()


class Stub:
    """A threaded HTTP server whose POST handler is ``behaviour(handler)``; records every request."""

    def __init__(self, behaviour):
        self.requests: list[dict] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append(
                    {
                        "path": self.path,
                        "body": json.loads(self.rfile.read(n)),
                        "auth": self.headers.get("Authorization"),
                    }
                )
                try:
                    behaviour(self)
                except OSError:  # the client hung up (deadline, cap): expected
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _send(h, body: bytes, status=200, headers=None, length=True):
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    if length:
        h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_ok_round_trip_sends_model_params_and_key():
    with Stub(lambda h: _send(h, _ok_body("Action: back()"))) as srv:
        c = ChatClient(srv.url, model="tiny", api_key="sk-secret", deadline_s=10)
        r = c.chat(MSGS, temperature=0.0, max_tokens=7)
    assert r == ChatResult(True, content="Action: back()", status=200, finish_reason="stop")
    req = srv.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-secret"
    assert req["body"] == {"model": "tiny", "messages": MSGS, "temperature": 0.0, "max_tokens": 7}
    assert "sk-secret" not in repr(c)


@pytest.mark.timeout(60)
def test_slow_drip_is_cut_at_the_total_deadline():
    """One byte every 50 ms never trips a per-read timeout; only a total deadline stops it."""
    sent = []

    def drip(h):
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(2000):  # would take 100 s
            h.wfile.write(b" ")
            h.wfile.flush()
            sent.append(1)
            time.sleep(0.05)

    with Stub(drip) as srv:
        r = ChatClient(srv.url, deadline_s=0.5).chat(MSGS)
    assert not r.ok and r.error == "timeout" and r.content == ""
    assert 0 < len(sent) < 2000  # the body really was dripping and the client left early


@pytest.mark.timeout(60)
def test_no_headers_at_all_times_out():
    with Stub(lambda h: time.sleep(5)) as srv:
        r = ChatClient(srv.url, deadline_s=0.3).chat(MSGS)
    assert not r.ok and r.error == "timeout"


def test_oversized_body_declared_and_streamed():
    big = _ok_body("x" * 5000)
    with Stub(lambda h: _send(h, big)) as srv:
        r = ChatClient(srv.url, max_body_bytes=1000).chat(MSGS)
        assert not r.ok and r.error == "too_large" and r.status == 200
        assert ChatClient(srv.url, max_body_bytes=len(big)).chat(MSGS).ok  # exactly at the cap: read

    def chunked(h):  # no Content-Length: the cap must bind while streaming
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for _ in range(50):
            chunk = b"x" * 4096
            h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")

    with Stub(chunked) as srv:
        r = ChatClient(srv.url, max_body_bytes=10_000).chat(MSGS)
    assert not r.ok and r.error == "too_large"


def test_redirect_to_another_host_is_not_followed_and_the_key_stays_home():
    with Stub(lambda h: _send(h, _ok_body("stolen"))) as other:
        target = other.url.replace("127.0.0.1", "localhost") + "/chat/completions"
        for code in (301, 302, 307, 308):
            with Stub(lambda h, code=code: _send(h, b"", status=code, headers={"Location": target})) as srv:
                r = ChatClient(srv.url, api_key="sk-secret").chat(MSGS)
            assert not r.ok and r.error == "redirect" and r.status == code
            assert "localhost" in r.message and "sk-secret" not in r.message
            assert srv.requests[0]["auth"] == "Bearer sk-secret"
        assert other.requests == []  # the other host never saw a request, let alone the key


@pytest.mark.parametrize(
    "body, error",
    [
        (b"not json at all", "bad_json"),
        (b"\xff\xfe\x00garbage", "bad_json"),
        (b"[" * 100_000, "bad_json"),  # nested too deep for the json module
        (b"[]", "bad_schema"),
        (b"{}", "bad_schema"),
        (b'{"choices": []}', "bad_schema"),
        (b'{"choices": [{}]}', "bad_schema"),
        (b'{"choices": [{"message": "hi"}]}', "bad_schema"),
        (b'{"choices": [{"message": {"content": null}}]}', "bad_schema"),
        (b'{"choices": [{"message": {"content": 7}}]}', "bad_schema"),
        (b'{"choices": {"0": {"message": {"content": "x"}}}}', "bad_schema"),
    ],
)
def test_malformed_and_incomplete_replies(body, error):
    with Stub(lambda h: _send(h, body)) as srv:
        r = ChatClient(srv.url).chat(MSGS)
    assert not r.ok and r.error == error and r.status == 200


def test_http_error_status_and_truncated_body():
    with Stub(lambda h: _send(h, b'{"error": "overloaded"}', status=503)) as srv:
        r = ChatClient(srv.url).chat(MSGS)
    assert not r.ok and r.error == "http_status" and r.status == 503 and "overloaded" in r.message

    def truncated(h):  # promises 1000 bytes, sends 10, hangs up
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.write(b'{"choices"')
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)

    with Stub(truncated) as srv:
        r = ChatClient(srv.url).chat(MSGS)
    assert not r.ok and r.error in ("transport", "bad_json")


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on this port now
    r = ChatClient(f"http://127.0.0.1:{port}/v1", deadline_s=5).chat(MSGS)
    assert not r.ok and r.error == "connect"


def test_unserialisable_request_and_bad_configs():
    with Stub(lambda h: _send(h, _ok_body())) as srv:
        r = ChatClient(srv.url).chat([{"role": "user", "content": object()}])
        assert not r.ok and r.error == "bad_request" and srv.requests == []
    for bad in ("ftp://h/v1", "127.0.0.1:8000/v1", "http:///v1", "http://user:pw@h/v1", None):
        with pytest.raises(ValueError):
            ChatClient(bad)
    for deadline in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            ChatClient("http://h/v1", deadline_s=deadline)


def test_works_from_inside_a_running_event_loop():
    import asyncio

    async def main(url):
        return ChatClient(url).chat(MSGS)

    with Stub(lambda h: _send(h, _ok_body("from a loop"))) as srv:
        r = asyncio.run(main(srv.url))
    assert r.ok and r.content == "from a loop"


@settings(max_examples=150, deadline=2000)
@given(
    st.one_of(
        st.binary(max_size=2000),
        st.text(max_size=2000).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(
                    st.sampled_from(["choices", "message", "content", "finish_reason", "x"]), c, max_size=4
                )
            ),
            max_leaves=20,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_parse_chat_body_never_raises(body):
    r = parse_chat_body(body)
    assert isinstance(r, ChatResult)
    assert r.ok == (r.error == "") and (r.ok or r.error in ERRORS)
    if r.ok:
        assert json.loads(body)["choices"][0]["message"]["content"] == r.content
