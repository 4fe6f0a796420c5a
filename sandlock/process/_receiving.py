"""The receivers' side of the supervision: how many, knowing when the listener has hung
up, and keeping the interpreter responsive while the network engine is built."""

from __future__ import annotations

import _thread
import select
import sys

RECEIVERS = 3  # once the command forks: calls the kernel can hand over while Python is busy


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


def process_creation() -> frozenset[int]:
    """The numbers of the fork-like calls the process caps count."""
    global _CREATION_NUMBERS
    if _CREATION_NUMBERS is None:
        from ..kernel import PROCESS_CREATION, native_arch

        numbers = native_arch().numbers
        _CREATION_NUMBERS = frozenset(numbers[name] for name in PROCESS_CREATION)
    return _CREATION_NUMBERS


def file_calls() -> frozenset[int]:
    """The numbers of the calls sandlock.files answers."""
    global _FILE_NUMBERS
    if _FILE_NUMBERS is None:
        from ..kernel import native_arch, seccomp

        numbers = native_arch().numbers
        _FILE_NUMBERS = frozenset(numbers[name] for name in seccomp.FILE_CALLS)
    return _FILE_NUMBERS


_CREATION_NUMBERS: frozenset[int] | None = None
_FILE_NUMBERS: frozenset[int] | None = None
