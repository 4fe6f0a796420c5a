"""deny_path: files and directories the sandbox may no longer open, and the check of
one open (or exec) against them.

The check runs while every task of the sandbox is held (``ExecHold``, everyone), so
that neither the path in the caller's memory nor the filesystem under it can change
between the check and the kernel's own lookup. The path is read once and looked up
as the caller would: from its root (``/proc/PID/root``, RESOLVE_IN_ROOT: its mount
namespace, its symlinks), relative paths from its working directory or descriptor.
What is compared is the file found, not the name: a denied file reached by a symlink,
a hard link or another spelling is denied alike; a denied directory denies everything
beneath it, found by walking up from the file.
"""

from __future__ import annotations

import _thread
import errno
import os

from .._record import record
from ..kernel import read_memory, read_string

AT_FDCWD = -100
PATH_MAX = 4096
_O_PATH = os.O_PATH | os.O_CLOEXEC
_OPEN_HOW_SIZE = 24
_MAX_DEPTH = 4096
_CREAT_FLAGS = os.O_CREAT | os.O_WRONLY | os.O_TRUNC  # creat(2)


@record
class PathCall:
    """An open (or exec) as read once: ``dirfd`` (AT_FDCWD or the caller's
    descriptor), ``path`` (bytes)."""

    dirfd: int
    path: bytes
    flags: int = 0  # the open's O_* flags (for file events)

    def absolute(self, tid: int) -> str:
        """The path as thread ``tid``'s root sees it, a relative one joined (not
        normalised: ".." follows the filesystem) to its working directory or to the
        directory ``dirfd`` is. OSError if neither can be read."""
        path = os.fsdecode(self.path)
        if path.startswith("/"):
            return path
        base = (os.readlink(f"/proc/{tid}/cwd") if self.dirfd == AT_FDCWD
                else os.readlink(f"/proc/{tid}/fd/{self.dirfd}"))
        return os.path.join(base, path) if path else base


def read_open(tid: int, syscall: str, args: tuple[int, ...]) -> PathCall:
    """Materialize open/openat/openat2/creat's path (OSError if unreadable)."""
    if syscall in ("openat", "openat2"):
        dirfd, address, flags = signed_int(args[0]), args[1], args[2] & 0xFFFFFFFF
        if syscall == "openat2":
            how = read_memory(tid, args[2], min(args[3], _OPEN_HOW_SIZE))  # EFAULT as the kernel
            flags = int.from_bytes(how[:8], "little")
    else:
        dirfd, address = AT_FDCWD, args[0]
        flags = _CREAT_FLAGS if syscall == "creat" else args[1] & 0xFFFFFFFF
    return PathCall(dirfd, read_string(tid, address, PATH_MAX), flags)


class DeniedPaths:
    """What deny_path named, as (st_dev, st_ino) of files and of directories."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._files: frozenset[tuple[int, int]] = frozenset()
        self._trees: frozenset[tuple[int, int]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self._files or self._trees)

    def add(self, path: str) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"deny_path: expected a path, got {path!r}")
        try:
            info = os.stat(path)
        except OSError as exc:
            raise ValueError(f"deny_path: {path}: {exc.strerror}") from None
        key = (info.st_dev, info.st_ino)
        with self._lock:
            if os.path.isdir(path):
                self._trees |= {key}
            else:
                self._files |= {key}

    def denies(self, tid: int, call: PathCall) -> bool:
        """Whether the file ``call`` reaches, for thread ``tid``, is denied (or, if it
        does not exist yet, would be made in a denied directory)."""
        root = os.open(f"/proc/{tid}/root", _O_PATH | os.O_DIRECTORY)
        try:
            path = call.absolute(tid)
            found = _in_root(root, path)
            if found is None:  # not there (yet): where it would be made
                path = os.path.dirname(path.rstrip("/")) or "/"
                found = _in_root(root, path)
            if found is None:
                return False  # nor its directory: the kernel's lookup fails too
            try:
                info = os.fstat(found)
                if (info.st_dev, info.st_ino) in self._files:
                    return True
                if not self._trees:
                    return False
                if not _is_dir(info):  # walk up from the directory it was found in
                    os.close(found)
                    found = _in_root(root, os.path.dirname(path.rstrip("/")) or "/")
                    if found is None:
                        return False
                return self._beneath(found, os.fstat(root))
            finally:
                os.close(found)
        finally:
            os.close(root)

    def _beneath(self, directory: int, root: os.stat_result) -> bool:
        """Whether ``directory`` is or lies beneath a denied one (walking up by "..",
        as the caller's namespace has them, to its root)."""
        top = (root.st_dev, root.st_ino)
        current = os.dup(directory)
        try:
            for _ in range(_MAX_DEPTH):
                info = os.fstat(current)
                key = (info.st_dev, info.st_ino)
                if key in self._trees:
                    return True
                if key == top:
                    return False
                parent = os.open("..", _O_PATH | os.O_DIRECTORY, dir_fd=current)
                os.close(current)
                current = parent
            return True  # deeper than any real tree: refuse rather than guess
        finally:
            os.close(current)


def lookup_error(tid: int, call: PathCall) -> int:
    """ENOENT or ENOTDIR if ``call``'s path is not there for thread ``tid`` (looked up
    as it would be: its root, its working directory or descriptor); 0 if it is, and
    whenever that cannot be said."""
    try:
        root = os.open(f"/proc/{tid}/root", _O_PATH | os.O_DIRECTORY)
    except OSError:
        return 0
    try:
        os.close(_openat2_in_root(root, call.absolute(tid)))
        return 0
    except OSError as exc:
        return exc.errno if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 0
    finally:
        os.close(root)


def _in_root(root: int, path: str) -> int | None:
    """An O_PATH descriptor on ``path`` looked up from ``root`` as from "/"; None if
    it is not there."""
    try:
        return _openat2_in_root(root, path)
    except OSError:
        return None


def _openat2_in_root(root: int, path: str) -> int:
    from ..kernel import RESOLVE_IN_ROOT, openat2

    return openat2(root, os.fsencode(path.lstrip("/") or "."), _O_PATH, RESOLVE_IN_ROOT)


def _is_dir(info: os.stat_result) -> bool:
    import stat

    return stat.S_ISDIR(info.st_mode)



def signed_int(value: int) -> int:
    """A register's int argument (a dirfd) as the kernel reads it: 32-bit, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
