"""``run_python``: one confined Python worker per session, kept alive between calls so
that state and imports persist. It speaks framed JSON (``_pyworker``) over two pipes;
what it sends back is read as hostile input (the code it runs is the model's): a
frame's length is bounded before anything is read, its fields are checked one by one,
and its output is cut at the cap again here. A reply that breaks any rule, a worker
that dies, a timeout or a cancellation end the worker: the next call starts a new one,
and the result says the state was lost."""

from __future__ import annotations

import json
import os
import select
import struct
import tempfile
import threading
import time

from ..api import Sandbox
from ._command import STARTING, AuditReader, Outcome
from ._pyworker import SOURCE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..process import SandboxedProcess
    from ._command import Handle
    from ._settings import Settings

INTERPRETER = "python3"
_SLACK = 64 * 1024  # a reply's bytes beyond its capped fields (JSON escapes, keys, a repr)
LOST = "the Python worker was ended; its state (variables, imports) is lost"



class _Overdue(Exception):
    """No whole reply before the deadline (not TimeoutError: that is an OSError)."""


class WorkerBroke(Exception):
    """The worker's reply broke the protocol (the message says how)."""


class PythonWorker:
    """``launch(argv, stdin, reply_fd)`` starts the worker confined (a run of its own,
    or an exec in the session's sandbox) and returns its process. Not thread-safe: the
    caller gives it one call at a time (and reads the call's audit records around it)."""

    def __init__(self, launch: Callable[[list[str], int, int], object], cap: int) -> None:
        self._launch = launch
        self._cap = cap
        self._process: object | None = None
        self._requests = self._replies = -1
        self._lost = False  # an earlier worker of the session was ended: say so once

    def run(self, code: str, timeout: float, handle: Handle) -> Outcome:
        """``code`` in the session's namespace, past ``timeout`` the worker killed."""
        notes = []
        if self._process is None:
            if self._lost:
                notes.append("a new Python worker started: nothing of earlier calls is defined")
                self._lost = False
            self._start()
        handle.started(self._process)
        try:
            reply = self._ask(code.encode("utf-8", "surrogatepass"), timeout, handle)
        except _Overdue:
            self.stop(lost=True)
            return Outcome(124, b"", b"", timed_out=True, notices=[LOST])
        except WorkerBroke as broke:
            start_error = getattr(self._process, "start_error", None)
            self.stop(lost=True)
            return Outcome(125, b"", b"", notices=[LOST], cancelled=handle.cancelled,
                           start_error=start_error, error=str(broke))
        outcome = _outcome(reply, self._cap)
        outcome.notices[:0] = notes
        return outcome

    def stop(self, *, lost: bool = False) -> None:
        """Kill the worker (its sandbox tree) and forget it."""
        self._lost = self._lost or (lost and self._process is not None)
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
        for fd in (self._requests, self._replies):
            if fd >= 0:
                os.close(fd)
        self._requests = self._replies = -1

    def _start(self) -> None:
        requests_read, requests = os.pipe()
        replies, replies_write = os.pipe()
        # python3 as the sandbox's PATH finds it (the default workspace grants the system's;
        # sandlock's own venv is not the model's to import from): -E -s, no PYTHON*
        # variables, no user site
        argv = [INTERPRETER, "-E", "-s", "-c", SOURCE, str(replies_write), str(self._cap)]
        try:
            self._process = self._launch(argv, requests_read, replies_write)
        finally:
            os.close(requests_read)
            os.close(replies_write)  # the worker's alone: its end is the replies' EOF
        self._requests, self._replies = requests, replies

    def _ask(self, code: bytes, timeout: float, handle: Handle) -> dict:
        deadline = time.monotonic() + timeout
        try:
            _write_all(self._requests, struct.pack(">I", len(code)) + code)
            size = struct.unpack(">I", self._read(4, deadline))[0]
            if size > 4 * self._cap + _SLACK:
                raise WorkerBroke(f"the worker announced a reply of {size} bytes, more than "
                                  "its output cap allows")
            data = self._read(size, deadline)
        except OSError as exc:
            why = "cancelled" if handle.cancelled else \
                f"no reply ({exc}): it could not start under this policy (its messages are on " \
                "the server's stderr), or the code ended it (os._exit, a signal, a limit)"
            raise WorkerBroke(f"the Python worker ended: {why}") from None
        try:
            return _checked(json.loads(data))
        except (ValueError, UnicodeDecodeError):
            raise WorkerBroke("the Python worker's reply could not be read: not JSON") from None

    def _read(self, size: int, deadline: float) -> bytes:
        data = b""
        while len(data) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._replies], [], [], remaining)[0]:
                raise _Overdue
            chunk = os.read(self._replies, size - len(data))
            if not chunk:
                raise OSError("it exited")
            data += chunk
        return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _checked(reply: object) -> dict:
    """The reply's fields, each of the type the protocol says, or WorkerBroke."""
    if not isinstance(reply, dict) or set(reply) != {"stdout", "stderr", "value", "error", "dropped"}:
        raise WorkerBroke("the Python worker's reply is not what the protocol says")
    for name in ("stdout", "stderr"):
        if not isinstance(reply[name], str):
            raise WorkerBroke(f"the Python worker's reply has a {name} that is not text")
    for name in ("value", "error"):
        if reply[name] is not None and not isinstance(reply[name], str):
            raise WorkerBroke(f"the Python worker's reply has a {name} that is not text")
    dropped = reply["dropped"]
    if not (isinstance(dropped, list) and len(dropped) == 2
            and all(type(n) is int and 0 <= n < 2**63 for n in dropped)):
        raise WorkerBroke("the Python worker's reply has a bad count of dropped bytes")
    return reply


def _outcome(reply: dict, cap: int) -> Outcome:
    """The reply as a call's outcome, each output cut at ``cap`` bytes again."""
    outputs = []
    for name, dropped in zip(("stdout", "stderr"), reply["dropped"]):
        data = reply[name].encode("utf-8", "replace")
        outputs.append((data[:cap], dropped + max(len(data) - cap, 0)))
    error = reply["error"]
    stderr = outputs[1][0] + (error.encode("utf-8", "replace")[-cap:] if error else b"")
    return Outcome(1 if error else 0, outputs[0][0], stderr, (outputs[0][1], outputs[1][1]),
                   value=reply["value"][:cap] if reply["value"] is not None else None)


class PythonSession:
    """Without --workdir: the worker in a sandbox of its own under the server's policy,
    with its own audit file (the calls take turns: each is told what it gained)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._turn = threading.Lock()
        self._scratch = tempfile.TemporaryDirectory(prefix="sandlock-mcp-")
        self._audit = os.path.join(self._scratch.name, "audit.jsonl")
        self._records = AuditReader(self._audit)
        self._worker = PythonWorker(self._launch, settings.output_cap)

    def run(self, code: str, timeout: float, handle: Handle) -> Outcome:
        try:
            with self._turn:
                if handle.cancelled:
                    return Outcome(137, b"", b"", cancelled=True)
                self._records.read()  # (between calls: not this call's)
                outcome = self._worker.run(code, timeout, handle)
                outcome.records = self._records.read()
                return outcome
        finally:
            handle.finished.set()

    def close(self) -> None:
        with self._turn:
            self._worker.stop()
            self._records.close()
            self._scratch.cleanup()

    def _launch(self, argv: list[str], stdin: int, replies: int) -> SandboxedProcess:
        settings = self.settings
        sandbox = Sandbox(settings.policy.replace(cwd=settings.root), audit=self._audit,
                          quiet=settings.quiet)
        sandbox.policy_files = settings.policy_files
        with STARTING:
            return sandbox.start(argv, stdin=stdin, pass_fds=(replies,))
