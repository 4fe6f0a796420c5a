"""What a run says about three of its particular events, on stderr and in its audit
log: a command killed for its file size, a run in full-access mode, a command that
could not start (loaded only by runs that have them)."""

from __future__ import annotations

import _signal as signal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._auditlog import AuditLog
    from ..process import SandboxedProcess
    from ._sandbox import Sandbox


def file_size_exceeded(process: SandboxedProcess, limit: int) -> str | None:
    """The command was killed by SIGXFSZ: it wrote past --max-file-size (a process that
    handles or ignores the signal gets EFBIG instead, and knows)."""
    if process.returncode != 128 + signal.SIGXFSZ:
        return None
    reason = f"file size limit {limit} exceeded: the command was killed by SIGXFSZ (--max-file-size)"
    process.limits_hit.append(("max_file_size", "kill"))
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


def start_report(sandbox: Sandbox, argv: Sequence[str], process: SandboxedProcess,
                 stderr: bytes | None) -> bytes | None:
    """A command that could not start says why in its Result's ``stderr`` (else empty:
    only ``start_error`` would tell), as the CLI prints it, with the notes naming the
    grant that would let it start (unless quiet); without a capture (``stderr`` None),
    on sandlock's own stderr."""
    from ..confinement import failure_notes
    from ..process import child_environment

    policy = sandbox.policy
    lines = [f"sandlock: {process.start_error}"]
    if not sandbox.quiet:
        cwd = policy.cwd or policy.workdir or os.getcwd()
        lines += failure_notes(policy, argv, cwd, child_environment(policy, os.environ),
                               process.start_errno)
    if stderr is None:
        print(*lines, sep="\n", file=sys.stderr)
        return None
    return "".join(f"{line}\n" for line in lines).encode(errors="replace") + stderr
