"""One call's command, run in a sandbox of its own (so that its audit file, and so
what it was denied, is its alone), its output captured up to the cap. Runs in a
worker thread; ``Handle.kill`` may come from any thread (the client cancelled)."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import threading
from dataclasses import dataclass, field

from ..api import Sandbox
from ..process import Capture, TimeoutExpired

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..policy import Policy
    from ..api._handles import LiveProcess
    from ..process import SandboxedProcess

# Sandbox.start forks (the keeper) from whichever thread calls it: one start at a
# time keeps the launch path as single-threaded as the CLI's; the calls then run,
# and are waited for, concurrently.
STARTING = threading.Lock()
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
    value: str | None = None  # run_python: the repr of the code's last expression
    error: str | None = None  # run_python: why the worker was ended (its reply broke the protocol...)


class Handle:
    """The call's process, for the thread that cancels: a kill that comes before the
    process exists is kept and done the moment it does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: SandboxedProcess | LiveProcess | None = None
        self.cancelled = False
        self.finished = threading.Event()

    def started(self, process: SandboxedProcess | LiveProcess) -> None:
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


def shell_line(command: str, cwd: str, root: str) -> list[str]:
    """bash's argv for ``command`` run in ``cwd``. The sandbox always starts in the root
    (its default workspace is the root's, decided once): a cwd beneath it is entered by
    the line's first step, inside the sandbox, so that a directory swapped for a symlink
    after the call's cwd was checked moves the command, never the grants."""
    if cwd == root:
        return [*SHELL, command]
    return [*SHELL, f"cd -- {shlex.quote(cwd)} || exit 126\n{command}"]


def run(policy: Policy, command: str, cwd: str, root: str, timeout: float, cap: int, handle: Handle,
        *, quiet: bool = False, policy_files: tuple[str, ...] = ()) -> Outcome:
    """``command`` by bash in ``cwd`` (the root or beneath it), confined by ``policy``
    in the root, killed after ``timeout``."""
    try:
        with tempfile.TemporaryDirectory(prefix="sandlock-mcp-") as scratch:
            audit = os.path.join(scratch, "audit.jsonl")
            with AuditReader(audit) as records:
                sandbox = Sandbox(policy.replace(cwd=root), audit=audit, quiet=quiet)
                sandbox.policy_files = policy_files
                argv = shell_line(command, cwd, root)

                def start(stdio: dict) -> SandboxedProcess:
                    with STARTING:
                        return sandbox.start(argv, **stdio)

                outcome = collect(start, lambda process: process.end_for_timeout(timeout),
                                  timeout, cap, handle)
                outcome.notices[:0] = sandbox.warnings
                outcome.records = records.read()
            return outcome
    finally:
        handle.finished.set()


class AuditReader:
    """The records an audit file gains, read through a descriptor made before the run
    (as `learn` does): whatever a command granted the host's /tmp leaves at the name
    later, never a link is followed."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o600)
        self._lines = open(self._fd, encoding="utf-8", errors="surrogateescape")

    def __enter__(self) -> AuditReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self) -> list[dict]:
        """The records appended since the last read."""
        return [record for line in self._lines.readlines() if isinstance(record := _parsed(line), dict)]

    def close(self) -> None:
        self._lines.close()


def collect(start: Callable[[dict], object], on_timeout: Callable[[object], None], timeout: float,
            cap: int, handle: Handle) -> Outcome:
    """Start the process (``start(stdio)``: a run's or a long-lived sandbox's), capture
    its output up to ``cap``, wait for it; past ``timeout``, ``on_timeout(process)``."""
    with Capture(b"", True, limit=cap) as capture:  # stdin: empty (ours is the protocol)
        process = start(capture.child_stdio())
        handle.started(process)
        capture.start()
        timed_out = False
        try:
            process.wait(timeout)
        except TimeoutExpired:
            on_timeout(process)
            timed_out = True
        stdout, stderr = capture.finish(_OUTPUT_GRACE)
    code = 124 if timed_out else process.returncode
    return Outcome(code if code is not None else 125, stdout or b"", stderr or b"",
                   (capture.dropped[0], capture.dropped[1]), timed_out,
                   handle.cancelled and not timed_out, process.start_error, list(process.notices))


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None
