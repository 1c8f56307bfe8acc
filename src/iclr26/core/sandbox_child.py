"""Child side of :mod:`iclr26.core.sandbox` (runs only inside sandbox processes; see that module's docstring).

Protocol: the parent writes length-prefixed pickles on stdin (a config, then requests; trusted: only the
parent writes there). For every request the worker writes one frame on the result fd:
``nonce (16 bytes) | length (8 bytes) | sandbox_wire body``. stdout is /dev/null; stderr is kept for crash
messages only.
"""

from __future__ import annotations

import builtins
import os
import pickle
import re
import resource
import signal
import sys
import types
from typing import Any

from . import sandbox_kernel as kernel
from . import sandbox_wire as wire
from .sandbox import (
    _DANGEROUS_ORIGINS,
    _FILENAME,
    _GUARD,
    _HDR,
    _MAX_FILES,
    _RECURSION_LIMIT,
    BLOCKED_ATTRS,
    BLOCKED_MODULES,
    _bad_attr,
    _bad_ident,
    _module_ok,
    _prepare,
    _resolve_tool,
)

_THIS = os.path.abspath(__file__)
_NAME_OK = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events refused while untrusted code may run (prefix match)
_DENY_EVENTS = (
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.chmod",
    "os.chown",
    "os.chflags",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "os.chdir",
    "os.chroot",
    "os.setxattr",
    "os.removexattr",
    "os.mkfifo",
    "os.mknod",
    "os.startfile",
    "os.add_dll_directory",
    "subprocess.",
    "pty.",
    "socket.",
    "ctypes.",
    "mmap.",
    "code.__new__",
    "function.__new__",
    "sys.settrace",
    "sys.setprofile",
    "sys._current_frames",
    "sys._current_exceptions",
    "sys.addaudithook",
    "sys.setrecursionlimit",
    "sys.monitoring",
    "gc.",
    "resource.",
    "signal.",
    "shutil.",
    "webbrowser.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "poplib.",
    "imaplib.",
    "nntplib.",
    "telnetlib.",
    "builtins.input",
    "builtins.breakpoint",
    "pdb.",
    "cpython.",
    "marshal.dumps",
    "marshal.load",
    "tempfile.",
    "sqlite3.",
    "syslog.",
    "fcntl.",
    "msvcrt.",
    "winreg.",
    "_winapi.",
    "os.mkdir",
    "os.setpgid",
    "os.setsid",
    "shelve.",
    "dbm.",
)
_FREE_EVENTS = frozenset(
    {
        "sys._getframe",
        "object.__getattr__",
        "object.__setattr__",
        "object.__delattr__",
        "time.sleep",
        "os.listdir",
        "os.scandir",
        "marshal.loads",
        "os.getxattr",
        "os.listxattr",
        "array.__new__",
        "builtins.id",
        "sys._getframemodulename",
    }
)
_AUDIT_BLOCKED_IMPORTS = frozenset(
    "socket _socket subprocess _posixsubprocess multiprocessing _multiprocessing pty ssl _ssl http urllib ftplib "
    "smtplib asyncio webbrowser mmap ctypes _ctypes pdb code codeop runpy sqlite3 _sqlite3 tkinter".split()
)


class _SandboxError(BaseException):
    """Raised by the guards; a BaseException so ``except Exception`` in user code does not catch it."""


def _sandbox_frame_on_stack() -> bool:
    """True when code compiled from the untrusted source is running (somewhere up the stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == _FILENAME:
            return True
        frame = frame.f_back
    return False


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
    """Child-side guards; reachable from user code only through the bound methods put in its builtins.

    One per worker: a violation is sticky for the worker's life (the parent then replaces the worker)."""

    def __init__(self, allowed: frozenset, workdir: str, read_roots: tuple) -> None:
        self.allowed, self.workdir, self.violation = allowed, os.path.realpath(workdir), None
        self.read_roots = tuple(os.path.join(os.path.realpath(p), "") for p in read_roots)
        # host folders that lie inside the work dir (kernel mode: import paths under /tmp stay visible, read-only,
        # inside the private /tmp) are host files, not the sandbox's own: reads only as import roots, never open()
        self.host_roots = tuple(r for r in self.read_roots if r.startswith(self.workdir + os.sep))
        self.stdout, self.displayed, self.written, self.trusted = _Capture(0), [], set(), True
        names = (
            "eval exec compile open input breakpoint globals locals vars getattr setattr delattr "
            "__import__ help exit quit type memoryview"
        )
        self.denied = {id(builtins.__dict__[n]) for n in names.split() if n in builtins.__dict__}
        self.real_import = builtins.__import__
        self.forbidden_types = (
            type,
            types.FunctionType,
            types.CodeType,
            types.FrameType,
            types.TracebackType,
            types.ModuleType,
            types.MethodType,
        )
        stdlib = os.path.dirname(os.path.realpath(os.__file__))
        self.helper_files = {os.path.join(stdlib, f) for f in ("ast.py", "inspect.py")}
        self.eval_callers = {
            _THIS,
            os.path.join(stdlib, "collections", "__init__.py"),
            os.path.join(stdlib, "dataclasses.py"),
        }
        import importlib.util

        spec = importlib.util.find_spec("numpy")
        self.numpy_dir = (
            os.path.join(os.path.dirname(os.path.realpath(spec.origin)), "") if spec and spec.origin else None
        )

    def in_workdir(self, full: str) -> bool:
        """``full`` (a real path) is the sandbox's own: below the work dir and not in a host folder kept there."""
        return full.startswith(self.workdir + os.sep) and not (full + os.sep).startswith(self.host_roots)

    def deny(self, kind: str, message: str) -> None:
        self.violation = self.violation or (kind, message)  # sticky, even if user code catches it
        raise _SandboxError(message)

    # -- audit hook (layer 5)
    def audit(self, event: str, args: tuple) -> None:
        if event in _FREE_EVENTS or (self.trusted and not _sandbox_frame_on_stack()):
            return
        if event == "open":
            self._audit_open(*args[:3])
        elif event == "exec":  # eval/exec of a code object; compiling alone runs nothing
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename in self.helper_files:
                frame = frame.f_back
            caller = frame.f_code.co_filename
            ok = (
                caller.startswith("<frozen importlib")
                or os.path.realpath(caller) in self.eval_callers
                or (self.numpy_dir is not None and caller.startswith(self.numpy_dir))
            )
            if not ok:
                self.deny("SecurityViolation", f"run-time eval/exec is not allowed (called from {caller})")
        elif event == "import":
            if str(args[0]).partition(".")[0] in _AUDIT_BLOCKED_IMPORTS:
                self.deny("ImportBlocked", f"import of {args[0]!r} is not allowed, even by library code")
        elif event.startswith(_DENY_EVENTS):
            self.deny("SecurityViolation", f"'{event}' is not allowed in the sandbox")

    def _audit_open(self, path: Any, mode: Any = None, flags: Any = 0) -> None:
        if not isinstance(path, str | bytes):
            self.deny("SecurityViolation", "opening file descriptors is not allowed")
        full = os.path.realpath(os.path.join(self.workdir, os.fsdecode(path)))
        write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        )
        if self.in_workdir(full):
            if write:
                self.written.add(full)
                if len(self.written) > _MAX_FILES:
                    self.deny("SecurityViolation", f"more than {_MAX_FILES} files written")
            return
        if not write and full.startswith(self.read_roots):
            return
        self.deny(
            "SecurityViolation",
            f"{'writing' if write else 'reading'} {os.fsdecode(path)!r} outside the sandbox directory is not allowed",
        )

    # -- guards used by the rewritten code and the restricted builtins (layers 3 and 4)
    def check_name(self, name: Any) -> str:
        # allow-list: exactly an ASCII identifier not starting with '_' (a str subclass could lie in comparisons)
        if type(name) is not str or not _NAME_OK.match(name) or _bad_attr(name):
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

    def open_(
        self,
        file: Any,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
    ) -> Any:
        if not isinstance(file, str):
            self.deny("SecurityViolation", "open() only accepts str paths inside the sandbox directory")
        full = os.path.realpath(os.path.join(self.workdir, file))
        if not self.in_workdir(full):
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
        safe = {
            n: getattr(builtins, n)
            for n in (
                "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict dir divmod enumerate "
                "filter float format frozenset hash hex id int isinstance issubclass iter len list map max min next "
                "object oct ord pow property range repr reversed round set slice sorted staticmethod str sum super "
                "tuple zip Ellipsis NotImplemented __build_class__"
            ).split()
        }
        safe.update(
            {
                n: v
                for n, v in vars(builtins).items()
                if isinstance(v, type) and issubclass(v, BaseException) and not n.startswith("_")
            }
        )

        def denied(name: str) -> Any:
            return lambda *a, **k: self.deny("SecurityViolation", f"{name}() is not available in the sandbox")

        for name in "eval exec compile input breakpoint globals locals vars help exit quit memoryview".split():
            safe[name] = denied(name)
        safe.update(
            getattr=self.getattr_,
            hasattr=self.hasattr_,
            setattr=self.setattr_,
            delattr=self.delattr_,
            type=self.type_,
            open=self.open_,
            print=self.print_,
            __import__=self.import_,
        )
        safe[_GUARD] = self.getattr_
        return safe


def _lower_limits(*pairs: tuple[int, int]) -> None:
    for limit, value in pairs:
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)  # an extension module that cannot be mapped under RLIMIT_AS fails its import
    return isinstance(exc, MemoryError) or "failed to map segment" in text or "annot allocate memory" in text


def _user_line(exc: BaseException) -> str:
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""


class _Worker:
    """Runs requests: ``exec`` (a source; ``keep`` stores its namespace as the definitions) and ``call``."""

    def __init__(self, cfg: dict, tools: dict) -> None:
        self.cfg, self.tools, self.defs = cfg, tools, {}
        self.allowed = frozenset(cfg["allowed"]) - BLOCKED_MODULES
        roots = [p for p in cfg["sys_path"] if os.path.isdir(p)] + [sys.prefix, sys.base_prefix, sys.exec_prefix]
        self.jail = _Jail(self.allowed, cfg["workdir"], tuple(roots))
        self.safe_builtins = self.jail.builtins()

    def handle(self, req: dict) -> dict:
        env = {"ok": False, "value": None, "error": None, "message": "", "stdout": "", "displayed": []}
        jail, code = self.jail, None
        if req["op"] == "exec":
            code, problem = _prepare(req["source"], self.allowed)
            if problem:
                env["error"], env["message"] = problem
                return env
            scope = {
                **self.defs,
                **self.tools,
                **req["inputs"],
                "display": jail.display,
                "__name__": "__sandbox__",
                "__builtins__": self.safe_builtins,
            }
        elif not callable(self.defs.get(req["fn"])):
            env.update(error="RuntimeError", message=f"NameError: function {req['fn']!r} is not defined by the code")
            return env
        jail.stdout, jail.displayed = _Capture(min(1_000_000, self.cfg["max_output"] // 8)), []
        used = resource.getrusage(resource.RUSAGE_SELF)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = int(used.ru_utime + used.ru_stime) + self.cfg["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        sys.stdout = jail.stdout
        sys.setrecursionlimit(_RECURSION_LIMIT)
        jail.trusted = False
        try:
            if code is not None:
                exec(code, scope)
                if req["keep"]:
                    self.defs = {k: v for k, v in scope.items() if k not in ("__builtins__", "__name__")}
                if req["call"] is not None:
                    fn = scope.get(req["call"][0])
                    if not callable(fn):
                        raise NameError(f"function {req['call'][0]!r} is not defined by the code")
                    value = fn(*req["call"][1])
                else:
                    value = scope.get(req["result_name"]) if req["result_name"] else None
            else:
                value = self.defs[req["fn"]](*req["args"])
            env.update(ok=True, value=value)
        except BaseException as exc:  # still untrusted: str(exc) may run the code's own __str__
            if jail.violation is None:
                env.update(self._describe(exc))
        finally:
            sys.setrecursionlimit(1000)
            sys.stdout = sys.__stdout__
        env.update(stdout=jail.stdout.getvalue(), displayed=jail.displayed)
        return env  # jail.trusted stays False: child_main encodes the value under the guards, then resets it

    def _describe(self, exc: BaseException) -> dict:
        """Error kind and one-line message; runs untrusted (user ``__str__``/``__repr__`` may run)."""
        try:
            if isinstance(exc, RecursionError):
                kind = "RecursionLimit"
            elif _out_of_memory(exc):
                kind = "MemoryLimit"
            else:
                kind = "RuntimeError"
            if kind == "MemoryLimit":
                text = f"MemoryError: allocation beyond the {self.cfg['memory_mb']} MB limit"
            else:
                text = f"{type(exc).__name__}: {exc}"[:1000]
            return {"error": kind, "message": text + _user_line(exc)}
        except BaseException as inner:
            if type(inner).__name__ == "_SandboxError" or self.jail.violation is not None:
                return {}
            return {"error": "RuntimeError", "message": "the code raised an exception that cannot be printed"}


def _encode_untrusted(jail: _Jail, env: dict, max_bytes: int) -> bytes:
    """Encode the result with the guards still enforcing (the value may be an object of the code's own
    classes; the wire takes exact types only, so nothing of the code should run, but if it does, the
    audit hook refuses). Afterwards the worker is trusted again; a violation replaces the result."""
    try:
        body = _encode(env, max_bytes)
    except BaseException as exc:  # _SandboxError, or anything escaping _encode
        if jail.violation is None:
            jail.violation = ("BadResult", f"result cannot be sent: {type(exc).__name__}"[:500])
        body = b""
    finally:
        jail.trusted = True
    if jail.violation:
        v = jail.violation
        body = wire.encode({"ok": False, "value": None, "error": v[0], "message": v[1], "stdout": "", "displayed": []})
    return body


def _encode(env: dict, max_bytes: int) -> bytes:
    try:
        body = wire.encode(env)
    except MemoryError:
        env.update(
            ok=False,
            value=None,
            displayed=[],
            stdout="",
            error="MemoryLimit",
            message="out of memory while encoding the result",
        )
        body = wire.encode(env)
    except Exception as e:  # WireError (a type that cannot be sent), RecursionError
        env.update(
            ok=False,
            value=None,
            displayed=[],
            error="BadResult",
            message=f"result cannot be sent: {type(e).__name__}: {e}"[:500],
        )
        body = wire.encode(env)
    if len(body) > max_bytes:
        env.update(
            ok=False,
            value=None,
            displayed=[],
            stdout=env["stdout"][:10000],
            error="OutputTooLarge",
            message=f"encoded result is {len(body)} bytes, over the {max_bytes}-byte limit",
        )
        body = wire.encode(env)
    return body


def _read_exact(n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_msg() -> Any:
    head = _read_exact(_HDR.size)
    if head is None:
        return None
    body = _read_exact(_HDR.unpack(head)[0])
    return None if body is None else pickle.loads(body)  # trusted: only the parent writes to our stdin


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _setup(cfg: dict) -> tuple[dict, tuple[str, str] | None]:
    """Kernel layer (kernel mode), tools, lock-down. Returns (tools, None) or ({}, (kind, message))."""
    if cfg["mode"] == "kernel":
        try:
            keep = [*cfg["sys_path"], sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable]
            kernel.enter_namespaces(cfg["disk"], tuple(p for p in keep if p))
        except Exception as e:
            return {}, (
                "IsolationUnavailable",
                f"kernel isolation is unavailable here ({e}); nothing was run. "
                "Pass isolation='python-only' to run with the Python layers only",
            )
        kernel.fork_pid_init()  # returns in the worker (PID 2 of the new namespace) only
    os.chdir(cfg["workdir"])
    sys.path[:] = cfg["sys_path"]
    try:
        tools = {name: _resolve_tool(spec) for name, spec in cfg["tools"].items()}
    except Exception as e:
        kind = "MemoryLimit" if isinstance(e, MemoryError) else "Crashed"
        return {}, (kind, f"sandbox setup failed: {type(e).__name__}: {e}"[:500])
    if cfg["mode"] == "kernel":
        try:
            kernel.drop_capabilities()
            kernel.install_seccomp(allow_fork=bool(cfg.get("fork")))
        except Exception as e:
            return {}, ("IsolationUnavailable", f"kernel isolation is unavailable here ({e}); nothing was run")
    return tools, None


def child_main() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with OSError instead of killing us
    cfg = _read_msg()
    if cfg is None:
        os._exit(0)
    out_fd = cfg["result_fd"]
    _lower_limits(
        (resource.RLIMIT_AS, cfg["memory_mb"] * 2**20), (resource.RLIMIT_FSIZE, cfg["fsize"]), (resource.RLIMIT_CORE, 0)
    )
    tools, failed = _setup(cfg)
    worker = None
    if failed is None:
        try:
            worker = _Worker(cfg, tools)
        except MemoryError:
            failed = ("MemoryLimit", f"out of memory while setting up the sandbox ({cfg['memory_mb']} MB limit)")
    if worker is not None:
        sys.addaudithook(worker.jail.audit)  # irremovable; enforces only while untrusted code may run
        _lower_limits((resource.RLIMIT_NOFILE, 64))
        if cfg["mode"] == "python-only" and not cfg.get("fork"):
            _lower_limits((resource.RLIMIT_NPROC, 0))  # fork-server: set in each fork instead
    definitions = None  # fork-server: the request that defined the functions, replayed in every fresh child
    while True:
        req = _read_msg()
        if req is None:
            os._exit(0)
        if failed:
            env = {"ok": False, "value": None, "error": failed[0], "message": failed[1], "stdout": "", "displayed": []}
            body = _encode(env, int(cfg["max_output"]))
        elif cfg.get("fork"):
            _serve_forked(worker, cfg, definitions, req, out_fd)
            if req["op"] == "exec" and req["keep"]:
                definitions = req
                _spare_loop(worker, cfg, definitions, out_fd)  # never returns: spares read the next requests
            continue
        else:
            body = _encode_untrusted(worker.jail, _handle(worker, cfg, req), int(cfg["max_output"]))
        _write_all(out_fd, req["nonce"] + _HDR.pack(len(body)) + body)


def _handle(worker: _Worker, cfg: dict, req: dict) -> dict:
    try:
        return worker.handle(req)
    except MemoryError:
        return {
            "ok": False,
            "value": None,
            "error": "MemoryLimit",
            "stdout": "",
            "displayed": [],
            "message": f"MemoryError: allocation beyond the {cfg['memory_mb']} MB limit",
        }


def _entries(path: str) -> set[str]:
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def _clear_dir(path: str) -> None:
    for entry in os.scandir(path):
        try:
            if entry.is_dir(follow_symlinks=False):
                _clear_dir(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _lock_down_fork(cfg: dict) -> None:
    """In a fresh fork, before anything untrusted: no process creation from here on."""
    if cfg["mode"] == "kernel":
        kernel.install_seccomp()  # the full filter on top of the fork-server's: no fork from here on
    else:
        _lower_limits((resource.RLIMIT_NPROC, 0))


def _serve_in_fork(worker: _Worker, cfg: dict, definitions: dict | None, req: dict, out_fd: int) -> None:
    """Replay the definitions (their output is dropped unless they fail), serve ``req``, write its frame."""
    env = None
    if definitions is not None:
        env = _handle(worker, cfg, {**definitions, "call": None, "result_name": None})
        worker.jail.trusted = True
        env = None if env["ok"] else env
    body = _encode_untrusted(worker.jail, env or _handle(worker, cfg, req), int(cfg["max_output"]))
    _write_all(out_fd, req["nonce"] + _HDR.pack(len(body)) + body)


def _serve_forked(worker: _Worker, cfg: dict, definitions: dict | None, req: dict, out_fd: int) -> None:
    """Fork-server (SandboxServer): every request runs in a fresh fork of this never-tainted process, so
    nothing one call does to modules, builtins, files of the worker's memory or the handler survives it.
    The fork replays the definitions first (their output is dropped), then serves the request."""
    before = _entries(cfg["workdir"])
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _lock_down_fork(cfg)
            _serve_in_fork(worker, cfg, definitions, req, out_fd)
        except BaseException:
            code = 70
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    _after_fork(cfg, before, status)


_SPARE_EOF = 3  # a spare's exit code when the parent closed the request pipe


def _spare_loop(worker: _Worker, cfg: dict, definitions: dict, out_fd: int) -> None:
    """Fork-server with a spare: the fork that will serve the next request is made (and locked down) while
    the current one serves, so a call does not wait for ``fork()``. Each spare blocks on its own go-pipe;
    the worker writes it only after the previous fork has exited and the files it added are removed, so
    at most one fork runs code at a time and every call still starts from the definitions alone. The
    spare then reads its request itself (the worker no longer reads stdin), replays the definitions and
    serves it."""
    spare = _fork_spare(worker, cfg, definitions, out_fd)
    while True:
        pid, go = spare
        before = _entries(cfg["workdir"])
        os.write(go, b"g")
        os.close(go)
        spare = _fork_spare(worker, cfg, definitions, out_fd)  # made while this call runs
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == _SPARE_EOF:
            os._exit(0)  # the next spare sees its go-pipe close and exits too
        _after_fork(cfg, before, status)


def _fork_spare(worker: _Worker, cfg: dict, definitions: dict, out_fd: int) -> tuple[int, int]:
    """A locked-down fork waiting for its go signal: (pid, write end of its go-pipe)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(rfd)
        return pid, wfd
    os.close(wfd)
    code = 0
    try:
        _lock_down_fork(cfg)
        if os.read(rfd, 1) != b"g":  # the worker is gone (or exiting): nothing to serve
            os._exit(0)
        os.close(rfd)
        req = _read_msg()
        if req is None:
            os._exit(_SPARE_EOF)
        _serve_in_fork(worker, cfg, definitions, req, out_fd)
    except BaseException:
        code = 70
    os._exit(code)


def _after_fork(cfg: dict, before: set[str], status: int) -> None:
    """After a fork served one request: remove what it added to the work dir; if it died without a result,
    die the same way (the parent classifies the worker's death)."""
    # files of one call do not reach the next (the definitions are replayed): what the call added is removed;
    # entries present before it are left alone (never walk a large or read-only tree on every call)
    for name in _entries(cfg["workdir"]) - before:
        path = os.path.join(cfg["workdir"], name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                _clear_dir(path)
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            pass
    code = os.waitstatus_to_exitcode(status)
    if code != 0:  # the fork died without a result: die the same way, so the parent classifies it
        if code < 0:
            kernel._die_of(-code)
        os._exit(code)
