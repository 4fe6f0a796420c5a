"""The sandbox's filesystem grants by inode, and what they give a file: the Landlock
rights of every rule on the way from the file up to the caller's root, joined, as
Landlock itself decides (a rule on a directory covers everything beneath it; a mount
is crossed to where it is mounted).

Rules are known by (st_dev, st_ino), read when Landlock took them (in sandlock's
process, on the host's tree); the rules of the trees the sandbox mounts anew (its /proc
and scratch directories, the copy-on-write workspace) are looked up in its namespace
the first time a call needs them, from the caller's root.
"""

from __future__ import annotations

import os
import stat
from _thread import allocate_lock

from ..kernel import RESOLVE_IN_ROOT, RESOLVE_NO_SYMLINKS, openat2

_O_PATH = os.O_PATH | os.O_CLOEXEC
_MAX_DEPTH = 4096  # deeper than any real tree: the walk stops, having found less


class Grants:
    def __init__(self, rules: dict[tuple[int, int], int], reanchored: tuple[tuple[str, int], ...]) -> None:
        """``rules``: (st_dev, st_ino) -> Landlock access of the rules sandlock added;
        ``reanchored``: (path, access) of those the sandbox's init adds again."""
        self._rules = dict(rules)
        self._reanchored = reanchored
        self._lock = allocate_lock()

    def access(self, file: int, root: int, wanted: int) -> int:
        """The rights granted on ``file`` (a descriptor) for a caller whose root is
        ``root``; the walk up stops once every right of ``wanted`` is found."""
        if self._reanchored:
            self._look_up_reanchored(root)
        info = os.fstat(file)
        granted = self._rules.get((info.st_dev, info.st_ino), 0)
        if granted & wanted == wanted:
            return granted
        if stat.S_ISDIR(info.st_mode):
            directory = os.dup(file)
        else:
            directory = _parent(file, info, root)
            if directory is None:  # no path leads to it (deleted...): its own rule only
                return granted
        return granted | self._above(directory, os.fstat(root), wanted & ~granted)

    def _above(self, directory: int, root: os.stat_result, wanted: int) -> int:
        """The rights of ``directory`` (closed here) and each directory above it, up
        to ``root`` or the top of a tree with nothing above it."""
        top = (root.st_dev, root.st_ino)
        granted = 0
        current = directory
        try:
            for _ in range(_MAX_DEPTH):
                info = os.fstat(current)
                key = (info.st_dev, info.st_ino)
                granted |= self._rules.get(key, 0)
                if granted & wanted == wanted or key == top:
                    break
                parent = os.open(b"..", _O_PATH | os.O_DIRECTORY, dir_fd=current)
                above = os.fstat(parent)
                os.close(current)
                current = parent
                if (above.st_dev, above.st_ino) == key:
                    break  # a tree's own root: ".." stays there
            return granted
        finally:
            os.close(current)

    def _look_up_reanchored(self, root: int) -> None:
        with self._lock:
            reanchored, self._reanchored = self._reanchored, ()
            for path, access in reanchored:
                try:
                    fd = openat2(root, os.fsencode(path), _O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)
                except OSError:
                    continue  # not in the sandbox's tree: nothing was granted there either
                try:
                    info = os.fstat(fd)
                finally:
                    os.close(fd)
                key = (info.st_dev, info.st_ino)
                self._rules[key] = self._rules.get(key, 0) | access


def _parent(file: int, info: os.stat_result, root: int) -> int | None:
    """An O_PATH descriptor on the directory ``file`` (not a directory) is in, found by
    its path (as the kernel names it, from the root of its mount namespace) and checked
    to hold that very file; None if that cannot be done."""
    if info.st_nlink == 0:
        return None
    try:
        path = os.readlink(f"/proc/self/fd/{file}".encode())
    except OSError:
        return None
    if not path.startswith(b"/"):
        return None  # a pipe, a socket, an anonymous inode
    head, _, name = path.rpartition(b"/")
    try:
        directory = openat2(root, head or b"/", _O_PATH | os.O_DIRECTORY,
                            RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)
    except OSError:
        return None
    try:
        there = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except OSError:
        there = None
    if there is None or (there.st_dev, there.st_ino) != (info.st_dev, info.st_ino):
        os.close(directory)
        return None
    return directory
