"""Run untrusted Python source (LLM-generated reward code, tool calls) in a separate, locked-down process.

Threat model: the source string is hostile (model output). It may loop, allocate, write huge output,
try to read or write files, open sockets, start processes, signal the caller, climb out of the restricted
namespace (dunder walks, frames, ``str.format``, library code that ``eval``s strings such as string
annotations), or forge its result. The caller (parent) must never crash, hang past the timeout, execute
anything the child chose or accept a result the harness did not produce. Callers' own arguments
(inputs, tools, limits) are trusted.

Layers, outermost first (``isolation="kernel"``, the default):

1. Kernel (:mod:`iclr26.core.sandbox_kernel`, Linux x86_64 with user/mount/PID/net namespaces and seccomp;
   works as root or, with unprivileged user namespaces, as any user): the child runs in fresh mount,
   network, PID, IPC and UTS namespaces. No network at all (a new network namespace, and no socket
   syscalls); every mount read-only and nosuid, with a private size-capped tmpfs on /tmp as the only
   writable place (the work dir: ``max_disk_bytes``; the host's /tmp is not visible, only folders of the
   import path under it are bound in read-only); /etc/shadow-like files and every entry of the home
   directories that is not on the import path (keys, tokens, shell history), and /run, mounted over with
   empty ones; a /dev with only null, zero, full, random and urandom;
   a fresh /proc that shows only the sandbox's processes. The code runs in a worker whose PID-namespace
   init dies with it, so every process the code could start dies with the call; the caller also SIGKILLs
   the whole process group at the deadline. The worker has no capabilities, ``no_new_privs`` and a seccomp
   filter (hand-written BPF) that refuses fork/vfork/execve/execveat, clone without CLONE_THREAD, clone3,
   socket/socketpair/connect/bind/listen/accept, ptrace, kill/tkill/tgkill aimed at any other process,
   mount/unshare/setns/chroot, setsid/setpgid, bpf, io_uring, keyrings and the like. Where this layer
   cannot be set up (another OS or architecture, a container without namespaces), nothing runs: the result
   is ``IsolationUnavailable`` unless the caller names the weaker mode, ``isolation="python-only"`` (or
   the environment variable ``ICLR26_SANDBOX_ISOLATION=python-only``). :attr:`SandboxResult.isolation`
   says which mode ran.
2. rlimits: RLIMIT_AS=memory_mb, RLIMIT_CPU (per call), RLIMIT_FSIZE (SIGXFSZ ignored, so an oversized
   write raises OSError), RLIMIT_CORE=0, RLIMIT_NOFILE=64 (and RLIMIT_NPROC=0 in python-only mode).
3. Static check (in the child, under the timeout and limits; the parent does not parse the source, it
   only refuses more than ``max_source_bytes`` first): no identifier or attribute starting with ``_``,
   none of :data:`BLOCKED_ATTRS` (str.format tricks, frame walks, numpy file readers/writers, typing's
   string evaluation...), imports only of allowed modules (``ImportBlocked``). Every ``obj.attr`` load is
   rewritten into a guarded call that also refuses, at run time, modules outside the allowlist, frames,
   code objects and dangerous builtins reached through allowed modules. Python normalises identifiers
   (NFKC) before the check sees them, so ``ｅｖａｌ`` is checked as ``eval``.
4. Restricted builtins: eval/exec/compile/globals/vars/... raise; getattr/setattr/delattr/hasattr refuse
   ``_`` and blocked names; ``open`` only inside the work dir; ``__import__`` enforces the allowlist.
   :data:`BLOCKED_MODULES` stay blocked even if a caller allows them.
5. Audit hook (``sys.addaudithook``, installed before any untrusted code and irremovable): while user code
   runs, refuses run-time ``compile``/``exec`` except by the import system, ``collections.namedtuple``,
   ``dataclasses`` and numpy (this closes the ``typing.get_type_hints``/``ForwardRef``/``singledispatch``
   string-annotation path, which evaluates strings with the sandbox globals), every ``open`` outside the
   work dir (reads also allowed under the import path), process, socket, signal, ctypes, mmap, gc, trace
   and code-object events, and imports of socket/subprocess/ctypes/... even by library code.
6. Transport (:mod:`iclr26.core.sandbox_wire`): no pickle from the child. Plain values plus raw buffers of
   plain numeric numpy dtypes; sizes checked before use, nesting/items/int size capped, hash-colliding
   set elements or dict keys refused; anything else is ``BadResult``. Results travel on a separate pipe
   (fd 3), never stdout/stderr, and each frame must start with the call's 16-byte random nonce, which the
   code never sees; anything else (a forged or stale frame) is ``BadResult`` and the child is killed.

Persistent mode (:class:`SandboxServer`): one such child serves many calls (an RL reward function called
every step) as a fork-server: the worker never runs untrusted code; each request runs in a fresh fork of
it (definitions replayed first, the files the call added to the work dir removed afterwards; in kernel mode
the fork stacks the full seccomp filter over the worker's, which allows only the fork itself), so nothing
one call changes (module patches, stashed state, files, a replaced handler) reaches the next. The fork for
the next call (a spare) is made while the current call runs, locked down at once, and released only after
the current fork has exited and been cleaned up; it then reads its request, replays the definitions and
serves it, so a caller that does other work between calls does not wait for ``fork()``. The child is killed and
replaced after any violation, timeout, crash, memory error or bad result.

No code of the source runs while the worker is trusted: exception text and result conversion happen
with the guards on, and the audit hook enforces whenever a frame of the source is on the stack.
``python-only`` is not a security boundary: it is the Python layers alone. Callers that run model-written
code (ROSETTA's rewards, VTool-R1's edit code, AceReason's code tests) resolve their mode through
:func:`model_code_isolation`, which refuses python-only (named, or as the fallback where the kernel layer
is unavailable) with :class:`IsolationRefused` unless the user allowed it (``--set
sandbox.allow_python_only=true`` on ``iclr26 run``, which also writes a warning into the run's results,
or ``ICLR26_SANDBOX_ALLOW_PYTHON_ONLY=1``).

Known limits: the kernel layer bounds what escaped code can do to the machine, not what result it
reports (the harness runs in the same process, so fully escaped code can fake its own result; the
Python layers are what keep code from escaping). Apart from the hidden paths, files readable by the
caller's user stay readable at the kernel level (the Python layers refuse reads outside the work dir and the
import path); as root, the worker keeps uid 0 without capabilities, so it cannot write anything outside
/tmp, but can read root-owned files that are not hidden. The kernel layer is tested as root; the
unprivileged path (a user namespace) follows the same code but was not exercised here. Without the
kernel layer (python-only), an escape from the Python layers reaches the caller's user rights. Memory of
the private /tmp counts against the machine, not RLIMIT_AS (it is capped by ``max_disk_bytes``). For
hostile code at scale, still run the whole job inside a container or VM with its own user.
"""

from __future__ import annotations

import ast
import hmac
import importlib
import os
import pickle
import re
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import sandbox_wire as wire

__all__ = [
    "ALLOW_PYTHON_ONLY_ENV",
    "DEFAULT_ALLOWED_IMPORTS",
    "ERROR_KINDS",
    "ISOLATION_MODES",
    "IsolationRefused",
    "PYTHON_ONLY_WARNING",
    "SandboxLimits",
    "SandboxResult",
    "SandboxServer",
    "kernel_isolation_available",
    "model_code_isolation",
    "python_only_allowed",
    "run_untrusted",
]

DEFAULT_ALLOWED_IMPORTS = (
    "math",
    "cmath",
    "random",
    "statistics",
    "itertools",
    "functools",
    "collections",
    "re",
    "string",
    "heapq",
    "bisect",
    "operator",
    "fractions",
    "decimal",
    "numpy",
    "json",
)
BLOCKED_MODULES = frozenset(
    "os sys subprocess socket shutil importlib ctypes multiprocessing threading signal pathlib io builtins gc "
    "inspect pickle marshal posix nt _thread _io _socket _ctypes _pickle _posixsubprocess _signal _imp "
    "_frozen_importlib _frozen_importlib_external codecs _codecs tempfile glob mmap resource fcntl select pty "
    "runpy code pdb asyncio concurrent urllib http ssl zipimport pkgutil site sysconfig webbrowser faulthandler "
    "atexit typing annotationlib tracemalloc sqlite3 dbm shelve zipfile tarfile linecache tokenize".split()
)
BLOCKED_ATTRS = frozenset(
    "format format_map vformat get_field Formatter attrgetter methodcaller mro gi_frame gi_code gi_yieldfrom "
    "cr_frame cr_code cr_await ag_frame ag_code ag_await f_globals f_locals f_builtins f_back f_code tb_frame "
    "tb_next co_code ctypeslib ctypes load save savez savez_compressed savetxt loadtxt genfromtxt fromregex "
    "fromfile tofile memmap open_memmap DataSource dump lib f2py distutils testing test show mrecords openfile "
    "fromtextfile get_type_hints ForwardRef evaluate_forward_ref get_annotations update_wrapper wraps "
    "WRAPPER_ASSIGNMENTS WRAPPER_UPDATES partialmethod singledispatchmethod cached_property".split()
)
_DANGEROUS_ORIGINS = BLOCKED_MODULES - {"builtins"}  # int, list... are fine; bad builtins are denied by identity
ERROR_KINDS = frozenset(
    {
        "Timeout",
        "MemoryLimit",
        "ImportBlocked",
        "SecurityViolation",
        "SyntaxError",
        "RuntimeError",
        "RecursionLimit",
        "OutputTooLarge",
        "Crashed",
        "BadResult",
        "SourceTooLarge",
        "IsolationUnavailable",
    }
)
ISOLATION_MODES = ("kernel", "python-only")
_RESTART_KINDS = ERROR_KINDS - {"RuntimeError", "SyntaxError", "ImportBlocked", "SourceTooLarge"}

_FILENAME = "<sandbox>"
_GUARD = "_sbx_getattr"  # injected by the AST rewrite; user code cannot spell it
_RECURSION_LIMIT = 400
_MAX_FILES = 32  # files user code may create/write (each capped by RLIMIT_FSIZE)
_NONCE = 16
_RESULT_FD = 3
_HDR = struct.Struct("<Q")
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_TOOL_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")
_SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from iclr26.core.sandbox_child import child_main; child_main()"


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0  # wall time per call (one-shot: including start-up); the process group is killed
    memory_mb: int = 1024  # RLIMIT_AS of the child (address space)
    max_output_bytes: int = 8_000_000  # cap on the encoded result + captured stdout
    max_file_bytes: int = 10_000_000  # RLIMIT_FSIZE: one file
    max_source_bytes: int = 256_000  # source longer than this is refused before anything parses it
    max_disk_bytes: int = 64_000_000  # kernel mode: size of the private tmpfs work dir (all files together)


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    value: Any = None  # the returned value, None on error
    error: str | None = None  # one of ERROR_KINDS
    message: str = ""  # one line for humans (exception type + text for RuntimeError)
    stdout: str = ""  # what the code printed (truncated)
    displayed: tuple = ()  # objects passed to display(...) in order (images as uint8 numpy arrays)
    isolation: str | None = None  # "kernel" or "python-only": the mode the code ran under (None: nothing ran)


# ----------------------------------------------------------------------------------------- static check
def _bad_ident(name: str | None) -> bool:
    return name is not None and name != "_" and name.startswith("_")


def _bad_attr(name: str) -> bool:
    return name.startswith("_") or name in BLOCKED_ATTRS


def _module_ok(name: str, allowed: frozenset) -> bool:
    parts = name.split(".")
    return parts[0] in allowed and parts[0] not in BLOCKED_MODULES and not any(not p or _bad_attr(p) for p in parts)


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


def _prepare(source: str, allowed: frozenset) -> tuple[Any, tuple[str, str] | None]:
    """Parse, check, rewrite and compile ``source``: (code, None) or (None, (kind, message))."""
    try:
        tree = ast.parse(source, _FILENAME, "exec")
        problem = _static_problem(tree, allowed)
        if problem:
            return None, problem
        tree = ast.fix_missing_locations(_GuardAttributes().visit(tree))
        return compile(tree, _FILENAME, "exec", dont_inherit=True), None
    except SyntaxError as e:
        return None, ("SyntaxError", f"line {e.lineno}: {e.msg}")
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return None, ("SyntaxError", f"line ?: source cannot be compiled ({type(e).__name__}: {e})"[:500])


# ------------------------------------------------------------------------------------ result decoding
_ENVELOPE = {"ok", "value", "error", "message", "stdout", "displayed"}


def _decode_frame(body: bytes, limits: SandboxLimits, isolation: str | None) -> SandboxResult:
    """Turn the child's frame body into a result; never executes anything the child chose."""
    try:
        env = wire.decode(body)
        if not (
            isinstance(env, dict)
            and set(env) == _ENVELOPE
            and isinstance(env["ok"], bool)
            and isinstance(env["message"], str)
            and isinstance(env["stdout"], str)
            and isinstance(env["displayed"], list)
            and (env["error"] is None if env["ok"] else env["error"] in ERROR_KINDS)
        ):
            raise wire.WireError("result envelope has the wrong shape")
    except Exception as e:  # WireError, and MemoryError/ValueError from numpy on absurd shapes
        return SandboxResult(
            False, error="BadResult", message=f"refused the sandbox result: {e}"[:500], isolation=isolation
        )
    ran = None if env["error"] == "IsolationUnavailable" else isolation
    return SandboxResult(
        env["ok"],
        env["value"] if env["ok"] else None,
        env["error"],
        env["message"][:2000],
        env["stdout"][: limits.max_output_bytes],
        tuple(env["displayed"]),
        ran,
    )


# ------------------------------------------------------------------------------------------- parent
def _resolve_tool(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _check_setup(tools: dict, allowed: Sequence[str], limits: SandboxLimits, isolation: str | None) -> str:
    for name in tools:
        if not isinstance(name, str) or not _IDENT.match(name) or name == "display":
            raise ValueError(f"tool name {name!r}: use an identifier not starting with '_' (not 'display')")
    for name, spec in tools.items():
        if not isinstance(spec, str) or not _TOOL_SPEC.match(spec):
            raise ValueError(f"tool {name!r}: spec {spec!r} is not 'package.module:attr'")
        try:
            _resolve_tool(spec)
        except Exception as e:
            raise ValueError(f"tool {name!r}: cannot import {spec!r}: {type(e).__name__}: {e}") from e
    if isinstance(allowed, str) or not all(isinstance(m, str) for m in allowed):
        raise ValueError("allowed_imports must be a sequence of module names")
    if not (
        limits.timeout_s > 0
        and limits.memory_mb > 0
        and limits.max_output_bytes > 0
        and limits.max_file_bytes >= 0
        and limits.max_source_bytes >= 0
        and limits.max_disk_bytes > 0
    ):
        raise ValueError(f"invalid limits: {limits}")
    return _resolve_mode(isolation)


def _resolve_mode(isolation: str | None) -> str:
    mode = isolation if isolation is not None else os.environ.get("ICLR26_SANDBOX_ISOLATION", "kernel")
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    return mode


def _check_inputs(inputs: dict, tools: Mapping) -> None:
    for name in inputs:
        if not isinstance(name, str) or not _IDENT.match(name) or name == "display":
            raise ValueError(f"input name {name!r}: use an identifier not starting with '_' (not 'display')")
    if set(inputs) & set(tools):
        raise ValueError(f"names given both as inputs and tools: {sorted(set(inputs) & set(tools))}")


def _source_problem(source: Any, limits: SandboxLimits) -> SandboxResult | None:
    """Refuse oversized source in O(1) before anything parses it (and before a process starts)."""
    if not isinstance(source, str):
        raise ValueError("source must be a str")
    if len(source) > limits.max_source_bytes or len(source.encode("utf-8", "surrogatepass")) > limits.max_source_bytes:
        return SandboxResult(
            False,
            error="SourceTooLarge",
            message=f"source is over the {limits.max_source_bytes}-byte limit ({len(source)} chars)",
        )
    return None


def _dumps(obj: Any, what: str) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)  # parent -> child only: the child trusts what the parent sends
    except Exception as e:
        raise ValueError(f"{what} must be picklable: {type(e).__name__}: {e}") from e


class _Child:
    """Parent-side handle of one sandbox process tree: start, send requests, read nonce-checked frames, kill."""

    def __init__(self, mode: str, tools: dict, allowed: tuple, limits: SandboxLimits, fork: bool = False) -> None:
        self.mode, self.limits, self.stderr = mode, limits, bytearray()
        self.tmp = tempfile.mkdtemp(prefix="iclr26-sandbox-") if mode == "python-only" else None
        workdir = os.path.join(self.tmp, "work") if self.tmp else "/tmp"
        if self.tmp:
            os.mkdir(workdir)
        config = {
            "mode": mode,
            "tools": tools,
            "allowed": allowed,
            "workdir": workdir,
            "sys_path": [os.path.abspath(p) for p in sys.path if isinstance(p, str)],
            "memory_mb": limits.memory_mb,
            # python-only has no size-capped tmpfs: cap each file so that _MAX_FILES of them fit in max_disk_bytes
            "fsize": limits.max_file_bytes
            if mode == "kernel"
            else min(limits.max_file_bytes, limits.max_disk_bytes // _MAX_FILES),
            "fork": fork,
            "disk": limits.max_disk_bytes,
            "cpu_s": int(limits.timeout_s) + 2,
            "max_output": limits.max_output_bytes,
        }
        env = {
            "PATH": os.defpath,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": workdir,
            "TMPDIR": workdir,
            **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")},
        }
        marker = "iclr26-sandbox:" + tempfile.gettempdir()
        rfd, wfd = os.pipe()
        config["result_fd"] = wfd
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", _BOOT, _SRC_DIR, marker],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(wfd,),
                cwd=self.tmp or "/",
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            os.close(rfd)
            self.cleanup()
            raise
        finally:
            os.close(wfd)
        self.rfd = rfd
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.pending = _frame(_dumps(config, "tools"))

    # -- transport
    def request(self, req: dict, deadline: float) -> SandboxResult:
        nonce = os.urandom(_NONCE)
        self.pending += _frame(_dumps({**req, "nonce": nonce}, "inputs/call arguments"))
        data, self.pending = self.pending, b""
        self.stderr.clear()
        status = self._send(data, deadline)
        header = self._read(_NONCE + _HDR.size, deadline) if status == "ok" else status
        if isinstance(header, bytes):
            if not hmac.compare_digest(header[:_NONCE], nonce):
                self.kill()
                return SandboxResult(
                    False,
                    error="BadResult",
                    isolation=self.mode,
                    message="refused a result frame without this call's nonce (forged or stale)",
                )
            size = _HDR.unpack(header[_NONCE:])[0]
            if size > self.limits.max_output_bytes + 65536:
                self.kill()
                return SandboxResult(
                    False,
                    error="OutputTooLarge",
                    isolation=self.mode,
                    message=f"child output exceeded {self.limits.max_output_bytes} bytes",
                )
            body = self._read(size, deadline)
            if isinstance(body, bytes):
                return _decode_frame(body, self.limits, self.mode)
            header = body
        return self._failure(header, deadline)

    def _send(self, data: bytes, deadline: float) -> str:
        view = memoryview(data)
        fd = self.proc.stdin.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while view:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "timeout"
                if sel.select(remaining):
                    try:
                        view = view[os.write(fd, view[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except (BrokenPipeError, OSError):
                        return "eof"
        return "ok"

    def _read(self, n: int, deadline: float) -> bytes | str:
        """Exactly ``n`` bytes from the result pipe (draining stderr meanwhile), or "eof"/"timeout"."""
        out = bytearray()
        with selectors.DefaultSelector() as sel:
            sel.register(self.rfd, selectors.EVENT_READ)
            if self.proc.stderr is not None:
                sel.register(self.proc.stderr, selectors.EVENT_READ)
            while len(out) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "timeout"
                for key, _ in sel.select(remaining):
                    fd = key.fd
                    chunk = os.read(fd, min(1 << 16, n - len(out)) if fd == self.rfd else 1 << 16)
                    if fd == self.rfd:
                        if not chunk:
                            return "eof"
                        out += chunk
                    elif not chunk:
                        sel.unregister(key.fileobj)
                    elif len(self.stderr) < 65536:
                        self.stderr += chunk
        return bytes(out)

    def _failure(self, status: str, deadline: float) -> SandboxResult:
        limits, mode = self.limits, self.mode
        if status == "eof":  # collect the exit status (the child may still be tearing down)
            try:
                self.proc.wait(timeout=max(0.05, min(1.0, deadline - time.monotonic() + 1.0)))
            except subprocess.TimeoutExpired:
                status = "timeout"
        self.kill()
        if status == "timeout":
            return SandboxResult(
                False, error="Timeout", isolation=mode, message=f"exceeded the {limits.timeout_s} s wall-time limit"
            )
        rc, text = self.proc.returncode, self.stderr.decode("utf-8", "replace").strip()
        if rc == -signal.SIGXCPU:
            return SandboxResult(False, error="Timeout", message="exceeded the CPU-time limit", isolation=mode)
        if "kernel isolation is unavailable" in text:
            return SandboxResult(False, error="IsolationUnavailable", message=text.splitlines()[-1][:300])
        if "MemoryError" in text or "annot allocate memory" in text:
            return SandboxResult(
                False, error="MemoryLimit", message=f"out of memory ({limits.memory_mb} MB limit)", isolation=mode
            )
        last = text.splitlines()[-1][:300] if text else "no output"
        how = f"signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
        return SandboxResult(
            False, error="Crashed", isolation=mode, message=f"sandbox process died ({how}) without a result: {last}"
        )

    # -- life cycle
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:  # the leader is not reaped yet, so its pid still names our process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        if self.rfd >= 0:
            os.close(self.rfd)
            self.rfd = -1
        self.cleanup()

    def cleanup(self) -> None:
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _frame(payload: bytes) -> bytes:
    return _HDR.pack(len(payload)) + payload


def run_untrusted(
    source: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    tools: Mapping[str, str] | None = None,
    allowed_imports: Sequence[str] = DEFAULT_ALLOWED_IMPORTS,
    result_name: str | None = "result",
    call: tuple[str, tuple] | None = None,
    limits: SandboxLimits = SandboxLimits(),
    isolation: str | None = None,
) -> SandboxResult:
    """Run ``source`` in a fresh locked-down child process and return its value or a structured error.

    ``isolation``: "kernel" (default; namespaces + seccomp, ``IsolationUnavailable`` where the kernel
    does not allow them) or "python-only" (the weaker mode, only when named; None reads the environment
    variable ICLR26_SANDBOX_ISOLATION, default "kernel"). Caller mistakes (bad names, an unimportable
    tool, unpicklable inputs, an unknown isolation mode) raise ValueError before any process starts;
    everything the untrusted code does ends up in the returned :class:`SandboxResult`.
    """
    tools, inputs = dict(tools or {}), dict(inputs or {})
    mode = _check_setup(tools, allowed_imports, limits, isolation)
    _check_inputs(inputs, tools)
    if result_name is not None and not (isinstance(result_name, str) and _IDENT.match(result_name)):
        raise ValueError(f"result_name {result_name!r} must be an identifier not starting with '_'")
    if call is not None and not (
        isinstance(call, tuple)
        and len(call) == 2
        and isinstance(call[0], str)
        and _IDENT.match(call[0])
        and isinstance(call[1], tuple)
    ):
        raise ValueError("call must be (function_name, args_tuple)")
    too_large = _source_problem(source, limits)
    if too_large:
        return too_large
    req = {"op": "exec", "source": source, "inputs": inputs, "result_name": result_name, "keep": False, "call": call}
    _dumps(req, "inputs/call arguments")
    deadline = time.monotonic() + limits.timeout_s
    try:
        child = _Child(mode, tools, tuple(allowed_imports), limits)
    except OSError as e:
        return SandboxResult(False, error="Crashed", message=f"could not start the sandbox process: {e}")
    try:
        return child.request(req, deadline)
    finally:
        child.kill()


class SandboxServer:
    """One locked-down child serving many calls: define ``source`` once, then call its functions.

    >>> with SandboxServer("def reward(y, gt):\\n    return float(y == gt)") as srv:   # doctest: +SKIP
    ...     srv.call("reward", "42", "42").value
    1.0

    The source runs once per child (:attr:`definition` holds its result); :meth:`call` calls one of its
    functions with new arguments, :meth:`run` runs another snippet in a fresh namespace (modules and the
    definitions stay). Each call has its own ``limits.timeout_s``. After a violation, timeout, crash,
    memory error, oversized or refused result, the child is killed; the next call starts a fresh one
    (:attr:`restarts` counts them). With ``fresh="call"`` (default) every call starts from the state right
    after the definitions (a fresh fork): nothing a call changes (module state, globals, files) is seen by the
    next. ``fresh="draft"`` keeps one child per server (per draft): calls share its state, so a draft's calls
    may see what its earlier calls changed, never another draft's; for code called thousands of times (a
    reward inside an RL loop), where a fork and the replay of the definitions per call dominate the cost.
    Thread-safe (calls are serialised); use one server per worker thread for parallelism.
    """

    def __init__(
        self,
        source: str = "",
        *,
        inputs: Mapping[str, Any] | None = None,
        tools: Mapping[str, str] | None = None,
        allowed_imports: Sequence[str] = DEFAULT_ALLOWED_IMPORTS,
        limits: SandboxLimits = SandboxLimits(),
        isolation: str | None = None,
        fresh: str = "call",
    ) -> None:
        if fresh not in ("call", "draft"):
            raise ValueError(f"fresh must be 'call' or 'draft', got {fresh!r}")
        self.fresh = fresh
        self.tools, self.inputs = dict(tools or {}), dict(inputs or {})
        self.mode = _check_setup(self.tools, allowed_imports, limits, isolation)
        _check_inputs(self.inputs, self.tools)
        self.allowed, self.limits, self.source = tuple(allowed_imports), limits, source
        self.definition: SandboxResult | None = _source_problem(source, limits)
        _dumps(self.inputs, "inputs")
        self.restarts, self._child, self._lock, self._closed = 0, None, threading.Lock(), False

    def __enter__(self) -> SandboxServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._child is not None:
                self._child.kill()
                self._child = None

    def __del__(self) -> None:
        child = getattr(self, "_child", None)
        if child is not None:
            child.kill()

    def _ensure(self) -> SandboxResult | None:
        """A running child with the definitions loaded, or the result explaining why there is none."""
        if self._closed:
            raise ValueError("the SandboxServer is closed")
        if self._child is not None and self._child.alive():
            return None
        if self._child is not None:
            self._kill()
        if self.definition is not None and not self.definition.ok:
            return self.definition  # the same source would fail the same way
        try:
            child = _Child(self.mode, self.tools, self.allowed, self.limits, fork=self.fresh == "call")
        except OSError as e:
            return SandboxResult(False, error="Crashed", message=f"could not start the sandbox process: {e}")
        self._child = child
        req = {
            "op": "exec",
            "source": self.source,
            "inputs": self.inputs,
            "result_name": None,
            "keep": True,
            "call": None,
        }
        res = child.request(req, time.monotonic() + self.limits.timeout_s)
        if not res.ok:
            self._kill()
            if res.error not in ("Timeout", "Crashed", "MemoryLimit", "IsolationUnavailable"):
                self.definition = res  # deterministic failures are remembered; transient ones retried
            return res
        self.definition = res
        return None

    def _kill(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None
            self.restarts += 1

    def _request(self, req: dict) -> SandboxResult:
        with self._lock:
            failed = self._ensure()
            if failed is not None:
                return failed
            res = self._child.request(req, time.monotonic() + self.limits.timeout_s)
            if not res.ok and res.error in _RESTART_KINDS:
                self._kill()
            return res

    def call(self, fn: str, *args: Any) -> SandboxResult:
        """``fn(*args)`` where ``fn`` is a function defined by the server's source."""
        if not (isinstance(fn, str) and _IDENT.match(fn)):
            raise ValueError(f"function name {fn!r} must be an identifier not starting with '_'")
        _dumps(args, "call arguments")
        return self._request({"op": "call", "fn": fn, "args": args})

    def run(
        self, source: str, inputs: Mapping[str, Any] | None = None, *, result_name: str | None = "result"
    ) -> SandboxResult:
        """Run another snippet in this child (fresh namespace holding the definitions, ``inputs`` and tools)."""
        inputs = dict(inputs or {})
        _check_inputs(inputs, self.tools)
        if result_name is not None and not (isinstance(result_name, str) and _IDENT.match(result_name)):
            raise ValueError(f"result_name {result_name!r} must be an identifier not starting with '_'")
        too_large = _source_problem(source, self.limits)
        if too_large:
            return too_large
        _dumps(inputs, "inputs")
        return self._request(
            {"op": "exec", "source": source, "inputs": inputs, "result_name": result_name, "keep": False, "call": None}
        )


_AVAILABLE: list = []


def kernel_isolation_available() -> str | None:
    """None if the kernel layer works here (checked once per process by running a trivial sandbox), else why not."""
    if not _AVAILABLE:
        res = run_untrusted("result = 1", limits=SandboxLimits(timeout_s=20), isolation="kernel")
        _AVAILABLE.append(None if res.ok and res.isolation == "kernel" else f"{res.error}: {res.message}")
    return _AVAILABLE[0]


ALLOW_PYTHON_ONLY_ENV = "ICLR26_SANDBOX_ALLOW_PYTHON_ONLY"
"""Set to 1/true by ``iclr26 run --set sandbox.allow_python_only=true`` for the run (worker processes inherit
it); library users may set it themselves."""
PYTHON_ONLY_WARNING = (
    "model-written code ran with the sandbox's Python layers only (sandbox.allow_python_only=true): they are "
    "not a security boundary, and code that escapes them runs with this user's rights"
)


class IsolationRefused(RuntimeError):
    """Model-written code would run without the sandbox's kernel layer, and the user did not allow that."""


def python_only_allowed() -> bool:
    """Whether :data:`ALLOW_PYTHON_ONLY_ENV` allows python-only isolation for model-written code."""
    return os.environ.get(ALLOW_PYTHON_ONLY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def model_code_isolation(isolation: str | None = None, allow_python_only: bool | None = None) -> str:
    """The isolation mode in which model-written (hostile) code may run here, or :class:`IsolationRefused`.

    ``isolation``: as for :func:`run_untrusted` (None reads ICLR26_SANDBOX_ISOLATION, default "kernel").
    "kernel" where the kernel layer works. Python-only, named or as the fallback where the kernel layer is
    unavailable, only when ``allow_python_only`` (None: :func:`python_only_allowed`); otherwise
    :class:`IsolationRefused` with a one-line message saying how to allow it.
    """
    mode = _resolve_mode(isolation)
    allowed = python_only_allowed() if allow_python_only is None else bool(allow_python_only)
    if mode == "kernel":
        why = kernel_isolation_available()
        if why is None:
            return "kernel"
        reason = f"the sandbox's kernel layer is unavailable here ({why.splitlines()[0][:200]})"
    else:
        reason = "python-only sandbox isolation was requested"
    if allowed:
        return "python-only"
    raise IsolationRefused(
        f"{reason}; model-written code does not run with the Python layers only, which are not a security "
        f"boundary, unless you pass --set sandbox.allow_python_only=true (or set {ALLOW_PYTHON_ONLY_ENV}=1)"
    )
