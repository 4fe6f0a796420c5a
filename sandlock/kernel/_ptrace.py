"""ptrace(2), only as a brake: seize a task, stop it before its next user
instruction, learn what it created or whether its exec completed, and let it go.
Nothing here reads or changes a tracee's registers or memory.

A tracee is controlled by the thread that seized it: every request on it must come
from that same thread (the kernel checks), so one caller keeps a task from seize to
detach. Waiting uses __WALL and a pid, never -1: the process's own children are not
touched.
"""

from __future__ import annotations

import ctypes
import errno
import os

from ._libc import syscall_function
from ._syscalls import nr

PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_GETEVENTMSG = 0x4201
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207

O_TRACEFORK = 0x02
O_TRACEVFORK = 0x04
O_TRACECLONE = 0x08
O_TRACEEXEC = 0x10
O_EXITKILL = 0x100000

EVENT_FORK = 1
EVENT_VFORK = 2
EVENT_CLONE = 3
EVENT_EXEC = 4
EVENT_STOP = 128
CREATION_EVENTS = frozenset({EVENT_FORK, EVENT_VFORK, EVENT_CLONE})

_WALL = 0x40000000
_WNOTHREAD = 0x20000000

_ptrace = syscall_function(nr("ptrace"), ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)


class Refused(OSError):
    """The kernel will not let sandlock trace this task (Yama's ptrace_scope, another
    tracer, an LSM): nothing that needs it may be allowed."""


def seize(tid: int, options: int = 0) -> None:
    """Trace ``tid`` without stopping it. Refused if ptrace is not allowed; OSError
    ESRCH if it is gone."""
    try:
        _ptrace(PTRACE_SEIZE, tid, None, options)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise
        raise Refused(exc.errno, f"ptrace of {tid} refused: {os.strerror(exc.errno)}") from None


def interrupt(tid: int) -> None:
    """Stop ``tid`` before it runs another user instruction (a task blocked in the
    kernel stops when it would return)."""
    _ptrace(PTRACE_INTERRUPT, tid, None, None)


def resume(tid: int, signal: int = 0) -> None:
    """Restart a stopped tracee, delivering ``signal`` if it stopped for one."""
    _ptrace(PTRACE_CONT, tid, None, signal)


def detach(tid: int, signal: int = 0) -> bool:
    """Let ``tid`` go (it runs again; ``signal``: the one it stopped to receive,
    delivered after all). False if it is not stopped for sandlock: gone, or dying
    (then it must still be waited for)."""
    try:
        _ptrace(PTRACE_DETACH, tid, None, signal)
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise
        return False
    return True


def event_message(tid: int) -> int:
    """At a creation event: the new task's id (in sandlock's PID namespace)."""
    value = ctypes.c_ulong()
    _ptrace(PTRACE_GETEVENTMSG, tid, None, ctypes.addressof(value))
    return value.value


def wait_event(tid: int, block: bool = True) -> tuple[str, int] | None:
    """The next report of tracee ``tid``: ("event", N) for a ptrace event stop,
    ("signal", SIG) for a signal-delivery stop, ("exit", STATUS) when it ended; None
    (with ``block`` False) if there is none yet."""
    try:
        pid, status = os.waitpid(tid, _WALL | (0 if block else os.WNOHANG))
    except ChildProcessError:
        return "exit", 0  # gone, reaped elsewhere
    return None if pid == 0 else _report(status)


def wait_any() -> tuple[int, tuple[str, int]] | None:
    """The next report of any task the calling thread traces (its tracees are its
    only children: sandlock's threads fork nothing), as (tid, report); None if it
    traces none."""
    try:
        pid, status = os.waitpid(-1, _WALL | _WNOTHREAD)
    except ChildProcessError:
        return None
    return pid, _report(status)


def _report(status: int) -> tuple[str, int]:
    if os.WIFSTOPPED(status):
        event = status >> 16
        return ("event", event) if event else ("signal", os.WSTOPSIG(status))
    return "exit", status

