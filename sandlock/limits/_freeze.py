"""The sandbox's processes, as its own /proc lists them: listed, stopped, continued.

Every process is reached through its /proc directory (a pidfd from it), so a pid is
never reused under our feet; sandlock's init (pid 1 in the namespace) is never one of
them. Used by the CPU throttle and by a long-lived sandbox's pause and resume.
"""

from __future__ import annotations

import _signal
import os
import time

INIT = "1"  # sandlock's init: in the namespace, not one of the command's processes
_SETTLE = 0.0005


def sandbox_pids(proc_fd: int) -> list[str]:
    """The pids (as /proc names them) of the sandbox's processes, init excepted."""
    return [name for name in os.listdir(proc_fd) if name.isdigit() and name != INIT]


def signal_all(proc_fd: int, sig: int, skip: set[str] = frozenset()) -> set[str]:
    """``sig`` to every process of the sandbox not in ``skip``; those it was sent to."""
    sent = set()
    for pid in sandbox_pids(proc_fd):
        if pid in skip:
            continue
        try:
            fd = os.open(pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc_fd)
        except OSError:
            continue  # gone
        try:
            _signal.pidfd_send_signal(fd, sig)
            sent.add(pid)
        except OSError:
            pass
        finally:
            os.close(fd)
    return sent


def freeze(proc_fd: int, timeout: float = 2.0) -> bool:
    """Stop every process of the sandbox, including those forked while this runs: a
    pass that finds none left to stop, after each stopped one has really stopped (a
    fork in flight when its parent was signalled shows up by then), ends it. False
    if that did not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    stopped: set[str] = set()
    while time.monotonic() < deadline:
        new = signal_all(proc_fd, _signal.SIGSTOP, stopped)
        if not new and all(map(lambda pid: _stopped(proc_fd, pid), stopped)):
            return True
        stopped |= new
        time.sleep(_SETTLE)
    return False


def thaw(proc_fd: int) -> None:
    signal_all(proc_fd, _signal.SIGCONT)


def _stopped(proc_fd: int, pid: str) -> bool:
    """Whether ``pid`` is stopped (or gone), from its stat's state field."""
    try:
        fd = os.open(f"{pid}/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return True
    try:
        state = os.read(fd, 4096).rsplit(b")", 1)[1].split(None, 1)[0]
    except (OSError, IndexError):
        return True
    finally:
        os.close(fd)
    if state == b"D":  # in the kernel: a vfork parent, until its (stopped) child execs
        return _stop_pending(proc_fd, pid)
    return state in (b"T", b"t", b"Z", b"X")


def _stop_pending(proc_fd: int, pid: str) -> bool:
    """Whether ``pid`` has a SIGSTOP pending: it stops as it leaves the kernel, before
    running another instruction of its own, so it counts as stopped. (Without this, a
    shell's vfork parent, waiting in the kernel for a child stopped before its exec,
    never looked stopped: pause() failed after 2 s, 7 times in 30 on a `sh` loop.)"""
    try:
        fd = os.open(f"{pid}/status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return True
    try:
        status = os.read(fd, 4096)
    except OSError:
        return True
    finally:
        os.close(fd)
    stop = 1 << (_signal.SIGSTOP - 1)
    return any(int(line.split()[1], 16) & stop for line in status.splitlines()
               if line.startswith((b"SigPnd:", b"ShdPnd:")))
