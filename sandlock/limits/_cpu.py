"""The CPU share (--max-cpu PCT): the sandbox as a whole gets at most PCT% of one CPU.

A thread of sandlock's keeps a budget of CPU time that grows by PCT/100 of a second
each second, saved up for at most PERIOD (so a burst lasts at most that), and every
TICK takes from it what the sandbox's processes used since (their CPU times in the
sandbox's own /proc: every thread of a process, wherever the process went). When the
budget is spent, every process of the sandbox is stopped (SIGSTOP, through its /proc
directory: a pid is never reused under it) until the budget is back; a process that
appears meanwhile is stopped too. The processes stopped are all of the sandbox's, so
none is left running to continue another; sandlock's init is never stopped.
"""

from __future__ import annotations

import _signal
import _thread
import os
import time

from .._latch import Latch
from ._freeze import sandbox_pids, signal_all

TICK = 0.01
PERIOD = 0.1
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class CpuThrottle:
    """Holds the sandbox whose /proc is ``proc_fd`` (owned from now on) to ``share``
    percent of one CPU."""

    def __init__(self, share: float, proc_fd: int) -> None:
        self._rate = share / 100
        self._proc_fd = proc_fd
        self._seen: dict[str, int] = {}  # pid -> its CPU time (clock ticks) last tick
        self._stopped: set[str] = set()
        self._end = Latch()
        self._over = Latch()  # set when the thread ends
        self.holds = 0  # times the sandbox was stopped for having spent its budget
        self.held = 0.0  # seconds it spent stopped
        # A paused sandbox (a long-lived one's pause()) is not the throttle's to continue.
        self._signalling = _thread.allocate_lock()
        self._paused = False

    def start(self) -> None:
        _thread.start_new_thread(self._run, ())

    def set_share(self, share: float) -> None:
        """The share from now on (sb.update): the budget grows at the new rate."""
        self._rate = share / 100

    def pause(self) -> None:
        """From now on until ``resume``, the throttle sends no signal (its budget still
        accrues and is spent)."""
        with self._signalling:
            self._paused = True

    def resume(self) -> None:
        """The sandbox was continued as a whole: none of its processes is held now."""
        with self._signalling:
            self._paused = False
            self._stopped = set()

    def stop(self) -> None:
        self._end.set()
        self._over.wait(5)
        os.close(self._proc_fd)

    def _run(self) -> None:
        budget = self._rate * PERIOD
        last = time.monotonic()
        held_since = None
        try:
            while not self._end.wait(TICK):
                now = time.monotonic()
                budget = min(budget + self._rate * (now - last), self._rate * PERIOD)
                last = now
                budget -= self._used_since_last()
                if budget < 0:
                    if held_since is None:
                        held_since = now
                        self.holds += 1
                    self._hold()
                elif held_since is not None:
                    self._continue()
                    self.held += now - held_since
                    held_since = None
        finally:
            if held_since is not None:
                self._continue()
                self.held += time.monotonic() - held_since
            self._over.set()

    def _hold(self) -> None:
        with self._signalling:
            if not self._paused:
                self._stopped |= signal_all(self._proc_fd, _signal.SIGSTOP, self._stopped)

    def _continue(self) -> None:
        with self._signalling:
            if not self._paused and self._stopped:
                signal_all(self._proc_fd, _signal.SIGCONT)
            self._stopped = set()

    def _used_since_last(self) -> float:
        """CPU seconds the sandbox used since the last tick."""
        used = 0
        seen = {}
        for pid in sandbox_pids(self._proc_fd):
            ticks = _cpu_ticks(pid, self._proc_fd)
            if ticks is None:
                continue
            seen[pid] = ticks
            used += max(ticks - self._seen.get(pid, ticks), 0)
        self._seen = seen
        return used / _CLOCK_TICKS

def _cpu_ticks(pid: str, proc_fd: int) -> int | None:
    """utime + stime of process ``pid`` (all its threads), in clock ticks."""
    try:
        fd = os.open(f"{pid}/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return None
    try:
        fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    finally:
        os.close(fd)
    return int(fields[11]) + int(fields[12])  # stat fields 14 and 15
