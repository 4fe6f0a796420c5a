"""--status-fd FD: how the run ended, as one JSON line written to descriptor FD once the
sandbox is gone, for the program that started sandlock (docs/usage.md, "Run status").

    {"exit_code": 137, "reason": "limit", "signal": 9, "limits": ["max_memory"],
     "start_error": null}

``reason``: "exited" (the command's own exit), "signaled" (a signal it did not survive),
"timeout" (--timeout), "limit" (a limit that kills: --max-memory, --max-file-size...),
"start_failed" (it never ran: 125, 126, 127 with ``start_error``). ``limits``: every
limit hit, those that refuse or truncate too (max_processes, max_output, max_disk).
"""

from __future__ import annotations

import os

from .._errors import EXIT_TIMEOUT, PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..process import SandboxedProcess


def check_status_fd(fd: int) -> None:
    """The descriptor is open for writing, before anything runs (PolicyError if not)."""
    import fcntl

    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise PolicyError("status_fd", f"{fd} is not an open descriptor") from None
    if mode == os.O_RDONLY:
        raise PolicyError("status_fd", f"descriptor {fd} is open for reading only")


def status_line(process: SandboxedProcess, code: int, timed_out: bool) -> bytes:
    limits = list(dict.fromkeys(name for name, _ in process.limits_hit))
    killed_by_limit = any(verdict == "kill" and name != "timeout"
                          for name, verdict in process.limits_hit)
    if process.start_error:
        reason = "start_failed"
    elif timed_out and code == EXIT_TIMEOUT:
        reason = "timeout"
    elif killed_by_limit:
        reason = "limit"
    elif code > 128:
        reason = "signaled"
    else:
        reason = "exited"
    import json

    return (json.dumps({"exit_code": code, "reason": reason,
                        "signal": code - 128 if code > 128 and reason != "timeout" else None,
                        "limits": limits, "start_error": process.start_error}) + "\n").encode()


def write_status(fd: int, line: bytes) -> None:
    """Written whole (a pipe may take it in parts); a reader gone is no error of the run."""
    view = memoryview(line)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass
