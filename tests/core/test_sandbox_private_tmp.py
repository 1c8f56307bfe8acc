"""Kernel mode: the sandbox's /tmp is a private, size-capped tmpfs, not the host's /tmp (read-only or not)."""

import os
import uuid

import pytest

from iclr26.core.sandbox import SandboxLimits, SandboxServer, kernel_isolation_available, run_untrusted

pytestmark = pytest.mark.skipif(kernel_isolation_available() is not None, reason="kernel layer unavailable here")
TOOLS = {"exists": "sandbox_view_tools:exists", "listdir": "sandbox_view_tools:listdir"}


def test_host_tmp_is_invisible_and_sandbox_writes_stay_private(tmp_path):
    probe = f"/tmp/iclr26-probe-{uuid.uuid4().hex}"
    with open(probe, "w") as fh:
        fh.write("host")
    name = f"written-{uuid.uuid4().hex}"
    try:
        src = (
            f"with open('/tmp/{name}', 'w') as f:\n"
            "    f.write('sandbox')\n"
            f"result = (exists({probe!r}), exists('/tmp/{name}'), listdir('/tmp'))"
        )
        res = run_untrusted(src, tools=TOOLS, isolation="kernel")
        assert res.ok and res.isolation == "kernel", res
        host_file_seen, own_file_seen, listing = res.value
        assert host_file_seen is False  # the host's /tmp is not mounted there, not even read-only
        assert own_file_seen is True and name in listing
        assert os.path.basename(probe) not in listing
        assert not os.path.exists(f"/tmp/{name}")  # what the sandbox wrote never reached the host
    finally:
        os.unlink(probe)


def test_private_tmp_is_capped_by_max_disk_bytes():
    limits = SandboxLimits(max_disk_bytes=1_000_000, max_file_bytes=50_000_000)
    src = "with open('/tmp/big', 'wb') as f:\n    f.write(b'x' * 3_000_000)\nresult = 1"
    res = run_untrusted(src, limits=limits, isolation="kernel")
    assert not res.ok and res.error == "RuntimeError" and "No space left" in res.message, res
    ok = run_untrusted(src.replace("3_000_000", "500_000"), limits=limits, isolation="kernel")
    assert ok.ok and ok.value == 1, ok


def test_server_calls_see_a_private_tmp_too():
    with SandboxServer("def look(p):\n    return exists(p)", tools={"exists": TOOLS["exists"]}) as srv:
        assert srv.call("look", "/tmp").value is True
        assert srv.call("look", os.path.realpath(__file__)).value is True  # the read-only root stays visible
        probe = f"/tmp/iclr26-probe-{uuid.uuid4().hex}"
        open(probe, "w").close()
        try:
            assert srv.call("look", probe).value is False
        finally:
            os.unlink(probe)
