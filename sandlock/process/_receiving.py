"""The receivers' side of the supervision: knowing when they wait in the kernel, when
the listener has hung up, and keeping the interpreter responsive while the network
engine is built."""

from __future__ import annotations

import _thread
import select
import sys

RECEIVERS = 3  # calls the kernel can hand over while Python is busy with others
_READY_TIMEOUT = 0.05

_IOCTL = b"16 "  # x86_64's ioctl, as /proc/PID/task/TID/syscall shows a blocked call


def wait_until_receiving(tids: list[int]) -> None:
    """Until each receiver waits in the kernel (in RECV, not for the GIL): a call the
    command makes at once, then, is received at once. Bounded: a receiver late to wait
    only widens the EINTR window that Supervision._receive speaks of."""
    import time

    deadline = time.monotonic() + _READY_TIMEOUT
    pending = RECEIVERS
    while time.monotonic() < deadline:
        if len(tids) == pending and all(map(_in_ioctl, tids)):
            return
        time.sleep(0.00005)  # lets the receivers take the GIL


def _in_ioctl(tid: int) -> bool:
    try:
        with open(f"/proc/self/task/{tid}/syscall", "rb") as file:
            return file.read(3) == _IOCTL
    except OSError:
        return True  # gone (the sandbox already is): nothing to wait for


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
