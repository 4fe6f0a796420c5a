"""One confined command whose stdio may be pipes it owns: ``Sandbox.popen`` (started
at once) and ``Sandbox.create`` (parked: confined, its pid known, waiting for
``start()`` to exec). The returned ``Process`` is to a sandbox what subprocess.Popen
is to a process: it owns its pipes, ends the sandbox when its ``with`` block ends, and
a dropped one still running is killed and reaped with a ResourceWarning.
"""

from __future__ import annotations

import _warnings
import enum
import os

from ..process import TimeoutExpired, check_argv, check_pass_fds, check_timeout
from ._sandbox import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO

    from ..policyfiles import Checkpoint
    from ..process import SandboxedProcess
    from ._sandbox import Sandbox

_ABANDONED_WAIT = 10.0  # the keeper reports within ms of a kill; this bounds a stuck one


class StdioMode(enum.IntEnum):
    """What one of a popen'd command's stdio is (upstream's values: 0, 1, 2)."""

    INHERIT = 0  # this process's own
    PIPED = 1  # a pipe whose other end the Process owns (.stdin/.stdout/.stderr)
    NULL = 2  # /dev/null


class Process:
    """A command ``popen`` started (or ``create`` parked) in a sandbox of its own:
    ``pid``, ``stdin``/``stdout``/``stderr`` (file objects for PIPED, else None),
    ``poll()``, ``wait()``, ``kill()``, ``pause()``/``resume()`` (every process of its
    sandbox), ``is_running``; ``with`` closes its pipes and ends its sandbox."""

    def __init__(self, process: SandboxedProcess, argv: list[str],
                 streams: list[IO[bytes] | None]) -> None:
        self._process = process
        self.args = argv
        self.stdin, self.stdout, self.stderr = streams
        self._result: Result | None = None

    @property
    def pid(self) -> int | None:
        """The command's pid (None once it has been waited for: the number may be reused)."""
        return None if self._result is not None else self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def is_running(self) -> bool:
        """Its sandbox has not ended (parked by ``create`` counts as running)."""
        return self._process.poll() is None

    def poll(self) -> int | None:
        """The exit code if it has ended, else None (never blocks)."""
        return self._process.poll()

    def start(self) -> None:
        """Let a ``create``d command exec (``Sandbox.start()`` does the same)."""
        self._process.release()

    def wait(self, timeout: float | None = None) -> Result:
        """Until the sandbox has ended: a piped stdin is closed first (the command sees
        EOF), and past ``timeout`` the sandbox is killed (``timed_out``, exit 124), as
        ``Sandbox.run``'s. The same Result every time once it has ended. Read piped
        stdout and stderr before (a full pipe stops a writer, as with subprocess)."""
        if self._result is not None:
            return self._result
        if timeout is not None and timeout != 0:  # (0: now, as subprocess's wait)
            timeout = check_timeout(timeout)
        _close_quietly(self.stdin)
        if self._process._parked is not None:
            self._process.release()  # (a created command waited for: it is started)
        timed_out = False
        try:
            self._process.wait(timeout)
        except TimeoutExpired:
            self._process.end_for_timeout(timeout)
            timed_out = True
        process = self._process
        code = 124 if timed_out else process.returncode
        self._result = Result(code, None, None, timed_out, process.start_error, process.workspace)
        return self._result

    def send_signal(self, sig: int) -> None:
        """``sig`` to the command's process group (not once it has ended)."""
        self._process.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        """Kill every process of its sandbox (again: nothing)."""
        self._process.kill()

    def pause(self) -> None:
        """Stop every process of its sandbox (those it forks meanwhile too)."""
        if self._process.poll() is not None:
            raise RuntimeError("the process has ended: nothing to pause")
        pauser = self._process.pauser
        if pauser is None:
            raise RuntimeError("pause needs the sandbox's own PID namespace")
        if not pauser.pause():
            raise RuntimeError("the sandbox's processes could not all be stopped within 2 s")

    def resume(self) -> None:
        if self._process.pauser is not None and self._process.poll() is None:
            self._process.pauser.resume()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        """The pipes closed, the sandbox killed if it runs on, and reaped."""
        for stream in (self.stdout, self.stderr):
            _close_quietly(stream)
        self.kill()
        self.wait()

    def __del__(self) -> None:
        try:
            if self._result is not None or self._process.poll() is not None:
                return
            _warnings.warn(f"sandbox process {self._process.pid} was still running when its "
                           f"Process was dropped: killed", ResourceWarning, 2, source=self)
            self._process.kill()
            self._process.wait(_ABANDONED_WAIT)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (at shutdown, say)
            pass

    def __repr__(self) -> str:
        return f"<sandlock.Process pid={self.pid} returncode={self.returncode}>"


def popen(sandbox: Sandbox, argv: Sequence[str], stdio: tuple[object, object, object],
          pass_fds: Sequence[int], *, parked: bool) -> Process:
    """Start (or park) ``argv`` in a sandbox of its own, its stdio as ``stdio`` says."""
    argv = check_argv(argv)
    pass_fds = check_pass_fds(pass_fds)
    modes = [_mode(name, value) for name, value in zip(("stdin", "stdout", "stderr"), stdio)]
    ours: list[int] = []  # sandlock's ends of the pipes, kept
    theirs: list[int] = []  # the command's ends and /dev/null: closed once it holds them
    child: list[int | None] = []
    try:
        for index, mode in enumerate(modes):
            child.append(_child_end(index, mode, ours, theirs))
        process = sandbox._launch(argv, None, tuple(child), pass_fds, pausable=True,
                                  parked=parked)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    streams = iter(ours)
    files = [os.fdopen(next(streams), "wb" if index == 0 else "rb")
             if mode is StdioMode.PIPED else None for index, mode in enumerate(modes)]
    return Process(process, argv, files)


def checkpoint(sandbox: Sandbox, save_fn: Callable[[], bytes | None] | None) -> Checkpoint:
    """``sandbox``'s policy and ``save_fn()``'s bytes, taken while every process of the
    sandbox (a block's, or popen's/create's) is stopped: what they share stays still."""
    from ..policyfiles import Checkpoint

    if save_fn is not None and not callable(save_fn):
        raise TypeError(f"save_fn: expected a callable, got {type(save_fn).__name__}")
    live, own = sandbox._live, sandbox._own()
    if live is None and (own is None or not own.is_running):
        raise RuntimeError("checkpoint(): the sandbox is not running (a `with Sandbox(...)` "
                           "block, or a command popen/create started)")
    stopped = live if live is not None else own
    stopped.pause()
    try:
        state = save_fn() if save_fn is not None else None
    finally:
        stopped.resume()
    argv = tuple(own.args) if live is None and own is not None else None
    return Checkpoint(sandbox.policy, state, argv=argv)


def _mode(name: str, value: object) -> StdioMode | int:
    """A StdioMode (None and 0..2 as upstream's discriminants), or a descriptor: a file
    object's, or an int above 2."""
    if value is None:
        return StdioMode.INHERIT
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected a StdioMode or a file, got a bool")
    if isinstance(value, int) and not isinstance(value, StdioMode) and value > 2:
        return value  # a descriptor of the caller's (0..2 are the modes, as upstream)
    if isinstance(value, int):
        try:
            return StdioMode(value)
        except ValueError:
            raise ValueError(f"{name}: {value} is no StdioMode (PIPED, NULL, INHERIT) "
                             f"nor a descriptor") from None
    if hasattr(value, "fileno"):
        return value.fileno()
    raise TypeError(f"{name}: expected a StdioMode, a file or a descriptor, "
                    f"got {type(value).__name__}")


def _child_end(index: int, mode: StdioMode | int, ours: list[int],
               theirs: list[int]) -> int | None:
    """The descriptor the command gets as stdio ``index`` (None: it inherits ours)."""
    if mode is StdioMode.INHERIT:
        return None
    if mode is StdioMode.NULL:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        theirs.append(null)
        return null
    if mode is StdioMode.PIPED:
        read, write = os.pipe()
        mine, child = (write, read) if index == 0 else (read, write)
        ours.append(mine)
        theirs.append(child)
        return child
    return mode


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is None or stream.closed:
        return
    try:
        stream.close()
    except BrokenPipeError:  # (it flushes first: a command that ended reads nothing)
        pass
