"""Sends on the command's behalf (sendto, sendmsg, sendmmsg): at once when the socket
has room, else on a worker that waits for room as the blocking call would, copying the
bytes from the caller a part at a time (``_payload``: what is held, and how much)."""

from __future__ import annotations

import errno
import select

import struct

from ..kernel import MSG_FASTOPEN, Gone, Listener, write_memory
from ._execute import INLINE_WAIT_MS, Deferred, Outcome, completed, send_now
from ._materialize import MMSGHDR_SIZE, MSG_LEN_OFFSET, Message, Request, Socket
from ._payload import CHUNK, HeldBytes

_SOCK_STREAM = 1
_U32 = struct.Struct("=I")
_MSG_DONTWAIT = 0x40


def send(sock: Socket, message: Message, flags: int, held: HeldBytes) -> Outcome | Deferred:
    """sendmsg() of one owned message (sendto, sendmsg and each sendmmsg entry).

    On a blocking socket it is first tried with MSG_DONTWAIT; only a full buffer
    sends it to a worker to block there. What waits keeps no byte of the message:
    the worker copies each part again from the caller when there is room for it
    (``_payload``), within the run's ``held`` bytes.
    """
    if sock.nonblocking or flags & _MSG_DONTWAIT:  # a stream's first part at most: a short send
        return send_now(sock.fd, message, flags)
    value, error = send_now(sock.fd, message, flags | _MSG_DONTWAIT)
    stream = sock.type == _SOCK_STREAM
    if error in (errno.EAGAIN, errno.EWOULDBLOCK):
        waiting = _without_copy(message)
        if stream:
            return lambda gone: _send_stream(sock.fd, waiting, flags, 0, gone, held)
        return lambda gone: _send_datagram(sock.fd, waiting, flags, gone, held)
    if not error and stream and value < message.length:
        # A blocking stream send hands over everything before it returns: the rest
        # goes out from a worker (the ancillary data already went with the first part).
        waiting = _without_copy(message)
        return lambda gone: _send_stream(sock.fd, waiting, flags & ~MSG_FASTOPEN, value, gone, held)
    if error == errno.EINPROGRESS and flags & MSG_FASTOPEN:
        # A Fast Open connect started and nothing was sent (no cookie yet): blocking,
        # the call would wait for the connection and then send. So do we.
        flags &= ~MSG_FASTOPEN
        connected = completed(sock.fd, INLINE_WAIT_MS)
        if connected is None:
            waiting = _without_copy(message)
            return lambda gone: _send_when_connected(sock.fd, waiting, flags, gone, held)
        return connected if connected[1] else send(sock, message, flags, held)
    return value, error


def _without_copy(message: Message) -> Message:
    """What a send that waits keeps: no bytes when they can be read again."""
    return message if message.source is None else message.replace(data=())


def _send_stream(fd: int, message: Message, flags: int, sent: int, gone: int,
                 held: HeldBytes) -> Outcome:
    """What a blocking stream send does from byte ``sent`` on: everything, a part at a
    time as room frees; the destination and ancillary data go with byte 0. No part is
    held while waiting for room: what did not fit is read again after."""
    total, full = message.length, False
    while sent < total:
        if full and not _writable(fd, gone):
            return -1, errno.EINTR  # the caller is gone: nobody is left to tell
        size = min(CHUNK, total - sent)
        with held.hold(size):
            data = _part(message, sent, size, gone)
            if isinstance(data, int):
                return (sent, 0) if sent and data == errno.EFAULT else (-1, data)
            first = sent == 0
            part = Message(message.destination if first else None, data,
                           message.control if first else b"")
            value, error = send_now(fd, part, flags | _MSG_DONTWAIT)
        full = error in (errno.EAGAIN, errno.EWOULDBLOCK) or (not error and value < size)
        if error and not full:
            return (sent, 0) if sent else (-1, error)
        if not error:
            sent += value
            flags &= ~MSG_FASTOPEN
    return sent, 0


def _send_datagram(fd: int, message: Message, flags: int, gone: int, held: HeldBytes) -> Outcome:
    """What a blocking datagram send does: wait for room, then the whole message."""
    while True:
        if not _writable(fd, gone):
            return -1, errno.EINTR
        with held.hold(message.length):
            data = _part(message, 0, message.length, gone)
            if isinstance(data, int):
                return -1, data
            value, error = send_now(fd, message.replace(data=data), flags | _MSG_DONTWAIT)
        if error not in (errno.EAGAIN, errno.EWOULDBLOCK):
            return value, error


def _part(message: Message, offset: int, size: int, gone: int) -> tuple[bytes, ...] | int:
    """``size`` bytes of the message from ``offset``, read again from the caller; or an
    errno: EFAULT (its buffer is no longer readable), EINTR (it is gone: what was read
    proves nothing, and nobody is left to tell)."""
    if message.source is None:
        return (b"".join(message.data)[offset:offset + size],)
    try:
        data = message.source.read(offset, size)
    except OSError as exc:  # (ESRCH: the thread is gone)
        return errno.EFAULT if exc.errno == errno.EFAULT else errno.EINTR
    # The pidfd names the caller: not readable after the read, the tid was still its own.
    if gone >= 0 and _ended(gone):
        return errno.EINTR
    return data


def _ended(pidfd: int) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _writable(fd: int, gone: int) -> bool:
    """Wait until ``fd`` has room; False when the caller is gone first (``gone``, a
    pidfd, readable)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if gone >= 0:
        poller.register(gone, select.POLLIN)
    return not any(ready == gone for ready, _ in poller.poll(-1))


def _send_when_connected(fd: int, message: Message, flags: int, gone: int,
                         held: HeldBytes) -> Outcome:
    value, error = completed(fd, -1, gone)
    return (value, error) if error else _send_stream(fd, message, flags, 0, gone, held)


def send_blocking(request: Request, message: Message, held: HeldBytes) -> Outcome:
    """``send`` waiting here rather than on a worker (the confined worker's sends)."""
    outcome = send(request.socket, message, request.flags, held)
    return outcome(-1) if callable(outcome) else outcome


def sent(listener: Listener, request: Request, index: int, outcome: Outcome, *,
         late: bool = False) -> Outcome:
    """Message ``index`` was sent (or failed): for sendmmsg, write its msg_len back
    (glibc's resolver checks it) and count the messages sent; other calls return
    the byte count. ``late``: after a wait on a worker, when the caller may be gone
    and its tid reused: the notification must still be pending to write."""
    value, error = outcome
    if request.syscall != "sendmmsg":
        return outcome
    if error:
        return (index, 0) if index else outcome  # the earlier messages did go out
    if late:
        try:
            listener.check_valid(request.notification.id)
        except Gone:
            return outcome  # nobody to tell; the reply will find the call gone too
    write_memory(request.notification.pid, request.msgvec + index * MMSGHDR_SIZE + MSG_LEN_OFFSET,
                 _U32.pack(value))
    return index + 1, 0
