"""What the supervisor holds of the bytes a command sends: bounded per call and in total.

Nothing is judged from a send's bytes (only from its destination and ancillary data),
so they need not be copied whole when the call is read. A call's bytes stay where the
command put them (``Payload``: the calling thread's buffers) and are copied a part at
a time, when they can be sent, as the kernel itself copies them while room frees in
the socket's buffer:

- a stream send (TCP, unix stream) copies at most ``CHUNK`` at a time; a send that
  has to wait for room (the peer does not read) holds no byte while it waits;
- a datagram (UDP, unix datagram and seqpacket, netlink, ICMP) goes whole or not at
  all, so it is copied whole, but only once it is known to fit the socket: past the
  socket's largest message (its send buffer; 64 KiB for UDP and ICMP) the call is
  refused with the kernel's own EMSGSIZE before anything is copied;
- one sendmmsg copies its messages up to ``CALL_MAX``; the ones after wait for the
  command's next call (sendmmsg says how many went, as the kernel may);
- the workers that finish waiting sends hold at most ``HELD_MAX`` of copies at once
  (``HeldBytes``), whatever the number of calls waiting.
"""

from __future__ import annotations

import errno
import os
import socket
import threading

from ..kernel import read_memory, socket_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._materialize import Request

CHUNK = 256 << 10  # a stream send's bytes copied at a time
DATAGRAM_FREE = 64 << 10  # datagrams up to this size are copied without asking the socket
CALL_MAX = 1 << 20  # the bytes of one sendmmsg's messages copied at once
HELD_MAX = 8 << 20  # what a run's workers hold at once, for every waiting send together
_UDP_MAX = 0xFFFF  # the kernel's largest UDP and ICMP message


class TooLarge(Exception):
    """A datagram larger than its socket takes: EMSGSIZE, as the kernel would say."""

    errno = errno.EMSGSIZE


class Payload:
    """Where a message's bytes lie in the calling thread (``segments``: its iovec,
    address and length), read again when they are sent. (A plain class: one is made
    for every send, and a record's construction costs twice as much.)"""

    __slots__ = ("pid", "segments", "length")

    def __init__(self, pid: int, segments: tuple[tuple[int, int], ...], length: int) -> None:
        self.pid, self.segments, self.length = pid, segments, length

    def read(self, offset: int, size: int) -> tuple[bytes, ...]:
        """``size`` bytes from ``offset``, one part per segment they span (Fault if
        the command's memory is no longer readable)."""
        if len(self.segments) == 1:  # (sendto, and most sendmsg: the common case)
            return (read_memory(self.pid, self.segments[0][0] + offset, size),)
        parts = []
        for base, length in self.segments:
            if offset >= length:
                offset -= length
                continue
            take = min(length - offset, size)
            parts.append(read_memory(self.pid, base + offset, take))
            size -= take
            offset = 0
            if not size:
                break
        return tuple(parts)


def first_copy(payload: Payload, fd: int, kind: int) -> tuple[bytes, ...]:
    """What is copied when the call is read: a small message whole, a stream's first
    CHUNK, a datagram whole once it fits the socket (TooLarge otherwise)."""
    if payload.length <= DATAGRAM_FREE:
        return payload.read(0, payload.length)
    if kind == socket.SOCK_STREAM:
        return payload.read(0, CHUNK)
    if payload.length > max(socket_option(fd, socket.SOL_SOCKET, socket.SO_SNDBUF), _UDP_MAX):
        raise TooLarge
    return payload.read(0, payload.length)


def passes_memfd(request: Request) -> bool:
    """A descriptor the call passes (SCM_RIGHTS, our duplicates) is a memfd: memory that,
    in flight, no process's descriptor table or counters show."""
    for fd in request.owned_fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(_SHARED_MEMORY_FILES):
                return True
        except OSError:
            continue
    return False


_SHARED_MEMORY_FILES = ("/memfd:", "/secretmem")


class HeldBytes:
    """The bytes a run's workers hold at once, at most ``limit``: a worker about to
    copy waits for room (it holds nothing while it waits)."""

    def __init__(self, limit: int = HELD_MAX) -> None:
        self.limit = limit
        self.held = 0
        self._room = threading.Condition(threading.Lock())

    def hold(self, size: int) -> _Holding:
        return _Holding(self, min(size, self.limit))

    def _take(self, size: int) -> None:
        with self._room:
            while self.held + size > self.limit:
                self._room.wait()
            self.held += size

    def _give(self, size: int) -> None:
        with self._room:
            self.held -= size
            self._room.notify_all()


class _Holding:
    __slots__ = ("_bytes", "_size")

    def __init__(self, held: HeldBytes, size: int) -> None:
        self._bytes, self._size = held, size

    def __enter__(self) -> None:
        self._bytes._take(self._size)

    def __exit__(self, *exc: object) -> None:
        self._bytes._give(self._size)
