"""``Sandbox.call``: a Python function run in a confined copy of the caller.

The command's side of the fork (``_child``) confines itself as for any command, then,
instead of exec, runs the function: it sees the caller's modules and data as they
were at the call, shared copy-on-write, nothing re-imported. What it returns comes
back pickled through a pipe of its own; what it prints, through the same capture as
``Sandbox.run``.

    caller ──fork──> keeper ──fork──> init ──fork──> fn(*args, **kwargs)
       <──────────── result pipe: pickle of ("value", v) or ("error", type, message, traceback)
"""

from __future__ import annotations

import errno
import gc
import os
import pickle
import sys
import time
import traceback  # imported before the fork: the function's side imports nothing

from .._errors import EXIT_TIMEOUT
from .._record import record
from ..process import TimeoutExpired, check_timeout

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Protocol, TextIO

    from ..process import Capture, SandboxedProcess
    from ._sandbox import Sandbox

    class Waitable(Protocol):
        """A started function's process: a SandboxedProcess, or a long-lived sandbox's."""

        returncode: int | None
        start_error: str | None
        notices: list[str]
        audit: object

        def wait(self, timeout: float | None = None) -> int: ...
        def end_for_timeout(self, timeout: float) -> None: ...

EXIT_RAISED = 1  # as an uncaught exception ends the interpreter
_GRACE = 1.0  # seconds the output is still collected after the function's process ended
EXIT_UNPICKLABLE = 3


@record
class CallError:
    """Why a call returned no value: the exception's ``type`` (qualified name), its
    ``message`` and the ``traceback`` text, as the function's process saw them."""

    type: str
    message: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@record
class CallResult:
    """How a ``Sandbox.call`` ended: ``value`` is what the function returned (when
    ``success``), ``error`` why not; ``exit_code``, ``stdout``, ``stderr`` and
    ``timed_out`` as in ``Result``."""

    success: bool
    value: object
    error: CallError | None
    exit_code: int
    stdout: bytes | None
    stderr: bytes | None
    timed_out: bool = False


def call(sandbox: Sandbox, function: Callable[..., object], args: tuple = (),
         kwargs: Mapping[str, object] | None = None, timeout: float | None = None) -> CallResult:
    """A call of its own: a fresh sandbox forked from the caller, now."""
    check_call(function, args, kwargs, timeout)

    def start(stdout: int, stderr: int, result: int) -> SandboxedProcess:
        run = Runner(function, tuple(args), dict(kwargs or {}), result)
        with open(os.devnull, "rb") as nothing:  # not the caller's stdin
            return sandbox._launch([_label(function)], run, (nothing.fileno(), stdout, stderr),
                                   (result,))

    return call_in(sandbox, start, timeout)


def call_in(sandbox: Sandbox, start: Callable[[int, int, int], Waitable],
            timeout: float | None, owns_audit: bool = True) -> CallResult:
    """Start a function's process with ``start(stdout, stderr, result)`` (descriptors
    it must pass on), collect what it prints and returns, wait for it (at most
    ``timeout``, else the policy's). ``owns_audit``: the process's audit log is its
    own, closed once it has ended (not a running sandbox's, which its next processes
    still write to)."""
    from ..process import Capture

    timeout = sandbox.policy.timeout if timeout is None else timeout
    result_r, result_w = os.pipe()
    flush_streams()  # else the copy would print again what the caller buffered
    with Capture(None, True, limit=sandbox.policy.max_output, extra=result_r) as capture:
        stdio = capture.child_stdio()
        try:
            process = start(stdio["stdout"], stdio["stderr"], result_w)
        finally:
            os.close(result_w)
        timed_out = _collect(process, capture, timeout)
        stdout, stderr = capture.finish()
    drops = capture.drop_notices(process.audit, close=owns_audit)
    if not sandbox.quiet:
        for notice in [*drops, *process.notices]:
            print(notice, file=sys.stderr)
    code = EXIT_TIMEOUT if timed_out else process.returncode
    return result_of(capture.extra_data, code, stdout, stderr, timed_out, process.start_error)


def _collect(process: Waitable, capture: Capture, timeout: float | None) -> bool:
    """Its output and result, then its end, in this thread (it waits for them anyway:
    a pump thread per call cost a thread's start and join, and its wake-ups); past
    ``timeout`` it is killed (True). What it left behind may hold its output open
    after it ended: that is collected for ``_GRACE`` more seconds, no longer."""
    deadline = None if timeout is None else time.monotonic() + timeout
    drained = capture.pump_here(lambda: process.returncode is None, deadline, _GRACE)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        process.wait(left if drained else 0)
        timed_out = False
    except TimeoutExpired:
        process.end_for_timeout(timeout)
        timed_out = True
    if not drained:  # (killed, or ended in time with its output held open: the rest)
        capture.pump_here(lambda: False, None, _GRACE)
    return timed_out


class Runner:
    """What the function's process runs: the call, its outcome pickled to ``fd``."""

    def __init__(self, function: Callable[..., object], args: tuple, kwargs: dict,
                 fd: int, streams: bool = True) -> None:
        """``streams``: give sys.stdin/stdout/stderr to descriptors 0-2 first; False
        where they are there already (the processes a running sandbox's resident
        forks: it made them once, with nothing buffered)."""
        self._function, self._args, self._kwargs, self._fd = function, args, kwargs, fd
        self._streams = streams
        self._collecting = gc.isenabled()  # (made on the caller's side: its collector's state)

    @classmethod
    def loading(cls, payload: bytes, fd: int, streams: bool = True) -> Runner:
        """The runner of a function and arguments pickled by sandlock (a running
        sandbox's call); one that raises why, if they cannot be loaded here."""
        try:
            function, args, kwargs = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. a module the sandbox cannot read
            error = RuntimeError(f"the function cannot be loaded in the running sandbox: {exc}")

            def unloadable() -> None:
                raise error

            return cls(unloadable, (), {}, fd, streams)
        return cls(function, args, kwargs, fd, streams)

    def __call__(self, host_proc: int = -1) -> int:
        if self._streams:
            standard_streams()
        collecting(self._collecting)
        try:
            value = self._function(*self._args, **self._kwargs)
        except SystemExit as exc:  # sys.exit(): a status, not an error of the call
            flush_streams()
            return _exit_status(exc.code)
        except BaseException as exc:  # noqa: BLE001 - any failure is the call's result
            self._send(_error_message(exc))
            return EXIT_RAISED
        try:
            payload = pickle.dumps(("value", value), pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - an unpicklable value is an error result
            self._send(_error_message(exc, "the function's return value cannot be pickled"))
            return EXIT_UNPICKLABLE
        self._send(payload)
        return 0

    def _send(self, payload: bytes) -> None:
        flush_streams()
        try:
            _write_all(self._fd, payload)
        except OSError as exc:
            if exc.errno != errno.EMSGSIZE:
                raise
            # A clone's results socket takes one message per value, of bounded size.
            _write_all(self._fd, _error_message(exc, f"the return value is too large "
                                                f"({len(payload)} bytes pickled) for a clone"))
        os.close(self._fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def collecting(enabled: bool) -> None:
    """The caller's cyclic garbage collection, back where its code runs (sandlock's forked
    copies run without; a function that makes reference cycles would otherwise grow
    until a memory limit killed it), the objects there so far out of its reach: a
    collection that visited the parent's would write to (so copy) every page of its
    heap."""
    if enabled:
        gc.freeze()
        gc.enable()


def standard_streams() -> None:
    """sys.stdin/stdout/stderr on descriptors 0-2, which are the call's: the caller's
    may have been something else (a test's capture, a notebook's socket), now /dev/null.
    A descriptor that is not open gives None, as at the interpreter's start."""
    sys.stdin = fresh_stdin()
    sys.stdout = _stream(1, "w")
    sys.stderr = _stream(2, "w", buffering=1)


def fresh_stdin() -> TextIO | None:
    """sys.stdin anew on descriptor 0: nothing read ahead."""
    return _stream(0, "r", errors="strict")


def _stream(fd: int, mode: str, buffering: int = -1,
            errors: str = "backslashreplace") -> TextIO | None:
    try:
        return open(fd, mode, buffering, encoding="utf-8", errors=errors, closefd=False)
    except OSError:
        return None


def _error_message(exc: BaseException, context: str = "") -> bytes:
    return pickle.dumps(error_outcome(exc, context))


def error_outcome(exc: BaseException, context: str = "") -> tuple[str, str, str, str]:
    """("error", type, message, traceback) of what a function raised."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    message = f"{context}: {exc}" if context else str(exc)
    # From the function's own frame on: the runner's is not the caller's business.
    frames = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    text = "".join(traceback.format_exception(type(exc), exc, frames or exc.__traceback__))
    return ("error", name, message, text)


def result_of(payload: bytes, code: int, stdout: bytes | None, stderr: bytes | None,
              timed_out: bool, start_error: str | None) -> CallResult:
    """The CallResult of a function's process that sent ``payload`` and ended with
    ``code``."""
    outcome = _outcome(payload)
    if outcome is not None and outcome[0] == "value" and code == 0:
        return CallResult(True, outcome[1], None, code, stdout, stderr, timed_out)
    if outcome is not None and outcome[0] == "error":
        error = CallError(*outcome[1:])
    else:
        error = CallError(*_why_no_value(code, timed_out, start_error))
    return CallResult(False, None, error, code, stdout, stderr, timed_out)


def _outcome(payload: bytes) -> tuple | None:
    """("value", v) or ("error", type, message, traceback) from what the function's
    process sent, which may be anything: the function may have run hostile code.
    Only plain values load (``_safepickle``): never code of the sandbox's choosing."""
    if not payload:
        return None
    from . import _safepickle

    try:
        outcome = _safepickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - a refused type, or bytes that are no pickle
        return ("error", type(exc).__qualname__,
                f"the function's return value cannot be taken back: {exc}", "")
    if (isinstance(outcome, tuple) and len(outcome) == 2 and outcome[0] == "value") or (
            isinstance(outcome, tuple) and len(outcome) == 4 and outcome[0] == "error"
            and all(isinstance(part, str) for part in outcome)):
        return outcome
    return ("error", "UnpicklingError", "the function's process sent no result sandlock knows", "")


def _why_no_value(code: int, timed_out: bool, start_error: str | None) -> tuple[str, str]:
    if start_error:
        return "SetupError", start_error
    if timed_out:
        return "TimeoutExpired", "the call ran out of time: killed with everything it started"
    if code > 128:
        return "Killed", f"the function's process was killed by signal {code - 128}"
    return "SystemExit", f"the function's process exited with status {code} before returning"


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)  # as the interpreter does for sys.exit("message")
    return 1


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _label(function: Callable[..., object]) -> str:
    """How notices and the audit log name the call (no arguments: they may be secrets)."""
    return f"<call {getattr(function, '__qualname__', type(function).__name__)}>"


def check_call(function: object, args: object, kwargs: object, timeout: object) -> None:
    if not callable(function):
        raise TypeError(f"fn: expected a callable, got {type(function).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args: expected a tuple, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs: expected a dict, got {type(kwargs).__name__}")
    check_timeout(timeout)
