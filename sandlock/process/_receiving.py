"""The receivers' side of the supervision: knowing when they are about to wait in the
kernel, when the listener has hung up, and keeping the interpreter responsive while
the network engine is built."""

from __future__ import annotations

import _thread
import select
import sys

RECEIVERS = 3  # once the command forks: calls the kernel can hand over while Python is busy
READY_TIMEOUT = 0.05


class Arrivals:
    """Until ``count`` receivers have arrived at their first RECV. Each says so just
    before it: the waiter, woken, gets the interpreter only once that receiver lets it
    go, in the ioctl, so a call the command makes at once is received at once. Bounded:
    a receiver late to wait only widens the EINTR window Supervision._receive speaks of."""

    def __init__(self, count: int) -> None:
        self._pending = count
        self._lock = _thread.allocate_lock()
        self._all = _thread.allocate_lock()
        self._all.acquire()  # released by the last to arrive

    def arrive(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending == 0:
                self._all.release()

    def wait(self, timeout: float) -> None:
        if self._all.acquire(timeout=timeout):
            self._all.release()


def hung_up(fd: int) -> bool:
    """The listener's filter has no process left (RECV then fails at once)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


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


responsive_switching = _ResponsiveSwitching()  # one for the process: the interval is global
