"""One client for OpenAI-compatible ``/chat/completions`` endpoints (vLLM, llama.cpp server, OpenAI).

The server is treated as untrusted: whatever it sends (or fails to send), :meth:`ChatClient.chat`
returns a :class:`ChatResult` and never raises.

* **Total deadline.** ``deadline_s`` bounds the whole request (connect, send, every read) by one
  clock: the request runs as one ``asyncio`` task cancelled at the deadline, so a server that
  drips one byte at a time cannot stretch it.
* **Body cap.** The body is streamed and reading stops after ``max_body_bytes`` (decoded) bytes;
  a larger declared ``Content-Length`` is refused before reading.
* **No redirects.** A 3xx answer is a handled failure (``error="redirect"``) and is never followed,
  so the ``Authorization`` header cannot reach another host. Proxy variables and ``.netrc`` are
  ignored unless ``trust_env=True``.
* **Parse failures** (not JSON, nested too deep, no ``choices[0].message.content`` string) are
  handled failures too.

``httpx`` is imported when a request is made; without it every call returns
``ChatResult(ok=False, error="missing_dependency")``.
"""

from __future__ import annotations

import asyncio
import json
import math
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ERRORS", "ChatClient", "ChatResult", "parse_chat_body"]

ERRORS = (
    "timeout",
    "too_large",
    "redirect",
    "http_status",
    "connect",
    "transport",
    "encoding",
    "bad_json",
    "bad_schema",
    "bad_request",
    "missing_dependency",
)
"""Every value :attr:`ChatResult.error` can take on a failure."""


@dataclass(frozen=True)
class ChatResult:
    """Outcome of one chat request: ``ok`` with ``content``, or a handled failure with ``error``."""

    ok: bool
    """True when the reply held a ``choices[0].message.content`` string."""
    content: str = ""
    """The first choice's message content (``""`` on failure)."""
    error: str = ""
    """On failure, one of :data:`ERRORS`; ``""`` when ok."""
    message: str = ""
    """Human-readable detail of a failure (never contains the API key)."""
    status: int | None = None
    """HTTP status code, when a response started."""
    finish_reason: str | None = None
    """``choices[0].finish_reason`` when the server sent one."""


_SSL_CONTEXT: list = []


def _ssl_context():
    """One TLS context for every request (building one costs ~0.1 s, more than a local chat call)."""
    if not _SSL_CONTEXT:
        import httpx

        make = getattr(httpx, "create_ssl_context", None)
        _SSL_CONTEXT.append(make() if make is not None else ssl.create_default_context())
    return _SSL_CONTEXT[0]


def _fail(error: str, message: str, status: int | None = None) -> ChatResult:
    return ChatResult(False, error=error, message=message[:300], status=status)


def parse_chat_body(body: bytes, status: int | None = 200) -> ChatResult:
    """Decode a ``/chat/completions`` JSON body into a :class:`ChatResult` (never raises)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return _fail("bad_json", f"reply is not JSON ({type(exc).__name__}): {body[:120]!r}", status)
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    msg = first.get("message") if isinstance(first, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, str):
        return _fail("bad_schema", f"reply has no choices[0].message.content string: {body[:120]!r}", status)
    reason = first.get("finish_reason")
    return ChatResult(True, content=content, status=status, finish_reason=reason if isinstance(reason, str) else None)


@dataclass(frozen=True)
class ChatClient:
    """An OpenAI-compatible chat endpoint with the limits described in the module docstring."""

    base_url: str
    """e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)."""
    model: str = "default"
    """The served model name sent in every request."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer ...`` when given (hidden from ``repr``)."""
    deadline_s: float = 60.0
    """Total wall-clock budget of one request, connect to last byte."""
    max_body_bytes: int = 4 * 2**20
    """Largest response body read (decoded bytes); larger -> ``error="too_large"``."""
    trust_env: bool = False
    """Honour proxy environment variables and ``.netrc`` (off: nothing from the environment is sent)."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {self.base_url!r}")
        if parts.username or parts.password:
            raise ValueError("base_url must not contain credentials; pass the key as api_key")
        if not 0 < self.deadline_s < math.inf or self.max_body_bytes < 1:
            raise ValueError("need a finite deadline_s > 0 and max_body_bytes >= 1")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def chat(self, messages: list[dict], **params: Any) -> ChatResult:
        """POST ``{"model", "messages", **params}``; the first choice's content or a handled failure."""
        try:
            body = json.dumps({"model": self.model, "messages": messages, **params}).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            return _fail("bad_request", f"request is not JSON-serialisable: {exc}")
        try:
            import httpx  # noqa: F401
        except ImportError:
            return _fail("missing_dependency", "iclr26.core.http needs httpx (pip install httpx)")
        try:
            return _run_with_deadline(self._post(body), self.deadline_s)
        except Exception as exc:  # the boundary: nothing from the transport escapes
            return _fail("transport", f"{type(exc).__name__}: {exc}")

    async def _post(self, body: bytes) -> ChatResult:
        import httpx

        headers = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(self.deadline_s),
                follow_redirects=False,
                trust_env=self.trust_env,
                verify=_ssl_context(),
            ) as client:
                async with client.stream("POST", self.url, content=body, headers=headers) as resp:
                    return await self._read(resp)
        except httpx.ConnectError as exc:
            return _fail("connect", f"cannot connect to {self.url}: {exc}")
        except httpx.TimeoutException as exc:
            return _fail("timeout", f"{type(exc).__name__} before the {self.deadline_s} s deadline")
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            return _fail("transport", f"{type(exc).__name__}: {exc}")

    async def _read(self, resp) -> ChatResult:
        status = resp.status_code
        if 300 <= status < 400:
            where = urlsplit(resp.headers.get("location", ""))
            return _fail(
                "redirect", f"HTTP {status} redirect to {where.scheme}://{where.netloc or '?'} not followed", status
            )
        coding = resp.headers.get("content-encoding", "").strip().lower()
        if coding not in ("", "identity"):  # we asked for identity: a compressed body could inflate past the cap
            return _fail("encoding", f"refused Content-Encoding {coding[:40]!r} (only identity is accepted)", status)
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return _fail("too_large", f"declared body of {declared} bytes > cap {self.max_body_bytes}", status)
        buf = bytearray()
        async for chunk in resp.aiter_raw():  # raw bytes: with identity these are the bytes parsed
            buf += chunk
            if len(buf) > self.max_body_bytes:
                return _fail("too_large", f"body exceeds the cap of {self.max_body_bytes} bytes", status)
        if not 200 <= status < 300:
            return _fail("http_status", f"HTTP {status}: {bytes(buf[:200])!r}", status)
        return parse_chat_body(bytes(buf), status)


def _run_with_deadline(coro, deadline_s: float) -> ChatResult:
    """Run ``coro`` on a private event loop, cancelled at ``deadline_s`` (a worker thread when a loop runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_loop(coro, deadline_s)
    box: list = []
    t = threading.Thread(target=lambda: box.append(_run_loop(coro, deadline_s)), daemon=True)
    t.start()
    t.join()
    return box[0] if box else _fail("transport", "request thread ended without a result")


def _run_loop(coro, deadline_s: float) -> ChatResult:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, deadline_s))
    except TimeoutError:
        return _fail("timeout", f"no complete reply within the {deadline_s} s deadline")
    except Exception as exc:
        return _fail("transport", f"{type(exc).__name__}: {exc}")
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # does not wait for a stuck resolver thread (shutdown(wait=False))
