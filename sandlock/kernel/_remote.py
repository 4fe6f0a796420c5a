"""Reaching into the notifying child: copy its memory, duplicate its fds.

Only the supervisor's materialize phase uses the reads (owned copies come out), and
only sendmmsg's msg_len write-back uses the write.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from ._libc import IoVec, syscall, syscall_function
from ._syscalls import nr

PIDFD_THREAD = os.O_EXCL  # pidfd_open flag (Linux 6.9): a pidfd for a thread, not a leader
MAX_COPY = 1 << 26  # refuse to copy more than 64 MiB for one syscall (the kernel's limit is larger)

# The supervisor's per-call syscalls, with their argument types bound once.
_process_vm_readv = syscall_function(nr("process_vm_readv"), ctypes.c_long, ctypes.c_void_p, ctypes.c_ulong,
                                     ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong)
_pidfd_getfd = syscall_function(nr("pidfd_getfd"), ctypes.c_long, ctypes.c_long, ctypes.c_ulong)


class Fault(OSError):
    """The child's pointer does not reach readable (or writable) memory: EFAULT."""

    def __init__(self) -> None:
        super().__init__(errno.EFAULT, os.strerror(errno.EFAULT))


def read_memory(pid: int, address: int, length: int) -> bytes:
    """Copy ``length`` bytes at ``address`` in thread ``pid``; Fault if not all readable."""
    if length == 0:
        return b""
    if length < 0 or length > MAX_COPY:
        raise OSError(errno.EMSGSIZE, os.strerror(errno.EMSGSIZE))
    buffer = ctypes.create_string_buffer(length)
    vectors = (ctypes.c_size_t * 4)(ctypes.addressof(buffer), length, address, length)  # local, remote iovec
    local = ctypes.addressof(vectors)
    try:
        done = _process_vm_readv(pid, local, 1, local + ctypes.sizeof(IoVec), 1, 0)
    except OSError as exc:
        if exc.errno == errno.EFAULT:
            raise Fault from None
        raise
    if done != length:
        raise Fault
    return buffer.raw


def read_string(pid: int, address: int, limit: int) -> bytes:
    """The NUL-terminated string at ``address`` in thread ``pid`` (without the NUL),
    read a page at most at a time so that it may end just before unmapped memory;
    OSError ENAMETOOLONG past ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = read_memory(pid, address, _PAGE - address % _PAGE)
        end = chunk.find(b"\0")
        if end >= 0:
            parts.append(chunk[:end])
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        address += len(chunk)
    raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))


_PAGE = 4096


def write_memory(pid: int, address: int, data: bytes) -> None:
    buffer = ctypes.create_string_buffer(data, len(data))
    local = IoVec(ctypes.addressof(buffer), len(data))
    remote = IoVec(address, len(data))
    done = syscall(nr("process_vm_writev"), pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if done != len(data):
        raise Fault


def open_pidfd(tid: int) -> int:
    """A pidfd for thread ``tid`` (notifications name threads, not processes)."""
    try:
        return syscall(nr("pidfd_open"), tid, PIDFD_THREAD)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    return syscall(nr("pidfd_open"), _thread_group(tid), 0)  # kernels before 6.9


def _thread_group(tid: int) -> int:
    with open(f"/proc/{tid}/status", "rb") as status:
        for line in status:
            if line.startswith(b"Tgid:"):
                return int(line.split()[1])
    raise ProcessLookupError(tid)


def duplicate_fd(pidfd: int, fd: int) -> int:
    """Our own descriptor for the child's open file ``fd`` (close-on-exec)."""
    return _pidfd_getfd(pidfd, fd, 0)


def cwd_of(tid: int) -> str:
    return os.readlink(f"/proc/{tid}/cwd")


def abstract_socket_inode(name: bytes) -> int | None:
    """The inode of the socket now bound to abstract ``name`` (None: nobody)."""
    wanted = b"@" + name.replace(b"\0", b"@")  # how /proc/net/unix spells abstract names
    with open("/proc/net/unix", "rb") as table:
        next(table, None)  # header
        for line in table:
            fields = line.rstrip(b"\n").split(None, 7)
            if len(fields) == 8 and fields[7] == wanted:
                return int(fields[6])
    return None


_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST = 0x1
_UDIAG_SHOW_VFS, _UNIX_DIAG_VFS = 0x2, 1
_NLMSGHDR = struct.Struct("=IHHII")
_UNIX_DIAG_REQ = struct.Struct("=BBHIII")  # family, protocol, pad, states, ino, show (+ cookie)
_UNIX_DIAG_MSG = struct.Struct("=BBBBI8x")  # family, type, state, pad, ino, cookie
_RTATTR = struct.Struct("=HH")


def unix_socket_file(socket_inode: int) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the socket file unix socket ``socket_inode`` is bound to;
    None if it is bound to no file, or gone.

    Asks the kernel (sock_diag, UNIX_DIAG_VFS) about that one socket: which socket a
    file stands for cannot be learnt from its path, which the sandbox may swap at any
    moment (and a table dump may skip entries while sockets come and go).
    """
    import socket  # ~2 ms: only for this rare question, not on every start

    request = _UNIX_DIAG_REQ.pack(socket.AF_UNIX, 0, 0, 0xFFFFFFFF, socket_inode, _UDIAG_SHOW_VFS)
    request += b"\xff" * 8  # udiag_cookie: any
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
        diag.sendall(header + request)
        for kind, payload in _netlink_messages(diag.recv(1 << 12)):
            if kind == _SOCK_DIAG_BY_FAMILY:
                return _vfs_of(payload, socket_inode)
    return None  # NLMSG_ERROR: no such socket


def _netlink_messages(data: bytes):
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            return
        yield kind, data[offset + _NLMSGHDR.size:offset + length]
        offset += (length + 3) & ~3


def _vfs_of(payload: bytes, socket_inode: int) -> tuple[int, int] | None:
    """UNIX_DIAG_VFS of a unix_diag_msg about ``socket_inode``, as (st_dev, st_ino)."""
    if len(payload) < _UNIX_DIAG_MSG.size or _UNIX_DIAG_MSG.unpack_from(payload)[4] != socket_inode:
        return None
    offset = _UNIX_DIAG_MSG.size
    while offset + _RTATTR.size <= len(payload):
        length, kind = _RTATTR.unpack_from(payload, offset)
        if length < _RTATTR.size:
            return None
        if kind == _UNIX_DIAG_VFS:
            vfs_ino, vfs_dev = struct.unpack_from("=II", payload, offset + _RTATTR.size)
            # The kernel's dev_t (major << 20 | minor) in the stat encoding.
            return os.makedev(vfs_dev >> 20, vfs_dev & 0xFFFFF), vfs_ino
        offset += (length + 3) & ~3
    return None
