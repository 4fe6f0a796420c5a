"""``Latch``: threading.Event's one-way use (set once, waited for, with timeouts) on a
bare ``_thread`` lock. ``threading`` (with ``functools``, ``collections`` and
``weakref``) costs ~2.5 ms, which the code that runs before a command starts, and the
limits' watcher threads, do without."""

from __future__ import annotations

import _thread


class Latch:
    def __init__(self) -> None:
        self._closed = _thread.allocate_lock()
        self._closed.acquire()  # released, once, by set(): waiters pass from then on
        self._setting = _thread.allocate_lock()
        self._set = False

    def set(self) -> None:
        with self._setting:
            if not self._set:
                self._set = True
                self._closed.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it was set within ``timeout`` seconds (None: for as long as it takes)."""
        if self._set:
            return True
        if self._closed.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            self._closed.release()  # for the other waiters
            return True
        return self._set
