"""A process's children that have ended, reaped without waiting for the others."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


def exited_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child that has ended, reaped; stops when none has
    (or there is no child left)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status
