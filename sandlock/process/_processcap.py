"""A run's caps on its processes, as the supervision sees them: -P's supervised cap
(fork-like calls decided by ``limits.ProcessGate``, built at the first such call) and
the default task cap, which the kernel holds and the keeper reports reached."""

from __future__ import annotations

import _thread
import errno
import os

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..kernel import Listener, Notification
    from ..limits import ProcessGate

    Hit = Callable[..., None]

_RECORDED = 4096  # processes remembered as on record (then forgotten, and recorded anew)
UNCAPPED = 1 << 30  # a policy_fn without a process cap: forks counted, none refused


class ProcessCaps:
    """``max_processes``: -P (0: none); ``task_cap``: the default cap (0: none);
    ``hit(limit, value, verdict, reason, **details)`` says a limit was hit, at once;
    ``summarize`` (same arguments) says it in the exit summary."""

    def __init__(self, max_processes: int, task_cap: int, hit: Hit, summarize: Hit) -> None:
        self._max_processes = max_processes
        self._cap = max_processes or UNCAPPED
        self._restricted = UNCAPPED  # policy_fn's lowest cap
        self._task_cap = task_cap
        self._hit = hit
        self._summarize = summarize
        self._gate: ProcessGate | None = None  # built at the first fork-like call
        # Processes whose refusal is in the audit log: one record each, not one per fork
        # retried, so that each process a long-lived sandbox runs (a pool's item) that
        # tries to fork past the cap is on record, and a bomb's retries are only counted.
        self._recorded: set[int] = set()
        self._proc_fd = -1  # the sandbox's /proc, for the gate
        self._gating = _thread.allocate_lock()  # fork-like calls: one at a time
        self.supervised = False  # fork-like calls reach the supervisor

    def supervise(self, proc_fd: int) -> None:
        """Fork-like calls will be decided here (``proc_fd``: the sandbox's /proc, owned)."""
        self._proc_fd = proc_fd
        self.supervised = True

    def admit(self, listener: Listener, notification: Notification) -> bool:
        """Whether the process cap admits the fork; if not it is answered EAGAIN here."""
        with self._gating:
            gate = self._gate_now()
            if gate.admit(notification.pid):
                return True
            first = gate.refused == 1  # (read here: refusals race past the lock)
            recorded = notification.pid in self._recorded
            if not recorded:
                if len(self._recorded) >= _RECORDED:
                    self._recorded.clear()
                self._recorded.add(notification.pid)
        listener.reply(notification.id, error=errno.EAGAIN)
        if not recorded:  # said on stderr once: a fork bomb's next million are only counted
            source = ("-P/--max-processes raises it" if gate.cap == self._max_processes
                      else "set by policy_fn's restrict_max_processes"
                      if gate.cap == self._restricted else "set by sb.update()")
            self._hit("max_processes", gate.cap, "deny",
                      f"process limit {gate.cap} reached: a fork failed with EAGAIN "
                      f"({source})", notice=first, pid=notification.pid)
        return False

    def tighten(self, cap: int) -> None:
        """policy_fn's restrict_max_processes: a lower cap from now on."""
        with self._gating:
            self._restricted = min(self._restricted, cap)
            self._set(min(self._cap, cap))

    def set_cap(self, cap: int) -> None:
        """sb.update(max_processes=...): the cap from now on (checked by the caller),
        never above what policy_fn restricted it to."""
        with self._gating:
            self._set(min(cap, self._restricted))

    def _set(self, cap: int) -> None:
        self._cap = cap
        if self._gate is not None:
            self._gate.cap = cap

    def task_cap_reached(self, count: int) -> None:
        """The keeper saw the sandbox at its default task cap, where the kernel fails
        forks and new threads with EAGAIN and says nothing: said now, and in the exit
        summary."""
        cap = self._task_cap
        self._hit("max_processes", cap, "deny", f"task cap {cap} reached (threads included): "
                  "forks and new threads fail with EAGAIN (-P/--max-processes sets another "
                  "cap)", tasks=count, default=True)
        self._summarize("max_processes", cap, "deny", f"task cap {cap}: reached during the "
                        "run (-P/--max-processes sets another cap)", audit=False)

    def close(self) -> None:
        """The sandbox is gone: what the cap refused, summed up."""
        gate = self._gate
        if gate is None:
            if self._proc_fd >= 0:
                os.close(self._proc_fd)
            return
        if gate.refused:
            self._summarize("max_processes", gate.cap, "deny",
                            f"process limit {gate.cap}: {gate.refused} fork(s) refused (EAGAIN)",
                            count=gate.refused)
        gate.close()

    def _gate_now(self) -> ProcessGate:
        """The gate, with ``_gating`` held. Built at the first fork-like call: a command
        that makes none (and one that has not yet) pays nothing for it."""
        if self._gate is None:
            from ..limits import ProcessGate

            self._gate = ProcessGate(self._cap, self._proc_fd)
            self._proc_fd = -1  # the gate's now
        return self._gate
