"""--deterministic-dirs: getdents64 answered with the directory's entries sorted by
name (bytes), whatever order its file system keeps them in.

The supervisor takes the caller's descriptor (pidfd_getfd: the same open directory,
the same position), reads the whole listing through a descriptor of its own (opened
again through /proc/self/fd: the caller's position untouched), and serves it from
the position, which here is an index into the sorted listing: each entry's d_off is
the index after it (telldir/seekdir work), and the position is set to where the
answer ends. The listing is read again when a caller starts at 0, else kept for the
caller's next calls (a directory changed meanwhile: POSIX leaves that open).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct

from ..kernel import nr, syscall

_HEADER = struct.Struct("<QqHB")  # d_ino, d_off, d_reclen, d_type; then the name
_READ = 1 << 16
_KEPT = 64  # listings kept for callers in the middle of one


class Listings:
    def __init__(self) -> None:
        self._kept: dict[tuple[int, int, int, int], list[tuple[bytes, int, int]]] = {}

    def getdents64(self, directory: int, tid: int, fd: int, count: int) -> tuple[bytes, int]:
        """``directory``: sandlock's duplicate of the caller's ``fd``. The records to
        write for a buffer of ``count`` bytes, and the position after them."""
        if _opened_as_path(directory):  # (getdents on an O_PATH descriptor: EBADF)
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        info = os.fstat(directory)
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        position = os.lseek(directory, 0, os.SEEK_CUR)
        key = (tid, fd, info.st_dev, info.st_ino)
        entries = self._kept.pop(key, None) if position else None
        if entries is None:
            entries = _sorted_listing(directory)
        records, end = _records(entries, position, count)
        if end < len(entries):
            if len(self._kept) >= _KEPT:
                self._kept.pop(next(iter(self._kept)))
            self._kept[key] = entries
        return records, end


def _opened_as_path(fd: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_PATH)


def _sorted_listing(directory: int) -> list[tuple[bytes, int, int]]:
    """(name, inode, d_type) of every entry, "." and ".." included, sorted by name."""
    own = os.open(f"/proc/self/fd/{directory}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    entries = []
    buffer = ctypes.create_string_buffer(_READ)
    try:
        while True:
            size = syscall(nr("getdents64"), own, buffer, _READ)
            if size <= 0:
                break
            data = buffer.raw[:size]
            offset = 0
            while offset < size:
                inode, _, length, kind = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size:offset + length].split(b"\0", 1)[0]
                entries.append((name, inode, kind))
                offset += length
    finally:
        os.close(own)
    entries.sort()
    return entries


def _records(entries: list[tuple[bytes, int, int]], start: int, count: int) -> tuple[bytes, int]:
    parts = []
    used = 0
    index = start
    while index < len(entries):
        name, inode, kind = entries[index]
        length = (_HEADER.size + len(name) + 1 + 7) & ~7
        if used + length > count:
            break
        parts.append(_HEADER.pack(inode, index + 1, length, kind) + name
                     + b"\0" * (length - _HEADER.size - len(name)))
        used += length
        index += 1
    if index == start and index < len(entries):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))  # (the kernel's: buffer too small)
    return b"".join(parts), index
