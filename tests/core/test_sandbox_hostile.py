"""Hostile suite for iclr26.core.sandbox: every attack is harmless, and every test checks that the caller is
unharmed (alive, no SIGUSR1 received, the canary file untouched, nothing new next to it, no sandbox process
left) and that the call ended in a handled error kind.

Python-layer cases run with ``isolation="python-only"`` (so they prove the Python layers alone refuse them,
and run on machines without namespaces); kernel-layer cases use ``test_sandbox_helpers.escaped``, which
stands for code that already got out of the Python layers, and skip where the kernel layer is unavailable.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest
import test_sandbox_helpers as helpers

from iclr26.core import sandbox, sandbox_wire
from iclr26.core.sandbox import ERROR_KINDS, SandboxLimits, SandboxServer, kernel_isolation_available, run_untrusted

FAST = SandboxLimits(timeout_s=4.0)
KERNEL_WHY = kernel_isolation_available()
needs_kernel = pytest.mark.skipif(KERNEL_WHY is not None, reason=f"kernel layer unavailable here: {KERNEL_WHY}")
ESCAPED = {"x": f"{helpers.__name__}:escaped"}
_GOT_USR1: list = []


def _marker_pids(marker: str, wait_s: float = 2.0) -> list[int]:
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


@pytest.fixture(autouse=True)
def unharmed(tmp_path, monkeypatch):
    """Canary next to the sandbox's temp root; afterwards: no signal, canary intact, nothing new, no processes."""
    root = tmp_path / "sbx"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    canary = tmp_path / "canary.txt"
    canary.write_text("canary")
    old = signal.signal(signal.SIGUSR1, lambda *a: _GOT_USR1.append(1))
    _GOT_USR1.clear()
    yield canary
    time.sleep(0.05)  # a late signal would arrive by now
    signal.signal(signal.SIGUSR1, old)
    assert not _GOT_USR1, "the caller received SIGUSR1"
    assert canary.read_text() == "canary"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt", "sbx"]
    assert list(root.iterdir()) == []
    assert _marker_pids("iclr26-sandbox:" + str(root)) == []


def _check(src: str, kinds: str | tuple, isolation: str = "python-only", **kw):
    kw.setdefault("limits", FAST)
    res = run_untrusted(src, isolation=isolation, **kw)
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    assert not res.ok and res.error in kinds and res.error in ERROR_KINDS, (src, res)
    assert res.value is None and res.message
    return res


# ------------------------------------------------------------------------------- techniques from the report
def test_singledispatch_string_annotation_escape_is_refused(unharmed):
    payload = f"().__class__.__base__.__subclasses__() or open({str(unharmed)!r}, 'w').write('pwned')"
    src = textwrap.dedent(f"""
        import functools
        def g(x: {payload!r}):
            return 1
        f = functools.singledispatch(lambda x: 0)
        f.register(g)
        """)
    for mode in ("python-only", "kernel") if KERNEL_WHY is None else ("python-only",):
        assert "eval/exec" in _check(src, "SecurityViolation", isolation=mode).message
    # the decorator form and typing itself
    _check(
        "import functools\n@functools.singledispatch\ndef f(x):\n    return 0\n"
        "@f.register\ndef g(x: 'int'):\n    return 1",
        "SecurityViolation",
    )
    _check("import typing\ntyping.get_type_hints(len)", "ImportBlocked")
    _check("import functools\nfunctools.get_type_hints", "SecurityViolation")


def test_numpy_record_file_readers_are_refused(unharmed):
    for src in (
        f"import numpy.ma.mrecords as m\nresult = m.openfile({str(unharmed)!r}).read()",
        f"import numpy as np\nresult = np.ma.mrecords.fromtextfile({str(unharmed)!r})",
        "import numpy as np\nf = getattr(np.ma, 'mrec' + 'ords')",
        "import numpy as np\nresult = np.loadtxt('/etc/hostname')",
        "import numpy as np\nresult = np.genfromtxt('/etc/hostname')",
        "import numpy as np\nresult = np.fromregex('/etc/hostname', 'x', 'u1')",
        "import numpy as np\nnp.zeros(2).tofile('/tmp/x')",
    ):
        _check(src, ("SecurityViolation", "ImportBlocked"))


def test_source_over_the_cap_costs_the_parent_nothing(monkeypatch):
    def no_popen(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(sandbox.subprocess, "Popen", no_popen)
    src = "x = 1\n" * 400_000  # 2.4 MB
    t0 = time.process_time()
    res = run_untrusted(src, limits=FAST)
    assert res.error == "SourceTooLarge" and not res.ok and res.isolation is None
    assert run_untrusted("é" * 200_000, limits=FAST).error == "SourceTooLarge"  # 400 kB once encoded
    assert SandboxServer(src).call("f").error == "SourceTooLarge"
    assert time.process_time() - t0 < 1.0  # no parsing: O(1) in the source length


def test_forged_and_malformed_frames_are_bad_results():
    lim = SandboxLimits()
    good = {"ok": True, "value": 1, "error": None, "message": "", "stdout": "", "displayed": []}
    assert sandbox._decode_frame(sandbox_wire.encode(good), lim, "kernel").value == 1
    arr = sandbox_wire.encode({**good, "value": np.arange(3, dtype=np.int32)})
    structured = arr.replace(b"<i4", b"V12")  # same length, a structured/void dtype: refused before use
    huge_shape = arr.replace((3).to_bytes(8, "little"), (2**40).to_bytes(8, "little"), 1)
    frames = [
        b"",
        b"garbage",
        sandbox_wire.encode(good) + b"x",
        structured,
        huge_shape,
        arr[:-1],
        sandbox_wire.encode({**good, "error": "NotAKind", "ok": False}),
        b"l" + (2**60).to_bytes(8, "little"),
        b"s" + (5).to_bytes(8, "little") + b"\xff\xfe\xfa\xfb\xfc",
        b"i" + (10**6).to_bytes(4, "little"),
    ]
    nested = b"l" + (1).to_bytes(8, "little")
    frames.append(nested * 200 + b"N")  # 200 levels deep
    for frame in frames:
        res = sandbox._decode_frame(frame, lim, "kernel")
        assert res.error == "BadResult" and not res.ok and res.value is None, frame[:40]


def test_hash_colliding_keys_are_refused_in_bounded_time():
    p = 2**61 - 1  # CPython's int hash modulus: k * p all hash to 0
    colliding = [k * p for k in range(1, 20_001)]
    frame = sandbox_wire.encode(
        {"ok": True, "value": set(colliding[:9]), "error": None, "message": "", "stdout": "", "displayed": []}
    )
    assert sandbox._decode_frame(frame, SandboxLimits(), "kernel").error == "BadResult"
    body = b"S" + len(colliding).to_bytes(8, "little") + b"".join(sandbox_wire.encode(c) for c in colliding)
    t0 = time.process_time()
    with pytest.raises(sandbox_wire.WireError, match="hash"):
        sandbox_wire.decode(body)
    with pytest.raises(sandbox_wire.WireError, match="hash"):
        sandbox_wire.decode(
            b"d" + len(colliding).to_bytes(8, "little") + b"".join(sandbox_wire.encode(c) + b"N" for c in colliding)
        )
    assert time.process_time() - t0 < 2.0  # building these would take minutes
    _check("p = 2 ** 61 - 1\nresult = set(k * p for k in range(1, 300))", "BadResult")


def test_vtool_parser_recursion_payload_is_a_handled_error():
    _check("result = " + "-" * 3000 + "1", ("SyntaxError", "RecursionLimit"))
    _check("(" * 500 + ")" * 500, "SyntaxError")


# --------------------------------------------------------------------------- Python layers: new techniques
FRAME_WALKS = [
    "g = (x for x in [1])\nnext(g)\nf = g.gi_frame",
    "try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__",
    "try:\n    1 / 0\nexcept Exception as e:\n    t = getattr(e, '__trace' + 'back__')",
    "import functools\nfunctools.reduce(getattr, ['__class__', '__base__'], 1)",
    "g = (lambda: 0).__globals__",
    "import random\nrandom.Random.__init__",
    "async def f():\n    pass\nc = f()\nfr = c.cr_frame",
    "import functools\nfunctools.partial(getattr, 1)('__cl' + 'ass__')",
    "r = list(map(getattr, [1], ['__class__']))",
    "v = vars()",
    "x = [].__class__.__mro__",
    "import operator\noperator.attrgetter('__class__')(1)",
    "import operator\nm = operator.methodcaller('__reduce__')",
]
FORMAT_AND_ANNOTATIONS = [
    "'{0.__class__.__base__}'.format(1)",
    "f = str.format_map",
    "x = f'{(1).__class__}'",
    "def f(x: int):\n    return x\na = f.__annotations__",
    "import json\njson.loads('1', object_hook=eval)\nresult = json.loads('{}', object_hook=eval)",
    "import re\nresult = re.sub('x', eval, 'x')",
]
DECORATORS_AND_METACLASSES = [
    "class A(metaclass=type):\n    pass",
    "class M(type):\n    pass",
    "import functools\n@functools.lru_cache\ndef f(x):\n    return x\nw = f.__wrapped__",
    "def deco(fn):\n    return fn.__code__\n@deco\ndef f():\n    pass",
    "class A:\n    def __init_subclass__(cls):\n        pass",
    "@eval\ndef f():\n    pass",
]
UNICODE = [
    "ｅｖａｌ('1')",
    "result = ｏｐｅｎ('/etc/hostname').read()",
    "x = 1\ny = x.＿＿class＿＿",  # fullwidth low lines: the parser refuses them
    "x = 1\ny = x.__ｃｌａｓｓ__",  # NFKC: checked as __class__
    "ｂ = __ｂｕｉｌｔｉｎｓ__",
    "__ｉｍｐｏｒｔ__('os')",
    "import ｏｓ",
    "ｇｅｔａｔｔｒ(1, '__class__')",
]


@pytest.mark.parametrize(
    "group",
    [FRAME_WALKS, FORMAT_AND_ANNOTATIONS, DECORATORS_AND_METACLASSES, UNICODE],
    ids=["frames", "format-annotations", "decorators-metaclasses", "unicode"],
)
def test_python_layers_refuse(group):
    for src in group:
        _check(src, ("SecurityViolation", "ImportBlocked", "RuntimeError", "SyntaxError"))
    # the runtime string is not NFKC-normalised, but getattr takes only ASCII identifiers (an allow-list)
    assert "not allowed" in _check("getattr(1, '＿＿class＿＿')", "SecurityViolation").message
    # namedtuple's exec only ever sees checked identifiers
    _check("import collections\nP = collections.namedtuple('P', ['a=__import__(\"os\")'])", "RuntimeError")


def test_resource_exhaustion_is_a_handled_error():
    _check("x = [0] * (10 ** 9)", "MemoryLimit")
    _check("while True:\n    pass", "Timeout", limits=SandboxLimits(timeout_s=1.0))
    _check("def f(n):\n    return f(n + 1) + 1\nresult = f(0)", "RecursionLimit")
    _check("result = str(10 ** 100000)", "RuntimeError")  # int -> str digit limit
    _check("result = 2 ** (2 ** 20)", "BadResult")  # a 131 kB int does not travel
    _check("x = []\nfor i in range(150):\n    x = [x]\nresult = x", "BadResult")
    _check("result = b'x' * 9_000_000", "OutputTooLarge")
    _check("fs = [open('f%d' % (i % 8), 'w') for i in range(200)]", "RuntimeError")  # RLIMIT_NOFILE
    _check("for i in range(40):\n    open('f%d' % i, 'w').close()", "SecurityViolation")  # file count
    _check(
        "with open('big', 'w') as f:\n    f.write('x' * 200_000)",
        "RuntimeError",
        limits=SandboxLimits(timeout_s=4.0, max_file_bytes=100_000),
    )
    res = run_untrusted(
        "for i in range(100000):\n    print('x' * 100)\nresult = 1",
        isolation="python-only",
        limits=SandboxLimits(timeout_s=4.0, max_output_bytes=80_000),
    )
    assert res.ok and res.stdout.endswith("[stdout truncated]") and len(res.stdout) < 11_000


def test_file_network_process_signal_attempts_refused_by_the_python_layers(unharmed):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        cases = [
            ("result = open('/etc/hostname').read()", {}),
            (f"open({str(unharmed)!r}, 'w').write('x')", {}),
            (f"open('../../{unharmed.name}', 'a')", {}),
            ("open(0).read()", {}),
            ("import json\njson.codecs.open('/tmp/x', 'w')", {}),
            ("import socket", {}),
            (f"c(('127.0.0.1', {port}))", {"c": "socket:create_connection"}),
            ("p = popen(['true'])", {"popen": "subprocess:Popen"}),
            ("system('true')", {"system": "os:system"}),
            ("fork()", {"fork": "os:fork"}),
            (f"kill({os.getpid()}, 10)", {"kill": "os:kill"}),
            (f"kill({os.getpid()}, 10)", {"kill": "signal:pthread_kill"}),
            (f"w({str(unharmed)!r}, 'w')", {"w": "builtins:open"}),
            ("r('/etc/hostname').read()", {"r": "io:open"}),
            ("l('libc.so.6')", {"l": "ctypes:CDLL"}),
        ]
        for src, tools in cases:
            _check(src, ("SecurityViolation", "ImportBlocked"), tools=tools)
        listener.settimeout(0.05)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_result_channel_from_the_python_layers():
    fake = "\\x00" * 16 + "\\x08" + "\\x00" * 7 + "TTTTTTTT"
    res = run_untrusted(f"print('{fake}')\nresult = 'real'", isolation="python-only", limits=FAST)
    assert res.ok and res.value == "real" and "TTTT" in res.stdout  # printed text never becomes a result
    for src in (
        "import numpy as np\nresult = np.zeros(2, dtype=[('a', 'i4'), ('b', 'f8')])",
        "import numpy as np\nresult = np.array([len], dtype=object)",
        "import numpy as np\nresult = np.ma.masked_array([1, 2], [0, 1])",
        "import numpy as np\nresult = np.dtype('i4')",
        "import numpy as np\nresult = np.array(['a'])",
        "class A:\n    pass\nresult = A()",
        "result = lambda: 0",
        "result = {[]: 1} if False else {(1, [2]): 3}",
    ):
        _check(src, ("BadResult", "RuntimeError"))


def test_server_is_replaced_after_each_violation():
    with SandboxServer("def f(x):\n    return x + 1", isolation="python-only", limits=FAST) as srv:
        assert srv.call("f", 1).value == 2
        for src in (
            "import functools\ndef g(x: 'int'):\n    pass\nfunctools.singledispatch(len).register(g)",
            "while True:\n    pass",
            "x = bytearray(2 ** 34)",
        ):
            res = srv.run(src)
            assert not res.ok and res.error in ("SecurityViolation", "Timeout", "MemoryLimit"), res
            assert srv.call("f", 2).value == 3  # a fresh child, the definitions loaded again
        assert srv.restarts == 3


# ------------------------------------------------------------------------------------------ kernel layer
@needs_kernel
def test_kernel_layer_stops_escaped_code(unharmed):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        outside = os.path.join(os.path.dirname(os.path.abspath(helpers.__file__)), ".sandbox-escape-canary")
        expect = {
            ("write", str(unharmed)): "err: ENOENT",  # the caller's /tmp is not even visible
            ("write", outside): "err: EROFS",  # everything else is mounted read-only
            ("mkdir", outside + "-dir"): "err: EROFS",
            ("fork", None): "err: EPERM",
            ("spawn", None): "err: EPERM",
            ("exec", None): "err: EPERM",
            ("connect", port): "err: EPERM",
            ("socketpair", None): "err: EPERM",
            ("kill", os.getpid()): "err: EPERM",
            ("killpg", None): "err: EPERM",
            ("setsid", None): "err: EPERM",
            ("thread", None): "ok: thread [1]",  # threads are fine: the filter refuses processes only
            ("tmp", None): f"ok: {_kept_tmp_tops()}",  # a private /tmp (holding only a kept environment)
            ("run", None): "ok: []",  # no daemon sockets or FIFOs
            ("dev", None): "ok: ['full', 'null', 'random', 'urandom', 'zero']",  # no disks or ttys to write to
            ("procs", None): "ok: [1, 2]",  # the PID namespace holds init and the worker only
        }
        homes = [os.path.join("/root", n) for n in (os.listdir("/root") if os.access("/root", os.R_OK) else [])]
        for path in [p for p in ["/etc/shadow", *homes] if os.path.isfile(p) and not os.path.islink(p)][:4]:
            if os.access(path, os.R_OK) and os.path.getsize(path) > 0:
                expect[("read", path)] = "ok: 0 bytes"  # secrets are mounted over
        src = "result = [x(a, b) for a, b in todo]"
        res = run_untrusted(
            src, {"todo": list(expect)}, tools=ESCAPED, isolation="kernel", limits=SandboxLimits(timeout_s=10)
        )
        assert res.ok and res.isolation == "kernel", res
        created = [p for p in (outside, outside + "-dir") if os.path.exists(p)]
        for p in created:
            os.rmdir(p) if os.path.isdir(p) else os.remove(p)
        assert not created
        assert dict(zip(expect, res.value)) == expect
        listener.settimeout(0.05)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


@needs_kernel
def test_kernel_namespaces_are_fresh():
    res = run_untrusted("result = x('ns')", tools=ESCAPED, isolation="kernel", limits=FAST)
    inside, parent = res.value.removeprefix("ok: ").split(" pid="), helpers.parent_ns().split()
    assert res.ok and inside[1] == "2"  # the worker is PID 2 under its own init
    for a, b in zip(inside[0].split(), parent, strict=True):
        assert a.split(":")[0] == b.split(":")[0] and a != b, (a, b)


@needs_kernel
def test_forged_frames_of_escaped_code_are_refused():
    res = run_untrusted("result = x('forge_stdout')", tools=ESCAPED, isolation="kernel", limits=FAST)
    assert res.ok and res.value == "ok: printed"  # fd 1/2 are never the result channel
    res = run_untrusted("x('forge_resultfd')\nresult = 'real'", tools=ESCAPED, isolation="kernel", limits=FAST)
    assert res.error == "BadResult" and "nonce" in res.message and res.value is None
    with SandboxServer(
        "def f():\n    return x('forge_resultfd')", tools=ESCAPED, isolation="kernel", limits=FAST
    ) as srv:
        assert srv.call("f").error == "BadResult" and srv.restarts == 1


@needs_kernel
def test_kernel_disk_cap():
    src = "for i in range(6):\n    with open('f%d' % i, 'w') as f:\n        f.write('x' * 4_000_000)"
    res = _check(src, "RuntimeError", isolation="kernel", limits=SandboxLimits(timeout_s=5, max_disk_bytes=10_000_000))
    assert "No space left" in res.message


def test_without_the_kernel_layer_nothing_runs_unless_named(unharmed):
    """Where namespaces are unavailable (simulated here by a seccomp filter refusing unshare, as container
    runtimes do), the default refuses to run; python-only runs and says so."""
    script = textwrap.dedent(f"""
        import ctypes, json, struct, sys
        if {KERNEL_WHY is None}:
            prog = [(0x20, 0, 0, 0), (0x15, 0, 1, 272), (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7FFF0000)]
            raw = b"".join(struct.pack("HBBI", *i) for i in prog)
            buf = ctypes.create_string_buffer(raw, len(raw))
            fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(buf)), 16)
            libc = ctypes.CDLL(None)
            libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
            assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0
        from iclr26.core.sandbox import SandboxLimits, SandboxServer, run_untrusted
        lim = SandboxLimits(timeout_s=20)
        out = []
        for iso in ("kernel", "python-only"):
            r = run_untrusted("print('ran')\\nresult = 1", isolation=iso, limits=lim)
            out.append([r.ok, r.error, r.isolation, r.stdout])
        r = SandboxServer("def f():\\n    return 2", limits=lim).call("f")
        out.append([r.ok, r.error, r.isolation, r.stdout])
        print(json.dumps(out))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("ICLR26_SANDBOX_ISOLATION", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kernel, python_only, server = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert kernel == [False, "IsolationUnavailable", None, ""]
    assert python_only == [True, None, "python-only", "ran\n"]
    assert server == [False, "IsolationUnavailable", None, ""]


def test_escape_through_the_vtool_executor_is_refused(unharmed):
    """The original route: model output -> a fenced python block -> ToolExecutor -> the sandbox."""
    from PIL import Image

    from iclr26.vtool_r1.executor import ToolExecutor

    code = (
        "import functools\n"
        f"def g(x: {f'open({str(unharmed)!r}, chr(119)).write(chr(120))'!r}):\n"
        "    return 1\n"
        "functools.singledispatch(len).register(g)\n"
        "display(image_1)\n"
    )
    ex = ToolExecutor(mode="sandbox", limits=SandboxLimits(timeout_s=5.0))
    res = ex.execute(code, Image.new("RGB", (8, 8)), {})
    assert not res.ok and res.image is None and res.path == "sandbox"
    assert res.error == ("SecurityViolation" if KERNEL_WHY is None else "IsolationUnavailable"), res


@needs_kernel
def test_detached_process_dies_with_the_call():
    import test_sandbox_spawner as spawner

    res = run_untrusted("result = s()", tools={"s": f"{spawner.__name__}:spawned"}, isolation="kernel", limits=FAST)
    assert res.ok and res.value.startswith("alive: "), res  # it ran, detached, during the call
    assert _marker_pids(spawner.MARKER) == []  # and the PID namespace took it down with the call


def test_kernel_layer_is_available_or_cleanly_refused():
    """Skipping the kernel tests is only right when the kernel refuses namespaces, never when our set-up breaks."""
    assert KERNEL_WHY is None or KERNEL_WHY.startswith("IsolationUnavailable: kernel isolation is unavailable"), (
        KERNEL_WHY
    )


def _kept_tmp_tops() -> list[str]:
    """What the sandbox's /tmp holds: the top folders of the interpreter/import paths that live under /tmp."""
    from iclr26.core.sandbox_kernel import _kept_dirs_under_tmp

    keep = [*sys.path, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable]
    kept = _kept_dirs_under_tmp(tuple(os.path.realpath(os.path.abspath(p)) for p in keep if p))
    return sorted({d.split("/")[2] for d in kept})


@needs_kernel
def test_kernel_layer_keeps_an_environment_that_lives_under_tmp(tmp_path_factory, monkeypatch):
    """/tmp becomes a fresh tmpfs in the sandbox; a virtualenv or import path under /tmp (a CI clone in /tmp,
    pytest's tmp_path) must stay importable there, read-only, instead of vanishing."""
    from iclr26.core.sandbox import DEFAULT_ALLOWED_IMPORTS
    from iclr26.core.sandbox_kernel import _kept_dirs_under_tmp

    tmp_path = tmp_path_factory.mktemp("under_tmp")
    assert str(tmp_path).startswith("/tmp/")
    (tmp_path / "iclr26_tmp_probe.py").write_text("VALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    res = run_untrusted(
        "import iclr26_tmp_probe\nresult = iclr26_tmp_probe.VALUE",
        allowed_imports=(*DEFAULT_ALLOWED_IMPORTS, "iclr26_tmp_probe"),
        isolation="kernel",
        limits=FAST,
    )
    assert (res.ok, res.value, res.isolation) == (True, 42, "kernel"), res
    # kept, but read-only: escaped code (Python layers disabled) cannot write into it
    res = run_untrusted(
        "result = x('write', target)",
        {"target": str(tmp_path / "planted.py")},
        tools=ESCAPED,
        isolation="kernel",
        limits=FAST,
    )
    assert (res.ok, res.value) == (True, "err: EROFS"), res
    assert not (tmp_path / "planted.py").exists()
    assert _kept_dirs_under_tmp(("/tmp/a/b", "/tmp/a", "/usr/lib", "/tmp")) == (
        ["/tmp/a"] if os.path.isdir("/tmp/a") else []
    )
    assert _kept_dirs_under_tmp((str(tmp_path / "x.py"), str(tmp_path))) == [str(tmp_path)]
