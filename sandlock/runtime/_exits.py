"""Telling the callback when a process of the sandbox has ended: one thread polls the
pidfds of the processes announced so far."""

from __future__ import annotations

import _thread
import os
import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class ExitWatch:
    def __init__(self, on_exit: Callable[[int, int], None]) -> None:
        """``on_exit(pid, parent)`` is called on the watching thread."""
        self._on_exit = on_exit
        self._lock = _thread.allocate_lock()
        self._watched: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, parent)
        self._wake_r, self._wake_w = -1, -1
        self._closed = False
        self._over = _thread.allocate_lock()  # held while the watching thread runs

    def watch(self, pid: int, parent: int) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return  # already gone (reaped): nothing to wait for
        with self._lock:
            if self._closed:
                os.close(pidfd)
                return
            self._watched[pidfd] = (pid, parent)
            if self._wake_r < 0:
                self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                self._over.acquire()
                _thread.start_new_thread(self._run, ())
            else:
                os.write(self._wake_w, b".")

    def close(self) -> None:
        """No more watching. The ends that have come are still told first (the run is
        over: its processes are gone), and waited for, up to CLOSE_TIMEOUT."""
        with self._lock:
            self._closed = True
            running = self._wake_w >= 0
            if running:
                os.write(self._wake_w, b".")
        if running and self._over.acquire(timeout=CLOSE_TIMEOUT):
            self._over.release()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        registered: set[int] = set()
        try:
            while True:
                with self._lock:
                    ended = self._take_ended() if self._closed else None
                    for pidfd in () if self._closed else self._watched.keys() - registered:
                        poller.register(pidfd, select.POLLIN)
                        registered.add(pidfd)
                if ended is not None:  # closed: the ends that have come, then no more
                    for pid, parent in ended:
                        self._on_exit(pid, parent)
                    return
                for fd, _ in poller.poll():
                    if fd == self._wake_r:
                        os.read(self._wake_r, 4096)
                        continue
                    poller.unregister(fd)
                    registered.discard(fd)
                    with self._lock:
                        pid, parent = self._watched.pop(fd)
                    os.close(fd)
                    self._on_exit(pid, parent)
        finally:
            with self._lock:
                for pidfd in self._watched:
                    os.close(pidfd)
                self._watched.clear()
                os.close(self._wake_r)
                os.close(self._wake_w)
            self._over.release()

    def _take_ended(self) -> list[tuple[int, int]]:
        """With ``_lock`` held: the watched processes that have ended, unwatched."""
        ended = select.poll()
        for pidfd in self._watched:
            ended.register(pidfd, select.POLLIN)
        gone = []
        for pidfd, _ in ended.poll(0):
            gone.append(self._watched.pop(pidfd))
            os.close(pidfd)
        return gone


CLOSE_TIMEOUT = 5.0  # seconds the run's end waits for the exits to be told
