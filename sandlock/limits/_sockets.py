"""The kernel memory a sandbox's sockets hold: the bytes queued in their buffers, asked
of the kernel through sock_diag (netlink, no privilege needed), for the memory watch.

A socket's queues are memory the sandbox makes the kernel hold, and no process's
counters show: a unix socket's unread messages are charged to the socket that sent
them (its wmem_alloc), TCP's and UDP's to the socket whose queue they are in (rmem,
wmem). Each socket of the sandbox (its inode found in a descriptor table) counts
its own buffers, and a unix socket whose peer is no longer one of the sandbox's (it
closed, or is outside) also counts what waits in its receive queue (a stream's every
byte; a datagram socket's next message, all that sock_diag tells of it).
"""

from __future__ import annotations

import socket
import struct

from ..kernel import sock_diag_dump as _dump

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from ..kernel import SharedDiag

    T = TypeVar("T")

_NETLINK_SOCK_DIAG = 4
_RTATTR = struct.Struct("=HH")
_UNIX_REQUEST = struct.Struct("=BBHIII8x")  # family, protocol, pad, states, ino, show, cookie
_UNIX_MESSAGE = struct.Struct("=BBBBI8x")  # family, type, state, pad, ino, cookie
_UDIAG_SHOW_PEER, _UDIAG_SHOW_RQLEN, _UDIAG_SHOW_MEMINFO = 0x4, 0x10, 0x20
_UNIX_DIAG_PEER, _UNIX_DIAG_RQLEN, _UNIX_DIAG_MEMINFO = 2, 4, 5
_INET_REQUEST = struct.Struct("=BBBxI48x")  # family, protocol, ext, pad, states, id
_INET_MESSAGE = struct.Struct("=BBBB48xIIIII")  # ..., id, expires, rqueue, wqueue, uid, inode
_INET_DIAG_SKMEMINFO = 7
_MEMINFO = struct.Struct("=9I")  # rmem_alloc, rcvbuf, wmem_alloc, sndbuf, fwd, wmem_queued, ...
_RQLEN = struct.Struct("=II")
_ALL_STATES = 0xFFFFFFFF
# TIME_WAIT (6) and SYN_RECV (3) entries are the kernel's, without a descriptor or
# buffers: left out of the dumps (a busy host has thousands).
_INET_STATES = _ALL_STATES & ~(1 << 6 | 1 << 3)
_INET = [(family, protocol) for family in (socket.AF_INET, socket.AF_INET6)
         for protocol in (socket.IPPROTO_TCP, socket.IPPROTO_UDP)]


def probe_sockets(shared: SharedDiag | None = None) -> None:
    """OSError if the kernel does not answer sock_diag's unix dumps (the memory watch
    then cannot start: a limit it could not hold is not silently weaker). ``shared``:
    a private network's sock_diag socket (its sockets are known only there)."""
    _asking(shared, lambda diag: _unix_bytes(diag, set()))  # (none is counted)


def socket_bytes(inodes: set[int], shared: SharedDiag | None = None) -> int:
    """Bytes queued in the buffers of the sockets ``inodes`` (see the module's doc)."""
    return _asking(shared, lambda diag: _bytes(diag, inodes)) if inodes else 0


def _asking(shared: SharedDiag | None, question: Callable[[socket.socket], T]) -> T:
    if shared is not None:
        with shared.lock:
            return question(shared.socket)
    with _diag() as diag:
        return question(diag)


def _bytes(diag: socket.socket, inodes: set[int]) -> int:
    total, found = _unix_bytes(diag, inodes)
    if found == len(inodes):  # all unix sockets: no IP socket to ask about (the
        return total          # dumps of a busy host's TCP sockets take milliseconds)
    for family, protocol in _INET:
        try:
            total += _inet_bytes(diag, family, protocol, inodes)
        except OSError:  # (e.g. no udp_diag in this kernel: that protocol is not counted)
            continue
    return total


def _diag() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         _NETLINK_SOCK_DIAG)


def _unix_bytes(diag: socket.socket, inodes: set[int]) -> tuple[int, int]:
    """(bytes, how many of ``inodes`` are unix sockets)."""
    request = _UNIX_REQUEST.pack(socket.AF_UNIX, 0, 0, _ALL_STATES, 0,
                                 _UDIAG_SHOW_PEER | _UDIAG_SHOW_RQLEN | _UDIAG_SHOW_MEMINFO)
    total = found = 0
    for payload in _dump(diag, request):
        _, _, _, _, inode = _UNIX_MESSAGE.unpack_from(payload)
        if inode not in inodes:
            continue
        found += 1
        attributes = _attributes(payload, _UNIX_MESSAGE.size)
        memory = _MEMINFO.unpack_from(attributes[_UNIX_DIAG_MEMINFO]) \
            if _UNIX_DIAG_MEMINFO in attributes else (0,) * 9
        total += memory[0] + memory[2]  # rmem_alloc, wmem_alloc
        peer = attributes.get(_UNIX_DIAG_PEER)
        if _UNIX_DIAG_RQLEN in attributes and (peer is None or
                                               struct.unpack_from("=I", peer)[0] not in inodes):
            total += _RQLEN.unpack_from(attributes[_UNIX_DIAG_RQLEN])[0]
    return total, found


def _inet_bytes(diag: socket.socket, family: int, protocol: int, inodes: set[int]) -> int:
    request = _INET_REQUEST.pack(family, protocol, 1 << (_INET_DIAG_SKMEMINFO - 1), _INET_STATES)
    total = 0
    for payload in _dump(diag, request):
        inode = _INET_MESSAGE.unpack_from(payload)[-1]
        if inode not in inodes:
            continue
        memory = _attributes(payload, _INET_MESSAGE.size).get(_INET_DIAG_SKMEMINFO)
        if memory is not None:
            values = _MEMINFO.unpack_from(memory)
            total += values[0] + max(values[2], values[5])  # rmem; wmem_alloc or wmem_queued
    return total


def _attributes(payload: bytes, offset: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    while offset + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, offset)
        if length < _RTATTR.size:
            break
        found[kind & 0x3FFF] = payload[offset + _RTATTR.size:offset + length]
        offset += (length + 3) & ~3
    return found
