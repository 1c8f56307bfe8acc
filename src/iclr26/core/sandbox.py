"""Run untrusted Python source (LLM-generated reward code, tool calls) in a separate, locked-down process.

Threat model: the source string may be buggy or hostile (infinite loops, huge allocations, fork loops,
attempts to read/write files, open sockets or climb out of the restricted namespace via dunder
attributes). The parent must never crash, hang or execute anything the child chose; the child gets the
caller's ``inputs`` and trusted ``tools`` and returns a value, printed text and ``display()``-ed objects.

Layers (defence in depth):

1. Process: ``python -I -B`` child in its own session, cwd = a fresh temp dir (removed afterwards), minimal
   env, sys.path = the parent's (made absolute). Wall time is enforced by the parent, which SIGKILLs the
   whole process group; the child is always reaped. The wall time includes interpreter start-up and the
   pre-import of the modules the code imports (~0.05 s bare, ~0.15 s with numpy).
2. rlimits set in the child before anything else runs: RLIMIT_AS=memory_mb, RLIMIT_CPU~timeout+1,
   RLIMIT_FSIZE (SIGXFSZ ignored, so oversized writes raise OSError), RLIMIT_CORE=0; after the
   pre-imports also RLIMIT_NOFILE=64 and RLIMIT_NPROC=0 (so tools cannot start threads/processes either).
   At most 32 files may be opened for writing, which bounds the disk a call can fill.
   Measured address space of the child (python 3.11, numpy 2.4, one BLAS thread): ~13 MB bare, ~100 MB
   with numpy, ~110 MB with numpy+PIL, ~600 MB if a tool or input pulls in torch, so the 1024 MB default
   leaves ~900 MB for the code itself (give tools that import torch >= 2048 MB).
3. Static AST check (in the parent, repeated in the child): no identifier or attribute starting with ``_``
   (except the throw-away name ``_``), no attribute in :data:`BLOCKED_ATTRS` (str.format tricks, frame
   walking, numpy file I/O and ctypes, ...), imports only of allowed modules -> ``ImportBlocked``;
   anything else -> ``SecurityViolation``. Every ``obj.attr`` load is then rewritten into a guarded call
   that also refuses, at run time, modules outside the allowlist (``fractions.sys``, ``json.codecs``),
   frames/code objects and dangerous builtins or classes from os/io/... reached through allowed modules.
4. Restricted builtins: eval/exec/compile/input/breakpoint/globals/locals/vars/... raise
   ``SecurityViolation``; getattr/setattr/delattr/hasattr refuse ``_`` and blocked names; ``type(x)``
   refuses io/os classes and metaclasses; ``__import__`` enforces the allowlist; ``open`` only opens paths
   that resolve inside the temp dir (anything else -> ``SecurityViolation``, also for reads such as
   ``open('/etc/passwd')``). :data:`BLOCKED_MODULES` (os, sys, socket, io, pickle, ...) stay blocked even
   if a caller adds them to ``allowed_imports``. numpy is allowed for convenience, with its file/ctypes
   surface (load, save, tofile, fromfile, memmap, ctypeslib, lib, testing, ...) blocked by name. Blocked
   names apply to every object (``json.load``/``json.dump`` are unavailable too: use loads/dumps), and to
   callables reached under another name. Imports issued by C code on behalf of user code (numpy lazily
   loading ``numpy._core._methods``) go back to that C code, not to the user, and are allowed for allowed
   packages. Violations are sticky: catching the exception in user code does not hide them.
5. Recursion limit of 400 in the child -> ``RecursionLimit``.
6. Safe transport: child -> parent is a pickle read with an unpickler whose ``find_class`` knows only
   complex/set/frozenset and numpy's ndarray/dtype/scalar reconstructors (wrapped and type-checked);
   anything else -> ``BadResult`` without running anything in the parent. Size is capped
   (``OutputTooLarge``); printed text is truncated to min(1 MB, max_output_bytes / 8) characters and
   does not fail the call. numpy subclasses (masked arrays, matrix, recarray), Fraction, Decimal, user
   classes, functions etc. are ``BadResult``: return plain data or plain arrays.

Known limits: this is defence in depth in pure Python, not a security boundary like a VM, gVisor or
seccomp. A CPython or numpy memory-corruption bug reachable from the allowed surface would give the
child full user rights. There is no network namespace: sockets are unreachable only because socket/os
cannot be imported or reached; for stronger isolation run the parent (or the child command) inside a
network namespace (``unshare -n``/a container). RLIMIT_NPROC is not enforced for root, so fork-loop
protection for root relies on the import/attribute rules alone. Values returned from *calls* into
allowed modules are not inspected (only attribute loads are). For hostile code at scale, run this inside
a container or VM with its own user, network and filesystem namespaces.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import os
import pickle
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_ALLOWED_IMPORTS", "SandboxLimits", "SandboxResult", "run_untrusted"]

DEFAULT_ALLOWED_IMPORTS = ("math", "cmath", "random", "statistics", "itertools", "functools", "collections",
                           "re", "string", "heapq", "bisect", "operator", "fractions", "decimal", "numpy", "json")
BLOCKED_MODULES = frozenset(
    "os sys subprocess socket shutil importlib ctypes multiprocessing threading signal pathlib io builtins gc "
    "inspect pickle marshal posix nt _thread _io _socket _ctypes _pickle _posixsubprocess _signal _imp "
    "_frozen_importlib _frozen_importlib_external codecs _codecs tempfile glob mmap resource fcntl select pty "
    "runpy code pdb asyncio concurrent urllib http ssl zipimport pkgutil site sysconfig webbrowser faulthandler "
    "atexit".split())
BLOCKED_ATTRS = frozenset(
    "format format_map vformat get_field Formatter attrgetter methodcaller mro gi_frame gi_code gi_yieldfrom "
    "cr_frame cr_code cr_await ag_frame ag_code ag_await f_globals f_locals f_builtins f_back f_code tb_frame "
    "tb_next co_code ctypeslib ctypes load save savez savez_compressed savetxt loadtxt genfromtxt fromregex "
    "fromfile tofile memmap open_memmap DataSource dump lib f2py distutils testing test show".split())
_DANGEROUS_ORIGINS = BLOCKED_MODULES - {"builtins"}  # int, list... are fine; bad builtins are denied by identity
ERROR_KINDS = frozenset({"Timeout", "MemoryLimit", "ImportBlocked", "SecurityViolation", "SyntaxError",
                         "RuntimeError", "RecursionLimit", "OutputTooLarge", "Crashed", "BadResult"})

_FILENAME = "<sandbox>"
_GUARD = "_sbx_getattr"            # injected by the AST rewrite; user code cannot spell it
_MAGIC = b"ICLR26-SANDBOX-1\n"
_RECURSION_LIMIT = 400
_MAX_DEPTH = 100                   # nesting accepted in a decoded result
_MAX_FILES = 32                    # files user code may create/write (each capped by RLIMIT_FSIZE)
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_TOOL_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
_BOOT = ("import sys, importlib.util as u; s = u.spec_from_file_location('_iclr26_sandbox_child', sys.argv[1]); "
         "m = sys.modules[s.name] = u.module_from_spec(s); s.loader.exec_module(m); m._child_main(sys.argv[2:])")


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0        # wall time; the child's process group is killed after it
    memory_mb: int = 1024         # RLIMIT_AS of the child (address space)
    max_output_bytes: int = 8_000_000   # cap on the serialized result + captured stdout
    max_file_bytes: int = 10_000_000    # RLIMIT_FSIZE


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    value: Any = None            # the returned value, None on error
    error: str | None = None     # one of ERROR_KINDS
    message: str = ""            # one line for humans (exception type + text for RuntimeError)
    stdout: str = ""             # what the code printed (truncated)
    displayed: tuple = ()        # objects passed to display(...) in order (images as uint8 numpy arrays)


# ----------------------------------------------------------------------------------------- static check
def _bad_ident(name: str | None) -> bool:
    return name is not None and name != "_" and name.startswith("_")


def _bad_attr(name: str) -> bool:
    return name.startswith("_") or name in BLOCKED_ATTRS


def _module_ok(name: str, allowed: frozenset) -> bool:
    parts = name.split(".")
    return (parts[0] in allowed and parts[0] not in BLOCKED_MODULES
            and not any(not p or _bad_attr(p) for p in parts))


def _static_problem(tree: ast.AST, allowed: frozenset) -> tuple[str, str] | None:
    """First rule the tree breaks as (error kind, message), or None."""
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}: "
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _module_ok(a.name, allowed):
                    return "ImportBlocked", f"{where}import of '{a.name}' is not allowed"
        elif isinstance(node, ast.ImportFrom):
            mod = "." * node.level + (node.module or "")
            if node.level or not _module_ok(mod, allowed):
                return "ImportBlocked", f"{where}import from '{mod}' is not allowed"
            for a in node.names:
                if a.name == "*" or _bad_attr(a.name):
                    return "ImportBlocked", f"{where}'from {mod} import {a.name}' is not allowed"
        attrs = [node.attr] if isinstance(node, ast.Attribute) else getattr(node, "kwd_attrs", [])  # MatchClass
        for attr in attrs:
            if _bad_attr(attr):
                return "SecurityViolation", f"{where}attribute '{attr}' is not allowed"
        # every identifier the code binds or reads: Name.id, def/class/except/match/type-param names, args, ...
        names = [getattr(node, f, None) for f in ("id", "name", "arg", "asname", "rest")]
        for n in names + (node.names if isinstance(node, ast.Global | ast.Nonlocal) else []):
            if isinstance(n, str) and _bad_ident(n):
                return "SecurityViolation", f"{where}name '{n}' is not allowed (names may not start with '_')"
    return None


class _GuardAttributes(ast.NodeTransformer):
    """Rewrite every attribute load ``x.name`` into ``_sbx_getattr(x, 'name')``."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        call = ast.Call(ast.Name(_GUARD, ast.Load()), [node.value, ast.Constant(node.attr)], [])
        return ast.copy_location(call, node)


def _prepare(source: str, allowed: frozenset) -> tuple[Any, tuple[str, str] | None, set[str]]:
    """Parse, check, rewrite and compile ``source``: (code, None, imported modules) or (None, (kind, msg), _)."""
    try:
        tree = ast.parse(source, _FILENAME, "exec")
        problem = _static_problem(tree, allowed)
        if problem:
            return None, problem, set()
        imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imports |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        tree = ast.fix_missing_locations(_GuardAttributes().visit(tree))
        return compile(tree, _FILENAME, "exec", dont_inherit=True), None, imports
    except SyntaxError as e:
        return None, ("SyntaxError", f"line {e.lineno}: {e.msg}"), set()
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return None, ("SyntaxError", f"line ?: source cannot be compiled ({type(e).__name__}: {e})"[:500]), set()


# ------------------------------------------------------------------------------------ safe transport
class _SafeUnpickler(pickle.Unpickler):
    """Only builtin containers/scalars and numpy arrays, dtypes and scalars can be rebuilt."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in ("complex", "set", "frozenset"):
            return getattr(builtins, name)
        np_mods = ("numpy._core.multiarray", "numpy.core.multiarray", "numpy._core.numeric", "numpy.core.numeric")
        if module in ("numpy", *np_mods):
            import numpy as np

            helpers = {"dtype": np.dtype, "ndarray": _NDARRAY_TOKEN, "_reconstruct": _np_reconstruct,
                       "scalar": _np_scalar, "_frombuffer": _np_frombuffer}
            if name in helpers and (module == "numpy") == (name in ("dtype", "ndarray")):
                return helpers[name]
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a sandbox result")


_NDARRAY_TOKEN = object()  # stands for numpy.ndarray; not callable, so REDUCE on it fails


def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> Any:
    import numpy as np

    if cls is not _NDARRAY_TOKEN or shape != (0,):
        raise pickle.UnpicklingError("bad ndarray reconstruct call")
    return np.ndarray((0,), dtype=np.uint8)  # numpy's __setstate__ (BUILD) then fills in dtype/shape/data


def _np_frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> Any:
    import numpy as np

    ok_shape = isinstance(shape, tuple) and all(type(d) is int for d in shape)
    if not (isinstance(buf, bytes | bytearray) and isinstance(dtype, np.dtype) and not dtype.hasobject
            and ok_shape and order in ("C", "F")):
        raise pickle.UnpicklingError("bad ndarray buffer")
    arr = np.frombuffer(buf, dtype=dtype).reshape(shape, order=order)
    return arr if arr.flags.writeable else arr.copy()


def _np_scalar(dtype: Any, data: Any) -> Any:
    import numpy as np

    if not (isinstance(dtype, np.dtype) and not dtype.hasobject and isinstance(data, bytes)
            and len(data) == dtype.itemsize <= 4096):
        raise pickle.UnpicklingError("bad numpy scalar")
    return np.frombuffer(data, dtype=dtype)[0]


def _too_deep(obj: Any) -> bool:
    stack, seen = [(obj, 0)], set()
    while stack:
        cur, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return True
        if isinstance(cur, list | tuple | set | frozenset | dict) and id(cur) not in seen:
            seen.add(id(cur))
            items = [*cur.keys(), *cur.values()] if isinstance(cur, dict) else list(cur)
            stack.extend((x, depth + 1) for x in items)
        elif type(cur).__name__ == "ndarray" and cur.dtype.hasobject and id(cur) not in seen:
            seen.add(id(cur))
            stack.extend((x, depth + 1) for x in cur.ravel().tolist())
    return False


def _decode(data: bytes, limits: SandboxLimits) -> SandboxResult:
    """Turn the child's frame into a result; never executes anything the child chose."""
    if not data.startswith(_MAGIC):
        return SandboxResult(False, error="BadResult", message="malformed result frame from the sandbox")
    buf = io.BytesIO(data[len(_MAGIC):])
    try:
        env = _SafeUnpickler(buf).load()
        if buf.read(1):
            raise pickle.UnpicklingError("trailing data after the result")
        if not (isinstance(env, dict) and set(env) == {"ok", "value", "error", "message", "stdout", "displayed"}
                and isinstance(env["ok"], bool) and isinstance(env["message"], str)
                and isinstance(env["stdout"], str) and isinstance(env["displayed"], list)
                and (env["error"] is None if env["ok"] else env["error"] in ERROR_KINDS)):
            raise pickle.UnpicklingError("result envelope has the wrong shape")
        if _too_deep(env["value"]) or _too_deep(env["displayed"]):
            raise pickle.UnpicklingError(f"result nested deeper than {_MAX_DEPTH} levels")
    except Exception as e:  # includes MemoryError/RecursionError from hostile frames
        return SandboxResult(False, error="BadResult", message=f"refused the sandbox result: {e}"[:500])
    return SandboxResult(env["ok"], env["value"] if env["ok"] else None, env["error"], env["message"][:2000],
                         env["stdout"][: limits.max_output_bytes], tuple(env["displayed"]))


# ------------------------------------------------------------------------------------------- parent
def _resolve_tool(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _check_args(inputs: dict, tools: dict, result_name: str | None, call: Any) -> None:
    for kind, names in (("input", inputs), ("tool", tools)):
        for name in names:
            if not isinstance(name, str) or not _IDENT.match(name) or name == "display":
                raise ValueError(f"{kind} name {name!r}: use an identifier not starting with '_' (not 'display')")
    if set(inputs) & set(tools):
        raise ValueError(f"names given both as inputs and tools: {sorted(set(inputs) & set(tools))}")
    for name, spec in tools.items():
        if not isinstance(spec, str) or not _TOOL_SPEC.match(spec):
            raise ValueError(f"tool {name!r}: spec {spec!r} is not 'package.module:attr'")
        try:
            _resolve_tool(spec)
        except Exception as e:
            raise ValueError(f"tool {name!r}: cannot import {spec!r}: {type(e).__name__}: {e}") from e
    if result_name is not None and not (isinstance(result_name, str) and _IDENT.match(result_name)):
        raise ValueError(f"result_name {result_name!r} must be an identifier not starting with '_'")
    if call is not None and not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], str)
                                 and _IDENT.match(call[0]) and isinstance(call[1], tuple)):
        raise ValueError("call must be (function_name, args_tuple)")


def run_untrusted(source: str, inputs: Mapping[str, Any] | None = None, *, tools: Mapping[str, str] | None = None,
                  allowed_imports: Sequence[str] = DEFAULT_ALLOWED_IMPORTS, result_name: str | None = "result",
                  call: tuple[str, tuple] | None = None, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``source`` in a locked-down child process and return its value or a structured error.

    Caller mistakes (bad names, an unimportable tool, unpicklable inputs) raise ValueError before any
    process starts; everything the untrusted code does ends up in the returned :class:`SandboxResult`.
    """
    if not isinstance(source, str):
        raise ValueError("source must be a str")
    if not (limits.timeout_s > 0 and limits.memory_mb > 0 and limits.max_output_bytes > 0
            and limits.max_file_bytes >= 0):
        raise ValueError(f"invalid limits: {limits}")
    inputs, tools = dict(inputs or {}), dict(tools or {})
    _check_args(inputs, tools, result_name, call)
    allowed = tuple(str(m) for m in allowed_imports)
    _, problem, _ = _prepare(source, frozenset(allowed))
    if problem:
        return SandboxResult(False, error=problem[0], message=problem[1])
    try:
        blob = pickle.dumps((inputs, call[1] if call else (), tools), protocol=5)
    except Exception as e:
        raise ValueError(f"inputs/call arguments must be picklable: {type(e).__name__}: {e}") from e
    meta = {"source": source, "allowed": allowed, "result_name": result_name, "call": call[0] if call else None,
            "sys_path": [os.path.abspath(p) for p in sys.path if isinstance(p, str)],
            "max_output": limits.max_output_bytes, "memory_mb": limits.memory_mb}
    tmp = tempfile.mkdtemp(prefix="iclr26-sandbox-")
    try:
        return _run_child(tmp, pickle.dumps((meta, blob), protocol=5), limits)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_child(tmp: str, payload: bytes, limits: SandboxLimits) -> SandboxResult:
    workdir, payload_path = os.path.join(tmp, "work"), os.path.join(tmp, "payload.pkl")
    os.mkdir(workdir)
    with open(payload_path, "wb") as f:
        f.write(payload)
    cpu = int(limits.timeout_s) + 2
    cmd = [sys.executable, "-I", "-B", "-c", _BOOT, os.path.abspath(__file__), payload_path, workdir,
           str(limits.memory_mb), str(cpu), str(limits.max_file_bytes)]
    env = {"PATH": os.defpath, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
           **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}}
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, close_fds=True)
    except OSError as e:
        return SandboxResult(False, error="Crashed", message=f"could not start the sandbox process: {e}")
    deadline = time.monotonic() + limits.timeout_s
    with proc:
        try:
            status, out, err = _collect(proc, deadline, limits.max_output_bytes + 65536)
            if status == "eof" and not _exited(proc.pid, deadline + 1.0):
                status = "timeout"
        finally:  # the leader is not reaped yet, so its pid still names our process group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    if status == "timeout":
        return SandboxResult(False, error="Timeout", message=f"exceeded the {limits.timeout_s} s wall-time limit")
    if status == "too_large":
        return SandboxResult(False, error="OutputTooLarge",
                             message=f"child output exceeded {limits.max_output_bytes} bytes")
    if out:
        return _decode(out, limits)
    rc, text = proc.returncode, err.decode("utf-8", "replace").strip()
    if rc == -signal.SIGXCPU:
        return SandboxResult(False, error="Timeout", message="exceeded the CPU-time limit")
    if "MemoryError" in text:
        return SandboxResult(False, error="MemoryLimit", message=f"out of memory ({limits.memory_mb} MB limit)")
    last = text.splitlines()[-1][:300] if text else "no output"
    how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
    return SandboxResult(False, error="Crashed", message=f"sandbox process died ({how}) without a result: {last}")


def _collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[str, bytes, bytes]:
    """Drain stdout (the result frame, capped) and stderr (first 64 KiB kept) until EOF or the deadline."""
    out, err, status = bytearray(), bytearray(), "eof"
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map() and status == "eof":
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data is out:
                    out += chunk
                    if len(out) > cap:
                        status = "too_large"
                elif len(err) < 65536:
                    err += chunk
    return status, bytes(out), bytes(err)


def _exited(pid: int, deadline: float) -> bool:
    """Wait (without reaping) until the child has exited; False if it is still alive at ``deadline``."""
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


# -------------------------------------------------------------------------------------------- child
class _SandboxError(BaseException):
    """Raised by the guards; a BaseException so ``except Exception`` in user code does not catch it."""


class _Capture:
    def __init__(self, cap: int) -> None:
        self.parts, self.size, self.cap, self.truncated = [], 0, cap, False

    def write(self, text: Any) -> int:
        text = str(text)
        room = self.cap - self.size
        if len(text) > room:
            text, self.truncated = text[: max(room, 0)], True
        self.parts.append(text)
        self.size += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def getvalue(self) -> str:
        return "".join(self.parts) + ("\n...[stdout truncated]" if self.truncated else "")


class _Jail:
    """Child-side guards; reachable from user code only through the bound methods put in its builtins."""

    def __init__(self, allowed: frozenset, workdir: str, stdout_cap: int) -> None:
        self.allowed, self.workdir, self.violation = allowed, os.path.realpath(workdir), None
        self.stdout, self.displayed, self.written = _Capture(stdout_cap), [], set()
        names = "eval exec compile open input breakpoint globals locals vars getattr setattr delattr " \
                "__import__ help exit quit type memoryview"
        self.denied = {id(builtins.__dict__[n]) for n in names.split() if n in builtins.__dict__}
        self.real_import = builtins.__import__
        self.forbidden_types = (type, types.FunctionType, types.CodeType, types.FrameType, types.TracebackType,
                                types.ModuleType, types.MethodType)

    def deny(self, kind: str, message: str) -> None:
        self.violation = self.violation or (kind, message)  # sticky, even if user code catches it
        raise _SandboxError(message)

    def check_name(self, name: Any) -> str:
        if not isinstance(name, str) or _bad_attr(name):
            self.deny("SecurityViolation", f"attribute {name!r} is not allowed")
        return name

    def check_value(self, value: Any, kind: str = "SecurityViolation") -> Any:
        if isinstance(value, types.ModuleType):
            if not _module_ok(value.__name__, self.allowed):
                self.deny(kind, f"access to module '{value.__name__}' is not allowed")
        elif isinstance(value, types.FrameType | types.CodeType | types.TracebackType):
            self.deny(kind, "access to frames, code or tracebacks is not allowed")
        elif id(value) in self.denied or (isinstance(value, type) and issubclass(value, self.forbidden_types)):
            self.deny(kind, f"access to builtin '{getattr(value, '__name__', '?')}' is not allowed")
        elif callable(value):  # also catches aliases such as ``fmt = str.format`` or ``x = os.system``
            try:
                mod, name = getattr(value, "__module__", None), getattr(value, "__name__", None)
            except Exception:
                mod = name = None
            if isinstance(mod, str) and mod.split(".")[0] in _DANGEROUS_ORIGINS:
                self.deny(kind, f"access to '{mod}' objects is not allowed")
            if isinstance(name, str) and name in BLOCKED_ATTRS:
                self.deny(kind, f"access to '{name}' is not allowed")
        return value

    def getattr_(self, obj: Any, name: Any, *default: Any) -> Any:
        self.check_name(name)
        try:
            value = getattr(obj, name)
        except AttributeError:
            if default:
                return default[0]
            raise
        return self.check_value(value)

    def hasattr_(self, obj: Any, name: Any) -> bool:
        return hasattr(obj, self.check_name(name))

    def setattr_(self, obj: Any, name: Any, value: Any) -> None:
        setattr(obj, self.check_name(name), value)

    def delattr_(self, obj: Any, name: Any) -> None:
        delattr(obj, self.check_name(name))

    def type_(self, *args: Any) -> Any:
        if len(args) == 3 and isinstance(args[2], dict) and any(_bad_ident(str(k)) for k in args[2]):
            self.deny("SecurityViolation", "type(): names starting with '_' are not allowed")
        result = type(*args)
        if len(args) == 1 and issubclass(result, self.forbidden_types):
            self.deny("SecurityViolation", f"type() of a {result.__name__} is not available in the sandbox")
        return self.check_value(result)

    def import_(self, name: Any, globals: Any = None, locals: Any = None, fromlist: Any = (), level: Any = 0) -> Any:
        if type(fromlist) is list and isinstance(name, str):
            # PyImport_Import() from C code called by user code (numpy lazily loading numpy._core._methods):
            # the name is chosen by trusted code and the module goes back to it, not to the user.
            if name.partition(".")[0] in self.allowed or name in sys.modules:
                return self.real_import(name, None, None, fromlist, 0)
            self.deny("ImportBlocked", f"internal import of {name!r} is not allowed")
        if level or not isinstance(name, str) or not _module_ok(name, self.allowed):
            self.deny("ImportBlocked", f"import of {name!r} is not allowed")
        fromlist = tuple(fromlist or ())
        for item in fromlist:
            if not isinstance(item, str) or item == "*" or _bad_attr(item):
                self.deny("ImportBlocked", f"'from {name} import {item}' is not allowed")
        module = self.real_import(name, None, None, fromlist, 0)
        for item in fromlist:
            self.check_value(getattr(module, item, None), "ImportBlocked")
        return module

    def open_(self, file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
              errors: str | None = None, newline: str | None = None) -> Any:
        if not isinstance(file, str):
            self.deny("SecurityViolation", "open() only accepts str paths inside the sandbox directory")
        full = os.path.realpath(os.path.join(self.workdir, file))
        if not full.startswith(self.workdir + os.sep):
            self.deny("SecurityViolation", f"open() outside the sandbox directory is not allowed: {file!r}")
        if isinstance(mode, str) and set(mode) & set("wax+"):
            self.written.add(full)
            if len(self.written) > _MAX_FILES:  # RLIMIT_FSIZE caps each file; this caps the disk used
                self.deny("SecurityViolation", f"more than {_MAX_FILES} files written")
        return open(full, mode, buffering, encoding, errors, newline)

    def print_(self, *args: Any, sep: Any = " ", end: Any = "\n", file: Any = None, flush: bool = False) -> None:
        sep, end = " " if sep is None else str(sep), "\n" if end is None else str(end)
        (self.stdout if file is None else file).write(sep.join(str(a) for a in args) + end)

    def display(self, obj: Any) -> None:
        pil = sys.modules.get("PIL.Image")
        if pil is not None and isinstance(obj, pil.Image):
            import numpy as np

            img = obj if obj.mode in ("L", "RGB", "RGBA") else obj.convert("RGBA" if "A" in obj.mode else "RGB")
            obj = np.array(img, dtype=np.uint8)
        elif type(obj).__name__ == "ndarray" and type(obj).__module__ == "numpy":
            obj = obj.copy()
        self.displayed.append(obj)

    def builtins(self) -> dict:
        safe = {n: getattr(builtins, n) for n in (
            "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict dir divmod enumerate "
            "filter float format frozenset hash hex id int isinstance issubclass iter len list map max min next "
            "object oct ord pow property range repr reversed round set slice sorted staticmethod str sum super "
            "tuple zip Ellipsis NotImplemented __build_class__").split()}
        safe.update({n: v for n, v in vars(builtins).items()
                     if isinstance(v, type) and issubclass(v, BaseException) and not n.startswith("_")})

        def denied(name: str) -> Any:
            return lambda *a, **k: self.deny("SecurityViolation", f"{name}() is not available in the sandbox")

        for name in "eval exec compile input breakpoint globals locals vars help exit quit memoryview".split():
            safe[name] = denied(name)
        safe.update(getattr=self.getattr_, hasattr=self.hasattr_, setattr=self.setattr_, delattr=self.delattr_,
                    type=self.type_, open=self.open_, print=self.print_, __import__=self.import_)
        safe[_GUARD] = self.getattr_
        return safe


def _lower_limits(*pairs: tuple[int, int]) -> None:
    for limit, value in pairs:
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "failed to map segment" in text or "annot allocate memory" in text


def _user_line(exc: BaseException) -> str:
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""


def _execute(meta: dict, workdir: str) -> dict:
    """Load inputs and tools, lock down, run the user code; returns the result envelope."""
    env = {"ok": False, "value": None, "error": None, "message": "", "stdout": "", "displayed": []}
    sys.path[:] = meta["sys_path"]
    allowed = frozenset(meta["allowed"]) - BLOCKED_MODULES
    code, problem, imports = _prepare(meta["source"], allowed)
    if problem:
        env["error"], env["message"] = problem
        return env
    try:
        inputs, args, tools = pickle.loads(meta["blob"])  # trusted: written by the parent
        scope = {name: _resolve_tool(spec) for name, spec in tools.items()}
        if "PIL.Image" in sys.modules:
            imports.add("numpy")  # display() turns images into arrays
        for name in imports:  # only what the code/inputs need, imported before the locks and recursion limit
            try:
                importlib.import_module(name)
            except Exception as e:  # other failures surface at the import statement, inside the sandbox
                if _out_of_memory(e):
                    raise
    except Exception as e:
        kind = "MemoryLimit" if _out_of_memory(e) else "Crashed"
        env["error"], env["message"] = kind, f"sandbox setup failed under the {meta['memory_mb']} MB limit: " \
            f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"[:500]
        return env
    _lower_limits((resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_NPROC, 0))
    jail = _Jail(allowed, workdir, min(1_000_000, meta["max_output"] // 8))
    scope.update(inputs, display=jail.display, __name__="__sandbox__", __builtins__=jail.builtins())
    sys.stdout = jail.stdout
    sys.setrecursionlimit(_RECURSION_LIMIT)
    try:
        exec(code, scope)
        if meta["call"] is not None:
            fn = scope.get(meta["call"])
            if not callable(fn):
                raise NameError(f"function {meta['call']!r} is not defined by the code")
            value = fn(*args)
        else:
            value = scope.get(meta["result_name"]) if meta["result_name"] else None
        env.update(ok=True, value=value)
    except BaseException as exc:
        if jail.violation is None:
            kind = ("RecursionLimit" if isinstance(exc, RecursionError) else
                    "MemoryLimit" if isinstance(exc, MemoryError) else "RuntimeError")
            text = f"{type(exc).__name__}: {exc}"[:1000] if kind != "MemoryLimit" else \
                f"MemoryError: allocation beyond the {meta['memory_mb']} MB limit"
            env.update(error=kind, message=text + _user_line(exc))
    finally:
        sys.setrecursionlimit(1000)
        sys.stdout = sys.__stdout__
    if jail.violation:
        env.update(ok=False, value=None, error=jail.violation[0], message=jail.violation[1])
    scope.clear()
    env.update(stdout=jail.stdout.getvalue(), displayed=jail.displayed)
    return env


def _encode(env: dict, max_bytes: int) -> bytes:
    try:
        blob = pickle.dumps(env, protocol=5)
    except BaseException as e:
        env.update(ok=False, value=None, displayed=[], error="BadResult",
                   message=f"result is not serializable: {type(e).__name__}: {e}"[:500])
        blob = pickle.dumps(env, protocol=5)
    if len(blob) > max_bytes:
        env.update(ok=False, value=None, displayed=[], stdout=env["stdout"][:10000], error="OutputTooLarge",
                   message=f"serialized result is {len(blob)} bytes, over the {max_bytes}-byte limit")
        blob = pickle.dumps(env, protocol=5)
    return _MAGIC + blob


def _child_main(argv: list[str]) -> None:
    payload_path, workdir, memory_mb, cpu_s, fsize = argv
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with OSError instead of killing us
    _lower_limits((resource.RLIMIT_AS, int(memory_mb) * 2**20), (resource.RLIMIT_CPU, int(cpu_s)),
                  (resource.RLIMIT_FSIZE, int(fsize)), (resource.RLIMIT_CORE, 0))
    out_fd = os.dup(1)  # the result channel; fd 1 itself goes to /dev/null so C-level writes cannot forge it
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    with open(payload_path, "rb") as f:
        meta, blob = pickle.load(f)
    os.unlink(payload_path)
    meta["blob"] = blob
    try:
        env = _execute(meta, workdir)
    except MemoryError:
        env = {"ok": False, "value": None, "error": "MemoryLimit", "stdout": "", "displayed": [],
               "message": f"out of memory while setting up the sandbox ({memory_mb} MB limit)"}
    except BaseException as e:
        env = {"ok": False, "value": None, "error": "Crashed", "stdout": "", "displayed": [],
               "message": f"sandbox setup failed: {type(e).__name__}: {e}"[:500]}
    data = memoryview(_encode(env, int(meta["max_output"])))
    while data:
        data = data[os.write(out_fd, data):]
    os._exit(0)
