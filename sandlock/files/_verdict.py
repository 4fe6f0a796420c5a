"""The verdict on a file call (pure): the operation, the kind of file it reaches and
whether the sandbox's grants give that file what the operation needs. (A set-id mode
never gets here: the filter refuses it, unless --allow-syscall waived that.)"""

from __future__ import annotations

import errno
import stat

from .._record import record
from ._calls import WATCHES, Operation


@record
class Verdict:
    allowed: bool
    error: int = 0  # the caller's errno when not allowed
    reason: str = ""


ALLOWED = Verdict(True)


def needs_write(operation: Operation) -> bool:
    """A change needs the file to be writable in the sandbox; a watch, readable."""
    return not isinstance(operation, WATCHES)


def judge(operation: Operation, mode: int, granted: bool) -> Verdict:
    """``mode``: the file's st_mode; ``granted``: the sandbox's grants give it what
    ``operation`` needs (``needs_write``)."""
    if not granted:
        if needs_write(operation):
            return Verdict(False, errno.EACCES, "not writable in this sandbox")
        return Verdict(False, errno.EACCES, "not readable in this sandbox")
    if needs_write(operation) and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        # Write grants on devices (/dev/null...) are for their data: a device node is
        # the host's, and its mode or owner outlives the run.
        return Verdict(False, errno.EACCES, "a device's metadata is the host's")
    return ALLOWED
