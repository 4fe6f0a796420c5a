"""Hold every task that could change an exec's arguments, from before sandlock reads
them until the kernel has copied them for itself.

The kernel reads execve's file name and argv again after sandlock lets the call go
on (CONTINUE), so what the callback judged must not change in between. Who can change
it: the caller's other threads and any process sharing its address space (CLONE_VM,
vfork), if every byte lies in private anonymous memory; otherwise (a shared mapping,
a file's pages) any process of the sandbox, which may write the file or the shared
memory. Those tasks are stopped with ptrace (seize, interrupt: none runs another user
instruction), so is the caller, to learn when its exec is over; all are let go after.
Tasks made meanwhile are caught too: threads of a held task are traced from their
birth (TRACECLONE); a process is made only through the supervisor, which makes none
while an exec is held, but for a hold of the caller's process alone (``local``:
private memory shared with no other process), whose callback runs on a helper thread:
a process made meanwhile can share no memory with it (only the caller's threads could
make one: the caller waits in its exec, the others are held, their calls deferred).
"""

from __future__ import annotations

import _thread
import errno
import os
import time

from ..kernel import ptrace, tasks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..kernel import Listener
    from ._numbers import CallNumbers
    from ._tracer import Tracer

_SETTLE_SECONDS = 0.05  # a running task stops within microseconds of its interrupt
_HELD_STATES = frozenset("tTZX")
_ENDED_STATES = frozenset("ZX")  # a zombie, or gone


class Unfreezable(Exception):
    """The tasks could not be held (ptrace refused, a task would not stop): the exec
    must be refused, never let through unchecked."""


class ExecHold:
    """``hold()`` before reading, ``finish(proceed)`` to let the exec go on and wait
    for its end, ``release()`` always. All on one thread (ptrace's rule)."""

    def __init__(self, tracer: Tracer, listener: Listener, tid: int, pid: int, root: int,
                 shared_vm: bool, numbers: CallNumbers, *, everyone: bool = False) -> None:
        """``tid``/``pid``: the caller; ``root``: sandlock's init in the sandbox (not
        held); ``shared_vm``: some process of the sandbox may share an address space
        with another (else only the caller's threads can share its memory)."""
        self._tracer = tracer
        self._listener = listener
        self._tid, self._pid, self._root = tid, pid, root
        self._shared_vm = shared_vm
        self._everyone = everyone  # the filesystem matters too: nobody in the sandbox runs
        self._numbers = numbers
        self._seen: set[int] = {tid}
        self._beyond = False  # tasks of other processes were held (or are, for another)
        self._traced: list[int] = []
        self._stopped: dict[int, tuple[str, int]] = {}  # tid -> its stop, already taken

    @property
    def local(self) -> bool:
        """Nothing but the caller's process is held: the tracer may do other work while
        this check waits for the callback (``hold_aside``), the caller waiting in the
        kernel."""
        return not self._everyone and not self._beyond

    def hold_aside(self) -> None:
        """Its callback runs aside: the caller's other threads are held for it until
        ``release`` (jobs for their calls wait; their stops are kept here)."""
        for tid in self._seen - {self._tid}:
            self._tracer.held[tid] = self

    def keep(self, tid: int, report: tuple[str, int]) -> None:
        """A stop of a held task that another check's wait took."""
        self._stopped[tid] = report

    def hold(self, ranges: tuple[tuple[int, int], ...] | None) -> bool:
        """Hold the writers of ``ranges`` of the caller's memory (None: not known yet,
        hold the address space's); whether any was not held before. Raises
        Unfreezable."""
        if not self._traced:
            self._seize(self._tid, ptrace.O_TRACEEXEC)
        everyone = self._everyone or (
            ranges is not None and not tasks.private_anonymous(self._pid, list(ranges)))
        more = False
        while True:
            new = [tid for tid in self._writers(everyone) if tid not in self._seen]
            if not new:
                return more
            more = True
            self._seen.update(new)
            # First: an answer to a call of theirs now waits. Then each is left where
            # it is if it cannot run before that (waiting for an answer, or for a
            # vfork child), else stopped.
            self._listener.hold_replies(self, frozenset(new))
            stopping = [tid for tid in new if not self._parked(tid) and self._seize(tid)]
            self._settle(stopping)

    def _writers(self, everyone: bool) -> list[int]:
        """Tasks that could change the arguments: the caller's threads; every task of
        the sandbox if the bytes lie where others may write, or if another process
        shares the caller's memory (it could be killed, and its exit would clear the
        word its thread id was to be written to)."""
        processes = [self._pid]
        if everyone or (self._shared_vm and self._memory_shared()):
            processes = [pid for pid in tasks.processes_under(self._root) if pid != self._root]
            self._beyond = True
        newborn = self._tracer.newborn  # stopped before their first instruction: left alone
        # Callers whose exec waits for the callback on a helper thread cannot run until a
        # later job answers them (while they wait in the call: a pid reused is held).
        checking = self._tracer.checking
        writers = [tid for pid in processes if pid not in newborn for tid in tasks.threads_of(pid)
                   if tid not in checking or not self._parked(tid)]
        # Threads held for a check whose callback runs aside stay held while this one
        # lasts, which must then not be local: it ends on the tracer before that one can.
        held = self._tracer.held
        if any(tid in held for tid in writers):
            self._beyond = True
        return [tid for tid in writers if tid not in held]

    def _memory_shared(self) -> bool:
        return any(pid not in (self._pid, self._root) and tasks.share_memory(self._pid, pid)
                   for pid in tasks.processes_under(self._root))

    def _parked(self, tid: int) -> bool:
        """Blocked where it cannot return to its program while the exec is held: in a
        call the supervisor has received (its answer is held), or in vfork's wait."""
        if tasks.state_of(tid) != "D":
            return False
        blocked = tasks.blocked_call(tid)
        return blocked is not None and self._numbers.parks(*blocked)

    def _seize(self, tid: int, options: int = ptrace.O_TRACECLONE) -> bool:
        """Trace and interrupt ``tid`` (its new threads traced from birth): True if
        it is held now, False if gone."""
        try:
            ptrace.seize(tid, options)
        except ptrace.Refused as exc:
            if exc.errno == errno.EPERM and tasks.state_of(tid) in _ENDED_STATES:
                # A zombie (ptrace refuses those): its exit, and the last write it makes
                # to its memory (CLONE_CHILD_CLEARTID's), are behind it.
                return False
            # Traced here already: left by an earlier check, or born traced (TRACECLONE).
            if exc.errno != errno.EPERM or not (
                    self._tracer.adopt(tid) or tasks.tracer_of(tid) == _thread.get_native_id()):
                raise Unfreezable(str(exc)) from None
            self._traced.append(tid)
            return True
        except OSError:
            return False  # gone
        self._traced.append(tid)
        ptrace.interrupt(tid)
        return True

    def _settle(self, tids: list[int]) -> None:
        """Until each of ``tids`` is stopped, gone, or parked (it made a call the
        supervisor received meanwhile: its answer is held, it stops after)."""
        deadline = time.monotonic() + _SETTLE_SECONDS
        pending = tids
        while pending:
            pending = [tid for tid in pending
                       if tasks.state_of(tid) not in _HELD_STATES and not self._parked(tid)]
            if pending and time.monotonic() > deadline:
                raise Unfreezable(f"task {pending[0]} would not stop")
            if pending:
                time.sleep(0.00002)

    def finish(self, proceed: Callable[[], object]) -> None:
        """``proceed()`` lets the kernel perform the exec; return once it has read the
        arguments: the exec completed (its event, under the process's id when another
        thread made it) or failed and returned (the interrupt's stop), or the caller
        died. Meanwhile, held threads the exec ends are reaped, and a stop a held task
        reports is kept for ``release``."""
        if proceed() is False:
            return  # the call is gone (its caller is dying): its end may be told elsewhere
        while (reported := ptrace.wait_any()) is not None:
            tid, report = reported
            if tid in (self._tid, self._pid) and report[0] == "signal":
                ptrace.resume(tid, report[1])  # not ours to keep: delivered
            elif self._exec_over(tid, report):
                self._stopped[tid] = report
                if tid not in self._traced:  # the caller, now under the process's id
                    self._traced.append(tid)
                return
            elif tid in self._traced:
                self._stopped[tid] = report
            else:  # one an earlier check left, stopping now
                self._tracer.reported(tid, report)

    def _exec_over(self, tid: int, report: tuple[str, int]) -> bool:
        """The exec event (under the process's id, whichever thread made it), the
        caller's stop as its failed call returns, or the end of either. The process's
        first thread, when another one execs, first reports its own stop: held."""
        kind, value = report
        if kind == "exit":
            return tid in (self._tid, self._pid)
        if value == ptrace.EVENT_EXEC:
            return tid == self._pid
        if value != ptrace.EVENT_STOP:
            return False
        # A caller traced before this check (no TRACEEXEC) reports its exec as the stop
        # it was interrupted for, under the process's id once its own id is gone.
        return tid == self._tid or (tid == self._pid and not os.path.exists(f"/proc/{self._tid}"))

    def release(self) -> None:
        """Let every held task go: the held answers first (the exec is over or
        refused), then each traced task, at once if stopped, else by the tracer as
        soon as it stops (ptrace lets go only of a stopped task)."""
        self._listener.release_replies(self)
        try:
            for tid in self._traced:
                self._tracer.let_go(tid, self._stopped.get(tid))
        finally:
            self._traced.clear()
            self._stopped.clear()
            self._tracer.let_held_go(self)
