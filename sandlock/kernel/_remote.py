"""Reaching into the notifying child: copy its memory, duplicate its fds.

Only the supervisor's materialize phase uses the reads (owned copies come out), and
only sendmmsg's msg_len write-back uses the write.
"""

from __future__ import annotations

import ctypes
import errno
import os

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
