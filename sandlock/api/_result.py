"""How a sandboxed command ended: ``Result`` (a run's), ``ExitStatus`` (a process's exit
code, from ``wait()``), and the words upstream Sandlock's results use for it
(``success``, ``code()``, ``reason`` as an ``ExitReason``), so that code written for
upstream reads ours unchanged."""

from __future__ import annotations

import _signal

from .._record import DataclassView, record

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ..process import WorkspaceOutcome

# enum and collections cost ~3 ms to import and a plain run never needs them: the two
# types below are made when first named (``_types``, through the module's __getattr__).


def _types() -> None:
    import enum
    from collections import namedtuple

    class ExitReason(enum.IntEnum):
        """Why a process ended, in upstream Sandlock's words (and numbers)."""

        EXITED = 0  # it exited: see the exit code
        SIGNALED = 1  # a signal other than SIGKILL ended it
        KILLED = 2  # SIGKILL: a limit sandlock enforces, kill(), the kernel's OOM killer
        TIMEOUT = 3  # sandlock's timeout: killed with everything it started
        TIMED_OUT = 3  # (the same reason, as some of upstream's bindings spell it)

    # One change a run made to its workdir: ``kind`` "A" added, "M" modified, "D"
    # deleted; ``path`` relative to the workdir, a directory's ending with "/". A
    # tuple, so code that unpacked ``(kind, path)`` pairs goes on working.
    change = namedtuple("Change", ("kind", "path"), module=__name__)
    ExitReason.__qualname__ = "ExitReason"  # (pickled by name: found here again)
    ExitReason.__module__ = __name__
    globals().update(ExitReason=ExitReason, Change=change)


def _type(name: str) -> type:
    if name not in globals():
        _types()
    return globals()[name]


def __getattr__(name: str) -> object:
    if name in ("ExitReason", "Change"):
        return _type(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reason_of(exit_code: int, timed_out: bool) -> ExitReason:
    reasons = _type("ExitReason")
    if timed_out:
        return reasons.TIMEOUT
    if exit_code > 128:
        return reasons.KILLED if exit_code - 128 == _signal.SIGKILL else reasons.SIGNALED
    return reasons.EXITED


class ExitStatus(int):
    """A process's exit code as the shell writes it (128+N for signal N, 124 for
    sandlock's timeout), which also answers upstream's questions: ``success``,
    ``code()``, ``reason``, ``signal``. Compares and computes as the int it is."""

    timed_out = False

    def __new__(cls, code: int, timed_out: bool = False) -> ExitStatus:
        status = super().__new__(cls, code)
        status.timed_out = timed_out
        return status

    @property
    def exit_code(self) -> int:
        return int(self)

    @property
    def success(self) -> bool:
        return int(self) == 0 and not self.timed_out

    @property
    def reason(self) -> ExitReason:
        return reason_of(int(self), self.timed_out)

    @property
    def signal(self) -> int | None:
        """The signal that ended the process, if one did (not counting a timeout kill)."""
        return int(self) - 128 if self.reason in (1, 2) else None  # SIGNALED, KILLED

    def code(self) -> int | None:
        """The status the process exited with; None if a signal or the timeout ended it."""
        return int(self) if self.reason == 0 else None  # EXITED


@record
class Result:
    """How a sandboxed command ended."""

    exit_code: int  # shell convention: 128+N for signal N, 124 on timeout
    stdout: bytes | None
    stderr: bytes | None
    timed_out: bool = False
    start_error: str | None = None  # why the command could not be started, if it could not
    # With a workdir: what became of its copy-on-write workspace (action, changes, id).
    workspace: WorkspaceOutcome | None = None
    __dataclass_fields__ = DataclassView()  # dataclasses.fields/replace/asdict, on demand

    @property
    def changes(self) -> tuple[Change, ...]:
        """The run's changes to its workdir, ``Change(kind, path)``: A added, M
        modified, D deleted, paths relative to the workdir (directories end with "/")."""
        if not self.workspace:
            return ()
        made = _type("Change")
        return tuple(made(*change) for change in self.workspace.changes)

    @property
    def success(self) -> bool:
        """It started, and exited with status 0 within its time."""
        return self.start_error is None and self._status.success

    @property
    def reason(self) -> ExitReason | None:
        """Why it ended; None if it never started (``start_error`` says why)."""
        return None if self.start_error is not None else self._status.reason

    @property
    def signal(self) -> int | None:
        """The signal that ended the command, if one did (not counting a timeout kill)."""
        return None if self.start_error is not None else self._status.signal

    @property
    def error(self) -> str | None:
        """(upstream's name for ``start_error``)"""
        return self.start_error

    def code(self) -> int | None:
        """The status the command exited with; None if a signal or the timeout ended it,
        or it never started."""
        return None if self.start_error is not None else self._status.code()

    @property
    def _status(self) -> ExitStatus:
        return ExitStatus(self.exit_code, self.timed_out)
