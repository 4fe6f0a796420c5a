"""What a run says about two of its particular events, on stderr and in its audit log:
a command killed for its file size, a run in full-access mode (loaded only by runs
that have them)."""

from __future__ import annotations

import _signal as signal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._auditlog import AuditLog
    from ._process import SandboxedProcess


def file_size_exceeded(process: SandboxedProcess, limit: int) -> str | None:
    """The command was killed by SIGXFSZ: it wrote past --max-file-size (a process that
    handles or ignores the signal gets EFBIG instead, and knows)."""
    if process.returncode != 128 + signal.SIGXFSZ:
        return None
    reason = f"file size limit {limit} exceeded: the command was killed by SIGXFSZ (--max-file-size)"
    if process.audit is not None:
        process.audit.limit("max_file_size", str(limit), "kill", reason)
    return f"sandlock: {reason}"


def record_full_access(audit: AuditLog | None, argv: list[str]) -> None:
    """Announced on stderr whatever -q says, and recorded in the audit log."""
    program = os.path.basename(argv[0])  # not the arguments: they may carry tokens
    print(f"sandlock: warning: full-access mode: {program} runs unconfined (filesystem, "
          "network and IPC open; only the syscall filter stays)", file=sys.stderr, flush=True)
    if audit is not None:
        audit.write({"event": "full-access", "program": program})
