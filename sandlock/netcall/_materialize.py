"""Materialize: the only code that reads the child, turning a notification into owned values.

Everything the verdict and the execution need is copied here, once: the destination
sockaddr, the bytes to send, ancillary data (SCM_RIGHTS descriptors are duplicated into
sandlock), and our own duplicate of the socket. After ``Listener.check_valid`` has
confirmed the notification is still pending, nothing the child does can change them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

from .._record import field, record
from ..kernel import (
    MSG_FASTOPEN,
    Notification,
    cwd_of,
    duplicate_fd,
    read_memory,
    socket_option,
)
from . import _sockaddr
from ._binder import PathBind, path_bind
from ._payload import CALL_MAX, Payload, TooLarge, first_copy
from ._sockaddr import SockAddress, UnixAddress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..netrules import NetPolicy

SOCKADDR_MAX = 128  # sizeof(struct sockaddr_storage): the kernel refuses longer (EINVAL)
IOV_MAX = 1024  # UIO_MAXIOV
MAX_RW_COUNT = 0x7FFFF000  # what one call reads or writes at most (INT_MAX, page aligned)
MMSG_MAX = 1024  # UIO_MAXIOV bounds sendmmsg's vlen too
_MSGHDR = struct.Struct("=QI4xQQQQi4x")  # name, namelen, iov, iovlen, control, controllen, flags
MSG_LEN_OFFSET = _MSGHDR.size  # struct mmsghdr: a msghdr, then unsigned int msg_len
MMSGHDR_SIZE = _MSGHDR.size + 8  # (padded)
_IOVEC = struct.Struct("=QQ")
_CMSGHDR = struct.Struct("=Qii")  # len, level, type
_SCM_RIGHTS = 1
_INT = struct.Struct("=i")

_libc = ctypes.CDLL(None, use_errno=True)


@record
class Socket:
    """Our duplicate of the child's socket and what it is."""

    fd: int
    family: int
    type: int
    protocol: int
    nonblocking: bool

    @property
    def transport(self) -> str:
        """"tcp", "udp" or "icmp" for IP sockets; "" otherwise."""
        if self.family not in (socket.AF_INET, socket.AF_INET6):
            return ""
        if self.protocol in (socket.IPPROTO_ICMP, socket.IPPROTO_ICMPV6):
            return "icmp"
        return "tcp" if self.type == socket.SOCK_STREAM else "udp"


@record
class Message:
    """One datagram or stream write to perform: owned bytes, translated ancillary data.

    ``data``: what was copied, the whole message or a stream's first part (``_payload``);
    ``source``: where all of it lies in the caller, read again for the rest."""

    destination: SockAddress | None
    data: tuple[bytes, ...]
    control: bytes = b""
    passed_fds: tuple[int, ...] = ()  # our duplicates of SCM_RIGHTS descriptors
    control_kinds: tuple[tuple[int, int], ...] = ()  # (level, type) of each ancillary item
    source: Payload | None = field(default=None, repr=False)

    @property
    def length(self) -> int:
        """The bytes the call sends, copied or not."""
        return self.source.length if self.source is not None else sum(map(len, self.data))


@record
class Request:
    notification: Notification
    syscall: str  # connect, bind, listen, sendto, sendmsg, sendmmsg, getsockname, getpeername
    socket: Socket
    address: SockAddress | None = None  # connect and bind; listen: the bound address
    messages: tuple[Message, ...] = ()  # sendto, sendmsg, sendmmsg
    flags: int = 0  # send flags; listen: the backlog
    msgvec: int = 0  # sendmmsg: where to write msg_len back
    owned_fds: tuple[int, ...] = field(default=(), repr=False)
    nested: tuple[NetPolicy, ...] = field(default=(), repr=False)  # nested sandboxes' rules
    path_bind: PathBind | None = None  # bind to a path: what the binder needs (_binder)
    # getsockname/getpeername: where the name goes (address, its length's address, the
    # length the caller gave), read once
    name_buffer: tuple[int, int, int] | None = None

    def close(self) -> None:
        for fd in (self.socket.fd, *self.owned_fds):
            try:
                os.close(fd)
            except OSError:
                pass


class Refused(Exception):
    """The request is malformed as the kernel would see it: answer with ``errno``."""

    def __init__(self, errno_: int) -> None:
        super().__init__(errno_)
        self.errno = errno_


def materialize(notification: Notification, syscall: str, pidfd: int) -> Request:
    """Copy what ``syscall`` needs from the child. Raises Refused, Fault or OSError."""
    args = notification.args
    pid = notification.pid
    sock = _socket(pidfd, _fd_arg(args[0]))
    owned: list[int] = []
    try:
        if syscall == "connect":
            return Request(notification, syscall, sock,
                           address=_anchor(_address(pid, args[1], args[2]), pid))
        if syscall == "bind":
            raw = _raw_address(pid, args[1], args[2])
            return _bind_request(notification, sock, raw, _parse(raw))
        if syscall == "sendto":
            destination = _destination(pid, sock, args[4], args[5], args[3])
            size = min(args[2], MAX_RW_COUNT)  # (the kernel takes no more in one call)
            payload = Payload(pid, ((args[1], size),), size)
            message = Message(destination, _first_copy(payload, sock), source=payload)
            return Request(notification, syscall, sock, messages=(message,), flags=args[3] & 0xFFFFFFFF)
        if syscall == "sendmsg":
            raw = read_memory(pid, args[1], _MSGHDR.size)
            message = _message(pid, pidfd, raw, owned, sock)
            return Request(notification, syscall, sock, messages=(message,),
                           flags=args[2] & 0xFFFFFFFF, owned_fds=tuple(owned))
        if syscall == "sendmmsg":
            count = min(args[2] & 0xFFFFFFFF, MMSG_MAX)
            table = read_memory(pid, args[1], count * MMSGHDR_SIZE)
            taken: list[Message] = []
            copied = 0
            for at in range(0, count * MMSGHDR_SIZE, MMSGHDR_SIZE):
                if copied >= CALL_MAX:  # the rest wait for the command's next call
                    break
                taken.append(_message(pid, pidfd, table[at:at + _MSGHDR.size], owned, sock))
                copied += sum(map(len, taken[-1].data))
            return Request(notification, syscall, sock, messages=tuple(taken), flags=args[3] & 0xFFFFFFFF,
                           msgvec=args[1], owned_fds=tuple(owned))
        if syscall in ("getsockname", "getpeername"):
            return Request(notification, syscall, sock, name_buffer=_name_buffer(pid, args))
        if syscall == "listen":
            backlog = _INT.unpack(struct.pack("=I", args[1] & 0xFFFFFFFF))[0]
            return Request(notification, syscall, sock, address=_local_address(sock.fd), flags=backlog)
        raise ValueError(f"not a supervised syscall: {syscall}")
    except BaseException:
        for fd in (sock.fd, *owned):
            os.close(fd)
        raise


def _name_buffer(pid: int, args: tuple[int, ...]) -> tuple[int, int, int]:
    """getsockname's and getpeername's buffer: the length the caller gave, read once."""
    room = _INT.unpack(read_memory(pid, args[2], _INT.size))[0]
    if room < 0:
        raise Refused(errno.EINVAL)
    return args[1], args[2], room


def _fd_arg(value: int) -> int:
    fd = _INT.unpack(struct.pack("=I", value & 0xFFFFFFFF))[0]  # the kernel reads an int
    if fd < 0:
        raise Refused(errno.EBADF)
    return fd


def _socket(pidfd: int, fd: int) -> Socket:
    try:
        dup = duplicate_fd(pidfd, fd)
    except OSError as exc:
        raise Refused(exc.errno or errno.EBADF) from None
    try:
        family, kind, protocol = _kind(dup)
    except OSError:
        os.close(dup)
        raise Refused(errno.ENOTSOCK) from None
    return Socket(dup, family, kind, protocol, not os.get_blocking(dup))


def _kind(fd: int) -> tuple[int, int, int]:
    """(family, type, protocol) of socket ``fd``; OSError if it is no socket."""
    if socket.getdefaulttimeout() is None:
        # The C socket type asks the kernel itself, at a fraction of socket.socket's cost.
        probe = socket.SocketType(fileno=fd)
        try:
            return probe.family, probe.type, probe.proto
        finally:
            probe.detach()
    # A socket object made under a default timeout sets O_NONBLOCK on the file: on the
    # command's own socket, that would change what its later calls do.
    return (socket_option(fd, socket.SOL_SOCKET, socket.SO_DOMAIN),
            socket_option(fd, socket.SOL_SOCKET, socket.SO_TYPE),
            socket_option(fd, socket.SOL_SOCKET, socket.SO_PROTOCOL))


def _local_address(fd: int) -> SockAddress:
    """Where our duplicate of the socket is bound (port 0: not bound yet)."""
    buffer = ctypes.create_string_buffer(SOCKADDR_MAX)
    length = ctypes.c_uint32(SOCKADDR_MAX)
    if _libc.getsockname(fd, buffer, ctypes.byref(length)) != 0:
        raise Refused(ctypes.get_errno() or errno.EBADF)
    return _sockaddr.parse(buffer.raw[:length.value])


def _address(pid: int, pointer: int, length: int) -> SockAddress:
    return _parse(_raw_address(pid, pointer, length))


def _destination(pid: int, sock: Socket, pointer: int, length: int, flags: int) -> SockAddress | None:
    """sendto's destination. An address of length 0 is no address to the kernel (a
    plain send), but on an IP datagram socket, or for a TCP Fast Open, which refuse
    it (EINVAL)."""
    if not pointer:
        return None
    if not length & 0xFFFFFFFF:
        if sock.transport in ("udp", "icmp") or (sock.transport == "tcp" and flags & MSG_FASTOPEN):
            raise Refused(errno.EINVAL)
        return None
    return _anchor(_address(pid, pointer, length), pid)


def _raw_address(pid: int, pointer: int, length: int) -> bytes:
    length &= 0xFFFFFFFF
    if length > SOCKADDR_MAX or pointer == 0:
        raise Refused(errno.EINVAL)
    return read_memory(pid, pointer, length)


def _parse(raw: bytes) -> SockAddress:
    try:
        return _sockaddr.parse(raw)
    except _sockaddr.BadAddress:
        raise Refused(errno.EINVAL) from None


def _bind_request(notification: Notification, sock: Socket, raw: bytes,
                  address: SockAddress) -> Request:
    """A bind. To a path, the binder (``_binder``) performs it from these copies, as
    the command would: the address stays as the command gave it, relative or not."""
    if not isinstance(address, UnixAddress) or address.abstract or not address.path:
        return Request(notification, "bind", sock, address=address)
    bind = path_bind(notification.pid, raw, address.path)
    return Request(notification, "bind", sock, address=address, path_bind=bind,
                   owned_fds=(bind.directory,) if bind.directory >= 0 else ())


def _anchor(address: SockAddress | None, pid: int) -> SockAddress | None:
    """A unix address with what it names for the child, for a connect or a send.

    Paths are the child's: relative ones are relative to its cwd, and every one is
    looked up in its mount namespace (through /proc/PID/root: it has its own /tmp).
    Symlinks are resolved so that the verdict sees the socket actually reached
    (execute then refuses any symlink). A socket that does not exist is ENOENT, as the
    kernel would say: no denial to report. What is reached is noted: the (st_dev,
    st_ino) of a socket file.
    """
    if not isinstance(address, UnixAddress) or not address.path or address.abstract:
        return address  # (which socket holds an abstract name: the supervisor asks the kernel)
    path, root = address.path, b"/proc/%d/root" % pid
    if not path.startswith(b"/"):
        path = os.path.join(os.fsencode(cwd_of(pid)), path)
    for own in (b"/proc/self/", b"/proc/thread-self/"):  # the caller's, seen from here
        if path.startswith(own):
            path, root = b"/proc/%d/" % pid + path[len(own):], b""
    path = _resolve(root, path)
    try:
        found = os.stat(root + path)
    except OSError:
        raise Refused(errno.ENOENT) from None
    return UnixAddress(path, False, identity=(found.st_dev, found.st_ino), root=root)


def _resolve(root: bytes, path: bytes) -> bytes:
    """realpath(``path``) for a process whose root directory is ``root`` (b"": ours):
    symlinks are read through ``root``, and absolute targets start again from it."""
    if not root:
        return os.path.realpath(path)
    pending = [part for part in path.split(b"/") if part]
    resolved: list[bytes] = []
    for _ in range(_MAX_PATH_STEPS):
        if not pending:
            return b"/" + b"/".join(resolved)
        name = pending.pop(0)
        if name == b"..":
            resolved = resolved[:-1]
            continue
        if name == b".":
            continue
        try:
            target = os.readlink(root + b"/" + b"/".join([*resolved, name]))
        except OSError:  # not a link (EINVAL), or missing: the stat after says
            resolved.append(name)
            continue
        if target.startswith(b"/"):
            resolved = []
        pending[:0] = [part for part in target.split(b"/") if part]
    raise Refused(errno.ELOOP)


_MAX_PATH_STEPS = 4096  # components and symlinks followed in one lookup (ELOOP past it)


def _message(pid: int, pidfd: int, raw: bytes, owned: list[int], sock: Socket) -> Message:
    """One msghdr's destination, data (what ``_payload`` copies of it) and ancillary data."""
    name, namelen, iov, iovlen, control, controllen, _ = _MSGHDR.unpack(raw)
    if iovlen > IOV_MAX:
        raise Refused(errno.EMSGSIZE)
    destination = _address(pid, name, namelen) if name and namelen else None
    segments = tuple(_IOVEC.iter_unpack(read_memory(pid, iov, iovlen * _IOVEC.size)))
    total = sum(length for _, length in segments)
    if total > MAX_RW_COUNT:  # the kernel sends no more in one call
        if any(length >> 63 for _, length in segments):  # negative as an ssize_t
            raise Refused(errno.EINVAL)
        total = MAX_RW_COUNT
    payload = Payload(pid, segments, total)
    data = _first_copy(payload, sock)
    control_bytes, passed, kinds = _control(pid, pidfd, control, controllen, owned)
    return Message(_anchor(destination, pid), data, control_bytes, passed, kinds, payload)


def _first_copy(payload: Payload, sock: Socket) -> tuple[bytes, ...]:
    try:
        return first_copy(payload, sock.fd, sock.type)
    except TooLarge:
        raise Refused(errno.EMSGSIZE) from None


def _control(pid: int, pidfd: int, pointer: int, length: int,
             owned: list[int]) -> tuple[bytes, tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Ancillary data with SCM_RIGHTS descriptors replaced by our duplicates, and the
    (level, type) of every item (the verdict refuses some)."""
    if not pointer or not length:
        return b"", (), ()
    raw = bytearray(read_memory(pid, pointer, min(length, 1 << 16)))
    passed: list[int] = []
    kinds: list[tuple[int, int]] = []
    offset = 0
    while offset + _CMSGHDR.size <= len(raw):
        cmsg_len, level, kind = _CMSGHDR.unpack_from(raw, offset)
        if cmsg_len < _CMSGHDR.size or offset + cmsg_len > len(raw):
            raise Refused(errno.EINVAL)
        kinds.append((level, kind))
        if level == socket.SOL_SOCKET and kind == _SCM_RIGHTS:
            for at in range(offset + _CMSGHDR.size, offset + cmsg_len - 3, 4):
                (child_fd,) = _INT.unpack_from(raw, at)
                ours = _duplicate_passed_fd(pidfd, child_fd)
                owned.append(ours)
                passed.append(ours)
                _INT.pack_into(raw, at, ours)
        offset += (cmsg_len + 7) & ~7
    return bytes(raw), tuple(passed), tuple(kinds)


def _duplicate_passed_fd(pidfd: int, fd: int) -> int:
    try:
        return duplicate_fd(pidfd, fd)
    except OSError:
        raise Refused(errno.EBADF) from None  # as the kernel would answer
