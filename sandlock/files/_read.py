"""Materialize: the only code of sandlock.files that reads the caller. A notification
becomes a ``FileCall`` of owned values, its descriptors duplicated into sandlock; the
caller never has its memory read again (``Listener.check_valid`` afterwards proves the
thread still made the call while it was read)."""

from __future__ import annotations

import errno
import os
import struct

from ..kernel import duplicate_fd, open_pidfd, read_memory, read_string
from ._calls import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_SYMLINK_NOFOLLOW,
    FileCall,
    InodeFlags,
    Mark,
    Mode,
    Owner,
    RemoveXattr,
    SetAttr,
    SetXattr,
    Target,
    Times,
    Watch,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

PATH_MAX = 4096
XATTR_NAME_MAX, XATTR_SIZE_MAX = 255, 65536
_XATTR_ARGS = struct.Struct("=QII")  # struct xattr_args: value, size, flags
_FILE_ATTR_MIN, _STRUCT_MAX = 24, 4096  # file_setattr's struct file_attr, version 0
_TIMESPECS = struct.Struct("=qqqq")
_TIMEVALS = struct.Struct("=qqqq")
_UTIMBUF = struct.Struct("=qq")
IN_DONT_FOLLOW = 0x02000000
FAN_MARK_DONT_FOLLOW = 0x04
# ioctls that set inode flags (chattr): FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS (an int),
# FS_IOC_FSSETXATTR (struct fsxattr)
INODE_FLAG_IOCTLS = {0x40086602: 4, 0x40046602: 4, 0x401C5820: 28}


class Reader:
    """One notification's reads: thread ``tid``'s memory and, through a pidfd opened
    when a descriptor is first needed, its descriptors (each duplicated once; ``taken``
    holds them, and the pidfd, to close with the call)."""

    def __init__(self, tid: int, args: tuple[int, ...]) -> None:
        self.tid, self.args = tid, args
        self.taken: list[int] = []
        self._pidfd = -1

    def fd(self, index: int) -> int:
        """Our duplicate of the descriptor in argument ``index`` (EBADF as the kernel)."""
        number = _int(self.args[index])
        if number < 0:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        if self._pidfd < 0:
            self._pidfd = open_pidfd(self.tid)
            self.taken.append(self._pidfd)
        fd = duplicate_fd(self._pidfd, number)
        self.taken.append(fd)
        return fd

    def dirfd(self, index: int) -> int:
        return AT_FDCWD if _int(self.args[index]) == AT_FDCWD else self.fd(index)

    def string(self, index: int, limit: int = PATH_MAX, too_long: int = errno.ENAMETOOLONG) -> bytes:
        try:
            return read_string(self.tid, self.args[index], limit)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise OSError(too_long, os.strerror(too_long)) from None
            raise

    def bytes(self, address: int, size: int) -> bytes:
        return read_memory(self.tid, address, size)

    def target(self, dirfd: int | None, path: int, flags: int = 0, *, follow: bool = True,
               allowed: int = AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) -> Target:
        """The file named by the dirfd and path arguments (indexes; dirfd None: the
        working directory) with the *at flags ``flags`` (their value)."""
        if flags & ~allowed:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        name = self.string(path)
        base = AT_FDCWD if dirfd is None else self.dirfd(dirfd)
        follow = follow and not flags & AT_SYMLINK_NOFOLLOW
        if not name:
            if not flags & AT_EMPTY_PATH:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
            return Target(base, None, follow)
        return Target(base, name, follow)

    def times(self, index: int, layout: struct.Struct, to_timespecs: Callable[[tuple], bytes]) -> Times:
        if not self.args[index]:
            return Times(None)
        return Times(to_timespecs(layout.unpack(self.bytes(self.args[index], layout.size))))

    def xattr(self, name: int, value: int, size: int, flags: int) -> SetXattr:
        if size > XATTR_SIZE_MAX:
            raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
        key = self.string(name, XATTR_NAME_MAX, errno.ERANGE)
        if not key:
            raise OSError(errno.ERANGE, os.strerror(errno.ERANGE))
        return SetXattr(key, self.bytes(value, size) if size else b"", flags)

    def xattr_name(self, index: int) -> RemoveXattr:
        key = self.string(index, XATTR_NAME_MAX, errno.ERANGE)
        if not key:
            raise OSError(errno.ERANGE, os.strerror(errno.ERANGE))
        return RemoveXattr(key)


def _int(value: int) -> int:
    """A register's int argument as the kernel reads it: 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _timespecs(values: tuple) -> bytes:
    return _TIMESPECS.pack(*values)


def _from_timevals(values: tuple) -> bytes:
    """utimes/futimesat's microseconds as utimensat's nanoseconds (EINVAL out of range,
    as the kernel)."""
    if not all(0 <= usec < 1_000_000 for usec in values[1::2]):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    return _TIMESPECS.pack(values[0], values[1] * 1000, values[2], values[3] * 1000)


def _from_utimbuf(values: tuple) -> bytes:
    return _TIMESPECS.pack(values[0], 0, values[1], 0)


def _word(value: int) -> int:
    return value & 0xFFFFFFFF


def _utimensat(r: Reader) -> tuple[Target, Times]:
    _, path, _, flags = r.args[:4]
    if not path:  # futimens: the descriptor itself (flags: only NOFOLLOW, ignored)
        if flags & ~AT_SYMLINK_NOFOLLOW:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        target = Target(r.fd(0), None)
    else:
        target = r.target(0, 1, _word(flags))
    return target, r.times(2, _TIMESPECS, _timespecs)


def _setxattrat(r: Reader) -> tuple[Target, SetXattr]:
    size = r.args[5]
    if size < _XATTR_ARGS.size or size > _STRUCT_MAX:
        raise OSError(errno.EINVAL if size < _XATTR_ARGS.size else errno.E2BIG, "xattr_args")
    value, length, flags = _XATTR_ARGS.unpack_from(r.bytes(r.args[4], _XATTR_ARGS.size))
    target = r.target(0, 1, _word(r.args[2]))
    if length > XATTR_SIZE_MAX:
        raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
    key = r.xattr_name(3).name
    return target, SetXattr(key, r.bytes(value, length) if length else b"", flags)


def _file_setattr(r: Reader) -> tuple[Target, SetAttr]:
    size = r.args[3]
    if size < _FILE_ATTR_MIN or size > _STRUCT_MAX:
        raise OSError(errno.EINVAL if size < _FILE_ATTR_MIN else errno.E2BIG, "file_attr")
    return r.target(0, 1, _word(r.args[4])), SetAttr(r.bytes(r.args[2], size))


def _inotify_add_watch(r: Reader) -> tuple[Target, Watch]:
    mask = _word(r.args[2])
    instance = r.fd(0)
    name = r.string(1)
    if not name:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    return Target(AT_FDCWD, name, not mask & IN_DONT_FOLLOW), Watch(instance, mask)


def _fanotify_mark(r: Reader) -> tuple[Target, Mark]:
    flags, mask = _word(r.args[1]), r.args[2]
    group = r.fd(0)
    follow = not flags & FAN_MARK_DONT_FOLLOW
    if not r.args[4]:  # no path: the directory descriptor itself
        dirfd = _int(r.args[3])
        target = Target(AT_FDCWD if dirfd == AT_FDCWD else r.fd(3), None, follow)
    else:
        target = Target(r.dirfd(3), r.string(4), follow)
        if not target.path:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    return target, Mark(group, flags, mask)


def _ioctl(r: Reader) -> tuple[Target, InodeFlags]:
    request = _word(r.args[1])
    return Target(r.fd(0), None), InodeFlags(request, r.bytes(r.args[2], INODE_FLAG_IOCTLS[request]))


# syscall -> what it names and what it asks, read from the caller
_READERS: dict[str, Callable[[Reader], tuple]] = {
    "chmod": lambda r: (r.target(None, 0), Mode(_word(r.args[1]))),
    "fchmod": lambda r: (Target(r.fd(0), None), Mode(_word(r.args[1]))),
    "fchmodat": lambda r: (r.target(0, 1), Mode(_word(r.args[2]))),
    "fchmodat2": lambda r: (r.target(0, 1, _word(r.args[3])), Mode(_word(r.args[2]))),
    "chown": lambda r: (r.target(None, 0), Owner(_word(r.args[1]), _word(r.args[2]))),
    "lchown": lambda r: (r.target(None, 0, follow=False), Owner(_word(r.args[1]), _word(r.args[2]))),
    "fchown": lambda r: (Target(r.fd(0), None), Owner(_word(r.args[1]), _word(r.args[2]))),
    "fchownat": lambda r: (r.target(0, 1, _word(r.args[4])), Owner(_word(r.args[2]), _word(r.args[3]))),
    "utime": lambda r: (r.target(None, 0), r.times(1, _UTIMBUF, _from_utimbuf)),
    "utimes": lambda r: (r.target(None, 0), r.times(1, _TIMEVALS, _from_timevals)),
    "futimesat": lambda r: (r.target(0, 1), r.times(2, _TIMEVALS, _from_timevals)),
    "utimensat": _utimensat,
    "setxattr": lambda r: (r.target(None, 0), r.xattr(1, r.args[2], r.args[3], _word(r.args[4]))),
    "lsetxattr": lambda r: (r.target(None, 0, follow=False),
                            r.xattr(1, r.args[2], r.args[3], _word(r.args[4]))),
    "fsetxattr": lambda r: (Target(r.fd(0), None), r.xattr(1, r.args[2], r.args[3], _word(r.args[4]))),
    "removexattr": lambda r: (r.target(None, 0), r.xattr_name(1)),
    "lremovexattr": lambda r: (r.target(None, 0, follow=False), r.xattr_name(1)),
    "fremovexattr": lambda r: (Target(r.fd(0), None), r.xattr_name(1)),
    "setxattrat": _setxattrat,
    "removexattrat": lambda r: (r.target(0, 1, _word(r.args[2])), r.xattr_name(3)),
    "file_setattr": _file_setattr,
    "inotify_add_watch": _inotify_add_watch,
    "fanotify_mark": _fanotify_mark,
    "ioctl": _ioctl,
}
SYSCALLS = tuple(_READERS)


def read_call(syscall: str, reader: Reader) -> FileCall:
    """The call, owned; OSError with the errno the kernel would have given for
    arguments it cannot read (the duplicates taken so far are in ``reader.taken``)."""
    target, operation = _READERS[syscall](reader)
    if isinstance(operation, Owner):
        operation = _outside(reader.tid, operation)
    return FileCall(syscall, target, operation)


_UNCHANGED = 0xFFFFFFFF


def _outside(tid: int, owner: Owner) -> Owner:
    """The ids of a chown as the caller's user namespace maps them (sandlock performs it
    outside); an id it does not map is EINVAL, as the kernel would say."""
    return Owner(*(_mapped(tid, kind, value) for kind, value in (("uid", owner.uid), ("gid", owner.gid))))


def _mapped(tid: int, kind: str, value: int) -> int:
    if value == _UNCHANGED:
        return value
    with open(f"/proc/{tid}/{kind}_map", "rb") as lines:
        for line in lines:
            inside, outside, count = map(int, line.split())
            if inside <= value < inside + count:
                return outside + value - inside
    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
