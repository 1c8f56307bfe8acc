"""Tests for iclr26.core.sandbox: results, limits, blocked imports/escapes, files and the safe transport."""

import os
import pickle
import tempfile
import time

import numpy as np
import pytest
from PIL import Image

import iclr26
from iclr26.core import sandbox
from iclr26.core.sandbox import DEFAULT_ALLOWED_IMPORTS, SandboxLimits, SandboxResult, run_untrusted

FAST = SandboxLimits(timeout_s=3.0)


def _sandbox_pids(marker: str, wait_s: float = 2.0) -> list[int]:
    """Live processes whose command line mentions ``marker`` (our temp root), after up to ``wait_s`` s for
    SIGKILLed ones to disappear."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if marker.encode() in f.read():
                            found.append(int(entry))
                except OSError:
                    pass
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _zombie_children() -> list[str]:
    kids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                kids += f.read().split()
        except OSError:  # kernel without CONFIG_PROC_CHILDREN, or the thread is gone
            pass
    states = []
    for pid in kids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    return [s for s in states if s == "Z"]


@pytest.fixture(autouse=True)
def sandbox_root(tmp_path, monkeypatch):
    """Each test gets its own temp root; afterwards the parent must be unharmed and everything cleaned."""
    root = tmp_path / "sbx"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    follow_up = run_untrusted("result = 40 + 2", limits=FAST)
    assert follow_up.ok and follow_up.value == 42, follow_up
    assert list(root.iterdir()) == []
    assert _sandbox_pids(str(root)) == []
    assert _zombie_children() == []


def _err(source: str, kind: str, **kwargs) -> SandboxResult:
    kwargs.setdefault("limits", FAST)
    res = run_untrusted(source, **kwargs)
    assert not res.ok and res.error == kind, res
    assert res.value is None and res.message
    return res


# ------------------------------------------------------------------------------------------ happy path
def test_returns_plain_python_values():
    src = "result = {'i': 3, 'f': 2.5, 'c': 1 + 2j, 'l': [1, 'x', None, True], 't': (1, (2,)), 's': {1, 2},\n" \
          "          'fs': frozenset({3}), 'b': b'ab', 'ba': bytearray(b'cd')}"
    res = run_untrusted(src, limits=FAST)
    assert res.ok and res.error is None
    assert res.value == {"i": 3, "f": 2.5, "c": 1 + 2j, "l": [1, "x", None, True], "t": (1, (2,)), "s": {1, 2},
                         "fs": frozenset({3}), "b": b"ab", "ba": bytearray(b"cd")}


def test_numpy_values_roundtrip_exactly():
    src = """
import numpy as np
result = {
    "i16_T": np.arange(12, dtype=np.int16).reshape(3, 4).T,
    "f32": np.linspace(0, 1, 5, dtype=np.float32),
    "bool": np.array([True, False]),
    "c128": np.array([1 + 2j]),
    "strided": np.arange(10.0)[::3],
    "rec": np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
    "scalar": np.float32(1.5),
    "bool_scalar": np.True_,
    "dtype": np.dtype(">u2"),
}
"""
    v = run_untrusted(src, limits=FAST).value
    assert v["i16_T"].dtype == np.int16 and np.array_equal(v["i16_T"], np.arange(12).reshape(3, 4).T)
    assert v["f32"].dtype == np.float32 and np.array_equal(v["f32"], np.linspace(0, 1, 5, dtype=np.float32))
    assert v["bool"].dtype == bool and v["c128"].dtype == np.complex128 and v["c128"][0] == 1 + 2j
    assert np.array_equal(v["strided"], [0.0, 3.0, 6.0, 9.0])
    assert v["rec"].dtype.names == ("a", "b") and v["rec"][0]["b"] == 2.0
    assert type(v["scalar"]) is np.float32 and v["scalar"] == 1.5 and v["bool_scalar"] is np.True_
    assert v["dtype"] == np.dtype(">u2")
    v["f32"][0] = 7  # decoded arrays are writable


def test_numpy_methods_that_import_helpers_lazily_work():
    src = "import numpy as np\nx = np.arange(6.0).reshape(2, 3)\nprint(x)\n" \
          "result = [float(x.sum()), float(x.mean()), float(x.std()), repr(x[0])]"
    res = run_untrusted(src, limits=FAST)
    assert res.ok and res.value[:2] == [15.0, 2.5] and res.value[3] == "array([0., 1., 2.])"
    assert res.stdout.startswith("[[0. 1. 2.]")


def test_inputs_call_and_result_name():
    src = "def reward(completion, answer):\n    return float(completion.strip() == answer) + bonus\n"
    res = run_untrusted(src, {"bonus": 0.5}, call=("reward", ("42 ", "42")), limits=FAST)
    assert res.ok and res.value == 1.5
    assert run_untrusted("score = sum(xs)", {"xs": np.arange(4)}, result_name="score", limits=FAST).value == 6
    assert run_untrusted("x = 1", limits=FAST) == SandboxResult(ok=True, value=None)
    assert run_untrusted("result = 1", result_name=None, limits=FAST).value is None
    src = "result = [type(1) is int, type([]) == list, type(x) is str]"  # type() works for plain checks
    assert run_untrusted(src, {"x": "s"}, limits=FAST).value == [True, True, True]
    _err("x = 1", "RuntimeError", call=("missing", ()))


def test_display_collects_images_and_arrays():
    img = Image.new("RGB", (4, 3), (255, 0, 0))
    src = "display(img)\ndisplay(gray)\nimport numpy as np\na = np.zeros((2, 2))\ndisplay(a)\na[0, 0] = 5\n" \
          "display('note')\nresult = img.size"
    res = run_untrusted(src, {"img": img, "gray": Image.new("F", (2, 2), 3.0)}, limits=FAST)
    assert res.ok and res.value == (4, 3)
    first, second, third, fourth = res.displayed
    assert first.dtype == np.uint8 and first.shape == (3, 4, 3) and (first[..., 0] == 255).all()
    assert second.dtype == np.uint8 and second.shape == (2, 2, 3)
    assert np.array_equal(third, np.zeros((2, 2)))  # copied at display() time
    assert fourth == "note"


def test_tools_are_injected_and_output_captured():
    res = run_untrusted("print('root', sqrt(16.0))\nresult = sqrt(2.25)", tools={"sqrt": "math:sqrt"}, limits=FAST)
    assert res.ok and res.value == 1.5 and res.stdout == "root 4.0\n"
    # the child sees the parent's sys.path, so this package's own modules can provide tools
    res = run_untrusted("result = version", tools={"version": "iclr26:__version__"}, limits=FAST)
    assert res.value == iclr26.__version__


def test_unimportable_tool_is_a_value_error_before_any_process(monkeypatch, sandbox_root):
    def no_popen(*a, **k):
        raise AssertionError("a process was started")

    with monkeypatch.context() as m:
        m.setattr(sandbox.subprocess, "Popen", no_popen)
        with pytest.raises(ValueError, match="iclr26_no_such_module"):
            run_untrusted("result = f()", tools={"f": "iclr26_no_such_module:f"})
        with pytest.raises(ValueError, match="cannot import"):
            run_untrusted("result = f()", tools={"f": "math:no_such_function"})
        bad_args = ({"inputs": {"_x": 1}}, {"inputs": {"f": lambda: 0}}, {"call": ("_f", ())}, {"tools": {"t": "x"}})
        for bad in bad_args:
            with pytest.raises(ValueError):
                run_untrusted("result = 1", **bad)
    assert list(sandbox_root.iterdir()) == []


def test_huge_print_is_truncated_but_ok():
    res = run_untrusted("for i in range(20000):\n    print('x' * 100)\nresult = 'done'",
                        limits=SandboxLimits(timeout_s=5, max_output_bytes=80_000))
    assert res.ok and res.value == "done"
    assert res.stdout.endswith("[stdout truncated]") and len(res.stdout) < 11_000


def test_too_large_result():
    _err("result = 'x' * 9_000_000", "OutputTooLarge")


# ------------------------------------------------------------------------------------- resource limits
def test_infinite_loop_times_out():
    start = time.monotonic()
    res = _err("while True:\n    pass", "Timeout", limits=SandboxLimits(timeout_s=1))
    assert time.monotonic() - start < 3 and "wall-time" in res.message


def test_timeout_kills_the_whole_process_group(sandbox_root):
    src = "try:\n    fork()\nexcept OSError:\n    pass\nsleep(100)"
    _err(src, "Timeout", tools={"fork": "os:fork", "sleep": "time:sleep"}, limits=SandboxLimits(timeout_s=1))
    assert _sandbox_pids(str(sandbox_root)) == []


@pytest.mark.parametrize("src", ["x = bytearray(10 * 2**30)", "import numpy\nx = numpy.ones(2_000_000_000)"])
def test_huge_allocation_is_a_memory_limit(src):
    assert "MB limit" in _err(src, "MemoryLimit").message


def test_too_little_memory_for_the_imports_is_a_memory_limit():
    assert "40 MB" in _err("import numpy", "MemoryLimit", limits=SandboxLimits(memory_mb=40)).message


def test_deep_recursion():
    _err("def f(n):\n    return f(n + 1) + 1\nresult = f(0)", "RecursionLimit")


def test_child_crash_is_reported():
    assert "signal 6" in _err("abort()", "Crashed", tools={"abort": "os:abort"}).message


# --------------------------------------------------------------------------------------------- imports
@pytest.mark.parametrize("src", ["import os", "import subprocess", "import socket", "from os import system",
                                 "import importlib", "import numpy.ctypeslib", "from numpy import lib",
                                 "from . import x", "from math import *", "from fractions import sys"])
def test_blocked_imports(src):
    _err(src, "ImportBlocked")


def test_dangerous_modules_stay_blocked_even_if_allowed():
    allowed = (*DEFAULT_ALLOWED_IMPORTS, "os", "socket", "sys", "pickle")
    for src in ("import os", "import socket\nsocket.socket()", "import sys", "import pickle"):
        _err(src, "ImportBlocked", allowed_imports=allowed)


@pytest.mark.parametrize("src", ["import os\nwhile True:\n    os.fork()",
                                 "__import__('os').fork()",
                                 "import fractions\nwhile True:\n    fractions.sys.modules['os'].fork()",
                                 "import fractions\ngetattr(fractions, 'sys').modules['os'].fork()"])
def test_fork_loop_is_blocked(src):
    _err(src, "ImportBlocked" if src.startswith("import os") else "SecurityViolation")


# ----------------------------------------------------------------------------------------------- files
def test_read_outside_is_a_security_violation():
    assert "outside the sandbox" in _err("result = open('/etc/passwd').read()", "SecurityViolation").message


@pytest.mark.parametrize("target", ["../x", "../../escape.txt", "ABS"])
def test_write_outside_is_blocked(target, sandbox_root, tmp_path):
    path = str(tmp_path / "escape.txt") if target == "ABS" else target
    _err(f"f = open({path!r}, 'w')\nf.write('x')\nf.close()", "SecurityViolation")
    assert not (tmp_path / "escape.txt").exists() and not (sandbox_root / "escape.txt").exists()


def test_write_inside_the_temp_dir_works():
    src = "with open('out.txt', 'w') as f:\n    f.write('hi')\nwith open('out.txt') as f:\n    result = f.read()"
    assert run_untrusted(src, limits=FAST).value == "hi"
    _err("open(1, 'w')", "SecurityViolation")  # no file descriptors


def test_number_of_written_files_is_capped():
    src = "for i in range(40):\n    open('f%d' % i, 'w').close()"
    assert "files written" in _err(src, "SecurityViolation").message


def test_file_size_limit():
    src = "with open('big', 'w') as f:\n    f.write('x' * 200_000)"
    assert "File too large" in _err(src, "RuntimeError", limits=SandboxLimits(max_file_bytes=100_000)).message


# --------------------------------------------------------------------------------------------- escapes
@pytest.mark.parametrize("src", [
    "__import__('os')",
    "b = __builtins__",
    "().__class__.__bases__[0].__subclasses__()",
    "getattr(getattr((), '__cl' + 'ass__'), '__ba' + 'ses__')",
    "'{0.__class__}'.format(1)",
    "getattr('{0.__class__}', 'for' + 'mat')(1)",
    "type(1).mro()",
    "m = getattr(type(1), 'm' + 'ro')",
    "g = (x for x in [])\nf = g.gi_frame",
    "g = (x for x in [])\nf = getattr(g, 'gi_' + 'frame')",
    "f = lambda: 0\nc = f.__code__",
    "print.__self__",
    "eval('1')",
    "exec('x = 1')",
    "compile('1', 'x', 'eval')",
    "globals()",
    "vars()",
    "import operator\ngetattr(operator, 'attr' + 'getter')('__class__')(1)",
    "import string\nstring.Formatter().vformat('{0.__class__}', (1,), {})",
    "import json\njson.codecs.open('/tmp/x', 'w')",
    "import numpy as np\nnp.load('/etc/passwd')",
    "import numpy as np\nnp.zeros(2).tofile('/tmp/x')",
    "t = type(open('a.txt', 'w'))",
    "t = type(type(1))",
    "try:\n    getattr(1, '__class__')\nexcept BaseException:\n    pass\nresult = 1",
    "class A:\n    def __reduce__(self):\n        return 1",
    "def f(_x):\n    return _x",
    "match 1:\n    case int(__class__=c):\n        pass",
])
def test_escapes_are_security_violations(src):
    _err(src, "SecurityViolation")


def test_pil_input_cannot_save_or_show():
    _err("img.save('/tmp/x.png')", "SecurityViolation", inputs={"img": Image.new("L", (2, 2))})
    _err("img.show()", "SecurityViolation", inputs={"img": Image.new("L", (2, 2))})


# ---------------------------------------------------------------------------------------------- errors
def test_syntax_errors_report_the_line():
    assert _err("x = 1\ny = (1,\n", "SyntaxError").message.startswith("line 2")
    assert _err("x = 1\n\nreturn x", "SyntaxError").message.startswith("line 3")  # compile-time error


def test_user_exception_is_a_runtime_error():
    res = _err("x = 1\ny = {}['k']", "RuntimeError")
    assert res.message == "KeyError: 'k' (line 2)"
    assert _err("1 / 0", "RuntimeError").message.startswith("ZeroDivisionError")


@pytest.mark.parametrize("src", ["result = lambda: 0", "class A:\n    pass\nresult = A()",
                                 "import collections\nresult = collections.OrderedDict(a=1)",
                                 "import fractions\nresult = fractions.Fraction(1, 3)",
                                 "import numpy as np\nresult = np.array([len], dtype=object)",
                                 "x = []\nfor i in range(150):\n    x = [x]\nresult = x"])
def test_disallowed_results_are_bad_results(src):
    _err(src, "BadResult")


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch " + self.marker,))


def test_parent_never_unpickles_arbitrary_objects(tmp_path):
    evil = _Evil()
    evil.marker = str(tmp_path / "pwned")
    env = {"ok": True, "value": evil, "error": None, "message": "", "stdout": "", "displayed": []}
    res = sandbox._decode(sandbox._MAGIC + pickle.dumps(env), SandboxLimits())
    assert res.error == "BadResult" and "posix.system" in res.message
    assert not (tmp_path / "pwned").exists()
    # numpy.ndarray is only a marker for the reconstruct helper: REDUCE on it (a huge np.empty) is refused
    bomb = b"\x80\x02cnumpy\nndarray\n" + pickle.dumps(((10**10,),), protocol=2)[2:-1] + b"R."
    assert sandbox._decode(sandbox._MAGIC + bomb, SandboxLimits()).error == "BadResult"
    assert sandbox._decode(b"garbage", SandboxLimits()).error == "BadResult"
    good = pickle.dumps({**env, "value": np.arange(3)}, protocol=5)
    assert np.array_equal(sandbox._decode(sandbox._MAGIC + good, SandboxLimits()).value, [0, 1, 2])
    assert sandbox._decode(sandbox._MAGIC + good + b"x", SandboxLimits()).error == "BadResult"
