"""Kernel layer of :mod:`iclr26.core.sandbox`: namespaces, a read-only root, dropped capabilities, seccomp.

Used only inside the sandbox's own child processes (never in the caller's process). Linux x86_64 only;
everything goes through ``ctypes`` and raw syscalls, no third-party package. The seccomp BPF program is
written out here by hand (``build_filter``); see ``seccomp(2)`` and ``Documentation/userspace-api/seccomp_filter``
in the kernel tree for the instruction set.

Process tree of one sandbox (``enter_namespaces`` + ``fork_pid_init``)::

    caller ──spawn──> outer (host PID ns; unshare: user?, mount, net, pid, ipc, uts; read-only /; tmpfs /tmp)
                        └─fork─> init (PID 1 of the new PID ns; fresh /proc; waits, exits with the worker)
                                   └─fork─> worker (no capabilities, no_new_privs, seccomp; runs the code)

When ``init`` exits the kernel kills every other process of its PID namespace, so nothing the code starts
(if it ever could) outlives the call; ``init`` and the worker also die with their parent (PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct

__all__ = [
    "KernelUnavailable",
    "build_filter",
    "drop_capabilities",
    "enter_namespaces",
    "fork_pid_init",
    "install_seccomp",
    "set_pdeathsig",
]

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP, CLONE_NEWTIME, CLONE_THREAD = 0x02000000, 0x00000080, 0x00010000
_NS_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | CLONE_NEWTIME
)
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RDONLY, MS_REC, MS_PRIVATE = 2, 4, 8, 1, 0x4000, 1 << 18
MS_REMOUNT, MS_BIND = 32, 0x1000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD = 0x1, 0x2, 0x8000, -100
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP = 1, 38, 22, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, SECCOMP_MODE_FILTER = 47, 4, 2

AUDIT_ARCH_X86_64 = 0xC000003E
# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl)
NR = {
    "clone": 56,
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "kill": 62,
    "tkill": 200,
    "tgkill": 234,
    "clone3": 435,
    "execveat": 322,
    "mount_setattr": 442,
    "capset": 126,
}
# refused outright with EPERM: process creation, sockets, tracing, namespaces and mounts, kernel/keyring/bpf
# surfaces, signals by queue/pidfd, changing session or process group (the caller kills the group)
DENIED = {
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
    "socket": 41,
    "socketpair": 53,
    "connect": 42,
    "accept": 43,
    "bind": 49,
    "listen": 50,
    "accept4": 288,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "mount": 165,
    "umount2": 166,
    "unshare": 272,
    "setns": 308,
    "pivot_root": 155,
    "chroot": 161,
    "setsid": 112,
    "setpgid": 109,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "pidfd_open": 434,
    "pidfd_send_signal": 424,
    "pidfd_getfd": 438,
    "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "quotactl": 179,
    "acct": 163,
    "settimeofday": 164,
    "clock_settime": 227,
    "adjtimex": 159,
    "syslog": 103,
    "iopl": 172,
    "ioperm": 173,
    "uselib": 134,
    "vhangup": 153,
    "kcmp": 312,
    "process_madvise": 440,
    "migrate_pages": 256,
    "move_pages": 279,
    "setdomainname": 171,
    "sethostname": 170,
    "personality": 135,
}
EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


class KernelUnavailable(RuntimeError):
    """The kernel layer cannot be set up here (no namespaces, another architecture, seccomp missing...)."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _check(ret: int, what: str) -> None:
    if ret < 0:
        err = ctypes.get_errno()
        raise KernelUnavailable(f"{what} failed: {os.strerror(err)} (errno {err})")


def supported_platform() -> str | None:
    """None if this platform can have the kernel layer, else why not."""
    if platform.system() != "Linux":
        return f"the kernel layer needs Linux, not {platform.system()}"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the seccomp filter is written for x86_64, not {platform.machine()}"
    return None


# ---------------------------------------------------------------------------------------- namespaces
def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _hide(libc: ctypes.CDLL, keep: tuple[str, ...]) -> None:
    """Mount over what escaped code has no business reading or writing: /etc/shadow-like files, /run, and
    every entry of the home directories (/root, /home/*) that is not on the way to a ``keep`` path."""
    targets = [p for p in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers") if os.path.isfile(p)]
    # /run: daemons' sockets and FIFOs (a FIFO stays writable on a read-only mount)
    targets += [p for p in ("/run",) if os.path.isdir(p) and not any(k.startswith(p + os.sep) for k in keep)]
    homes = ["/root"] + [os.path.join("/home", h) for h in (os.listdir("/home") if os.path.isdir("/home") else [])]
    for home in homes:
        try:
            entries = os.listdir(home)
        except OSError:
            continue
        for name in entries:
            full = os.path.join(home, name)
            if not any(k == full or k.startswith(full + os.sep) for k in keep) and not os.path.islink(full):
                targets.append(full)
    for path in targets:
        if os.path.isdir(path):
            ret = libc.mount(
                b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, b"size=4k"
            )
        else:
            ret = libc.mount(b"/dev/null", path.encode(), None, 0x1000, None)  # MS_BIND
        _check(ret, f"mount over {path}")


def _minimal_dev(libc: ctypes.CDLL) -> None:
    """Replace /dev by a read-only tmpfs holding only null, zero, full, random and urandom (bind mounts of the
    real nodes): a read-only mount does not stop writes *through* a device node (a disk, a tty)."""
    names = [n for n in ("null", "zero", "full", "random", "urandom") if os.path.exists(f"/dev/{n}")]
    fds = {n: os.open(f"/dev/{n}", os.O_PATH) for n in names}
    try:
        _check(libc.mount(b"tmpfs", b"/dev", b"tmpfs", MS_NOSUID | MS_NOEXEC, b"size=64k,mode=0755"), "mount(/dev)")
        for n, fd in fds.items():
            os.close(os.open(f"/dev/{n}", os.O_CREAT | os.O_WRONLY, 0o666))
            _check(
                libc.mount(f"/proc/self/fd/{fd}".encode(), f"/dev/{n}".encode(), None, 0x1000, None), f"bind /dev/{n}"
            )  # MS_BIND
        _check(
            libc.mount(None, b"/dev", None, 32 | MS_RDONLY | MS_NOSUID | MS_NOEXEC, None),  # MS_REMOUNT
            "remount /dev read-only",
        )
    finally:
        for fd in fds.values():
            os.close(fd)


def enter_namespaces(tmpfs_bytes: int, keep: tuple[str, ...] = (), tmpfs_inodes: int = 4096) -> None:
    """Called by ``outer``: new user (when not root), mount, network, PID, IPC and UTS namespaces; then
    every mount made private, read-only and nosuid (recursively), secrets hidden (:func:`_hide`), a /dev
    with only null/zero/full/random/urandom (:func:`_minimal_dev`), and a
    fresh size-capped tmpfs on /tmp (the only writable place, which becomes the work dir). The PID namespace
    applies to children only."""
    why = supported_platform()
    if why:
        raise KernelUnavailable(why)
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if uid != 0:
        flags |= CLONE_NEWUSER
    _check(libc.unshare(flags), "unshare(mount, net, pid, ipc, uts" + (", user)" if uid else ")"))
    if uid != 0:  # keep our own ids inside; we hold capabilities over the new namespaces until we drop them
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # struct mount_attr {u64 attr_set, attr_clr, propagation, userns_fd}
    attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, MS_PRIVATE, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    _check(
        libc.syscall(
            ctypes.c_long(NR["mount_setattr"]),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(b"/"),
            ctypes.c_uint(AT_RECURSIVE),
            buf,
            ctypes.c_size_t(len(attr)),
        ),
        "mount_setattr(/, read-only, private, recursive)",
    )
    _hide(libc, tuple(os.path.realpath(k) for k in keep))
    _minimal_dev(libc)
    # an interpreter or virtualenv living under /tmp would vanish under the fresh tmpfs: keep it, read-only
    under_tmp = _kept_dirs_under_tmp(tuple(os.path.realpath(k) for k in keep))
    fds = {d: os.open(d, os.O_PATH | os.O_DIRECTORY) for d in under_tmp}
    try:
        opts = f"size={max(int(tmpfs_bytes), 4096)},nr_inodes={int(tmpfs_inodes)},mode=0700".encode()
        _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, opts), "mount(tmpfs on /tmp)")
        for d, fd in fds.items():
            os.makedirs(d, exist_ok=True)
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), d.encode(), None, MS_BIND | MS_REC, None), f"bind {d}")
            _check(
                libc.mount(None, d.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
                f"remount {d} read-only",
            )
    finally:
        for fd in fds.values():
            os.close(fd)


def _kept_dirs_under_tmp(keep: tuple[str, ...]) -> list[str]:
    """The outermost existing directories among ``keep`` (files: their folder) strictly below /tmp."""
    dirs = sorted({k if os.path.isdir(k) else os.path.dirname(k) for k in keep if k.startswith("/tmp/")})
    dirs = [d for d in dirs if d.startswith("/tmp/") and os.path.isdir(d)]
    return [d for d in dirs if not any(d != o and d.startswith(o + os.sep) for o in dirs)]


def set_pdeathsig(expected_parent: int) -> None:
    """SIGKILL this process when its parent dies (and right now if it already has)."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected_parent:
        os._exit(1)


def fork_pid_init() -> int:
    """Called by ``outer`` after :func:`enter_namespaces`. Forks ``init`` (PID 1 of the new namespace),
    which mounts a fresh /proc and forks the worker. Returns 0 in the worker; in ``outer`` it waits for
    ``init`` and then exits with the worker's status (same exit code, or dies of the same signal)."""
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code > 128:  # the worker died of signal code - 128: die of it too, so the caller sees it
            _die_of(code - 128)
        os._exit(code if code >= 0 else 1)
    set_pdeathsig(0)  # our parent (outer) lives outside this PID namespace, so getppid() is 0
    libc = _libc()
    # fresh /proc for this PID namespace (hides the host's processes); an empty tmpfs if proc cannot be mounted
    if (
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, None) < 0
        and libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, b"size=4k") < 0
    ):
        os.write(2, b"kernel isolation is unavailable here (cannot mount /proc)\n")
        os._exit(70)
    init = os.getpid()
    worker = os.fork()
    if worker == 0:
        set_pdeathsig(init)
        return 0
    for fd in range(3, 256):  # init keeps no pipe ends: EOF on them means the worker is gone
        try:
            os.close(fd)
        except OSError:
            pass
    while True:  # reap everything; leave (taking the whole namespace down) when the worker is gone
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else min(code, 127))


def _die_of(sig: int) -> None:
    try:
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    os._exit(128 + sig)


# -------------------------------------------------------------------------------------- capabilities
def drop_capabilities() -> None:
    """No capabilities at all (effective, permitted, inheritable, ambient, bounding) and no_new_privs."""
    libc = _libc()
    for cap in range(64):  # bounding set (needs CAP_SETPCAP, which we still hold); EINVAL past the last cap
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0:
            break
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two __user_cap_data_struct {effective, permitted, inheritable} = 0
    hbuf, dbuf = ctypes.create_string_buffer(header, 8), ctypes.create_string_buffer(data, 24)
    _check(libc.syscall(ctypes.c_long(NR["capset"]), hbuf, dbuf), "capset(no capabilities)")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


# ------------------------------------------------------------------------------------------- seccomp
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}


def build_filter(self_pid: int, allow_fork: bool = False) -> list[tuple[int, int, int, int]]:
    """The BPF program as (code, jt, jf, k) tuples.

    Wrong architecture or an x32 syscall number: kill the process. Each number in :data:`DENIED`:
    EPERM. ``clone``: allowed only with CLONE_THREAD and no namespace flag (threads, not processes).
    ``clone3``: ENOSYS (the C library then falls back to ``clone``, which is checked). ``kill``/``tkill``/
    ``tgkill``: allowed only when aimed at ``self_pid`` (so ``abort()`` still works), EPERM otherwise.
    Everything else is allowed: the filter closes the ways *out* of the process; files are the mount
    namespace's job and memory/CPU the rlimits'.

    ``allow_fork``: the fork-server stage (:class:`~iclr26.core.sandbox.SandboxServer`'s worker, which runs
    no untrusted code itself): ``clone`` without CLONE_THREAD (but never with a namespace flag) and signals
    are allowed; every forked child installs the full filter on top before it runs anything untrusted
    (stacked filters: the strictest answer wins).
    """
    prog: list = []  # entries: (code, jt_label_or_int, jf_label_or_int, k) ; labels resolved below
    labels: dict[str, int] = {}

    def op(code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        prog.append([code, jt, jf, k])

    op(_LD_W_ABS, _OFF_ARCH)
    op(_JEQ_K, AUDIT_ARCH_X86_64, 0, "kill")
    op(_LD_W_ABS, _OFF_NR)
    op(_JGE_K, 0x40000000, "kill", 0)  # x32 ABI numbers
    for nr in sorted(set(DENIED.values()) - ({NR["fork"], NR["vfork"]} if allow_fork else set())):
        op(_JEQ_K, nr, "eperm", 0)
    op(_JEQ_K, NR["clone3"], "enosys", 0)
    op(_JEQ_K, NR["clone"], "clone", 0)
    if not allow_fork:
        op(_JEQ_K, NR["kill"], "own_pid", 0)
        op(_JEQ_K, NR["tkill"], "own_pid", 0)
        op(_JEQ_K, NR["tgkill"], "own_pid", 0)
    op(_RET_K, RET_ALLOW)
    labels["clone"] = len(prog)
    op(_LD_W_ABS, _OFF_ARG0)  # low 32 bits of the flags
    if not allow_fork:
        op(_JSET_K, CLONE_THREAD, 0, "eperm")
    op(_JSET_K, _NS_FLAGS, "eperm", 0)
    op(_RET_K, RET_ALLOW)
    labels["own_pid"] = len(prog)
    op(_LD_W_ABS, _OFF_ARG0)  # pid_t is 32 bits: the kernel ignores the upper half
    op(_JEQ_K, self_pid & 0xFFFFFFFF, 0, "eperm")
    op(_RET_K, RET_ALLOW)
    labels["eperm"] = len(prog)
    op(_RET_K, RET_ERRNO | EPERM)
    labels["enosys"] = len(prog)
    op(_RET_K, RET_ERRNO | ENOSYS)
    labels["kill"] = len(prog)
    op(_RET_K, RET_KILL_PROCESS)
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise AssertionError("BPF jump out of range")
        out.append((code, jt, jf, k))
    return out


def install_seccomp(self_pid: int | None = None, allow_fork: bool = False) -> None:
    """Load :func:`build_filter` for this process (needs no_new_privs, set by :func:`drop_capabilities`).
    Applies to every thread started afterwards and cannot be removed."""
    prog = build_filter(os.getpid() if self_pid is None else self_pid, allow_fork)
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    filt = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(filt))  # struct sock_fprog {u16 len; ptr}
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0), "prctl(PR_SET_SECCOMP)")
