"""Handles on the processes of a long-lived sandbox: what ``exec`` returns, and each
of ``fork``'s clones. Their state is kept by the sandbox's reader (``_live``)."""

from __future__ import annotations

import _signal
import os

from ..process import TimeoutExpired
from ._result import ExitStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._call import CallResult
    from ._live import LiveSandbox


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
