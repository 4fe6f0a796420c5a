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
                _thread.start_new_thread(self._run, ())
            else:
                os.write(self._wake_w, b".")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._wake_w >= 0:
                os.write(self._wake_w, b".")

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        registered: set[int] = set()
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    for pidfd in self._watched.keys() - registered:
                        poller.register(pidfd, select.POLLIN)
                        registered.add(pidfd)
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
