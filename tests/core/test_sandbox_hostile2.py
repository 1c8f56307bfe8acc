"""Second hostile round for iclr26.core.sandbox (issue: the Python layers must hold on their own).

Three escape classes, in variants of our own: (1) library helpers that copy or read attributes named by
the caller (``functools.update_wrapper`` & co.), (2) user code run while an exception is formatted,
(3) user code run while the result is converted to plain data. Each runs in every isolation mode
available here. Then SandboxServer's fresh state per call, and limits on what travels back.
"""

import os
import random
import textwrap
from pathlib import Path

import numpy as np
import pytest

from iclr26.core import sandbox_kernel, sandbox_wire
from iclr26.core.sandbox import ERROR_KINDS, SandboxLimits, SandboxServer, kernel_isolation_available, run_untrusted

FAST = SandboxLimits(timeout_s=4.0)
MODES = ["python-only"] + (["kernel"] if kernel_isolation_available() is None else [])
TOOLS = "sandbox_hostile2_tools"


def _refused(src, kinds, mode, **kw):
    kw.setdefault("limits", FAST)
    res = run_untrusted(src, isolation=mode, **kw)
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    assert not res.ok and res.error in kinds and res.error in ERROR_KINDS, (src, res)
    assert res.value is None and res.message
    return res


@pytest.fixture
def target():
    """A host path outside the work dir (and outside /tmp, the kernel mode's private work dir) that hostile
    code tries to create."""
    path = Path("/var/tmp") / f"iclr26-hostile2-{os.getpid()}.txt"
    path.unlink(missing_ok=True)
    yield str(path)
    created = path.exists()
    path.unlink(missing_ok=True)
    assert not created, "hostile code wrote outside the sandbox"


# ---------------------------------------------------------------------- (1) attributes named by the caller
UPDATE_WRAPPER = [
    "import functools\ndef f():\n    pass\ndef g():\n    pass\nfunctools.update_wrapper(g, f, ('__globals__',))",
    "from functools import update_wrapper",
    "import functools\nw = functools.wraps",
    "import functools\nu = getattr(functools, 'update' + '_wrapper')",
    "import functools\nfor n in dir(functools):\n    v = getattr(functools, n)",
    "import functools\np = functools.partial(getattr, functools)\nu = p('wr' + 'aps')",
    "import operator\nag = getattr(operator, 'attr' + 'getter')",
    "import functools\nc = functools.cached_property",
    "import functools\nm = functools.partialmethod",
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("src", UPDATE_WRAPPER, ids=[f"uw{i}" for i in range(len(UPDATE_WRAPPER))])
def test_name_based_attribute_helpers_are_refused(src, mode):
    _refused(src, ("SecurityViolation", "ImportBlocked"), mode)


@pytest.mark.parametrize("mode", MODES)
def test_getattr_takes_only_plain_ascii_identifiers(mode):
    _refused("result = getattr(1, 'real ')", "SecurityViolation", mode)
    _refused("class S(str):\n    pass\nresult = getattr(1, S('real'))", "SecurityViolation", mode)
    _refused("def f():\n    pass\nsetattr(f, '__glo' + 'bals__', {})", "SecurityViolation", mode)
    _refused("result = hasattr(1, 'ｒｅａｌ')", "SecurityViolation", mode)
    ok = run_untrusted("result = [getattr(3, 'real'), hasattr(3, 'imag')]", isolation=mode, limits=FAST)
    assert ok.ok and ok.value == [3, True]


# -------------------------------------------------------------------- (2) user code in exception formatting
def _counter_exc(body: str, exc: str = "ValueError") -> str:
    return textwrap.dedent(f"""
        import collections
        class C(collections.Counter):
            def most_common(self, n=None):
        {textwrap.indent(body, " " * 8)}
                return []
        raise {exc}(C(a=1))
    """)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exc", ["ValueError", "KeyError", "RuntimeError"])
def test_exception_text_is_formatted_under_the_guards(exc, mode, target):
    src = _counter_exc(f"open({target!r}, 'w').write('pwned')", exc)
    res = _refused(src, "SecurityViolation", mode)
    assert "outside the sandbox" in res.message


@pytest.mark.parametrize("mode", MODES)
def test_exception_text_cannot_read_host_files(mode):
    secret = Path(os.path.dirname(os.path.abspath(__file__))) / "sandbox_hostile2_tools.py"  # readable, off-path
    res = _refused(_counter_exc(f"print(open({str(secret)!r}).read())"), "SecurityViolation", mode)
    assert "forge_handler" not in res.message + res.stdout


@pytest.mark.parametrize("mode", MODES)
def test_exception_text_that_fails_or_loops_is_handled(mode):
    res = _refused(_counter_exc("raise ValueError('inner')"), "RuntimeError", mode)  # Counter's repr eats TypeError
    assert "cannot be printed" in res.message
    _refused(_counter_exc("while True: pass"), "Timeout", mode, limits=SandboxLimits(timeout_s=1.5))


# ------------------------------------------------------------------- (3) user code in result conversion
@pytest.mark.parametrize("mode", MODES)
def test_numpy_scalar_subclass_dtype_property_never_runs(mode, target):
    src = textwrap.dedent(f"""
        import numpy as np
        class F(np.float64):
            @property
            def dtype(self):
                open({target!r}, 'w').write('pwned')
                return np.dtype('float64')
        result = F(1.0)
    """)
    _refused(src, "BadResult", mode)  # and the fixture checks that the property never wrote its file


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "value",
    [
        "import numpy as np\nclass A(np.ndarray):\n    pass\nresult = np.zeros(3).view(A)",
        "import collections\nclass C(collections.Counter):\n    def most_common(self, n=None):\n        while True:\n"
        "            pass\nresult = C(a=1)",
        "class S(str):\n    pass\nresult = S('x')",
        "class I(int):\n    def bit_length(self):\n        while True:\n            pass\nresult = I(3)",
        "class L(list):\n    pass\nresult = [1, L([2])]",
        "class D(dict):\n    def items(self):\n        while True:\n            pass\nresult = {'k': D(a=1)}",
    ],
    ids=["ndarray-sub", "counter-sub", "str-sub", "int-sub", "nested-list-sub", "dict-sub"],
)
def test_subclass_results_are_refused_without_running_their_code(value, mode):
    res = _refused(value, "BadResult", mode)  # no Timeout: the loops above never ran
    assert "cannot send" in res.message or "cannot be sent" in res.message


@pytest.mark.parametrize("mode", MODES)
def test_displayed_objects_are_converted_under_the_guards(mode, target):
    src = textwrap.dedent(f"""
        import numpy as np
        class G(np.int64):
            @property
            def dtype(self):
                open({target!r}, 'w')
                return np.dtype('int64')
        display(G(3))
        result = 1
    """)
    _refused(src, "BadResult", mode)


def test_wire_refuses_scalar_subclasses_and_big_ints_before_running_anything():
    calls = []

    class F(np.float32):
        @property
        def dtype(self):
            calls.append(1)
            return np.dtype("float32")

    with pytest.raises(sandbox_wire.WireError):
        sandbox_wire.encode(F(1.0))
    assert calls == []
    assert sandbox_wire.decode(sandbox_wire.encode(np.float32(1.5))) == np.float32(1.5)
    big = 2 ** (8 * sandbox_wire.MAX_INT_BYTES - 2)
    assert str(sandbox_wire.decode(sandbox_wire.encode(big)))  # what travels, str() can print
    with pytest.raises(sandbox_wire.WireError):
        sandbox_wire.encode(2 ** (8 * sandbox_wire.MAX_INT_BYTES + 8))


@pytest.mark.parametrize("mode", MODES)
def test_big_int_results_are_refused(mode):
    _refused("result = 10 ** 4000", "BadResult", mode)
    ok = run_untrusted("result = 10 ** 2000", isolation=mode, limits=FAST)
    assert ok.ok and len(str(ok.value)) == 2001


# ---------------------------------------------------------------------------- SandboxServer: fresh state
@pytest.mark.parametrize("mode", MODES)
def test_server_monkey_patching_does_not_reach_the_next_call(mode):
    src = "import math\ndef f(x):\n    return math.floor(x)\ndef patch():\n    math.floor = abs\n    return f(-1.5)"
    with SandboxServer(src, isolation=mode, limits=FAST) as srv:
        assert srv.call("patch").value == 1.5
        assert srv.call("f", -1.5).value == -2
        assert srv.run("import math\nmath.floor = abs\nresult = math.floor(-2.5)").value == 2.5
        assert srv.run("import math\nresult = math.floor(-2.5)").value == -3
        assert srv.restarts == 0


@pytest.mark.parametrize("mode", MODES)
def test_server_tool_patching_modules_does_not_survive(mode):
    with SandboxServer("", tools={"patch": f"{TOOLS}:patch_math"}, isolation=mode, limits=FAST) as srv:
        assert srv.run("result = patch()").value == 42
        assert srv.run("import math\nresult = math.floor(1.5)").value == 1


@pytest.mark.parametrize("mode", MODES)
def test_forged_handler_does_not_survive_into_the_next_call(mode):
    with SandboxServer(
        "def f(x):\n    return x + 1", tools={"forge": f"{TOOLS}:forge_handler"}, isolation=mode, limits=FAST
    ) as srv:
        assert srv.run("result = forge()").value == "replaced"
        for x in range(3):
            assert srv.call("f", x).value == x + 1


@pytest.mark.parametrize("mode", MODES)
def test_server_module_state_and_files_do_not_leak(mode):
    with SandboxServer("import random", isolation=mode, limits=FAST) as srv:
        assert srv.run("import random\nrandom.seed(5)\nresult = 1").ok
        leaked = random.Random(5).random()  # what the next draw would be if the seeded state survived
        assert srv.run("import random\nresult = random.random()").value != leaked
        assert srv.run("open('stash', 'w').write('x')\nresult = 1").ok
        res = srv.run("result = open('stash').read()")
        assert res.error == "RuntimeError" and "FileNotFoundError" in res.message


@pytest.mark.parametrize("mode", MODES)
def test_server_definitions_are_replayed_but_their_output_is_not(mode):
    with SandboxServer("print('defining')\nK = [1]\ndef f():\n    K.append(2)\n    return K", isolation=mode) as srv:
        r1, r2 = srv.call("f"), srv.call("f")
        assert srv.definition.stdout == "defining\n"
        assert r1.value == r2.value == [1, 2] and r1.stdout == r2.stdout == ""


@pytest.mark.skipif("kernel" not in MODES, reason="kernel layer unavailable here")
def test_server_forks_cannot_fork_again_in_kernel_mode():
    with SandboxServer(
        "", tools={"x": "test_sandbox_helpers:escaped"}, isolation="kernel", limits=SandboxLimits(timeout_s=8)
    ) as srv:
        res = srv.run("result = [x('fork'), x('spawn')]")
        assert res.ok and all(v.startswith("err:") for v in res.value), res


def test_fork_server_filter_is_a_superset_only_in_clone_and_kill():
    strict, relaxed = sandbox_kernel.build_filter(7), sandbox_kernel.build_filter(7, allow_fork=True)
    assert strict != relaxed and len(relaxed) < len(strict)
    nr, ks = sandbox_kernel.NR, {k for _, _, _, k in relaxed}
    still = set(sandbox_kernel.DENIED.values()) - {nr["fork"], nr["vfork"]}
    assert still and still <= ks and nr["fork"] not in ks  # every other refusal stays in the fork-server stage


# ------------------------------------------------------------------------------------------- disk caps
def test_python_only_caps_each_file_so_the_count_cap_bounds_the_disk():
    lim = SandboxLimits(timeout_s=4.0, max_disk_bytes=3_200_000)  # 32 files of 100 kB at most
    res = _refused("open('a', 'w').write('x' * 150_000)", "RuntimeError", "python-only", limits=lim)
    assert "File too large" in res.message or "EFBIG" in res.message or "Errno 27" in res.message
    ok = run_untrusted("result = open('a', 'w').write('x' * 90_000)", isolation="python-only", limits=lim)
    assert ok.ok and ok.value == 90_000


def test_python_only_counts_files_opened_by_library_code():
    src = "import json\nfor i in range(40):\n    with open('f%d' % i, 'w') as f:\n        json.dump([i], f)"
    _refused(src, ("SecurityViolation", "RuntimeError"), "python-only")


@pytest.mark.parametrize("mode", MODES)
def test_audit_hook_enforces_while_the_source_is_on_the_stack_even_if_trusted(mode, target):
    tools = {"trust": f"{TOOLS}:set_trusted", "probe": f"{TOOLS}:write_file"}
    res = _refused(f"trust()\nresult = probe({target!r})", "SecurityViolation", mode, tools=tools)
    assert "outside the sandbox" in res.message
