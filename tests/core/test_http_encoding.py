"""ChatClient refuses a compressed reply (it asks for identity): a small gzip body must not inflate in memory."""

import gzip

from test_http import MSGS, Stub, _ok_body, _send

from iclr26.core.http import ERRORS, ChatClient


def test_gzip_reply_is_refused_before_decompression():
    bomb = gzip.compress(b" " * 5_000_000)  # ~5 kB on the wire, 5 MB inflated, over a 1 MB cap
    with Stub(lambda h: _send(h, bomb, headers={"Content-Encoding": "gzip"})) as srv:
        r = ChatClient(srv.url, model="m", deadline_s=10, max_body_bytes=2**20).chat(MSGS)
    assert not r.ok and r.error == "encoding" and "gzip" in r.message and r.error in ERRORS


def test_identity_and_missing_encoding_are_accepted():
    for headers in ({"Content-Encoding": "identity"}, {}):
        with Stub(lambda h, hd=headers: _send(h, _ok_body("fine"), headers=hd)) as srv:
            r = ChatClient(srv.url, model="m", deadline_s=10).chat(MSGS)
        assert r.ok and r.content == "fine", r
