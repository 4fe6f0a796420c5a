"""Reaching into the notifying child: copy its memory, duplicate its fds.

Only the supervisor's materialize phase uses the reads (owned copies come out), and
only sendmmsg's msg_len write-back uses the write.
"""

from __future__ import annotations

import ctypes
import errno
import os

from ._libc import syscall
from ._syscalls import nr

PIDFD_THREAD = os.O_EXCL  # pidfd_open flag (Linux 6.9): a pidfd for a thread, not a leader
MAX_COPY = 1 << 26  # refuse to copy more than 64 MiB for one syscall (the kernel's limit is larger)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


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
    local = _IoVec(ctypes.addressof(buffer), length)
    remote = _IoVec(address, length)
    try:
        done = syscall(nr("process_vm_readv"), pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    except OSError as exc:
        if exc.errno == errno.EFAULT:
            raise Fault from None
        raise
    if done != length:
        raise Fault
    return buffer.raw


def write_memory(pid: int, address: int, data: bytes) -> None:
    buffer = ctypes.create_string_buffer(data, len(data))
    local = _IoVec(ctypes.addressof(buffer), len(data))
    remote = _IoVec(address, len(data))
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
    return syscall(nr("pidfd_getfd"), pidfd, fd, 0)


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
