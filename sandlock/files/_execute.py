"""Execute: a judged call performed by sandlock on the file it judged (its own O_PATH
descriptor), never by name again, with no capability the command lacks (a root
command's were dropped: sandlock's own must not stand in for them)."""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from ..kernel import EffectiveDropped, ioctl, nr, syscall
from ._calls import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_SYMLINK_NOFOLLOW,
    InodeFlags,
    Mark,
    Mode,
    Operation,
    Owner,
    RemoveXattr,
    SetAttr,
    SetXattr,
    Times,
    Watch,
)

IN_DONT_FOLLOW = 0x02000000
FAN_MARK_DONT_FOLLOW = 0x04
_libc = ctypes.CDLL(None, use_errno=True)


def perform(operation: Operation, file: int, descriptor: int) -> int:
    """Do ``operation`` on ``file`` (an O_PATH descriptor on what was judged);
    ``descriptor``: the caller's own descriptor duplicated, for the ioctls, which need
    an open file. Returns the call's value; raises OSError with the kernel's errno."""
    with EffectiveDropped():
        return _DO[type(operation)](operation, file, descriptor)


def _symlink(file: int) -> bool:
    return stat.S_ISLNK(os.fstat(file).st_mode)


def _nofollow(file: int) -> int:
    """The *at flags for acting on ``file`` itself (a symlink stays one)."""
    return AT_EMPTY_PATH | (AT_SYMLINK_NOFOLLOW if _symlink(file) else 0)


def _chmod(op: Mode, file: int, _: int) -> int:
    return syscall(nr("fchmodat2"), file, ctypes.c_char_p(b""), op.mode, _nofollow(file))


def _chown(op: Owner, file: int, _: int) -> int:
    return syscall(nr("fchownat"), file, ctypes.c_char_p(b""), ctypes.c_uint32(op.uid),
                   ctypes.c_uint32(op.gid), AT_EMPTY_PATH)


def _utimes(op: Times, file: int, _: int) -> int:
    times = None if op.times is None else ctypes.create_string_buffer(op.times, len(op.times))
    return syscall(nr("utimensat"), file, ctypes.c_char_p(b""), times, _nofollow(file))


def _through_proc(file: int) -> bytes:
    """The file as a path (the kernel follows the magic link to it). Extended
    attributes of a symlink itself are never the user's to set (the kernel refuses
    user.* there; the other namespaces need a capability the command has not)."""
    if _symlink(file):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))
    return f"/proc/self/fd/{file}".encode()


def _setxattr(op: SetXattr, file: int, _: int) -> int:
    os.setxattr(_through_proc(file), op.name, op.value, op.flags)
    return 0


def _removexattr(op: RemoveXattr, file: int, _: int) -> int:
    os.removexattr(_through_proc(file), op.name)
    return 0


def _setattr(op: SetAttr, file: int, _: int) -> int:
    attr = ctypes.create_string_buffer(op.attr, len(op.attr))
    return syscall(nr("file_setattr"), file, ctypes.c_char_p(b""), attr, len(op.attr),
                   _nofollow(file))


def _inode_flags(op: InodeFlags, _: int, descriptor: int) -> int:
    return ioctl(descriptor, op.request, ctypes.create_string_buffer(op.argument, len(op.argument)))


def _watch(op: Watch, file: int, _: int) -> int:
    wd = _libc.inotify_add_watch(op.fd, f"/proc/self/fd/{file}".encode(), op.mask & ~IN_DONT_FOLLOW)
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return wd


_fanotify_mark = _libc.fanotify_mark
_fanotify_mark.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p)


def _mark(op: Mark, file: int, _: int) -> int:
    path = f"/proc/self/fd/{file}".encode()
    if _fanotify_mark(op.fd, op.flags & ~FAN_MARK_DONT_FOLLOW, op.mask, AT_FDCWD, path) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return 0


_DO = {Mode: _chmod, Owner: _chown, Times: _utimes, SetXattr: _setxattr,
       RemoveXattr: _removexattr, SetAttr: _setattr, InodeFlags: _inode_flags, Watch: _watch,
       Mark: _mark}
