"""The process cap: fork, vfork and clone without CLONE_THREAD reach the supervisor,
which lets the kernel make the process while the sandbox holds fewer than the cap and
answers EAGAIN otherwise (making a thread never reaches it).

Processes are counted in the sandbox's own procfs (its PID namespace): one numeric
entry per process, wherever it went (another process group, another session, a
daemon), zombies until reaped; threads are never listed, and init, sandlock's own
pid 1 there, is not counted. Listing it costs ~30 µs, so it is listed only when the
count might be near the cap: exits only lower a count, forks let go since the last
listing raise it by at most one each.

A fork let go is "in flight" until its process can be listed: a thread makes one
fork at a time, so its next fork-like call, or its exit, proves the last one done, and
so does a fork-like call of the process it made (which then exists); otherwise it is
counted for FLIGHT_SECONDS (a fork takes well under that), after which its process is
listed or gone. Counting in-flight forks as well as the listing can
only count one process twice, never miss one: forks from several threads at once do
not overshoot the cap; at worst a fork near the cap is refused while one lands.
"""

from __future__ import annotations

import os
import time

from ..kernel import tasks

FLIGHT_SECONDS = 0.01
_REMEMBERED = 4096  # forking threads whose process is remembered
_INIT = 1  # sandlock's init: in the namespace, not one of the command's processes


class ProcessGate:
    """Decides fork-like calls against ``cap``; ``proc_fd``: the sandbox's /proc."""

    def __init__(self, cap: int, proc_fd: int) -> None:
        self.cap = cap
        self._proc_fd = proc_fd
        # forking thread -> (when its fork was let go, its process)
        self._in_flight: dict[int, tuple[float, int]] = {}
        self._ceiling = cap  # what the sandbox may hold at most now; cap: count at once
        self._processes: dict[int, int] = {}  # forking thread -> its process, once read
        self.refused = 0

    def admit(self, tid: int) -> bool:
        """Whether thread ``tid`` may make one more process now (counted if so)."""
        process = self._processes.get(tid)
        if process is None:  # a thread not seen forking before: its process may be new
            process = self._first_fork_of(tid)
        self._in_flight.pop(tid, None)  # its previous fork, if any, is done
        if self._ceiling + 1 > self.cap:
            self._ceiling = self.count() + self._flying()
        if self._ceiling + 1 > self.cap:
            self.refused += 1
            return False
        self._ceiling += 1
        self._in_flight[tid] = (time.monotonic(), process)
        return True

    def _first_fork_of(self, tid: int) -> int:
        """Read ``tid``'s process and parent once (a shell forking in a loop costs no
        more reads), and settle the in-flight fork that made its process, if any."""
        process, parent = tasks.process_of(tid)
        if len(self._processes) >= _REMEMBERED:
            self._processes.clear()  # (threads come and go: bounded, read again if needed)
        self._processes[tid] = process
        made_by = next((t for t, (_, p) in self._in_flight.items() if parent and p == parent),
                       None)
        if made_by is not None:
            del self._in_flight[made_by]  # the fork that made this process is done
        return process

    def count(self) -> int:
        """The processes in the sandbox now."""
        return sum(1 for name in os.listdir(self._proc_fd) if name.isdigit()) - _INIT

    def _flying(self) -> int:
        """Forks let go whose process may not be listed yet."""
        recent = time.monotonic() - FLIGHT_SECONDS
        # A forking thread still alive may still be in its fork; one that ended is done.
        self._in_flight = {tid: entry for tid, entry in self._in_flight.items()
                           if entry[0] > recent and tasks.state_of(tid) not in ("Z", "X")}
        return len(self._in_flight)

    def close(self) -> None:
        os.close(self._proc_fd)

