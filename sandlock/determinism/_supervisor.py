"""``Determinism``: the supervisor's part of a reproducible run. The receivers hand it
the calls of ``kernel.seccomp.deterministic_calls``; it answers each itself (never
CONTINUE, but for arch_prctl, whose effect is the caller's own thread pointer and whose
argument is a register: nothing judged, nothing read), writing into the caller's memory
only after NOTIF_ID_VALID has said that the thread id still names the caller."""

from __future__ import annotations

import errno
import os
import sys

from ..kernel import Gone, duplicate_fd, native_arch, open_pidfd, write_memory

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..kernel import Listener, Notification
    from ..policy import Policy

_MOST_RANDOM = 1 << 20  # bytes per getrandom answer (fewer than asked is getrandom's right past 256)
_GRND_KNOWN = 0x7  # NONBLOCK | RANDOM | INSECURE
_GRND_RANDOM_INSECURE = 0x6


class Determinism:
    def __init__(self, policy: Policy, quiet: bool) -> None:
        numbers = native_arch().numbers
        self._quiet = quiet
        self._answers: dict[int, Callable[[Notification, Callable[[int, bytes], None]], int]] = {}
        functions: dict[str, bytes] = {}
        if policy.time_start is not None:
            from ._clock import Clock
            from ._vdso import CLOCKS

            clock = Clock(policy.time_start)
            for name in ("clock_gettime", "gettimeofday", "time"):
                answer = getattr(clock, name)
                self._answers[numbers[name]] = lambda n, write, answer=answer: answer(n.args, write)
            functions.update(CLOCKS)
        if policy.random_seed is not None:
            from ._stream import SeededStream
            from ._vdso import RANDOM

            self._stream = SeededStream(policy.random_seed, b"getrandom")
            self._answers[numbers["getrandom"]] = self._getrandom
            functions.update(RANDOM)
        self._listings = None
        if policy.deterministic_dirs:
            from ._listings import Listings

            self._listings = Listings()
            self._answers[numbers["getdents64"]] = self._getdents64
        self._patch = None
        self._arch_prctl = numbers["arch_prctl"]
        if functions:
            from ._vdso import VdsoPatch

            self._patch = VdsoPatch(functions)
        self.numbers = frozenset((*self._answers, *((self._arch_prctl,) if functions else ())))

    def handle(self, listener: Listener, notification: Notification) -> None:
        if notification.nr == self._arch_prctl:
            self._new_program(listener, notification)
            return

        def write(address: int, data: bytes) -> None:
            listener.check_valid(notification.id)
            write_memory(notification.pid, address, data)

        try:
            value = self._answers[notification.nr](notification, write)
        except Gone:
            return
        except OSError as exc:
            listener.reply(notification.id, error=exc.errno or errno.EIO)
            return
        listener.reply(notification.id, value)

    def _new_program(self, listener: Listener, notification: Notification) -> None:
        """A program sets its thread pointer: its vDSO made to enter the kernel first."""
        try:
            self._patch.apply(notification.pid, lambda: listener.check_valid(notification.id))
        except Gone:
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ESRCH):  # (else: the caller is gone)
                if not self._quiet:
                    print(f"sandlock: a program's vDSO could not be made to enter the kernel "
                          f"({exc.strerror}): it is refused its start (--time-start, "
                          "--random-seed)", file=sys.stderr, flush=True)
                listener.reply(notification.id, error=errno.EPERM)
                return
        listener.proceed(notification.id)

    def _getrandom(self, notification: Notification, write: Callable[[int, bytes], None]) -> int:
        buffer, count, flags = notification.args[:3]
        flags &= 0xFFFFFFFF
        if flags & ~_GRND_KNOWN or flags & _GRND_RANDOM_INSECURE == _GRND_RANDOM_INSECURE:
            raise OSError(errno.EINVAL, "invalid flags")
        count = min(count, _MOST_RANDOM)
        if count:
            write(buffer, self._stream.read(count))
        return count

    def _getdents64(self, notification: Notification, write: Callable[[int, bytes], None]) -> int:
        fd, buffer, count = notification.args[0] & 0xFFFFFFFF, notification.args[1], \
            notification.args[2] & 0xFFFFFFFF
        pidfd = open_pidfd(notification.pid)
        try:
            directory = duplicate_fd(pidfd, fd)
        finally:
            os.close(pidfd)
        try:
            records, end = self._listings.getdents64(directory, notification.pid, fd, count)
            write(buffer, records)  # (empty at the end: still the check that the fd was the caller's)
            os.lseek(directory, end, os.SEEK_SET)
        finally:
            os.close(directory)
        return len(records)
