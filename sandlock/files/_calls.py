"""What sandlock.files answers, as owned values: a call that changes a file's metadata
(mode, owner, times, extended attributes, inode flags) or puts a watch on it (inotify,
fanotify). Landlock (ABI 7) judges none of them: a command could make a denied key
world-readable, or watch a denied directory, with nothing to stop it.

A ``FileCall`` is what the caller named (``Target``) and what it asked to be done
(one of the operations below), each read once from the caller by ``_read``.
"""

from __future__ import annotations

from .._record import record

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000


@record
class Target:
    """The file a call names: ``path`` looked up from ``dirfd`` (AT_FDCWD: the caller's
    working directory; else sandlock's duplicate of the caller's descriptor), or, with
    ``path`` None, the file ``dirfd`` itself is (fchmod, fsetxattr, AT_EMPTY_PATH).
    ``follow``: a symlink named last is followed."""

    dirfd: int
    path: bytes | None
    follow: bool = True


@record
class Mode:
    mode: int


@record
class Owner:
    uid: int  # as the kernel reads them: 32 bits, 0xFFFFFFFF unchanged
    gid: int


@record
class Times:
    times: bytes | None  # two struct timespec (access, modification); None: now


@record
class SetXattr:
    name: bytes
    value: bytes
    flags: int


@record
class RemoveXattr:
    name: bytes


@record
class SetAttr:
    """file_setattr(2)'s struct file_attr, as the caller gave it."""

    attr: bytes


@record
class InodeFlags:
    """An ioctl setting inode flags (chattr) on the caller's descriptor ``Target.dirfd``."""

    request: int
    argument: bytes


@record
class Watch:
    """inotify_add_watch on sandlock's duplicate ``fd`` of the caller's instance."""

    fd: int
    mask: int


@record
class Mark:
    """fanotify_mark on sandlock's duplicate ``fd`` of the caller's group."""

    fd: int
    flags: int
    mask: int


Operation = Mode | Owner | Times | SetXattr | RemoveXattr | SetAttr | InodeFlags | Watch | Mark
WATCHES = (Watch, Mark)  # these need the file to be readable; the others, writable


@record
class FileCall:
    syscall: str
    target: Target
    operation: Operation
