"""Which process a calling thread belongs to, asked at every network call: read from
/proc once per thread (~13 µs), then kept with a pidfd of that thread, whose signal
0 (~0.5 µs) proves the number still names the same thread (a pidfd of a thread that
ended fails, even once its number is reused)."""

from __future__ import annotations

import _signal
import os

from ..kernel import open_pidfd, tasks

_KEPT = 256  # threads remembered; the oldest is forgotten past it


class Owners:
    """Only the network engine's thread uses it (one call at a time)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, int, int]] = {}  # tid -> (pidfd, pid, parent)

    def of(self, tid: int) -> tuple[int, int]:
        """(process id, parent process id) of thread ``tid``."""
        known = self._known.get(tid)
        if known is not None:
            try:
                _signal.pidfd_send_signal(known[0], 0)
                return known[1], known[2]
            except OSError:
                os.close(self._known.pop(tid)[0])
        pid, parent = tasks.process_of(tid)
        try:
            pidfd = open_pidfd(tid)
        except OSError:
            return pid, parent  # gone: nothing to keep
        if len(self._known) >= _KEPT:
            os.close(self._known.pop(next(iter(self._known)))[0])
        self._known[tid] = (pidfd, pid, parent)
        return pid, parent

    def close(self) -> None:
        for pidfd, _, _ in self._known.values():
            os.close(pidfd)
        self._known.clear()
