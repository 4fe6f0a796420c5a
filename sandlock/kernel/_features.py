"""Probe the running kernel for the features sandlock builds on."""

from __future__ import annotations

import ctypes
import errno
import os

from .._record import record
from . import _landlock
from ._libc import syscall
from ._mounts import (
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    enter_namespaces,
    mount_overlay,
    mount_proc,
    mount_tmpfs,
)
from ._seccomp import SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_USER_NOTIF
from ._syscalls import nr

_SECCOMP_GET_ACTION_AVAIL = 2  # a seccomp(2) operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


@record
class Feature:
    name: str
    available: bool
    detail: str  # what the kernel has
    use: str  # what sandlock does with it
    required: bool  # `sandlock run` refuses to start without it (unless --best-effort)


def _syscall_exists(name: str, *args: int) -> bool:
    """True when the syscall exists (any errno but ENOSYS proves it)."""
    try:
        result = syscall(nr(name), *args)
    except OSError as exc:
        return exc.errno != errno.ENOSYS
    os.close(result)
    return True


def probe() -> list[Feature]:
    from ._sockdiag import diag_available  # (`sandlock check` only: not on a run's start path)

    abi = _landlock.abi_version()
    features = [
        Feature("kernel", True, os.uname().release, os.uname().machine, False),
        Feature("Landlock", abi > 0, f"ABI {abi}" if abi else "not available",
                f"ABI {abi}, the best this kernel has" if abi else "-", True),
        *(
            Feature(f"  ABI {level}", level <= abi, "yes" if level <= abi else "no", what, level == 1)
            for level, what in sorted(_landlock.ABI_FEATURES.items())
        ),
        Feature("Landlock IPC scoping", abi >= 6, "yes" if abi >= 6 else "needs ABI 6",
                "abstract unix sockets and signals blocked unless --allow-ipc", True),
        Feature("Landlock TCP rules", abi >= 4, "yes" if abi >= 4 else "needs ABI 4",
                "not used: the supervisor enforces every network rule", False),
        Feature("seccomp filter", action_available(SECCOMP_RET_KILL_PROCESS),
                "SECCOMP_RET_KILL_PROCESS", "syscall filter installed last, before exec", True),
        Feature("seccomp user notification", action_available(SECCOMP_RET_USER_NOTIF),
                "SECCOMP_RET_USER_NOTIF",
                "supervisor: network (connect, send, bind), file metadata and watches", True),
        Feature("pidfd_open", _syscall_exists("pidfd_open", os.getpid(), 0), "syscall",
                "network supervisor", True),
        Feature("pidfd_getfd", _syscall_exists("pidfd_getfd", -1, 0, 0), "syscall",
                "on-behalf socket operations (network supervisor)", True),
        Feature("unix socket diagnostics", *diag_available(),
                "the sandbox's own unix sockets told from the host's", False),
        Feature("user namespaces", *namespaces(),
                "the sandbox's own /proc, /tmp and autorun protection", True),
        Feature("overlayfs, unprivileged", *overlay(),
                "the copy-on-write workspace (--workdir)", False),
        Feature(PID_MAX, *_pid_max(),
                "the default task cap for root (RLIMIT_NPROC exempts it)", False),
    ]
    return features


PID_MAX = "pid_max of a PID namespace"


_PROBED_PID_MAX = 4321


def _in_child(attempt: Callable[[], int]) -> int:
    """The exit status of ``attempt()`` run in a throwaway child (0: it worked)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(attempt())
        finally:
            os._exit(255)  # never back into the caller's code
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _pid_max() -> tuple[bool, str]:
    """(available, found): a sandbox's /proc mounted with its pid_max set, as init
    mounts it, in a throwaway PID namespace."""
    code = _in_child(lambda: _try_namespaces(_pid_max_set, _PROBED_PID_MAX))
    return (True, "yes") if code == 0 else (False, f"refused: {os.strerror(code % 128 or 1)}")


def _pid_max_set() -> None:
    """Linux 6.14+: a PID namespace has a pid_max of its own, which root in its user
    namespace may set (``mount_proc`` set it, if it could)."""
    with open("/proc/sys/kernel/pid_max", "rb") as file:
        if int(file.read()) != _PROBED_PID_MAX:
            raise OSError(errno.EPERM, "not set")


def namespaces() -> tuple[bool, str]:
    """Can this process make the sandbox's namespaces and its /proc (the kernel's
    switches, an outer sandbox's filter, a container whose /proc has masked files,
    where a new procfs is refused)? Tried in throwaway children: (available, found)."""
    code = _in_child(_try_namespaces)
    if code == 0:
        return True, "user, mount, PID; own /proc"
    what = "a procfs of its own" if code >= _PROC_FAILED else "the namespaces"
    return False, f"refused {what}: {os.strerror(code % _PROC_FAILED or 1)}"


_PROC_FAILED = 128  # added to the errno when the namespaces were made but not the procfs


def _try_namespaces(then: Callable[[], None] | None = None, pid_max: int = 0) -> int:
    try:
        enter_namespaces(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)
        pid = os.fork()  # the PID namespace's first process: only it can mount a procfs
        if pid == 0:
            try:
                mount_proc("/proc", pid_max)
            except OSError as exc:
                os._exit(_PROC_FAILED + min(exc.errno or 1, 127))
            try:
                if then is not None:
                    then()
                os._exit(0)
            except OSError as exc:
                os._exit(min(exc.errno or 1, 127))
            finally:
                os._exit(255)
        return min(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), 255)
    except OSError as exc:
        return min(exc.errno or 1, 127)
    except BaseException:  # noqa: BLE001 - a throwaway child: never unwind
        return 255


def overlay() -> tuple[bool, str]:
    """Can this process mount an overlayfs in a user namespace of its own (Linux 5.11+,
    userxattr)? Tried in a throwaway child, on a tmpfs of its private mount namespace."""
    code = _in_child(_try_overlay)
    return (True, "userxattr") if code == 0 else (False, f"refused: {os.strerror(code or 1)}")


def _try_overlay() -> int:
    try:
        enter_namespaces(CLONE_NEWUSER | CLONE_NEWNS)
        mount_tmpfs("/tmp", b"size=64k")  # (this child's mount namespace only)
        for name in ("lower", "upper", "work", "merged"):
            os.mkdir(f"/tmp/{name}")
        mount_overlay("/tmp/merged", "/tmp/lower", "/tmp/upper", "/tmp/work")
        return 0
    except OSError as exc:
        return min(exc.errno or 1, 255)
    except BaseException:  # noqa: BLE001 - a throwaway child: never unwind
        return 255


# LocalGPT's protection levels, from the most to the least this kernel allows.
LEVELS = (
    ("Full", "filesystem, IPC and signal scoping, own /proc and /tmp, syscall filter, "
             "network supervisor"),
    ("Standard", "filesystem, syscall filter, network supervisor; no IPC scoping or no "
                 "namespaces (sandlock run needs --best-effort)"),
    ("Minimal", "syscall filter and network supervisor only; no filesystem confinement "
                "(sandlock run needs --best-effort)"),
    ("None", "sandlock cannot confine commands here"),
)


def protection_level(features: list[Feature]) -> tuple[str, str]:
    """(level, what it gives) for the features ``probe`` found."""
    have = {feature.name: feature.available for feature in features}
    supervised = all(have[name] for name in ("seccomp filter", "seccomp user notification",
                                             "pidfd_open", "pidfd_getfd"))
    if not supervised:
        return LEVELS[3]
    if not have["Landlock"]:
        return LEVELS[2]
    full = have["Landlock IPC scoping"] and have["user namespaces"]
    return LEVELS[0] if full else LEVELS[1]


def action_available(action: int) -> bool:
    """True when the kernel supports the filter return ``action`` (and seccomp itself)."""
    value = ctypes.c_uint32(action)
    try:
        syscall(nr("seccomp"), _SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(value))
        return True
    except OSError:
        return False
