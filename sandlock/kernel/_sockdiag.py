"""What the kernel says about sockets (NETLINK_SOCK_DIAG). No privilege is needed.

* One unix socket, by inode (unix_diag): always an exact request about a single
  socket, never a table: a dump may skip entries while sockets come and go, and
  /proc/net/unix prints abstract names raw, so a name holding a newline forges a line
  (any inode, any name) for whoever parses it.
* The TCP sockets listening on a port (inet_diag): each one's inode and cookie, IPv4
  and IPv6 alike, from a dump of the listening sockets only (a host has tens; its
  connections, thousands, are never read), filtered by the kernel to the port asked
  about; and the dump of any sock_diag request (the memory watch's socket counts).

``socket`` (~2 ms) is imported by the functions that need it: only runs that bind or
reach their own sockets, or count their buffers, pay it.
"""

from __future__ import annotations

import os
import struct
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLMSGHDR = struct.Struct("=IHHII")
_RTATTR = struct.Struct("=HH")
_local = threading.local()  # each thread's sockets: .exact (unix questions), .dump

# unix_diag
_AF_UNIX = 1
_UDIAG_SHOW_NAME, _UDIAG_SHOW_VFS = 0x1, 0x2
_UNIX_DIAG_NAME, _UNIX_DIAG_VFS = 0, 1
_UNIX_DIAG_REQ = struct.Struct("=BBHIII8s")  # family, protocol, pad, states, ino, show, cookie
_UNIX_DIAG_MSG = struct.Struct("=BBBBI8s")  # family, type, state, pad, ino, cookie
ANY_COOKIE = b"\xff" * 8  # INET_DIAG_NOCOOKIE: whichever socket has the inode

# inet_diag
_IPPROTO_TCP = 6
_TCP_LISTEN = 10
_ALL_STATES = (1 << 14) - 1  # TCP_ESTABLISHED (1) .. TCP_BOUND_INACTIVE (13)
_INET_DIAG_REQ_BYTECODE = 1
_INET_DIAG_BC_S_EQ = 11  # the source (local) port equals the next op's "no" field
_BC_OP = struct.Struct("=BBH")  # code, yes, no
_REQUEST = struct.Struct("=BBBxI48x")  # family, protocol, ext, pad, states, sockid
_MESSAGE = struct.Struct("=BBBB4x32xI8sIIIII")  # .., id: ports, addresses, if, cookie; .., inode
SO_COOKIE = 57


# --- one unix socket ---------------------------------------------------------------

class SharedDiag:
    """A NETLINK_SOCK_DIAG socket made in another network namespace (a private
    network's: the kernel answers only about sockets of the asking socket's namespace),
    shared by the threads that ask, one question at a time. Owns ``sock``."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.lock = threading.Lock()
        self.sequence = 0


def unix_socket_file(socket_inode: int, shared: SharedDiag | None = None) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the socket file unix socket ``socket_inode`` is bound to;
    None if it is bound to no file, or gone. (Which socket a file stands for cannot
    be learnt from its path, which the sandbox may swap at any moment.) ``shared``:
    asked there (None: sandlock's own namespace)."""
    found = _ask(socket_inode, ANY_COOKIE, _UDIAG_SHOW_VFS, shared)
    vfs = found and found[1].get(_UNIX_DIAG_VFS)
    if not vfs or len(vfs) < 8:
        return None
    vfs_ino, vfs_dev = struct.unpack_from("=II", vfs)
    # The kernel's dev_t (major << 20 | minor) in the stat encoding.
    return os.makedev(vfs_dev >> 20, vfs_dev & 0xFFFFF), vfs_ino


def unix_socket_name(socket_inode: int, cookie: bytes = ANY_COOKIE,
                     shared: SharedDiag | None = None) -> tuple[bytes, bytes] | None:
    """(cookie, sun_path as bound) of unix socket ``socket_inode``; None if it is gone
    (or, given a ``cookie``, if that inode is now another socket's). An abstract name
    starts with NUL and is exact to the byte; b"": not bound.

    The cookie (8 bytes, never reused while the machine runs) names one socket for
    good: asked with it, the kernel answers about that socket or about none.
    """
    found = _ask(socket_inode, cookie, _UDIAG_SHOW_NAME, shared)
    if found is None:
        return None
    return found[0], found[1].get(_UNIX_DIAG_NAME, b"")


def diag_available() -> tuple[bool, str]:
    """Whether the kernel answers questions about unix sockets (sock_diag's unix_diag:
    CONFIG_UNIX_DIAG), asked about a socket made for it: (available, found)."""
    import socket

    with socket.socket(socket.AF_UNIX) as probe:
        probe.bind(b"")  # a name of the kernel's choosing
        try:
            found = unix_socket_name(os.fstat(probe.fileno()).st_ino)
        except OSError as exc:
            return False, f"refused: {exc.strerror or exc}"
        return (True, "unix_diag") if found and found[1] == probe.getsockname() else (False, "no answer")


def _ask(socket_inode: int, cookie: bytes, show: int,
         shared: SharedDiag | None) -> tuple[bytes, dict[int, bytes]] | None:
    """The kernel's answer about one socket: its cookie and attributes (None: no such)."""
    if shared is not None:
        with shared.lock:
            return _question(shared.socket, shared, socket_inode, cookie, show)
    diag = _diag_socket()
    try:
        return _question(diag, _local, socket_inode, cookie, show)
    except BaseException:
        _local.exact = None
        diag.close()
        raise


def _question(diag: socket.socket, numbering: object, socket_inode: int, cookie: bytes,
              show: int) -> tuple[bytes, dict[int, bytes]] | None:
    numbering.sequence = sequence = (numbering.sequence + 1) & 0xFFFFFFFF  # type: ignore[attr-defined]
    request = _UNIX_DIAG_REQ.pack(_AF_UNIX, 0, 0, 0xFFFFFFFF, socket_inode, show, cookie)
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST,
                            sequence, 0)
    diag.send(header + request)
    while True:  # (an answer to a question an exception cut short may come first)
        for kind, number, payload in _netlink_messages(diag.recv(1 << 12)):
            if number == sequence:
                return _answer(kind, payload, socket_inode)


def _diag_socket():
    """This thread's NETLINK_SOCK_DIAG socket (made once: it costs as much as a question)."""
    diag = getattr(_local, "exact", None)
    if diag is None:
        import socket  # ~2 ms: only a run that binds or reaches its own unix sockets pays it

        diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                             _NETLINK_SOCK_DIAG)
        _local.exact, _local.sequence = diag, 0
    return diag


def _answer(kind: int, payload: bytes, socket_inode: int) -> tuple[bytes, dict[int, bytes]] | None:
    if kind != _SOCK_DIAG_BY_FAMILY or len(payload) < _UNIX_DIAG_MSG.size:
        return None  # NLMSG_ERROR: ENOENT (no such inode), ESTALE (another cookie)
    *_, inode, cookie = _UNIX_DIAG_MSG.unpack_from(payload)
    if inode != socket_inode:
        return None
    return cookie, dict(_attributes(payload, _UNIX_DIAG_MSG.size))


def _netlink_messages(data: bytes):
    """(type, sequence number, payload) of each message in ``data``."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _, sequence, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            return
        yield kind, sequence, data[offset + _NLMSGHDR.size:offset + length]
        offset += (length + 3) & ~3


def _attributes(payload: bytes, offset: int):
    """(type, value) of each netlink attribute from ``offset`` on."""
    while offset + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, offset)
        if length < _RTATTR.size:
            return
        yield kind, payload[offset + _RTATTR.size:offset + length]
        offset += (length + 3) & ~3


# --- TCP listeners, and dumps ---------------------------------------------------


def tcp_listeners(port: int) -> frozenset[tuple[int, int]]:
    """(inode, cookie) of every TCP socket listening on local ``port`` (any address,
    either family); OSError if the kernel does not answer (no inet_diag)."""
    return _tcp_sockets(port, 1 << _TCP_LISTEN)


def tcp_sockets(port: int) -> frozenset[tuple[int, int]]:
    """(inode, cookie) of every TCP socket on local ``port``, in any state (bound only
    included: TCP_BOUND_INACTIVE, Linux 6.8); OSError as ``tcp_listeners``."""
    return _tcp_sockets(port, _ALL_STATES)


def _tcp_sockets(port: int, states: int) -> frozenset[tuple[int, int]]:
    import socket

    found = set()
    for family in (socket.AF_INET, socket.AF_INET6):
        for payload in _dump(_request(family, port, states)):
            *_, cookie, _, _, _, _, inode = _MESSAGE.unpack_from(payload)
            found.add((inode, int.from_bytes(cookie, "little")))
    return frozenset(found)


def socket_cookie(fd: int) -> int:
    """The kernel's cookie of socket ``fd``: never reused while the machine runs."""
    import socket

    with socket.socket(fileno=os.dup(fd)) as view:
        return int.from_bytes(view.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")


def _request(family: int, port: int, states: int) -> bytes:
    request = _REQUEST.pack(family, _IPPROTO_TCP, 0, states)
    # One test, "local port == port": yes jumps past the end (accept), no one further (reject).
    bytecode = _BC_OP.pack(_INET_DIAG_BC_S_EQ, 8, 12) + _BC_OP.pack(0, 0, port)
    attribute = _RTATTR.pack(_RTATTR.size + len(bytecode), _INET_DIAG_REQ_BYTECODE) + bytecode
    return request + attribute


def _dump(request: bytes):
    diag = getattr(_local, "dump", None)
    if diag is None:
        import socket

        diag = _local.dump = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
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
