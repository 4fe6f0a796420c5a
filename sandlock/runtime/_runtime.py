"""One run's runtime policy: the supervisor hands it the command's execs and process
creations, and the network engine its judged destinations; each becomes an Event for
the policy_fn, whose verdict can only narrow the static policy's.

exec: hold the writers of the caller's memory -> read file name and argv once
(materialize) -> ask (verdict) -> let the kernel perform it and hold on until it has
copied them, or refuse (execute). open, once deny_path is used: the same with the
whole sandbox held, the file found compared instead of asking. Process creation: let
the kernel make the process while tracing the caller for one creation event, so that
the new process is known, stopped before its first instruction, when the callback
hears of it. All three run on the tracer's thread, one at a time; the callback about
a new process, or about an exec whose hold is its caller's process alone, is asked on
a helper thread meanwhile.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from ..kernel import Gone, ptrace, tasks
from ._callback import Callback
from ._context import Context
from ._events import FILE, NETWORK, PROCESS, Answer, Event
from ._exec import absent, read_exec
from ._exits import ExitWatch
from ._freezer import ExecHold, Unfreezable
from ._live import LiveRules
from ._numbers import CLONE_VFORK, CLONE_VM, CallNumbers
from ._owners import Owners
from ._paths import read_open
from ._tracer import Tracer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ..kernel import Listener, Notification
    from ..net import NetworkCall
    from ._files import FileEvents

_CREATION_OPTIONS = ptrace.O_TRACEFORK | ptrace.O_TRACEVFORK | ptrace.O_TRACECLONE
_CREATION_SECONDS = 1.0  # a fork copies the caller's page tables: ~200 ms for 20 GB
_STABLE_READS = 3  # rereads while newly found writers are held, before refusing
_STOP_SECONDS = 0.05  # an interrupted caller's stop, waited for here (else: let go later)


class RuntimePolicy:
    def __init__(self, fn: Callable[[Event, Context], object], audit: AuditLog | None,
                 quiet: bool, on_max_processes: Callable[[int], None],
                 on_max_memory: Callable[[int], None], writes_proc: bool) -> None:
        """``writes_proc``: the sandbox may write under /proc, so a process may write
        another's memory (/proc/PID/mem): every exec check holds the whole sandbox."""
        self.rules = LiveRules()
        self._writes_proc = writes_proc
        self._callback = Callback(fn, Context(self.rules, on_max_processes, on_max_memory), audit)
        self._quiet = quiet
        self._numbers = CallNumbers.native()
        self._tracer = Tracer()  # execs and process creations: one at a time, there
        self._root = 0
        self._shared_vm = False  # a process was made sharing its maker's memory
        self._exits = ExitWatch(self._exited)
        self._owners = Owners()  # the network calls' threads -> their processes
        self._said: set[str] = set()
        self._files: FileEvents | None = None  # only when asked: each open is held for it
        if FILE in getattr(fn, "events", ()):
            from ._files import FileEvents

            self._files = FileEvents(self._callback)

    @property
    def numbers(self) -> CallNumbers:
        return self._numbers

    def attach(self, listener: Listener, command: int) -> None:
        """The command (a host pid) is about to run: its parent is sandlock's init in
        the sandbox, every process of which descends from it."""
        listener.track_callers()
        self._root = tasks.process_of(command)[1]
        self._exits.watch(command, self._root)

    def stop(self) -> None:
        """The run is over: no more exit events."""
        self._exits.close()
        self._tracer.stop()
        self._owners.close()

    # --- network (from the network engine's thread) ------------------------------

    def review_network(self, call: NetworkCall) -> int:
        pid, parent = self._owners.of(call.tid)
        live_refusal = not call.denied and not self.rules.admits(pid, call)
        # (by position: every connect makes one, and keywords cost twice as much)
        event = Event(call.syscall, NETWORK, pid, parent, call.host, str(call.address),
                      call.port or 0, None, None, call.denied or live_refusal)
        answer = self._callback.ask(event)
        return errno.EACCES if live_refusal else answer.error

    # --- exec ----------------------------------------------------------------------

    def exec(self, listener: Listener, notification: Notification) -> None:
        """Hand an exec to the tracer; the calling thread waits in the kernel. One of a
        file that is not there fails at once, as the kernel would fail it."""
        missing = absent(notification.pid, self._numbers.names[notification.nr],
                         notification.args)
        if missing:
            listener.reply(notification.id, error=missing)
            return
        self._tracer.submit(lambda: self._check_exec(listener, notification), notification.pid)

    def _check_exec(self, listener: Listener, notification: Notification) -> None:
        self._held_check(listener, notification, "an exec",
                         self._writes_proc or bool(self.rules.denied), self._judge_exec)

    def _judge_exec(self, listener: Listener, notification: Notification, syscall: str,
                    hold: ExecHold, pid: int, parent: int) -> bool:
        """True if the hold is kept, for the callback's answer (_conclude_exec)."""
        call = self._read_held(listener, notification, syscall, hold)
        if self.rules.denied and self.rules.denied.denies(notification.pid, call.file):
            self._refuse_path(listener, notification, syscall, call.path)
            return False
        event = Event(syscall, PROCESS, pid, parent, argv=call.argv, path=call.path)
        if not hold.local:  # other processes held: nothing else may be traced meanwhile
            self._finish_exec(listener, notification, hold, self._callback.ask(event))
            return False
        # Only the caller's process is held, the caller waiting in the kernel: the
        # callback is asked on a helper thread, so that a slow one holds back this
        # process alone.
        self._tracer.checking.add(notification.pid)
        hold.hold_aside()
        try:
            self._tracer.aside(lambda: self._callback.ask(event),
                               lambda answer: self._conclude_exec(listener, notification, hold,
                                                                  answer))
        except BaseException:
            self._tracer.checking.discard(notification.pid)
            raise
        return True

    def _conclude_exec(self, listener: Listener, notification: Notification, hold: ExecHold,
                       answer: Answer) -> None:
        """On the tracer, once the callback has answered about an exec it held aside."""
        self._tracer.checking.discard(notification.pid)
        try:
            self._answering(listener, notification, "an exec",
                            lambda: self._finish_exec(listener, notification, hold, answer))
        finally:
            hold.release()

    @staticmethod
    def _finish_exec(listener: Listener, notification: Notification, hold: ExecHold,
                     answer: Answer) -> None:
        if answer.error:
            listener.reply(notification.id, error=answer.error)
        else:
            hold.finish(lambda: listener.proceed(notification.id))

    def _read_held(self, listener: Listener, notification: Notification, syscall: str,
                   hold: ExecHold):
        """Read the arguments once nobody who could change them runs: the address
        space's writers first; if the bytes lie where others can write too (shared or
        file memory), those as well, and read again."""
        hold.hold(None)
        call = read_exec(notification.pid, syscall, notification.args)
        for _ in range(_STABLE_READS):
            listener.check_valid(notification.id)  # the reads came from the caller
            if not hold.hold(call.ranges):
                return call
            call = read_exec(notification.pid, syscall, notification.args)
        raise Unfreezable("its writers kept changing")

    # --- open (deny_path) ----------------------------------------------------------------

    def open(self, listener: Listener, notification: Notification) -> None:
        """Until deny_path is used, an open goes on at once (nothing is read); then
        each is checked by the tracer with the sandbox held."""
        if not self.rules.denied and self._files is None:
            listener.proceed(notification.id)
            return
        self._tracer.submit(lambda: self._check_open(listener, notification), notification.pid)

    def _check_open(self, listener: Listener, notification: Notification) -> None:
        self._held_check(listener, notification, "an open", True, self._judge_open)

    def _judge_open(self, listener: Listener, notification: Notification, syscall: str,
                    hold: ExecHold, pid: int, parent: int) -> None:
        hold.hold(None)
        call = read_open(notification.pid, syscall, notification.args)
        listener.check_valid(notification.id)
        if self.rules.denied and self.rules.denied.denies(notification.pid, call):
            self._refuse_path(listener, notification, syscall, os.fsdecode(call.path))
            return
        if self._files is not None:  # (asked with everyone held: see _files)
            answer = self._files.answer(notification.pid, pid, parent, syscall, call)
            if answer.error:
                listener.reply(notification.id, error=answer.error)
                return
        hold.finish(lambda: listener.proceed(notification.id))

    def _held_check(self, listener: Listener, notification: Notification, what: str,
                    everyone: bool, judge: Callable[..., bool | None]) -> None:
        """``judge(listener, notification, syscall, hold, pid, parent)`` with a hold
        (``everyone``: the whole sandbox), answering what it cannot (_answering); the
        hold is let go then, unless judge said it is kept for a later job."""
        syscall = self._numbers.names[notification.nr]
        pid, parent = tasks.process_of(notification.pid)
        hold = ExecHold(self._tracer, listener, notification.pid, pid, self._root,
                        self._shared_vm, self._numbers, everyone=everyone)
        kept = False
        try:
            kept = self._answering(listener, notification, what, lambda: judge(
                listener, notification, syscall, hold, pid, parent))
        finally:
            if not kept:  # (kept: a later job lets it go)
                hold.release()

    def _answering(self, listener: Listener, notification: Notification, what: str,
                   work: Callable[[], bool | None]) -> bool:
        """``work()``'s value; the call answered as it could not be where it failed:
        EPERM where the tasks could not be held, the errno of a read that failed, EPERM
        on a bug (said once)."""
        try:
            return bool(work())
        except Unfreezable as exc:
            listener.reply(notification.id, error=errno.EPERM)
            self._say("freeze", f"sandlock: {what} was refused (EPERM): the tasks that could "
                                f"change it could not be held for policy_fn ({exc})")
        except Gone:
            pass  # the caller is gone: nobody to answer
        except OSError as exc:
            listener.reply(notification.id, error=exc.errno or errno.EFAULT)
        except Exception as exc:  # noqa: BLE001 - a bug here must refuse, not hang
            self._refuse_on_error(listener, notification, what, exc)
        return False

    def _refuse_path(self, listener: Listener, notification: Notification, syscall: str,
                     path: str) -> None:
        listener.reply(notification.id, error=errno.EACCES)
        pid, parent = tasks.process_of(notification.pid)
        self._callback.record({"event": "policy_fn", "verdict": "deny", "reason": "deny_path",
                               "syscall": syscall, "pid": pid, "path": path})
        if not self._quiet:
            print(f"sandlock: denied {syscall} of {path} (policy_fn's deny_path)",
                  file=sys.stderr, flush=True)

    # --- process creation -------------------------------------------------------------

    def create(self, listener: Listener, notification: Notification) -> None:
        """Hand a process creation to the tracer; the calling thread waits in the kernel."""
        self._tracer.submit(lambda: self._follow(listener, notification), notification.pid)

    def _follow(self, listener: Listener, notification: Notification) -> None:
        syscall = self._numbers.names[notification.nr]
        flags = notification.args[0] if syscall == "clone" else 0
        if syscall == "vfork":
            flags = CLONE_VM | CLONE_VFORK
        tid = notification.pid
        try:
            ptrace.seize(tid, _CREATION_OPTIONS)
        except ptrace.Refused as exc:
            if not self._tracer.adopt(tid):  # (one an exec check left: traced here)
                listener.reply(notification.id, error=errno.EPERM)
                self._say("trace", f"sandlock: a fork was refused (EPERM): policy_fn needs to "
                                   f"see the new process, and {exc}")
                return
        except OSError:
            return  # gone
        if flags & CLONE_VM:
            self._shared_vm = True
        try:
            listener.proceed(notification.id)
            self._follow_creation(tid, syscall, notification.nr)
        except Exception as exc:  # noqa: BLE001
            self._refuse_on_error(listener, notification, "a fork", exc)

    def _follow_creation(self, tid: int, syscall: str, number: int) -> None:
        """The caller made its process (an event stop), failed, or died: the new one,
        stopped at its birth, is announced, then both go on."""
        report = _creation_report(tid, number, self._tracer.queued)
        child, born = 0, ("exit", 0)
        if report is not None and report[0] == "event" and report[1] in ptrace.CREATION_EVENTS:
            child = ptrace.event_message(tid)
            born = ptrace.wait_event(child)  # its first stop, before its first instruction
        self._tracer.let_go(tid, report)
        if not child:
            return
        pid, _ = tasks.process_of(tid)
        self.rules.inherit(pid, child)
        self._tracer.newborn.add(child)
        event = Event(syscall, PROCESS, child, pid)
        self._tracer.aside(lambda: self._callback.ask(event),
                           lambda answer: self._conclude_creation(child, pid, born, answer))

    def _conclude_creation(self, child: int, parent: int, born: tuple[str, int],
                           answer: Answer) -> None:
        """On the tracer, once the callback has answered about ``child``."""
        self._tracer.newborn.discard(child)
        if answer.error:
            os.kill(child, 9)  # refused: it dies before it runs
            while born[0] != "exit":  # (its end is told to its tracer first)
                born = ptrace.wait_event(child)
            return
        self._exits.watch(child, parent)
        self._tracer.let_go(child, born)

    def _exited(self, pid: int, parent: int) -> None:
        self.rules.forget(pid)
        if self._files is not None:
            self._files.forget(pid)
        self._callback.ask(Event("exit", PROCESS, pid, parent))

    def _refuse_on_error(self, listener: Listener, notification: Notification, what: str,
                         exc: Exception) -> None:
        """A bug in sandlock's own handling: the call fails (if still unanswered), and
        it is said, once."""
        try:
            listener.reply(notification.id, error=errno.EPERM)
        except OSError:
            pass
        self._say("internal", f"sandlock: internal error while checking {what} for policy_fn "
                              f"(refused): {type(exc).__name__}: {exc}")

    def _say(self, key: str, text: str) -> None:
        if key not in self._said and not self._quiet:
            self._said.add(key)
            print(text, file=sys.stderr, flush=True)


def _creation_report(tid: int, number: int, queued: set[int]) -> tuple[str, int] | None:
    """The caller's report after its fork-like call (syscall ``number``) went on: its
    creation event, or its end. A pending interrupt would make the kernel restart the
    fork (ERESTARTNOINTR), so the caller is interrupted only once the fork is over
    without a report: it failed and returned (seen blocked in another call: a shell
    sleeping before it tries again; or making another call ``queued`` for the tracer:
    a program trying again at once), or no report came within _CREATION_SECONDS. Its
    stop is then waited for briefly, never for good: it may be in a call this tracer
    has still to answer (its next fork, queued behind this job), and stop only after
    it; None then (the tracer lets it go once it stops)."""
    deadline = time.monotonic() + _CREATION_SECONDS
    pause = 0.00002
    while time.monotonic() < deadline:
        report = ptrace.wait_event(tid, block=False)
        if report is not None:
            return report
        if tid in queued:
            break
        blocked = tasks.blocked_call(tid)
        if blocked is not None and blocked[0] != number:
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.002)
    try:
        ptrace.interrupt(tid)
    except OSError:
        pass
    deadline = time.monotonic() + _STOP_SECONDS
    while (report := ptrace.wait_event(tid, block=False)) is None:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.0002)
    return report

