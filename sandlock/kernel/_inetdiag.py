"""What the kernel says about the TCP sockets listening on a port (NETLINK_SOCK_DIAG,
inet_diag): each one's inode and cookie, IPv4 and IPv6 alike; and the dump of any
sock_diag request (the memory watch's socket counts use it too).

A dump of the listening sockets only (a host has tens; its connections, thousands, are
never read), filtered by the kernel to the port asked about. No privilege is needed.
"""

from __future__ import annotations

import os
import socket
import struct
import threading

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLMSGHDR = struct.Struct("=IHHII")
_RTATTR = struct.Struct("=HH")
_TCP_LISTEN = 10
_INET_DIAG_REQ_BYTECODE = 1
_INET_DIAG_BC_S_EQ = 11  # the source (local) port equals the next op's "no" field
_BC_OP = struct.Struct("=BBH")  # code, yes, no
_REQUEST = struct.Struct("=BBBxI48x")  # family, protocol, ext, pad, states, sockid
_MESSAGE = struct.Struct("=BBBB4x32xI8sIIIII")  # .., id: ports, addresses, if, cookie; .., inode
SO_COOKIE = 57
_local = threading.local()  # each thread's netlink socket


def tcp_listeners(port: int) -> frozenset[tuple[int, int]]:
    """(inode, cookie) of every TCP socket listening on local ``port`` (any address,
    either family); OSError if the kernel does not answer (no inet_diag)."""
    found = set()
    for family in (socket.AF_INET, socket.AF_INET6):
        for payload in _dump(_request(family, port)):
            *_, cookie, _, _, _, _, inode = _MESSAGE.unpack_from(payload)
            found.add((inode, int.from_bytes(cookie, "little")))
    return frozenset(found)


def socket_cookie(fd: int) -> int:
    """The kernel's cookie of socket ``fd``: never reused while the machine runs."""
    with socket.socket(fileno=os.dup(fd)) as view:
        return int.from_bytes(view.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")


def _request(family: int, port: int) -> bytes:
    request = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << _TCP_LISTEN)
    # One test, "local port == port": yes jumps past the end (accept), no one further (reject).
    bytecode = _BC_OP.pack(_INET_DIAG_BC_S_EQ, 8, 12) + _BC_OP.pack(0, 0, port)
    attribute = _RTATTR.pack(_RTATTR.size + len(bytecode), _INET_DIAG_REQ_BYTECODE) + bytecode
    return request + attribute


def _dump(request: bytes):
    diag = getattr(_local, "socket", None)
    if diag is None:
        diag = _local.socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                             _NETLINK_SOCK_DIAG)
    return sock_diag_dump(diag, request)


def sock_diag_dump(diag: socket.socket, request: bytes):
    """The payloads of the answers to a sock_diag dump ``request`` (after its netlink
    header) on the NETLINK_SOCK_DIAG socket ``diag``; OSError if the kernel refuses it."""
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), _SOCK_DIAG_BY_FAMILY,
                            _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    diag.send(header + request)
    while True:
        data = diag.recv(1 << 16)
        offset = 0
        while offset + _NLMSGHDR.size <= len(data):
            length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
            if length < _NLMSGHDR.size or kind == _NLMSG_DONE:
                return
            if kind == _NLMSG_ERROR:
                error = -struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0]
                if error:
                    raise OSError(error, os.strerror(error))
                return
            yield data[offset + _NLMSGHDR.size:offset + length]
            offset += (length + 3) & ~3
