"""Descriptors a process leaves to the program it executes."""

from __future__ import annotations

from ._libc import syscall
from ._syscalls import nr

_CLOSE_RANGE_CLOEXEC = 4  # Linux 5.11
_LAST_FD = 0xFFFFFFFF


def close_on_exec_from(first: int) -> None:
    """Mark every descriptor from ``first`` up close-on-exec, in one call that needs no
    /proc (which the confined child may not be allowed to read)."""
    syscall(nr("close_range"), first, _LAST_FD, _CLOSE_RANGE_CLOEXEC)
