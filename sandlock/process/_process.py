"""sandlock's side of a running sandbox: spawn the keeper, follow its reports.

sandlock ──fork──> keeper ──fork──> command (confined, exec)
      <── report pipe: "pid N", "stop SIG", "exit STATUS" ──
      <── error pipe (close-on-exec): why the command could not start ──
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import _warnings  # (the C half of warnings: loaded with every interpreter)
import errno
import gc
import os
import select
import stat
import time

from .._errors import EXIT_SETUP
from . import _child, _keeper, _reports
from ._terminal import Foreground

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ._cow import WorkspaceOutcome
    from ._watches import Watches


class TimeoutExpired(Exception):
    """wait() ran out of time; the sandbox is still running."""


class SandboxedProcess:
    """A confined command and its keeper, as seen from sandlock."""

    def __init__(self, keeper_pid: int, report_fd: int, foreground: Foreground | None) -> None:
        self.keeper_pid = keeper_pid
        self.pid = 0  # the command's pid, which is also its process group
        self.returncode: int | None = None
        self.start_error: str | None = None  # why exec failed, if it did
        self.start_errno: int | None = None  # its errno, when exec itself failed
        self._reports = report_fd
        self._foreground = foreground
        self._exit_hooks: list[Callable[[], str | None]] = []
        self._at_task_cap: Callable[[int], None] | None = None
        self.tasks_at_cap = 0  # the sandbox's task count when it reached the default cap
        self.notices: list[str] = []  # what the exit hooks had to say (e.g. denial summary)
        self.audit: AuditLog | None = None  # the run's audit log, if it keeps one
        # (limit, verdict) of each limit hit, as the audit log records them (--status-fd)
        self.limits_hit: list[tuple[str, str]] = []
        self.pauser: Watches | None = None  # a long-lived sandbox's pause and resume
        self.nest_network: Callable[..., None] | None = None  # Supervision.nest_network
        self.ports: Callable[[], dict[int, int]] = dict  # --port-remap's (Supervision.ports)
        self.readable: tuple[str, ...] = ()  # what its processes read whatever their policy
        self.workspace_layer = -1  # a --max-disk workspace's tmpfs, taken from the command
        self.scratch: tuple[int, ...] = ()  # its private tmpfs directories, likewise
        self.workspace: WorkspaceOutcome | None = None  # with a workdir, once it has ended
        # A long-lived sandbox's resident is killed when its block ends: how the block
        # ended (0, or 1 for an exception) stands for its exit status.
        self.block_status: int | None = None
        self.argv: list[str] = []  # what it runs (a function's name, for a call)
        self.level = "nested"  # what confines it (Confinement.level), set by its launch
        self.started = time.monotonic()  # for its duration, in the audit log
        self.timed_out = False  # killed by end_for_timeout (its status: 124, as returned)
        # Created (Sandbox.create), not yet started: the gate it waits on, the error
        # pipe that says whether its exec worked, its argv[0] and cwd (for that report).
        self._parked: tuple[int, int, str, str] | None = None
        self._killed = False  # (kill() was called: a parked command stays parked)

    @property
    def is_running(self) -> bool:
        """The sandbox has not ended (created and not yet started counts as running)."""
        return self.poll() is None

    def poll(self) -> int | None:
        """The exit code if the sandbox has ended, else None (never blocks)."""
        if self.returncode is None and select.select([self._reports], [], [], 0)[0]:
            self._read_reports()
        return self.returncode

    def release(self) -> None:
        """Let a created command go on to its exec (Sandbox.start); its start error,
        if the exec failed, is known on return."""
        if self._parked is None:
            raise RuntimeError("the command was not created, or is already started")
        if self._killed:
            return  # killed while parked: it must never exec (its gate stays shut)
        gate, errors, command, cwd = self._parked
        self._parked = None
        try:
            os.write(gate, b"g")
        except BrokenPipeError:
            pass  # it was killed meanwhile: its error pipe says nothing, its exit all
        finally:
            os.close(gate)
        self._take_start_report(errors, command, cwd)

    def _take_start_report(self, errors: int, command: str, cwd: str) -> None:
        report = _read_all(errors)  # (EOF at a successful exec: the pipe is close-on-exec)
        self.start_error = describe_start_error(command, report, cwd)
        self.start_errno = _start_errno(report)

    def __del__(self) -> None:
        """Dropped while its sandbox runs (never waited for): killed and reaped, with a
        ResourceWarning, as subprocess.Popen warns; a sandbox nobody can reach again
        must not run on (nor its keeper stay a zombie)."""
        try:
            if self.returncode is not None or self.poll() is not None:
                return
            _warnings.warn(f"sandbox of pid {self.pid} was still running when its handle was "
                           f"dropped: killed", ResourceWarning, 2, source=self)
            self.kill()
            self.wait(_ABANDONED_WAIT)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (at shutdown, say)
            pass

    def on_exit(self, hook: Callable[[], str | None]) -> None:
        """Run ``hook`` once the sandbox has ended (now, if it already has: a sandbox
        that failed to start ends within spawn); a string it returns is kept in notices."""
        if self.returncode is None:
            self._exit_hooks.append(hook)
            return
        notice = hook()
        if notice:
            self.notices.append(notice)

    def on_task_cap(self, hook: Callable[[int], None]) -> None:
        """Call ``hook(task count)`` when the keeper reports that the sandbox reached
        its default task cap (now, if it already has)."""
        self._at_task_cap = hook
        if self.tasks_at_cap:
            hook(self.tasks_at_cap)

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command's process group."""
        if self.returncode is None and self.pid:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """Kill the command and everything it started (the keeper does it). A created
        command is never released after this, even before the kill has landed."""
        self._killed = True
        if self.returncode is None:
            try:
                os.kill(self.keeper_pid, _keeper.KILL_SIGNAL)
            except ProcessLookupError:
                pass

    def end_for_timeout(self, timeout: float) -> None:
        """The run's time is up: recorded in the audit log, then the sandbox killed."""
        self.limits_hit.append(("timeout", "kill"))
        if self.audit is not None:
            self.audit.limit("timeout", timeout, "kill",
                             f"timeout: killed the sandbox after {timeout:g} s")
        self.timed_out = True
        self.kill()
        self.wait()

    def wait(self, timeout: float | None = None) -> int:
        """The command's exit code in shell convention (128+N for signal N)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutExpired
            ready, _, _ = select.select([self._reports], [], [], remaining)
            if ready:
                self._read_reports()
        return self.returncode

    def fileno(self) -> int:
        """A descriptor that becomes readable when the keeper has news (an exit, mostly),
        to poll several sandboxes at once; ``take_news`` then reads it."""
        return self._reports

    def take_news(self) -> None:
        """Read what the keeper reported (after ``fileno`` polled readable)."""
        if self.returncode is None:
            self._read_reports()

    def _read_reports(self) -> None:
        data = os.read(self._reports, 4096)
        if not data:  # the keeper vanished without reporting
            self._finish(None)
            return
        for kind, value in _reports.parse_reports(data):
            self._on_report(kind, value)

    def _on_report(self, kind: str, value: int) -> None:
        if kind == "pid":
            self.pid = value
        elif kind == "stop" and self._foreground is not None:
            self._foreground.relay_stop(self.pid)
        elif kind == "tasks":
            self.tasks_at_cap = value
            if self._at_task_cap is not None:
                self._at_task_cap(value)
        elif kind == "exit":
            self._finish(value)

    def _finish(self, status: int | None) -> None:
        os.close(self._reports)
        if self._parked is not None:  # created, killed before it was started
            os.close(self._parked[0])
            os.close(self._parked[1])
            self._parked = None
        _reap_soon(self.keeper_pid)
        if self._foreground is not None:
            self._foreground.take_back()
        self.returncode = _exit_code(status)
        for hook in self._exit_hooks:
            notice = hook()
            if notice:
                self.notices.append(notice)


_ABANDONED_WAIT = 10.0  # the keeper reports within ms of the kill; this bounds a stuck one

# Keepers that had reported but not yet exited, reaped at the next spawn.
_exiting_keepers: list[int] = []


def wait_or_kill(process: SandboxedProcess, timeout: float | None) -> bool:
    """Wait for the command; on timeout kill the tree. True if it timed out."""
    try:
        process.wait(timeout)
        return False
    except TimeoutExpired:
        process.end_for_timeout(timeout)
        return True


def _reap_soon(keeper_pid: int) -> None:
    """Reap the keeper now if it is gone, else at the next spawn: after its report, all
    that is left of it is the teardown of the sandbox's namespaces (an RCU grace
    period, ~3.5 ms), which the caller need not wait for. Everything in the sandbox is
    gone. (Not on a thread: one waking while the interpreter shuts down can crash it.)"""
    _exiting_keepers.append(keeper_pid)
    _reap_exited()


def _reap_exited() -> None:
    for pid in list(_exiting_keepers):
        try:
            done = os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            done = True
        if done:
            _exiting_keepers.remove(pid)


def _exit_code(status: int | None) -> int:
    if status is None or status == _keeper.STATUS_FAILED:
        return EXIT_SETUP
    if status == _keeper.STATUS_KILLED:
        return 128 + signal.SIGKILL
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def spawn(spec: _child.ChildSpec, foreground: Foreground | None,
          adopt_listener: Callable[[int, int, int, int], Callable[[], None]] | None = None,
          *, parked: bool = False) -> SandboxedProcess:
    """Fork the keeper (which forks the command) and wait until the command exec'd;
    ``parked``: until it is confined and waits for ``release`` before its exec.

    With ``adopt_listener``, the command hands over its seccomp listener before exec:
    ``adopt_listener(pid, fd, proc, keeper_pid)`` must take it (and ``proc``, the sandbox's /proc,
    when not -1; the command waits until it returns) and returns what to do once the
    command has been told to go on.
    """
    _reap_exited()
    report_r, report_w = os.pipe()
    error_r, error_w = os.pipe()
    to_sandlock, from_child = os.pipe() if adopt_listener else (-1, -1)
    to_child, from_sandlock = os.pipe() if adopt_listener else (-1, -1)
    if adopt_listener:
        spec = spec.replace(handoff=(from_child, to_child))
    gate_r, gate_w = os.pipe() if parked else (-1, -1)
    if parked:
        spec = spec.replace(gate=gate_r)
    keeper_pid = os.fork()
    if keeper_pid == 0:
        # No collections in sandlock's forked copies: each would touch (so copy) pages
        # of the parent's heap for garbage the exec or _exit frees anyway.
        gc.disable()
        for fd in (report_r, error_r, to_sandlock, from_sandlock, gate_w):
            if fd >= 0:
                os.close(fd)
        try:
            _keeper.run(spec, report_w, error_w)  # never returns...
        finally:
            os._exit(EXIT_SETUP)  # ...and must never unwind into the caller's code
    for fd in (report_w, error_w, from_child, to_child, gate_r):
        if fd >= 0:
            os.close(fd)
    process = SandboxedProcess(keeper_pid, report_r, foreground)
    process.argv = spec.argv
    while not process.pid and process.returncode is None:
        process._read_reports()
    if adopt_listener:
        process.workspace_layer, process.scratch = _take_listener(
            to_sandlock, from_sandlock, lambda *handed: adopt_listener(*handed, keeper_pid))
    if parked and process.returncode is None:
        process._parked = (gate_w, error_r, spec.argv[0], spec.cwd)
        return process
    if parked:
        os.close(gate_w)
    process._take_start_report(error_r, spec.argv[0], spec.cwd)
    return process


def _take_listener(from_child: int, to_child: int,
                   adopt: Callable[[int, int, int], Callable[[], None]]
                   ) -> tuple[int, tuple[int, ...]]:
    """Returns our copies of the workspace's tmpfs layer (-1: none) and of the private
    scratch directories, if the command handed them."""
    then = None
    layer_fd, scratch = -1, ()
    try:
        message = os.read(from_child, 128)
        if message:  # empty: the command failed before installing its filter
            pid, fd, proc, layer, *scratch_fds = map(int, message.split())
            if layer >= 0 or scratch_fds:
                from ..kernel import take_fd

                layer_fd = take_fd(pid, layer) if layer >= 0 else -1
                scratch = tuple(take_fd(pid, number) for number in scratch_fds)
            then = adopt(pid, fd, proc)
            os.write(to_child, b"g")
    finally:
        os.close(from_child)
        os.close(to_child)
        if then is not None:
            then()  # the listener is the engine's from here on, whatever happened
    return layer_fd, scratch


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def describe_start_error(command: str, report: bytes, cwd: str = "") -> str | None:
    """Why the command could not start, in a line. (What the policy left out is said
    by the notes after it: ``confinement.failure_notes``.)"""
    error = _child.parse_error(report)
    if error is None:
        return None
    kind, detail = error
    if kind == "setup":
        return f"cannot set up the sandbox: {detail}"
    reason = os.strerror(detail)
    if detail == errno.EACCES and "/" in command and _not_executable(os.path.join(cwd, command)):
        reason += " (not executable: chmod +x it, or run it with its interpreter)"
    elif detail == errno.EPERM:  # the kernel's refusal to run it without its capabilities
        reason += " (a program with file capabilities? a sandbox gives none)"
    return f"cannot run {command!r}: {reason}"


def _not_executable(path: str) -> bool:
    """A file with no execute bit, or a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not mode & 0o111 or stat.S_ISDIR(mode)


def _start_errno(report: bytes) -> int | None:
    error = _child.parse_error(report)
    return error[1] if error is not None and error[0] == "exec" else None  # type: ignore[return-value]
