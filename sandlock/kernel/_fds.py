"""Descriptors a process leaves to the program it executes, or hands to sandlock."""

from __future__ import annotations

import os

from ._libc import syscall
from ._syscalls import nr

_CLOSE_RANGE_CLOEXEC = 4  # Linux 5.11
_LAST_FD = 0xFFFFFFFF


def close_on_exec_from(first: int) -> None:
    """Mark every descriptor from ``first`` up close-on-exec, in one call that needs no
    /proc (which the confined child may not be allowed to read)."""
    syscall(nr("close_range"), first, _LAST_FD, _CLOSE_RANGE_CLOEXEC)


def take_fd(pid: int, fd: int) -> int:
    """Our own descriptor (close-on-exec) for process ``pid``'s open file ``fd``: how the
    command's seccomp listener reaches sandlock. Made of what start-up has loaded
    already: the command waits for it."""
    pidfd = os.pidfd_open(pid)
    try:
        return syscall(nr("pidfd_getfd"), pidfd, fd, 0)
    finally:
        os.close(pidfd)
