"""The one thread that traces: every exec check and process creation of a run is
handled here, in turn, because a tracee answers ptrace requests only from the thread
that seized it.

A held task cannot always be let go when its exec check ends: ptrace detaches only a
stopped task, and one that was stopped on its way into a call the supervisor holds
(an exec or fork waiting for this very thread) stops only once that call is answered.
Such tasks wait in ``pending`` and are let go as they stop; a later check that needs
one takes it over (``adopt``).

A new process waits, stopped at its birth, for the callback's word on it; the callback
runs aside (``aside``), so that a slow one holds back only that process, and the
tracer concludes when it has answered. Exec checks leave such a ``newborn`` alone: it
has not run an instruction.

An exec check that holds no more than the caller's own process runs its callback aside
too. Meanwhile the caller's other threads stay held for it (``held``): a job for a call
one of them made waits until that check lets them go (its answer would wait too);
other checks count them as held; their stops, whoever's wait takes them, are kept for
that check (``reported``).
"""

from __future__ import annotations

import queue
import sys
import threading

from ..kernel import ptrace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol, TypeVar

    T = TypeVar("T")

    class Holder(Protocol):
        def keep(self, tid: int, report: tuple[str, int]) -> None: ...

_IDLE = object()
_POLL_SECONDS = 0.001  # while tasks wait to be let go
_ASIDE_THREADS = 8  # callbacks about new processes that may run at once


class Tracer:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.pending: set[int] = set()
        self.newborn: set[int] = set()
        self.checking: set[int] = set()  # callers whose exec's callback runs aside
        self.queued: set[int] = set()  # threads whose call waits for a job not started yet
        self.held: dict[int, Holder] = {}  # threads held for a check whose callback runs aside
        self._deferred: list[tuple[int, Callable[[], None]]] = []
        self._aside: queue.SimpleQueue = queue.SimpleQueue()
        self._helpers = 0
        threading.Thread(target=self._run, daemon=True, name="sandlock-tracer").start()

    def submit(self, job: Callable[[], None], caller: int = 0) -> None:
        """``job()`` on the tracer; ``caller``: the thread whose call waits for it,
        ``queued`` until the job starts."""
        if caller:
            self.queued.add(caller)
        self._jobs.put((caller, job))

    def aside(self, ask: Callable[[], T], then: Callable[[T], None]) -> None:
        """``ask()`` on a helper thread, then ``then(answer)`` here, on the tracer."""
        self._aside.put((ask, then))
        if self._helpers < _ASIDE_THREADS:
            self._helpers += 1
            threading.Thread(target=self._help, daemon=True, name="sandlock-policy-fn").start()

    def _help(self) -> None:
        while (work := self._aside.get()) is not None:
            ask, then = work
            answer = ask()
            self.submit(lambda then=then, answer=answer: then(answer))

    def stop(self) -> None:
        self._jobs.put((0, None))
        for _ in range(self._helpers):
            self._aside.put(None)

    def let_go(self, tid: int, report: tuple[str, int] | None = None) -> None:
        """Detach ``tid`` now if it is stopped (``report``: its stop, if taken), else
        as soon as it stops."""
        if report is None:
            report = ptrace.wait_event(tid, block=False)
        if report is None:
            self.pending.add(tid)
        elif report[0] != "exit" and not ptrace.detach(tid, _signal_of(report)):
            self.pending.add(tid)  # dying: its end is next

    def let_held_go(self, holder: Holder) -> None:
        """``holder``'s tasks are no longer held for it: deferred jobs are tried again."""
        mine = [tid for tid, by in self.held.items() if by is holder]
        if not mine:
            return  # (a check that held nothing aside: nothing deferred waits for it)
        for tid in mine:
            del self.held[tid]
        deferred, self._deferred = self._deferred, []
        for caller, job in deferred:
            self._jobs.put((caller, job))

    def reported(self, tid: int, report: tuple[str, int]) -> None:
        """A report of ``tid`` someone else's wait took: kept for the check that holds
        it, or a pending task is let go."""
        if tid in self.held:
            self.held[tid].keep(tid, report)
        elif tid in self.pending:
            self.pending.discard(tid)
            self.let_go(tid, report)

    def adopt(self, tid: int) -> bool:
        """Whether ``tid`` is traced here already, waiting to be let go: it is the
        caller's now."""
        if tid in self.pending:
            self.pending.discard(tid)
            return True
        return False

    def _run(self) -> None:
        while True:
            try:
                caller, job = self._jobs.get(timeout=_POLL_SECONDS if self.pending else None)
            except queue.Empty:
                job = _IDLE
            if job is None:
                return
            if job is not _IDLE and caller in self.held:  # its answer would wait: later
                self._deferred.append((caller, job))
            elif job is not _IDLE:
                self.queued.discard(caller)
                try:
                    job()
                except Exception as exc:  # noqa: BLE001 - the thread must go on
                    print(f"sandlock: internal error in policy_fn's tracer: {exc!r}",
                          file=sys.stderr, flush=True)
            for tid in list(self.pending):
                self.pending.discard(tid)
                self.let_go(tid)


def _signal_of(report: tuple[str, int]) -> int:
    return report[1] if report[0] == "signal" else 0
