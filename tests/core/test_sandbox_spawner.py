"""Tool module for the sandbox tests (no tests here): imported inside a kernel-mode worker, it starts a
detached ``sleep`` while the worker is still being set up (before seccomp), standing for a process that
escaped code managed to start. The PID namespace must kill it when the call ends."""

import os
import subprocess

MARKER = "31.4159265"
_PID = None
if os.getpid() == 2 and os.environ.get("HOME") == "/tmp":  # only in a kernel-mode sandbox worker
    _PID = subprocess.Popen(["sleep", MARKER], start_new_session=True).pid


def spawned() -> str:
    if _PID is None:
        return "not spawned"
    return f"alive: {_PID}" if str(_PID) in os.listdir("/proc") else "gone"
