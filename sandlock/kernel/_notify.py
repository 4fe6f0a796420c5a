"""seccomp user-notification kernel interface: receive, validate, answer.

Struct layouts and ioctl numbers are those of linux/seccomp.h on 64-bit machines
(SECCOMP_GET_NOTIF_SIZES reports 80, 24, 64 here).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from _thread import _local, allocate_lock  # threading's, without importing threading

from .._record import record
from ._libc import ioctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _thread import LockType

_NOTIF = struct.Struct("<QIIiIQ6Q")  # id, pid, flags, nr, arch, ip, args[6]
_RESP = struct.Struct("<QqiI")  # id, val, error, flags
_ID = struct.Struct("<Q")

IOCTL_RECV = 0xC0502100
IOCTL_SEND = 0xC0182101
_FLAG_CONTINUE = 1  # SECCOMP_USER_NOTIF_FLAG_CONTINUE
IOCTL_ID_VALID = 0x40082102
IOCTL_SET_FLAGS = 0x40082104
SET_FLAG_SYNC_WAKE_UP = 1  # wake the supervisor on the CPU the child runs on


@record
class Notification:
    """One intercepted syscall, as the kernel reported it (register values only)."""

    id: int
    pid: int  # the thread id, in sandlock's pid namespace
    nr: int
    arch: int
    args: tuple[int, int, int, int, int, int]


class Gone(Exception):
    """The notification is no longer pending: the thread died or was killed."""


class Listener:
    """The listener fd of a seccomp filter installed with NEW_LISTENER."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._users = 0  # workers still holding a call to answer
        self._closing = False
        self._lock = allocate_lock()
        self._callers: dict[int, int] | None = None  # id -> thread, while replies are held
        # holder -> (a lock it holds, the threads whose replies wait for it)
        self._holds: dict[object, tuple[LockType, frozenset[int]]] = {}
        self._thread = _local()  # .deferred: this thread's answers, while it defers them
        try:
            # The flags are the ioctl's argument itself, not a pointer to them.
            ioctl(fd, IOCTL_SET_FLAGS, SET_FLAG_SYNC_WAKE_UP)
            self.sync_wake_up = True
        except OSError:
            self.sync_wake_up = False  # before Linux 6.6: only a latency optimisation

    def receive(self) -> Notification | None:
        """The next notification; None if it vanished before we got it."""
        # One buffer per call: receivers run in several threads, and whether one can be
        # switched out between its ioctl and the unpacking (another's call landing in a
        # shared buffer) is an interpreter detail. Zeroed: RECV fails with EINVAL on a
        # dirty buffer.
        buffer = ctypes.create_string_buffer(_NOTIF.size)
        try:
            ioctl(self.fd, IOCTL_RECV, buffer)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINTR):
                return None
            raise
        notif_id, pid, _, nr, arch, _, *args = _NOTIF.unpack(buffer.raw)
        if self._callers is not None:
            self._callers[notif_id] = pid
        return Notification(notif_id, pid, nr, arch, tuple(args))

    def track_callers(self) -> None:
        """Remember which thread made each call, so that replies can be held."""
        if self._callers is None:
            self._callers = {}

    def hold_replies(self, holder: object, tids: frozenset[int]) -> None:
        """Until ``release_replies(holder)``, an answer to a call of one of ``tids``
        waits: they stay in the kernel (sandlock's exec check keeps them from the memory
        it read). Several holders may hold the same thread; ``track_callers`` first.
        Only the tracer's thread holds and releases."""
        lock, held = self._holds.get(holder) or (None, frozenset())
        if lock is None:
            lock = allocate_lock()
            lock.acquire()
        self._holds[holder] = (lock, held | tids)

    def release_replies(self, holder: object) -> None:
        lock, _ = self._holds.pop(holder, (None, None))
        if lock is not None:
            lock.release()

    def _wait_unheld(self, caller: int) -> None:
        """Until no holder holds ``caller``'s replies."""
        while locks := [lock for lock, held in list(self._holds.values()) if caller in held]:
            with locks[0]:
                pass

    def check_valid(self, notif_id: int) -> None:
        """Raise Gone unless the notification is still pending.

        After reading the child's memory or opening its pidfd, this proves that the
        pid still named the notifying thread while we did it (no pid reuse).
        """
        try:
            ioctl(self.fd, IOCTL_ID_VALID, _ID.pack(notif_id))
        except OSError as exc:
            raise Gone from exc

    def hold(self) -> None:
        """A worker will answer a call later: keep the fd open until it has."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            close = self._closing and not self._users
        if close:
            os.close(self.fd)

    def close_when_idle(self) -> None:
        with self._lock:
            self._closing = True
            close = not self._users
        if close:
            os.close(self.fd)

    def reply(self, notif_id: int, value: int = 0, error: int = 0) -> bool:
        """Answer with ``value`` or ``-error``; False if the notification is gone."""
        return self._send(_RESP.pack(notif_id, value, -error, 0), notif_id)

    def proceed(self, notif_id: int) -> bool:
        """Let the kernel perform the call, as the caller (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
        Only where nothing was checked that the caller could change since."""
        return self._send(_RESP.pack(notif_id, 0, 0, _FLAG_CONTINUE), notif_id)

    def defer_answers(self) -> None:
        """Until ``send_deferred``, this thread's answers wait. The caller runs at once
        on an answer (on this CPU: SYNC_WAKE_UP) and may make its next call before the
        answering thread has let go of its locks, keeping the receiver of that call
        waiting for them: answers are best sent on the way out of them."""
        self._thread.deferred = []

    def send_deferred(self) -> None:
        """Send what this thread answered since ``defer_answers``, and stop deferring."""
        deferred, self._thread.deferred = self._thread.deferred, None
        for response, notif_id in deferred or ():
            self._send(response, notif_id)

    def _send(self, response: bytes, notif_id: int) -> bool:
        deferred = getattr(self._thread, "deferred", None)
        if deferred is not None:
            deferred.append((response, notif_id))
            return True  # (nobody needs to know, yet, whether the caller is still there)
        if self._callers is not None:
            caller = self._callers.pop(notif_id, None)
            if caller is not None and self._holds:
                self._wait_unheld(caller)
        try:
            ioctl(self.fd, IOCTL_SEND, response)
            return True
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return False
            raise
