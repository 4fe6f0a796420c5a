"""One call's command, run in a sandbox of its own (so that its audit file, and so
what it was denied, is its alone), its output captured up to the cap. Runs in a
worker thread; ``Handle.kill`` may come from any thread (the client cancelled)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass, field

from ..api import Sandbox
from ..process import Capture, TimeoutExpired

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy
    from ..process import SandboxedProcess

# Sandbox.start forks (the keeper) from whichever thread calls it: one start at a
# time keeps the launch path as single-threaded as the CLI's; the calls then run,
# and are waited for, concurrently.
_STARTING = threading.Lock()
_OUTPUT_GRACE = 2.0  # seconds to drain pipes that a process outliving the command holds
SHELL = ("bash", "-c")


@dataclass
class Outcome:
    exit_code: int
    stdout: bytes
    stderr: bytes
    dropped: tuple[int, int] = (0, 0)  # bytes of stdout, stderr past the cap
    timed_out: bool = False
    cancelled: bool = False
    start_error: str | None = None
    notices: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)  # the call's own audit records


class Handle:
    """The call's process, for the thread that cancels: a kill that comes before the
    process exists is kept and done the moment it does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: SandboxedProcess | None = None
        self.cancelled = False
        self.finished = threading.Event()

    def started(self, process: SandboxedProcess) -> None:
        with self._lock:
            self._process = process
            if self.cancelled:
                process.kill()

    def kill(self) -> None:
        """Kill the call's whole tree (the keeper does it); idempotent."""
        with self._lock:
            self.cancelled = True
            if self._process is not None:
                self._process.kill()


def run(policy: Policy, command: str, cwd: str, timeout: float, cap: int, handle: Handle, *,
        quiet: bool = False, policy_files: tuple[str, ...] = ()) -> Outcome:
    """``command`` by bash in ``cwd``, confined by ``policy``, killed after ``timeout``."""
    try:
        with tempfile.TemporaryDirectory(prefix="sandlock-mcp-") as scratch:
            audit = os.path.join(scratch, "audit.jsonl")
            # Read back through this descriptor, made before the run (as `learn` does):
            # whatever a command granted the host's /tmp leaves at the name, never a link.
            records = os.open(audit, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600)
            with open(records, encoding="utf-8", errors="surrogateescape") as lines:
                outcome = _run(policy.replace(cwd=cwd), [*SHELL, command], audit, timeout, cap,
                               handle, quiet, policy_files)
                outcome.records = [record for line in lines
                                   if isinstance(record := _parsed(line), dict)]
            return outcome
    finally:
        handle.finished.set()


def _run(policy: Policy, argv: list[str], audit: str, timeout: float, cap: int,
         handle: Handle, quiet: bool, policy_files: tuple[str, ...]) -> Outcome:
    sandbox = Sandbox(policy, audit=audit, quiet=quiet)
    sandbox.policy_files = policy_files
    with Capture(b"", True, limit=cap) as capture:  # stdin: empty (ours is the protocol)
        with _STARTING:
            process = sandbox.start(argv, **capture.child_stdio())
        handle.started(process)
        capture.start()
        timed_out = False
        try:
            process.wait(timeout)
        except TimeoutExpired:
            process.end_for_timeout(timeout)
            timed_out = True
        stdout, stderr = capture.finish(_OUTPUT_GRACE)
    code = 124 if timed_out else process.returncode
    return Outcome(code if code is not None else 125, stdout or b"", stderr or b"",
                   (capture.dropped[0], capture.dropped[1]), timed_out,
                   handle.cancelled and not timed_out, process.start_error,
                   [*sandbox.warnings, *process.notices])


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None
