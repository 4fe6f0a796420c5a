"""The supervisor's threads and the pidfds it keeps: a pool of workers for operations
that may block, and a cache of the pidfds of the threads that made calls."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from ..kernel import open_pidfd


class PidfdCache:
    """pidfds of the threads that made calls, kept for their next calls.

    A pidfd names one thread for good: if its tid is reused by a new thread, the old
    pidfd fails with ESRCH rather than reaching the newcomer, and is replaced.
    Only the supervisor thread uses it. ``notes``: what was learnt of a pidfd's thread
    (which nested sandbox it is in), dropped with the pidfd.
    """

    SIZE = 256

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}
        self.notes: dict[int, object] = {}

    def get(self, tid: int) -> int:
        pidfd = self._pidfds.get(tid)
        return pidfd if pidfd is not None else self.reopen(tid)

    def reopen(self, tid: int) -> int:
        old = self._pidfds.pop(tid, None)
        if old is not None:
            self._close(old)
        if len(self._pidfds) >= self.SIZE:  # forget the oldest
            self._close(self._pidfds.pop(next(iter(self._pidfds))))
        pidfd = open_pidfd(tid)  # OSError: the thread is gone
        self._pidfds[tid] = pidfd
        return pidfd

    def close(self) -> None:
        for pidfd in self._pidfds.values():
            self._close(pidfd)
        self._pidfds.clear()

    def _close(self, pidfd: int) -> None:
        self.notes.pop(pidfd, None)  # first: the number may name another thread next
        os.close(pidfd)


class WorkerPool:
    """Threads for operations that may block; idle ones are reused, then retire."""

    IDLE_SECONDS = 30
    MAX_THREADS = 256

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0 and self._threads < self.MAX_THREADS
            if start:
                self._threads += 1
            else:
                self._idle -= 1
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._work, daemon=True, name="sandlock-worker").start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            job()
            with self._lock:
                self._idle += 1
