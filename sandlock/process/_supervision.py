"""A run's supervision, from the process's point of view: the command's seccomp
listener, taken before it execs, and the receivers that answer it: fork-like calls
against the process cap (``_processcap``), network calls by the network engine
(``sandlock.net``), built at the first network call, or at once when DNS must pin
names at start; and the memory watch and CPU throttle (``limits``), with
--max-memory and --max-cpu."""

from __future__ import annotations

import _thread  # threading costs ~1 ms of start-up; its Lock and a daemon thread are these
import os
import sys

from ..kernel import seqpacket_pair
from ._networkslot import NetworkSlot

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ..confinement import Confinement
    from ..files import FileCalls
    from ..kernel import Listener, Notification
    from ..net import HttpRun
    from ..policy import Policy
    from ..runtime import Context, Event, RuntimePolicy
    from ._child import ChildSpec
    from ._processcap import ProcessCaps
    from ._watches import Watches


class Supervision:
    """Takes the command's seccomp listener at once, so that it can exec, and answers
    it on a thread: a command never waits for it but at a supervised call, which the
    kernel holds until the loop reads it. The network engine (~10 ms of imports) is
    built when DNS must pin the policy's names at start, else at the first network
    call: a command that never makes one never pays for it, nor does its exit (on two
    CPUs the build competed with the command). Counting processes needs nothing of it.
    """

    def __init__(self, policy: Policy, confinement: Confinement, audit: AuditLog | None,
                 quiet: bool, http: HttpRun | None, *, pausable: bool = False,
                 policy_fn: Callable[[Event, Context], object] | None = None) -> None:
        """``audit``: the run's log (it closes it), where limits hit are recorded too;
        ``pausable``: keep the sandbox's /proc for pause() and resume(); ``policy_fn``:
        the runtime policy's callback (confinement ``observed``)."""
        self._policy = policy
        self._http = http  # the network slot's
        self._quiet = quiet
        self._audit = audit
        self.limits_hit: list[tuple[str, str]] = []  # (limit, verdict): the process's list
        # The sandbox's /proc: processes are counted, their memory summed and their CPU
        # time taken there.
        self._watched = ((policy.max_memory is not None or policy.max_cpu is not None)
                         and confinement.isolation is not None)
        self._counts_processes = confinement.counts_processes
        self._pausable = pausable and confinement.isolation is not None
        # The memory and CPU watches and pause: only for runs that use them (an import).
        self.watches: Watches | None = None
        if self._watched or self._pausable or policy_fn is not None:
            from ._watches import Watches

            self.watches = Watches(policy, self._hit)
        self._task_cap = confinement.task_cap
        # The process caps: for -P and a policy_fn now, else if the default cap is met.
        self._processes: ProcessCaps | None = None
        if self._counts_processes or policy_fn is not None:
            self._processes = self._process_caps()
        if self.watches is not None:
            self.watches.caps = self._processes  # (a long-lived sandbox's update())
        if self._counts_processes:
            # The receivers' imports (~0.2 ms) before the fork: after it, every page sandlock
            # writes is copied first (the keeper shares them): ~0.9 ms then (measured).
            from ..kernel import Listener  # noqa: F401
            from ._receiving import hung_up  # noqa: F401
        self._runtime: RuntimePolicy | None = None
        if policy_fn is not None:
            from ..runtime import RuntimePolicy

            self._runtime = RuntimePolicy(policy_fn, audit, quiet, self._processes.tighten,
                                          self.watches.lower_memory, confinement.writes_proc)
        self.wants_proc = self._counts_processes or self._watched or self._pausable
        # The private scratch directories' files are memory: for a memory limit, now or
        # set by policy_fn later.
        self.wants_scratch = confinement.memory_watched
        self._lock = _thread.allocate_lock()
        self._closed = False
        # The confined worker restricts itself with the command's ruleset, later.
        ruleset_fd = os.dup(confinement.ruleset.fileno()) if confinement.ruleset else None
        # In namespaces, socket files are bound by a thread of the sandbox's init, on
        # this channel (netcall._binder); ``binder_fd`` is init's end, for the launch.
        ours, self.binder_fd = seqpacket_pair() if confinement.isolation else (None, -1)
        # A private network's sock_diag socket comes first on it (take_listener).
        private = confinement.isolation is not None and confinement.isolation.private_network
        self._diag_channel = ours if private else None
        self._network = NetworkSlot(policy, ruleset_fd, audit, quiet, http,
                                    self._runtime.review_network if self._runtime else None,
                                    lambda: self._closed,
                                    # what the supervisor holds for the command is its memory
                                    self.watches.attach if self.watches is not None else None,
                                    binder_fd=ours)
        # Decided before the fork: the command waits while take_listener runs.
        self._pins_at_start = False
        if policy.net_allow_specs or policy.has_http_rules:  # (only then: an import)
            from ..netrules import pins_at_start

            self._pins_at_start = pins_at_start(policy)
        self._memfd_nr = _memfd_number() if self.wants_scratch else -1  # (see MEMFD_CALL)
        # The file calls Landlock does not judge (sandlock.files), answered once one comes.
        self._file_grants = confinement.file_grants
        self._reanchored = confinement.isolation.reanchored if confinement.isolation else ()
        self._files: FileCalls | None = None
        # Reproducible runs: their calls answered by sandlock.determinism (only they import it).
        self._determinism = None
        if policy.time_start is not None or policy.random_seed is not None \
                or policy.deterministic_dirs:
            from ..determinism import Determinism

            self._determinism = Determinism(policy, quiet)
        self._determined = self._determinism.numbers if self._determinism else frozenset()
        self._receivers = 0  # threads waiting for the command's calls
        self._grown = False  # the receivers joined at the first fork-like call
        self._over = _thread.allocate_lock()  # held until the last receiver is over
        self.notices: list[str] = []

    def take_listener(self, pid: int, fd: int, proc: int, keeper: int) -> Callable[[], None]:
        """While the command waits to exec: its listener (and /proc, for the process cap
        and the memory watch); returns what to start once it has been told to go on.
        ``keeper``: its pid (the engine counts the sandbox's seccomp filters on it)."""
        from ..kernel import take_fd

        self._network.keeper = keeper
        if self._diag_channel is not None:  # (received when first needed)
            self._share_diag(self._diag_channel)
        listener_fd = take_fd(pid, fd)
        try:
            proc_fd = take_fd(pid, proc) if proc >= 0 else -1
            if self._http is not None:
                self._http.wait_for_trust()  # the command may read its CA bundle at once
        except BaseException:
            os.close(listener_fd)
            raise
        self._over.acquire()  # released by the last receiver
        if proc_fd >= 0 and self.watches is not None:  # watched once the command runs
            self.watches.adopt(proc_fd, watched=self._watched, pausable=self._pausable,
                               later=self._runtime is not None)
        if proc_fd >= 0 and not self._counts_processes:
            os.close(proc_fd)
            proc_fd = -1
        if proc_fd < 0:
            # Only network calls: one receiver, started after the go (its imports and
            # the engine's would hold the GIL while the command waits).
            self._receivers = 1
            return lambda: _thread.start_new_thread(self._receive_from, (listener_fd,))
        from ..kernel import Listener

        listener = Listener(listener_fd)
        self._processes.supervise(proc_fd)
        if self._runtime is not None:
            self._runtime.attach(listener, pid)
        # Forks are supervised too: still one receiver, started after the go; more join
        # it at the first fork-like call (_grow). Until then the command has no child to
        # send it SIGCHLD, the signal that makes an unreceived fork fail (see _receive).
        self._receivers = 1
        return lambda: self._start_receiving(listener)

    def _share_diag(self, channel: int) -> None:
        """The private network's sock_diag socket, for the engine (the sandbox's unix
        sockets) and the memory watch (their buffers): the kernel knows them only there."""
        from ._networkslot import SandboxDiag

        diag = SandboxDiag(channel)
        self._network.diag = diag
        if self.watches is not None:
            self.watches.socket_diag = diag

    def _start_receiving(self, listener: Listener) -> None:
        _thread.start_new_thread(self._receive, (listener,))
        if self._runtime is not None:
            # policy_fn's network calls were measured ~5-10 µs cheaper each with all the
            # receivers waiting (4 comparisons of 5; this VM's noise is about that size).
            self._grow(listener)
        if self._pins_at_start:
            _thread.start_new_thread(self._network.build_now, ())

    def task_cap_reached(self, count: int) -> None:
        """The keeper saw the sandbox at its default task cap (``ProcessCaps``)."""
        if self._processes is None:
            self._processes = self._process_caps()
        self._processes.task_cap_reached(count)

    def _process_caps(self) -> ProcessCaps:
        from ._processcap import ProcessCaps  # (a default run needs it only at its cap)

        return ProcessCaps(self._policy.max_processes, self._task_cap, self._hit, self._summarize)

    def _hit(self, limit: str, value: object, verdict: str, reason: str, *, notice: bool = True,
             **details: object) -> None:
        """A limit was hit: a record in the audit log, a notice on stderr."""
        self.limits_hit.append((limit, verdict))
        if self._audit is not None:
            self._audit.limit(limit, value, verdict, reason, **details)
        if notice and not self._quiet:
            print(f"sandlock: {reason}", file=sys.stderr, flush=True)

    def _receive_from(self, listener_fd: int) -> None:
        try:
            from ..kernel import Listener

            listener = Listener(listener_fd)
        except BaseException:
            os.close(listener_fd)  # fail closed: the command's network calls fail (ENOSYS)
            self._done(None)
            raise
        if self._pins_at_start:
            self._network.build_now()
        self._receive(listener)

    def _receive(self, listener: Listener) -> None:
        """One of the threads waiting in the kernel for the command's next call. The
        kernel hands a call to a waiting receiver at once, and from then on (with
        WAIT_KILLABLE_RECV) a signal to the caller no longer interrupts it: a call still
        unreceived when a signal comes fails with EINTR, which fork never does otherwise
        (a shell's SIGCHLD made its next fork fail). Once the command forks, several
        wait, so that a burst of calls is received while Python is busy with one. They
        end when the sandbox is gone (the listener hangs up)."""
        from ._receiving import (  # (in the thread: a default run loads it after exec)
            file_calls,
            hung_up,
            process_creation,
        )

        self._creations = process_creation()
        self._file_numbers = file_calls() if self._file_grants is not None else frozenset()

        try:
            while True:
                try:
                    notification = listener.receive()
                except OSError:
                    return
                if notification is not None:
                    self._dispatch(listener, notification)
                elif hung_up(listener.fd):
                    return
        finally:
            self._done(listener)

    def _grow(self, listener: Listener) -> None:
        """At the command's first fork-like call, before it is answered, the other
        receivers: from then on calls may come faster than one receiver (busy with one
        of them) takes them, and a call the kernel holds unreceived fails with EINTR if
        a signal comes (see _receive), such as the first child's SIGCHLD. Under -P
        alone, a command that never forks starts and wakes at its end one thread only
        (~0.1 ms of start-up each); a policy_fn's start at once (_start_receiving). Started
        after the answer instead, the second fork of `sh -c 'echo | cat'` failed in 2
        runs of 300 (none in 600 this way, as with three waiting from the start)."""
        from ._receiving import RECEIVERS

        with self._lock:
            # (None left: the sandbox ended before they were needed, and the last
            # receiver has let the listener go.)
            if self._grown or self._closed or not self._receivers:
                return
            self._grown = True
            self._receivers += RECEIVERS - 1
        for started in range(RECEIVERS - 1):
            try:
                _thread.start_new_thread(self._receive, (listener,))
            except RuntimeError:  # no thread to be had: the ones running go on alone
                with self._lock:
                    self._receivers -= RECEIVERS - 1 - started
                return

    def _dispatch(self, listener: Listener, notification: Notification) -> None:
        if notification.nr in self._determined:
            self._determinism.handle(listener, notification)
            return
        if notification.nr == self._memfd_nr:
            listener.proceed(notification.id)  # nothing read: the memory watch only learns
            self.watches.memfds_in_use()
            return
        if notification.nr in self._file_numbers:
            self._file_calls().handle(listener, notification)
            return
        caps = self._processes
        if caps is not None and caps.supervised and notification.nr in self._creations:
            if not self._grown:  # before the answer: a second fork may follow at once
                self._grow(listener)
            admitted = caps.admit(listener, notification)
            if admitted and self._runtime is None:
                listener.proceed(notification.id)  # nothing read from the caller: no TOCTOU
            if admitted and self._runtime is not None:
                self._runtime.create(listener, notification)
            return
        if self._runtime is not None and notification.nr in self._runtime.numbers.execs:
            self._runtime.exec(listener, notification)
            return
        if self._runtime is not None and notification.nr in self._runtime.numbers.opens:
            self._runtime.open(listener, notification)
            return
        self._network.handle(listener, notification)

    def prepared(self, spec: ChildSpec) -> ChildSpec:
        """The command's side as the supervision needs it: what it hands over with its
        listener, and init's end of the binder's channel."""
        return spec.replace(hand_proc=self.wants_proc, hand_scratch=self.wants_scratch,
                            binder_fd=self.binder_fd)

    def launched(self) -> None:
        """The keeper is forked (or could not be): init's end of the binder's channel
        is not sandlock's to hold."""
        if self.binder_fd >= 0:
            os.close(self.binder_fd)
            self.binder_fd = -1

    def ports(self) -> dict[int, int]:
        """--port-remap's virtual -> real TCP ports (``Sandbox.ports``)."""
        return self._network.ports()

    def nest_network(self, rules: dict[str, list[str]] | None, probe: socket.socket, name: str,
                     ruleset: int) -> None:
        """A nested sandbox's own network rules (None: the sandbox's) and its Landlock
        ruleset (net._nests); ``probe`` and ``ruleset``: owned."""
        self._network.nest(rules, probe, name, ruleset)

    def _file_calls(self) -> FileCalls:
        with self._lock:
            if self._files is None:
                from ..files import FileCalls

                self._files = FileCalls(self._file_grants, self._reanchored, self._audit, self._quiet)
            return self._files

    def _done(self, listener: Listener | None) -> None:
        """A receiver is over; the last one releases the listener: it closes once no
        network worker holds a call (the engine stays for close(), which ends it)."""
        with self._lock:
            self._receivers -= 1
            if self._receivers:
                return
        self._network.release(listener)
        if self._processes is not None:
            self._processes.close()
        self._over.release()

    def _summarize(self, limit: str, value: object, verdict: str, reason: str, *,
                   audit: bool = True, **details: object) -> None:
        """What a limit did over the whole run: said in the exit summary, and audited
        (unless ``audit`` is False: the record made when it was hit says it all)."""
        if audit:
            self._hit(limit, value, verdict, reason, notice=False, summary=True, **details)
        self.notices.append(f"sandlock: {reason}")

    def close(self) -> str | None:
        """End the supervision; the notices of what it refused, if any."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
        if self.watches is not None:
            self.watches.stop()
        if self._runtime is not None:
            self._runtime.stop()
        cpu = self.watches.cpu if self.watches is not None else None
        if cpu is not None and cpu.holds:
            share = f"{self._policy.max_cpu:g}%"
            self._summarize("max_cpu", self._policy.max_cpu, "throttle",
                            f"CPU share {share}: the sandbox was held back {cpu.holds} "
                            f"time(s), {cpu.held:.1f} s in all (--max-cpu)",
                            count=cpu.holds, held=round(cpu.held, 3))
        if self._over.locked():
            # The sandbox is gone (close() comes after its end): its listener hangs up and
            # the receivers end, before the run does: no thread of ours wakes later, when
            # the interpreter may be shutting down. (Not "while any receiver counts": the
            # last one uncounts itself before it sums up the process cap's refusals,
            # which the notices below must include; it releases this lock after.)
            self._over.acquire(timeout=_WAKE_TIMEOUT)
        summary = self._network.close()
        files = self._files.summary() if self._files is not None else None
        lines = [*self.notices, *filter(None, (files, summary))]
        return "\n".join(lines) if lines else None


def _memfd_number() -> int:
    from ..confinement import MEMFD_CALL
    from ..kernel import native_arch

    return native_arch().numbers[MEMFD_CALL]


_WAKE_TIMEOUT = 5.0  # receivers need microseconds to see the hang-up; this bounds a stuck one
