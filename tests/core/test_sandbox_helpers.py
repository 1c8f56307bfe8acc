"""Trusted tool functions for the sandbox tests (no tests here).

``escaped(action, arg)`` stands for code that has already got out of every Python layer: it switches the
audit hook of the running sandbox off (walking the stack to the harness, which only trusted tool code can
do), then tries ``action`` with the real os/socket/ctypes functions. What is left to stop it is the
kernel layer. Each action returns ``"ok: ..."`` or ``"err: <errno name>"``; every payload is harmless
(an empty file, a connection attempt, signal 0 / SIGUSR1 to the test process, a child that exits at once).
"""

import errno
import os
import signal
import socket
import subprocess
import sys


def _disable_audit() -> None:
    frame = sys._getframe()
    while frame is not None:
        jail = frame.f_locals.get("jail")
        if jail is not None and type(jail).__name__ == "_Jail":
            jail.trusted = True  # and the hook's "sandbox frame on the stack" test answers no from now on
            sys.modules["iclr26.core.sandbox_child"]._sandbox_frame_on_stack = lambda: False
            return
        frame = frame.f_back
    raise RuntimeError("no sandbox harness on the stack")


def _err(e: OSError) -> str:
    return f"err: {errno.errorcode.get(e.errno, e.errno)}"


def escaped(action: str, arg=None) -> str:
    _disable_audit()
    try:
        if action == "write":
            with open(arg, "w") as f:
                f.write("escaped")
            return "ok: wrote"
        if action == "read":
            with open(arg, "rb") as f:
                return f"ok: {len(f.read())} bytes"
        if action == "mkdir":
            os.mkdir(arg)
            return "ok: made"
        if action == "fork":
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return "ok: forked"
        if action == "spawn":  # a detached process that would outlive the call
            proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
            return f"ok: spawned {proc.pid}"
        if action == "exec":
            os.execv("/bin/true", ["true"])
        if action == "connect":
            with socket.create_connection(("127.0.0.1", arg), timeout=1):
                return "ok: connected"
        if action == "socketpair":
            socket.socketpair()
            return "ok: socketpair"
        if action == "kill":  # signal 0 probes, SIGUSR1 would reach the test process without the kernel layer
            os.kill(arg, signal.SIGUSR1)
            return "ok: signalled"
        if action == "killpg":
            os.killpg(os.getpgid(0), 0)
            return "ok: killpg"
        if action == "setsid":
            os.setsid()
            return "ok: setsid"
        if action == "thread":
            import threading

            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start()
            t.join()
            return f"ok: thread {out}"
        if action == "ns":
            names = ("net", "mnt", "pid", "ipc", "uts")
            return "ok: " + " ".join(os.readlink(f"/proc/self/ns/{n}") for n in names) + f" pid={os.getpid()}"
        if action == "run":
            return f"ok: {sorted(os.listdir('/run'))}"
        if action == "dev":
            return f"ok: {sorted(os.listdir('/dev'))}"
        if action == "tmp":
            return f"ok: {sorted(os.listdir('/tmp'))}"
        if action == "procs":
            return f"ok: {sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}"
        if action == "forge_stdout":  # a fake frame on fd 1 and 2: never read as a result
            for fd in (1, 2):
                os.write(fd, b"\x00" * 16 + (8).to_bytes(8, "little") + b"T" * 8)
            return "ok: printed"
        if action == "forge_resultfd":  # a well-formed frame with a guessed nonce on the real result channel
            from iclr26.core import sandbox_wire

            frame = sys._getframe()
            while "self" not in frame.f_locals or not hasattr(frame.f_locals["self"], "cfg"):
                frame = frame.f_back
            fd = frame.f_locals["self"].cfg["result_fd"]
            body = sandbox_wire.encode(
                {"ok": True, "value": "forged", "error": None, "message": "", "stdout": "", "displayed": []}
            )
            os.write(fd, os.urandom(16) + len(body).to_bytes(8, "little") + body)
            return "ok: forged"
        raise ValueError(action)
    except OSError as e:
        return _err(e)


def parent_ns() -> str:
    names = ("net", "mnt", "pid", "ipc", "uts")
    return " ".join(os.readlink(f"/proc/self/ns/{n}") for n in names)
