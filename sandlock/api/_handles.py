"""Handles on the processes of a long-lived sandbox: what ``exec`` returns, and each
of ``fork``'s clones. Their state is kept by the sandbox's reader (``_live``).

And clones as upstream Sandlock spells them: ``Sandbox(policy, init_fn=...,
work_fn=...).fork(n)`` outside a block (the sandbox runs for the clones alone, and
they have ended when it returns: ``ForkedClone``), ``work_fn(clone_id)``, and
``reducer.reduce(argv, clones)``, which gives a command what the clones printed.
A clone's stdout is kept in a memfd of its own and sent back with its value, so no
clone can write into another's output, and the order is the clones' own."""

from __future__ import annotations

import _signal
import os

from ..process import TimeoutExpired
from ._result import ExitStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ._call import CallResult
    from ._live import LiveSandbox
    from ._sandbox import Sandbox

_MARK = "sandlock.fork"  # what a captured clone's value starts with


class LiveProcess:
    """A process started in a long-lived sandbox (``exec``): ``pid`` (as sandlock
    sees it; the leader of its own process group), ``returncode``, ``start_error``."""

    def __init__(self, live: LiveSandbox, token: int, name: str) -> None:
        self._live = live
        self.token = token
        self.name = name
        self.pid = 0
        self.returncode: int | None = None
        self.start_error: str | None = None
        self.notices: list[str] = []  # (the sandbox's own are said when it ends)
        self._pending: list[int] = []  # signals sent before its pid was known: sent once it is

    @property
    def is_running(self) -> bool:
        """It has not ended (the sandbox's reader says when it does)."""
        return self.returncode is None

    def poll(self) -> int | None:
        """Its exit code if it has ended, else None."""
        return self.returncode

    @property
    def audit(self) -> object:
        """The sandbox's audit log, if it keeps one."""
        return self._live.audit

    def wait(self, timeout: float | None = None) -> ExitStatus:
        """Its exit code (128+N for signal N), which also says ``success`` and
        ``reason`` (upstream's words); TimeoutExpired if it runs on."""
        if not self._live.wait_until(lambda: self.returncode is not None, timeout):
            raise TimeoutExpired
        return ExitStatus(self.returncode)

    def send_signal(self, sig: int) -> None:
        """``sig`` to its process group (what it started, unless they moved away).
        Before its pid is known (a clone, a call just asked for), the signal is kept
        and sent by the reader as it learns the pid: never lost, whenever it comes."""
        with self._live.changed:  # (the reader sets pid under it: see started)
            if self.returncode is not None:
                return
            if not self.pid:
                self._pending.append(sig)
                return
        self._signal_group(sig)

    def started(self, pid: int) -> None:
        """(The reader, holding the sandbox's lock:) its pid, said by the process
        itself once its process group exists; a signal kept meanwhile goes now."""
        self.pid = pid
        for sig in self._pending:
            self._signal_group(sig)
        self._pending.clear()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # it has ended: the reader is about to hear it

    def kill(self) -> None:
        """SIGKILL to its process group (the sandbox goes on)."""
        self.send_signal(_signal.SIGKILL)

    def end_group(self) -> None:
        """SIGKILL to what is left of its process group, once it has ended."""
        if self.pid:
            try:
                os.killpg(self.pid, _signal.SIGKILL)
            except OSError:
                pass  # none left

    def end_for_timeout(self, timeout: float) -> None:
        if self.audit is not None:
            self.audit.limit("timeout", timeout, "kill",
                             f"timeout: killed {self.name} after {timeout:g} s")
        self.kill()
        self.wait()


class Clone(LiveProcess):
    """One of ``sb.fork(n)``'s clones: ``clone_id`` (its CLONE_ID), and once it has
    ended, ``value``/``error``/``success`` of ``work()`` as for a call."""

    def __init__(self, live: LiveSandbox, token: int, clone_id: int) -> None:
        super().__init__(live, token, f"clone {clone_id}")
        self.clone_id = clone_id
        self._outcome: bytes = b""

    @property
    def success(self) -> bool:
        return self._result().success

    @property
    def value(self) -> object:
        return self._result().value

    @property
    def error(self) -> object:
        return self._result().error

    def _result(self) -> CallResult:
        from ._call import result_of

        if self.returncode is None:
            raise RuntimeError(f"clone {self.clone_id} is still running: wait() for it first")
        return result_of(self._outcome, self.returncode, None, None, False, self.start_error)


def numbered(work_fn: Callable[[int], object]) -> Callable[[], object]:
    """``work_fn(clone_id)`` as a ``work()`` (the clone's number is in CLONE_ID)."""

    def work() -> object:
        return work_fn(int(os.environ["CLONE_ID"]))

    work.__qualname__ = getattr(work_fn, "__qualname__", "work_fn")
    return work


class _Captured:
    """(In each clone:) ``work()`` with its stdout in a memfd, sent back with its
    outcome: (_MARK, ("value", v) or ("error", type, message, traceback), stdout)."""

    def __init__(self, work: Callable[[], object]) -> None:
        self._work = work

    def __call__(self) -> tuple:
        from ._call import error_outcome, flush_streams

        memfd = os.memfd_create("sandlock-clone-stdout", os.MFD_CLOEXEC)
        os.dup2(memfd, 1)
        try:
            outcome = ("value", self._work())
        except Exception as exc:  # noqa: BLE001 - the clone's error, sent with its output
            outcome = error_outcome(exc)
        flush_streams()
        return (_MARK, outcome, os.pread(memfd, os.fstat(memfd).st_size, 0))


class ForkedClone:
    """One clone of a fork made outside a block, ended: ``clone_id``, ``pid``,
    ``success``, ``value`` (what ``work`` returned) or ``error``, ``stdout``."""

    def __init__(self, clone: Clone) -> None:
        from ._call import EXIT_RAISED, CallError

        self.clone_id, self.pid = clone.clone_id, clone.pid
        self.stdout = b""
        payload = clone.value if clone.success else None
        if isinstance(payload, tuple) and len(payload) == 3 and payload[0] == _MARK \
                and isinstance(payload[2], bytes):
            outcome, self.stdout = payload[1], payload[2]
            self.success = outcome[0] == "value"
            self.value = outcome[1] if self.success else None
            self.error = None if self.success else CallError(*outcome[1:])
            code = clone.returncode if self.success else EXIT_RAISED
        else:  # it never returned: killed, a limit, or a value that could not come back
            self.success, self.value = False, None
            self.error = clone.error if not clone.success else CallError(
                "UnpicklingError", "the clone sent no result sandlock knows")
            code = clone.returncode or EXIT_RAISED
        self.returncode = ExitStatus(code)

    def wait(self, timeout: float | None = None) -> ExitStatus:
        """Its exit status (it has ended already)."""
        return self.returncode


class ForkResult(list):
    """``fork(n)``'s clones, ended, in clone order; ``pids`` as upstream lists them."""

    @property
    def pids(self) -> list[int]:
        return [clone.pid for clone in self]


def fork_apart(sandbox: Sandbox, count: int) -> ForkResult:
    """The sandbox started for ``count`` clones alone (``init`` once), until they have
    all ended or the policy's timeout kills them."""
    if sandbox.work is None:
        raise RuntimeError("fork() needs work: Sandbox(policy, init_fn=..., work_fn=...)")
    from ._live import LiveSandbox

    live = sandbox._live = LiveSandbox(sandbox, sandbox.init, _Captured(sandbox.work))
    failed = True
    try:
        clones = live.fork(count)
        live.wait(sandbox.policy.timeout)
        failed = False
    finally:
        sandbox._live = None
        sandbox.workspace = live.close(failed=failed)
    return ForkResult(ForkedClone(clone) for clone in clones)


def gathered(clones: Iterable[ForkedClone] | Sequence[Clone]) -> bytes:
    """What ``clones`` printed, clone after clone."""
    outputs = [getattr(clone, "stdout", None) for clone in clones]
    if any(output is None for output in outputs):
        raise TypeError("reduce() reads the clones of a fork made outside a block "
                        "(Sandbox(policy, init_fn, work_fn).fork(n)): in a block, clones "
                        "write to the sandbox's own stdout")
    return b"".join(outputs)
