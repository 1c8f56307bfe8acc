"""Tests for iclr26.core.sandbox: results, transport, limits, imports, files, errors and the persistent server.

Attacks live in test_sandbox_hostile.py. These run under the kernel layer where it is available, else under
the python-only mode (named explicitly, as callers must).
"""

import math
import os
import tempfile
import time

import numpy as np
import pytest
from PIL import Image

import iclr26
from iclr26.core import sandbox, sandbox_kernel, sandbox_wire
from iclr26.core.sandbox import (
    DEFAULT_ALLOWED_IMPORTS,
    SandboxLimits,
    SandboxResult,
    SandboxServer,
    kernel_isolation_available,
    run_untrusted,
)

FAST = SandboxLimits(timeout_s=4.0)
MODE = "kernel" if kernel_isolation_available() is None else "python-only"


def run(source, inputs=None, **kw):
    kw.setdefault("limits", FAST)
    kw.setdefault("isolation", MODE)
    return run_untrusted(source, inputs, **kw)


@pytest.fixture(autouse=True)
def sandbox_root(tmp_path, monkeypatch):
    """Each test gets its own temp root; afterwards the caller must be unharmed and everything cleaned."""
    root = tmp_path / "sbx"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    assert run("result = 40 + 2").value == 42
    assert list(root.iterdir()) == []


def _err(source: str, kind: str, **kwargs) -> SandboxResult:
    res = run(source, **kwargs)
    assert not res.ok and res.error == kind, res
    assert res.value is None and res.message
    return res


# ------------------------------------------------------------------------------------------ happy path
def test_returns_plain_python_values():
    src = (
        "result = {'i': 3, 'f': 2.5, 'c': 1 + 2j, 'l': [1, 'x', None, True], 't': (1, (2,)), 's': {1, 2},\n"
        "          'fs': frozenset({3}), 'b': b'ab', 'ba': bytearray(b'cd'), 'big': -2 ** 200, 'u': 'é\\ud800',\n"
        "          7: 'int key', (1, 'k'): 'tuple key', 'nan': float('nan')}"
    )
    res = run(src)
    assert res.ok and res.error is None and res.isolation == MODE
    v = res.value
    assert math.isnan(v.pop("nan"))
    assert v == {
        "i": 3,
        "f": 2.5,
        "c": 1 + 2j,
        "l": [1, "x", None, True],
        "t": (1, (2,)),
        "s": {1, 2},
        "fs": frozenset({3}),
        "b": b"ab",
        "ba": bytearray(b"cd"),
        "big": -(2**200),
        "u": "é\ud800",
        7: "int key",
        (1, "k"): "tuple key",
    }
    assert type(v["ba"]) is bytearray and type(v["t"]) is tuple and type(v["fs"]) is frozenset


def test_numpy_values_roundtrip_exactly():
    src = """
import numpy as np
result = {
    "i16_T": np.arange(12, dtype=np.int16).reshape(3, 4).T,
    "f32": np.linspace(0, 1, 5, dtype=np.float32),
    "bool": np.array([True, False]),
    "c128": np.array([1 + 2j]),
    "strided": np.arange(10.0)[::3],
    "big_endian": np.arange(3, dtype=">u2"),
    "empty": np.zeros((0, 3), dtype=np.float16),
    "scalar": np.float32(1.5),
    "bool_scalar": np.True_,
    "u64": np.uint64(2 ** 64 - 1),
}
"""
    v = run(src).value
    assert v["i16_T"].dtype == np.int16 and np.array_equal(v["i16_T"], np.arange(12).reshape(3, 4).T)
    assert v["f32"].dtype == np.float32 and np.array_equal(v["f32"], np.linspace(0, 1, 5, dtype=np.float32))
    assert v["bool"].dtype == bool and v["c128"].dtype == np.complex128 and v["c128"][0] == 1 + 2j
    assert np.array_equal(v["strided"], [0.0, 3.0, 6.0, 9.0])
    assert v["big_endian"].dtype == np.dtype(">u2") and v["big_endian"].tolist() == [0, 1, 2]
    assert v["empty"].shape == (0, 3) and v["empty"].dtype == np.float16
    assert type(v["scalar"]) is np.float32 and v["scalar"] == 1.5 and v["bool_scalar"] is np.True_
    assert type(v["u64"]) is np.uint64 and v["u64"] == 2**64 - 1
    v["f32"][0] = 7  # decoded arrays are writable


def test_wire_roundtrip_and_refusals_in_process():
    value = {"a": [1, 2.5, None, (True, b"x")], 3: {frozenset({1}): np.arange(4).reshape(2, 2)}}
    back = sandbox_wire.decode(sandbox_wire.encode(value))
    assert back["a"] == value["a"] and np.array_equal(back[3][frozenset({1})], value[3][frozenset({1})])
    for bad in (
        np.zeros(2, dtype=[("a", "i4")]),
        np.array(["s"]),
        np.array([None]),
        np.datetime64("2020"),
        np.ma.masked_array([1]),
        object(),
        len,
        2**40000,
    ):
        with pytest.raises(sandbox_wire.WireError):
            sandbox_wire.encode(bad)
    with pytest.raises(sandbox_wire.WireError):  # unhashable key in a forged frame
        sandbox_wire.decode(b"d" + (1).to_bytes(8, "little") + b"l" + bytes(8) + b"N")


def test_numpy_methods_that_import_helpers_lazily_work():
    src = (
        "import numpy as np\nx = np.arange(6.0).reshape(2, 3)\nprint(x)\n"
        "result = [float(x.sum()), float(x.mean()), float(x.std()), repr(x[0])]"
    )
    res = run(src)
    assert res.ok and res.value[:2] == [15.0, 2.5] and res.value[3] == "array([0., 1., 2.])"
    assert res.stdout.startswith("[[0. 1. 2.]")


def test_library_code_that_execs_its_own_templates_still_works():
    src = (
        "import collections\nP = collections.namedtuple('P', 'a b')\nimport numpy as np\n"
        "m = np.ma.masked_array([1, 2, 3], [0, 1, 0])\nresult = [tuple(P(1, 2)), float(m.sum())]"
    )
    assert run(src).value == [(1, 2), 4.0]
    res = run(
        "import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 1\nresult = A(3).x",
        allowed_imports=(*DEFAULT_ALLOWED_IMPORTS, "dataclasses"),
    )
    assert res.ok and res.value == 3


def test_inputs_call_and_result_name():
    src = "def reward(completion, answer):\n    return float(completion.strip() == answer) + bonus\n"
    res = run(src, {"bonus": 0.5}, call=("reward", ("42 ", "42")))
    assert res.ok and res.value == 1.5
    assert run("score = sum(xs)", {"xs": np.arange(4)}, result_name="score").value == 6
    assert run("x = 1") == SandboxResult(ok=True, value=None, isolation=MODE)
    assert run("result = 1", result_name=None).value is None
    src = "result = [type(1) is int, type([]) == list, type(x) is str]"  # type() works for plain checks
    assert run(src, {"x": "s"}).value == [True, True, True]
    _err("x = 1", "RuntimeError", call=("missing", ()))


def test_display_collects_images_and_arrays():
    img = Image.new("RGB", (4, 3), (255, 0, 0))
    src = (
        "display(img)\ndisplay(gray)\nimport numpy as np\na = np.zeros((2, 2))\ndisplay(a)\na[0, 0] = 5\n"
        "display('note')\nresult = img.size"
    )
    res = run(src, {"img": img, "gray": Image.new("F", (2, 2), 3.0)})
    assert res.ok and res.value == (4, 3)
    first, second, third, fourth = res.displayed
    assert first.dtype == np.uint8 and first.shape == (3, 4, 3) and (first[..., 0] == 255).all()
    assert second.dtype == np.uint8 and second.shape == (2, 2, 3)
    assert np.array_equal(third, np.zeros((2, 2)))  # copied at display() time
    assert fourth == "note"


def test_tools_are_injected_and_output_captured():
    res = run("print('root', sqrt(16.0))\nresult = sqrt(2.25)", tools={"sqrt": "math:sqrt"})
    assert res.ok and res.value == 1.5 and res.stdout == "root 4.0\n"
    # the child sees the parent's sys.path, so this package's own modules can provide tools
    assert run("result = version", tools={"version": "iclr26:__version__"}).value == iclr26.__version__


def test_caller_mistakes_are_value_errors_before_any_process(monkeypatch, sandbox_root):
    def no_popen(*a, **k):
        raise AssertionError("a process was started")

    with monkeypatch.context() as m:
        m.setattr(sandbox.subprocess, "Popen", no_popen)
        with pytest.raises(ValueError, match="iclr26_no_such_module"):
            run_untrusted("result = f()", tools={"f": "iclr26_no_such_module:f"})
        with pytest.raises(ValueError, match="cannot import"):
            run_untrusted("result = f()", tools={"f": "math:no_such_function"})
        bad_args = (
            {"inputs": {"_x": 1}},
            {"inputs": {"f": lambda: 0}},
            {"call": ("_f", ())},
            {"tools": {"t": "x"}},
            {"isolation": "none"},
            {"isolation": "auto"},
            {"limits": SandboxLimits(timeout_s=0)},
            {"allowed_imports": "math"},
        )
        for bad in bad_args:
            with pytest.raises(ValueError):
                run_untrusted("result = 1", **bad)
        with pytest.raises(ValueError):
            run_untrusted(b"result = 1")
        with pytest.raises(ValueError):
            SandboxServer("", isolation="weak")
    assert list(sandbox_root.iterdir()) == []


def test_isolation_can_be_named_by_the_environment(monkeypatch):
    monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "python-only")
    assert run_untrusted("result = 1", limits=FAST).isolation == "python-only"
    monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "nonsense")
    with pytest.raises(ValueError):
        run_untrusted("result = 1")


# ------------------------------------------------------------------------------------- resource limits
def test_infinite_loop_times_out():
    start = time.monotonic()
    res = _err("while True:\n    pass", "Timeout", limits=SandboxLimits(timeout_s=1))
    assert time.monotonic() - start < 3 and "wall-time" in res.message


def test_too_little_memory_is_a_memory_limit():
    assert "40 MB" in _err("import numpy", "MemoryLimit", limits=SandboxLimits(memory_mb=40)).message
    assert "MB limit" in _err("import numpy\nx = numpy.ones(2_000_000_000)", "MemoryLimit").message


def test_child_crash_is_reported():
    assert "signal 6" in _err("abort()", "Crashed", tools={"abort": "os:abort"}).message


# --------------------------------------------------------------------------------------------- imports
@pytest.mark.parametrize(
    "src",
    [
        "import os",
        "import subprocess",
        "import socket",
        "from os import system",
        "import importlib",
        "import numpy.ctypeslib",
        "from numpy import lib",
        "from . import x",
        "from math import *",
        "from fractions import sys",
        "import typing",
    ],
)
def test_blocked_imports(src):
    _err(src, "ImportBlocked")


def test_dangerous_modules_stay_blocked_even_if_allowed():
    allowed = (*DEFAULT_ALLOWED_IMPORTS, "os", "socket", "sys", "pickle")
    for src in ("import os", "import socket\nsocket.socket()", "import sys", "import pickle"):
        _err(src, "ImportBlocked", allowed_imports=allowed)


# ----------------------------------------------------------------------------------------------- files
def test_write_inside_the_work_dir_works():
    src = "with open('out.txt', 'w') as f:\n    f.write('hi')\nwith open('out.txt') as f:\n    result = f.read()"
    assert run(src).value == "hi"
    assert "outside the sandbox" in _err("result = open('/etc/passwd').read()", "SecurityViolation").message


# ---------------------------------------------------------------------------------------------- errors
def test_syntax_errors_report_the_line():
    assert _err("x = 1\ny = (1,\n", "SyntaxError").message.startswith("line 2")
    assert _err("x = 1\n\nreturn x", "SyntaxError").message.startswith("line 3")  # compile-time error


def test_user_exception_is_a_runtime_error():
    res = _err("x = 1\ny = {}['k']", "RuntimeError")
    assert res.message == "KeyError: 'k' (line 2)"
    assert _err("1 / 0", "RuntimeError").message.startswith("ZeroDivisionError")


@pytest.mark.parametrize(
    "src",
    [
        "result = lambda: 0",
        "import fractions\nresult = fractions.Fraction(1, 3)",
        "import collections\nresult = collections.OrderedDict(a=1)",
        "import numpy as np\nresult = np.zeros(1, dtype=[('a', 'i4')])",
    ],
)
def test_disallowed_results_are_bad_results(src):
    assert "cannot send" in _err(src, "BadResult").message


# ---------------------------------------------------------------------------------------------- server
def test_server_defines_once_and_calls_many_times():
    src = "import math\ncalls = []\ndef reward(y, gt):\n    calls.append(y)\n    return float(y == gt) + len(calls)"
    with SandboxServer(src, isolation=MODE, limits=FAST) as srv:
        # every call starts from the state right after the definitions (fork-server): calls == [] each time
        assert [srv.call("reward", "a", "a").value, srv.call("reward", "a", "b").value] == [2.0, 1.0]
        assert srv.definition.ok and srv.restarts == 0
        res = srv.run("result = [reward('x', 'x'), len(calls), k]", {"k": 7})
        assert res.ok and res.value == [2.0, 1, 7] and res.isolation == MODE
        assert srv.run("k").error == "RuntimeError"  # inputs of one run do not leak into the next
        assert srv.call("missing").error == "RuntimeError" and srv.restarts == 0
        assert srv.call("reward", "x", "y").error is None  # still the same child
    with pytest.raises(ValueError):
        srv.call("reward", "a", "a")


def test_server_definition_errors_are_returned_for_every_call():
    with SandboxServer("def f(:\n    pass", isolation=MODE, limits=FAST) as srv:
        for _ in range(2):
            res = srv.call("f")
            assert res.error == "SyntaxError" and srv.definition.error == "SyntaxError"


def test_server_recovers_from_timeouts_and_crashes():
    with SandboxServer(
        "def f(n):\n    while n:\n        pass\n    return 'done'",
        tools={"abort": "os:abort"},
        isolation=MODE,
        limits=SandboxLimits(timeout_s=1.0),
    ) as srv:
        assert srv.call("f", 1).error == "Timeout"
        assert srv.call("f", 0).value == "done"
        assert srv.run("abort()").error == "Crashed"
        assert srv.call("f", 0).value == "done" and srv.restarts == 2


def test_server_cpu_limit_is_per_call():
    """RLIMIT_CPU is set afresh before each call (soft = CPU used so far + the per-call budget), so a long-lived
    server never runs into the CPU used by earlier calls."""
    src = (
        "def burn(seconds):\n    while use(0).ru_utime + use(0).ru_stime < seconds:\n        pass\n"
        "def headroom():\n    u = use(0)\n    return lim(0)[0] - (u.ru_utime + u.ru_stime)\n"
    )
    tools = {"use": "resource:getrusage", "lim": "resource:getrlimit"}
    limits = SandboxLimits(timeout_s=6.0)
    with SandboxServer(src, tools=tools, isolation=MODE, limits=limits) as srv:
        assert srv.call("burn", 1.2).ok
        budget = int(limits.timeout_s) + 2
        assert srv.call("headroom").value >= budget - 1  # would be below it with soft = budget after 1.2 s
        assert srv.restarts == 0


# ----------------------------------------------------------------------------------------- kernel layer
def test_seccomp_program_shape():
    prog = sandbox_kernel.build_filter(2)
    assert prog[0] == (0x20, 0, 0, 4) and prog[-1] == (0x06, 0, 0, sandbox_kernel.RET_KILL_PROCESS)
    ks = {k for code, _, _, k in prog if code == 0x15}
    for name in ("fork", "vfork", "execve", "socket", "connect", "ptrace", "unshare", "mount", "setsid"):
        assert sandbox_kernel.DENIED[name] in ks
    for code, jt, jf, _ in prog:
        assert 0 <= jt <= 255 and 0 <= jf <= 255 and code in (0x20, 0x15, 0x35, 0x45, 0x06)


def test_overhead_benchmark_runs():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "sandbox_overhead.py"
    spec = importlib.util.spec_from_file_location("bench_sandbox_overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    one_shot, server, ratio = mod.bench_sandbox(repeats=1, calls=2, isolation=MODE)
    assert one_shot > 0 and server > 0 and math.isfinite(ratio) and ratio > 0
    assert os.getpid() > 0


# ----------------------------------------------------------------------------------------- wire fuzzing
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4)
        | st.frozensets(st.integers(), max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(_VALUES)
def test_wire_roundtrips_plain_values(value):
    assert sandbox_wire.decode(sandbox_wire.encode(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([b"", b"l", b"d", b"a", b"g", b"S", b"t"]))
def test_decoding_arbitrary_bytes_is_a_result_or_bad_result(data, prefix):
    res = sandbox._decode_frame(prefix + data, SandboxLimits(), "kernel")
    assert isinstance(res, SandboxResult) and (res.ok or res.error in sandbox.ERROR_KINDS)
