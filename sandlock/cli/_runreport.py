"""What a run says of itself besides its command's output, each loaded only by the runs
that ask for it:

The run indicator (LocalGPT's shell sandbox spec): before the command, what runs,
in which workspace, with which network; after it, how long it took and at which
level it was confined. On sandlock's stderr only, never the command's stdout.
Said by runs that say it (stderr a terminal, or --announce / ``-p agent``).

--status-fd FD: how the run ended, as one JSON line written to descriptor FD once the
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
import sys
import time

from .._errors import EXIT_TIMEOUT, PolicyError, tell, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy
    from ..process import SandboxedProcess

# Marks as the spec shows them, where stderr can encode them (else none).
_LOCK, _DONE, _FAILED = "\N{LOCK} ", "\N{CHECK MARK} ", "\N{BALLOT X} "


class Indicator:
    """Says the run's start now, and its end in ``completed``."""

    def __init__(self, policy: Policy, command: list[str], cwd: str) -> None:
        import shlex

        self._marks = _encodable(_LOCK + _DONE + _FAILED)
        shown = visible(shlex.join(command))  # a name with control characters, escaped
        tell(f"{self._mark(_LOCK)}Running sandboxed: {shown}\n"
             f"  Workspace: {visible(cwd)}\n"
             f"  Network: {visible(network(policy))}")
        self._started = time.monotonic()

    def completed(self, code: int, level: str) -> None:
        seconds = time.monotonic() - self._started
        status = "" if code == 0 else f"; exit status {code}"
        mark = self._mark(_DONE if code == 0 else _FAILED)
        tell(f"{mark}Completed in {seconds:.1f}s (sandbox: {level}{status})")

    def _mark(self, mark: str) -> str:
        return mark if self._marks else ""


def network(policy: Policy) -> str:
    """"denied", or the rules that open it, as given."""
    if policy.full_access:
        return "unrestricted (full-access)"
    if policy.net_deny:
        opened = [f"everything but {', '.join(policy.net_deny)}"]
    else:
        opened = list(policy.net_allow_specs)
    opened += [f"HTTP {rule}" for rule in policy.http_allow]
    opened += [f"listen on {', '.join(policy.net_bind)}"] if policy.net_bind else []
    opened += [f"unix {path}" for path in policy.unix_allow]
    shown = "; ".join(opened) or "denied"
    # (its namespaces permitting: a --best-effort run without them has the host's)
    return f"{shown}; a private network, only lo" if policy.private_network else shown


def _encodable(text: str) -> bool:
    try:
        text.encode(sys.stderr.encoding or "ascii")
    except (UnicodeEncodeError, LookupError, AttributeError):
        return False
    return True


# --- --status-fd ---------------------------------------------------------------


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
