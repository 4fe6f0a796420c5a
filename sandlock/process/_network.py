"""A run's network side, from the process's point of view: the command's seccomp
listener taken before it execs, and the network engine (``sandlock.net``) built on a
thread, at once or at the command's first supervised call."""

from __future__ import annotations

import _thread  # threading costs ~1 ms of start-up; its Lock and a daemon thread are these
import os
import select
import sys
from io import TextIOWrapper as TextIO

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..confine import Confinement
    from ..net import HttpRun
    from ..policy import Policy


class NetworkLauncher:
    """Takes the command's seccomp listener at once, so that it can exec, and brings
    the network engine (~13 ms of imports) up on a thread: a command never waits for it
    but at a supervised call (connect, bind, sendto...), which the kernel holds until
    the supervisor reads it. When the policy names hosts for DNS to pin, the engine is
    built at once (pinning starts with the run); otherwise (no network rules, or every
    name given with --resolve) at the first supervised call: a command that never
    makes one never pays for it, nor does its exit (on two CPUs the build competed
    with the command).
    """

    def __init__(self, policy: Policy, confinement: Confinement, audit: TextIO | None,
                 quiet: bool, http: HttpRun | None) -> None:
        self._policy = policy
        self._http = http  # owned from now on
        self._quiet = quiet
        self._audit = audit
        # The confined worker restricts itself with the command's ruleset, later.
        self._ruleset_fd = os.dup(confinement.ruleset.fileno()) if confinement.ruleset else None
        self._lock = _thread.allocate_lock()
        self._network: object | None = None
        self._closed = False
        # Decided before the fork: the command waits while take_listener runs.
        self._pins_at_start = _pins_names(policy)
        self._wake: tuple[int, int] | None = None  # close() -> the thread waiting to build
        self._waiting = _thread.allocate_lock()  # held while that thread waits

    def take_listener(self, pid: int, fd: int) -> Callable[[], None]:
        from ..kernel import take_fd

        listener = take_fd(pid, fd)
        if self._http is not None:
            try:
                self._http.wait_for_trust()  # the command may read its CA bundle at once
            except BaseException:
                os.close(listener)
                raise
        # Started once the command has been told to go on: the thread's imports hold
        # the GIL, and the message that lets the command exec must not wait for them.
        if self._pins_at_start:
            return lambda: _thread.start_new_thread(self._start, (listener,))
        return lambda: self._wait_for_first_call(listener)

    def _wait_for_first_call(self, listener: int) -> None:
        self._wake = os.pipe2(os.O_CLOEXEC)
        self._waiting.acquire()  # released by the thread when its wait is over
        _thread.start_new_thread(self._start_when_needed, (listener,))

    def _start_when_needed(self, listener: int) -> None:
        """Wait for the first supervised call (the listener readable), or for the run
        to end (close(), or the command gone: the listener hangs up)."""
        wake = self._wake[0]
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(wake, select.POLLIN)
        ready = dict(poller.poll())
        os.close(wake)
        self._waiting.release()
        if ready.get(listener, 0) & select.POLLIN:
            self._start(listener)
            return
        os.close(listener)  # no engine: what it would have owned is closed here
        if self._ruleset_fd is not None:
            os.close(self._ruleset_fd)
        if self._audit is not None:
            self._audit.close()

    def _start(self, listener: int) -> None:
        try:
            with _responsive_switching:
                from ..net import Network

                network = Network(self._policy, self._ruleset_fd, self._audit,
                                  quiet=self._quiet, http=self._http)
        except BaseException as exc:
            os.close(listener)  # fail closed: the command's network calls now fail (ENOSYS)
            if self._http is not None:
                self._http.close()
            with self._lock:
                if self._closed:
                    return  # the run ended meanwhile (its proxy with it): nothing to say
            print(f"sandlock: error: the network supervisor could not start: {exc}",
                  file=sys.stderr, flush=True)
            return
        with self._lock:  # close() sees either no engine or one that is serving
            if not self._closed:
                network.serve(listener)
                self._network = network
                return
        os.close(listener)  # the command is already gone
        network.close()

    def close(self) -> str | None:
        """End the network engine; its denial summary, if it ran and denied anything."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
            network = self._network
        if self._wake is not None:
            _signal_and_close(self._wake[1])
            # Its wait is over before the run is: no thread of ours wakes later, when
            # the interpreter may be shutting down.
            self._waiting.acquire(timeout=_WAKE_TIMEOUT)
        if network is None:
            # Not built (yet): a builder still at work finds the run closed and drops
            # what it made. The proxy is ended here and now (idempotent), so that it
            # never outlives sandlock, without waiting for the builder.
            if self._http is not None:
                self._http.close()
            return None
        return network.close()


_WAKE_TIMEOUT = 5.0  # the waiting thread needs microseconds; this bounds a stuck one


def _pins_names(policy: Policy) -> bool:
    """Whether the policy names hosts that DNS must pin at start: those of its network
    and HTTP rules that --resolve does not pin already (parsed again here: the policy
    checks loaded the grammar, not the engine)."""
    if not (policy.net_allow_specs or policy.has_http_rules):
        return False
    from ..net import parse_allow, resolved_names

    names = {rule.host for rule in map(parse_allow, policy.net_allow_specs)
             if rule.host is not None}
    if policy.has_http_rules:  # (the rule grammar imports re: only for these runs)
        from ..proxy import HttpRules

        names |= HttpRules.parse(policy.http_allow, policy.http_deny).concrete_hosts()
    return bool(names - resolved_names(policy.resolve))


def _signal_and_close(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except OSError:
        pass  # the reader is gone: the engine was built, or the wait is over
    os.close(fd)


class _ResponsiveSwitching:
    """Lowers the interpreter's thread switch interval while network engines are being
    built. The builder imports for ~15 ms holding the GIL; a thread that wakes meanwhile
    (the one reporting that a short command has exited) would wait up to the default
    5 ms for it. Restored when the last builder is done."""

    INTERVAL = 0.0001

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._builders = 0
        self._saved = 0.0

    def __enter__(self) -> None:
        with self._lock:
            if self._builders == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, self.INTERVAL))
            self._builders += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._builders -= 1
            if self._builders == 0:
                sys.setswitchinterval(self._saved)


_responsive_switching = _ResponsiveSwitching()  # one for the process: the interval is global
