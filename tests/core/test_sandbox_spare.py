"""SandboxServer: the fork that serves the next call is made while the current call runs (a spare), and every
call still starts from the definitions alone."""

import pytest

from iclr26.core.sandbox import SandboxServer, kernel_isolation_available

TOOLS = {"me_and_others": "sandbox_view_tools:me_and_others"}


@pytest.mark.skipif(kernel_isolation_available() is not None, reason="needs the kernel layer's own PID namespace")
def test_the_next_call_is_served_by_a_spare_made_during_this_call():
    with SandboxServer("def look():\n    return me_and_others()", tools=TOOLS, isolation="kernel") as srv:
        first_pid, others = srv.call("look").value
        second_pid, _ = srv.call("look").value
    assert others == [second_pid] and second_pid != first_pid


@pytest.mark.parametrize("isolation", ["kernel", "python-only"])
def test_spares_start_from_the_definitions_alone(isolation):
    if isolation == "kernel" and kernel_isolation_available() is not None:
        pytest.skip("kernel layer unavailable here")
    src = "state = []\ndef add(x):\n    state.append(x)\n    with open('f' + str(x), 'w') as f:\n        f.write('x')\n"
    src += "    return list(state)\ndef files():\n    return [exists_file('f' + str(i)) for i in range(4)]\n"
    src += "def exists_file(name):\n    try:\n        open(name).close()\n        return True\n    except OSError:\n"
    src += "        return False\n"
    with SandboxServer(src, isolation=isolation) as srv:
        for x in range(4):
            assert srv.call("add", x).value == [x]  # no state from the previous call
            assert srv.call("files").value == [False] * 4  # nor its files
        assert srv.restarts == 0
