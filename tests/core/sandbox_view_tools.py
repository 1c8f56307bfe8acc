"""Trusted tools for tests/core/test_sandbox_private_tmp.py and test_sandbox_spare.py: look at the file system and
the processes from inside a sandbox with calls that the Python layers allow (stat and listdir are not audited), to
see what the kernel layer shows."""

import os
import time


def exists(path: str) -> bool:
    return os.path.exists(path)


def listdir(path: str) -> list:
    return sorted(os.listdir(path))


def me_and_others(wait_s: float = 3.0) -> tuple:
    """(this process's pid, the other pids of the sandbox's PID namespace besides init (1) and the fork-server
    worker (2)), waiting up to ``wait_s`` for another process to appear (the spare made while this call runs)."""
    me = os.getpid()
    deadline = time.monotonic() + wait_s
    while True:
        others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, 2, me))
        if others or time.monotonic() > deadline:
            return me, others
        time.sleep(0.01)
