"""The file a call names, looked up as the caller would: from its root (its mount
namespace, its absolute symlinks: ``/proc/TID/root`` and RESOLVE_IN_ROOT), a relative
path from its working directory or descriptor. The answer is an O_PATH descriptor of
sandlock's own, which is what gets judged and then acted on: were this lookup to
differ from the kernel's for the caller, sandlock would act on another file than the
caller meant, never on one it did not judge.

The kernel refuses magic links (``/proc/PID/fd/N``) under RESOLVE_IN_ROOT, and
``/proc/self`` means sandlock there: those paths are walked here, a component at a
time, "self" read as the caller's pid in its PID namespace and magic links followed
by the kernel.
"""

from __future__ import annotations

import errno
import os
import stat

from ..kernel import RESOLVE_IN_ROOT, filesystem_type, openat2
from ._calls import AT_FDCWD, Target

_O_PATH = os.O_PATH | os.O_CLOEXEC
_PROC_SUPER_MAGIC = 0x9FA0
_PROC_ROOT_INO = 1
MAX_LINKS = 40  # the kernel's own bound on symlinks in one lookup


def open_root(tid: int) -> int:
    """An O_PATH descriptor on thread ``tid``'s root directory."""
    return os.open(f"/proc/{tid}/root", _O_PATH | os.O_DIRECTORY)


def open_as_caller(tid: int, path: bytes) -> int:
    """An O_PATH descriptor (ours, to close) on the file ``path`` names for thread
    ``tid``, looked up as it would: from its root or working directory, its own
    ``/proc/self``, symlinks followed. OSError where the lookup fails."""
    root = open_root(tid)
    try:
        return resolve(tid, root, Target(AT_FDCWD, path))
    finally:
        os.close(root)


def resolve(tid: int, root: int, target: Target) -> int:
    """An O_PATH descriptor (ours, to close) on the file ``target`` names for ``tid``;
    OSError (ENOENT, ENOTDIR, ELOOP...) where the lookup fails."""
    if target.path is None:
        if target.dirfd == AT_FDCWD:
            return os.open(f"/proc/{tid}/cwd", _O_PATH)
        return os.dup(target.dirfd)
    path = target.path
    if not path.startswith(b"/"):
        path = _base(tid, target.dirfd) + b"/" + path
    flags = _O_PATH if target.follow else _O_PATH | os.O_NOFOLLOW
    try:
        return openat2(root, path, flags, RESOLVE_IN_ROOT)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.EXDEV):
            raise
    return _walk(tid, root, path, target.follow)  # a magic link, or /proc/self, on the way


def _base(tid: int, dirfd: int) -> bytes:
    """Where a relative path starts, as a path from the caller's root."""
    if dirfd == AT_FDCWD:
        return os.readlink(f"/proc/{tid}/cwd".encode())
    if not stat.S_ISDIR(os.fstat(dirfd).st_mode):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    return os.readlink(f"/proc/self/fd/{dirfd}".encode())


def _walk(tid: int, root: int, path: bytes, follow: bool) -> int:
    """``path`` looked up a component at a time from ``root`` (see the module's doc)."""
    pending = _components(path)
    links = 0
    current = os.dup(root)
    try:
        while pending:
            name = pending.pop()
            if name == b".":
                continue
            if name == b"..":
                current = _step(current, os.open(b"..", _O_PATH | os.O_DIRECTORY, dir_fd=current))
                continue
            last = not pending or pending == [b"."]
            found = os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=current)
            if not stat.S_ISLNK(os.fstat(found).st_mode) or (last and not follow):
                current = _step(current, found)
                continue
            links += 1
            if links > MAX_LINKS:
                os.close(found)
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            jumped, text = _link(tid, current, name, found)
            if jumped is not None:  # a magic link: the kernel took us to its file
                current = _step(current, jumped)
            elif text.startswith(b"/"):
                current = _step(current, os.dup(root))
            pending.extend(_components(text or b"."))
        return current
    except BaseException:
        os.close(current)
        raise


def _components(path: bytes) -> list[bytes]:
    """The names of ``path``, last first (a stack); a trailing slash keeps a "." so
    that the last symlink is followed, as the kernel does."""
    names = [name for name in path.split(b"/") if name]
    if path.endswith(b"/") and names:
        names.append(b".")
    return names[::-1]


def _step(current: int, new: int) -> int:
    os.close(current)
    return new


def _link(tid: int, directory: int, name: bytes, found: int) -> tuple[int | None, bytes]:
    """A symlink met on the way: (a descriptor the kernel jumped to, b"") for a magic
    link, else (None, its text). ``found`` (its O_PATH descriptor) is closed."""
    try:
        if filesystem_type(directory) != _PROC_SUPER_MAGIC:
            return None, os.readlink(name, dir_fd=directory)
        if name in (b"self", b"thread-self") and os.fstat(directory).st_ino == _PROC_ROOT_INO:
            return None, _self_of(tid, name == b"thread-self")
        try:
            text = os.readlink(name, dir_fd=directory)
        except OSError:
            text = b"/"
        if not text.startswith(b"/") and b":[" not in text:  # "self/mounts", "net"...
            return None, text
        return os.open(name, _O_PATH, dir_fd=directory), b""  # a magic link: the kernel follows
    finally:
        os.close(found)


def _self_of(tid: int, thread: bool) -> bytes:
    """What /proc/self (or /proc/thread-self) is to thread ``tid`` in the sandbox's
    procfs: its pids in its own (innermost) PID namespace."""
    process = thread_ = b""
    with open(f"/proc/{tid}/status", "rb") as status:
        for line in status:
            if line.startswith(b"NStgid:"):
                process = line.split()[-1]
            elif line.startswith(b"NSpid:"):
                thread_ = line.split()[-1]
    if not process or not thread_:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    return process + b"/task/" + thread_ if thread else process
