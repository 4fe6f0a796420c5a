"""Directory trees reached only through descriptors that never follow a symlink, at
any depth and with names of any total length: shared by the walk and the commit (a
target's trees) and the store (a workspace's own).

No full path is ever built: each directory is opened relative to its parent's
descriptor (a path longer than PATH_MAX is just a longer chain), and no walk recurses
(a tree 100,000 levels deep needs no deeper Python stack). A ``Chain`` holds the
descriptors of the directories between the top of a walk and where it is; past
``WINDOW`` levels the oldest are closed, and opened again through ``..`` of the one
below them when the walk comes back up, checked to be the same directory (device and
inode): a directory moved meanwhile stops the walk, it never leads it elsewhere.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
WINDOW = 32  # levels of a chain held open at once (two chains: ~64 descriptors)


def at(directory: int, name: str) -> str:
    """A short path naming ``name`` in ``directory`` (its last component is not
    followed by the *xattr calls that take follow_symlinks=False)."""
    return f"/proc/self/fd/{directory}/{name}"


def moved() -> OSError:
    return OSError(errno.ESTALE, "a directory was moved while sandlock worked in it")


class Chain:
    """The descriptors of nested directories, the first the top of the walk. A level
    may be None (no such directory: then every deeper one is None too). The chain
    owns its descriptors."""

    def __init__(self, top: int | None) -> None:
        self.fds: list[int | None] = []
        self.ids: list[tuple[int, int] | None] = []
        self.low = 0  # levels below it are closed for now
        self.real = 0  # levels that are directories (below the first None)
        self.push(top)

    @property
    def top(self) -> int | None:
        return self.fds[-1]

    @property
    def below(self) -> int | None:
        """The level under the top (``reveal_parent`` first: it may be closed)."""
        return self.fds[-2]

    def push(self, fd: int | None) -> None:
        if fd is None:
            self.fds.append(None)
            self.ids.append(None)
            return
        assert self.real == len(self.fds), "a directory inside a missing one"
        st = os.fstat(fd)
        self.fds.append(fd)
        self.ids.append((st.st_dev, st.st_ino))
        self.real += 1
        if self.real - self.low > WINDOW:
            os.close(self.fds[self.low])  # type: ignore[arg-type]
            self.fds[self.low] = -1
            self.low += 1

    def reveal_parent(self) -> None:
        """The level under the top opened again if it was closed (through ``..``)."""
        level = len(self.fds) - 2
        if level < 0 or level >= self.low:
            return
        child = self.fds[-1]
        assert child is not None and child >= 0
        fd = os.open("..", DIR_FLAGS, dir_fd=child)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.ids[level]:
            os.close(fd)
            raise moved()
        self.fds[level] = fd
        self.low = level

    def pop(self) -> None:
        self.reveal_parent()
        fd = self.fds.pop()
        self.ids.pop()
        if fd is not None:
            self.real -= 1
            os.close(fd)

    def close(self) -> None:
        for fd in self.fds:
            if fd is not None and fd >= 0:
                os.close(fd)
        self.fds.clear()
        self.ids.clear()


def open_directory(parent: int, name: str, need: int = 0) -> int:
    """The directory ``name`` of ``parent``, given the owner ``need`` bits (0o700:
    to list it and change its entries) if it lacks them: overlayfs leaves its work
    directory mode 000, a run may lock one of its own, a Go module cache is
    read-only. Never through a symlink, not even for the chmod."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        if not need:
            raise
        held = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{held}", stat.S_IMODE(os.fstat(held).st_mode) | need)
            return os.open(f"/proc/self/fd/{held}", DIR_FLAGS & ~os.O_NOFOLLOW)
        finally:
            os.close(held)
    if need:
        mode = os.fstat(fd).st_mode
        if mode & need != need:
            os.fchmod(fd, stat.S_IMODE(mode) | need)
    return fd


def open_parent(root: int, path: str) -> tuple[int, str]:
    """The directory holding ``path`` ("/"-separated, relative to ``root``) as an
    O_PATH descriptor reached one name at a time without following a symlink (a
    path of any length), and the last name."""
    *names, last = path.rstrip("/").split("/")
    fd = os.dup(root)
    try:
        for name in names:
            inner = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd, last


def _listing(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as listing:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]


def remove_tree(parent: int, name: str) -> None:
    """Delete a directory and all under it, never through a symlink."""
    chain = Chain(open_directory(parent, name, 0o700))
    pending = [_listing(chain.top)]  # type: ignore[arg-type]
    names = [name]
    try:
        while pending:
            entries = pending[-1]
            if entries:
                child, is_dir = entries.pop()
                top = chain.top
                assert top is not None
                if is_dir:
                    chain.push(open_directory(top, child, 0o700))
                    pending.append(_listing(chain.top))  # type: ignore[arg-type]
                    names.append(child)
                else:
                    os.unlink(child, dir_fd=top)
                continue
            pending.pop()
            done = names.pop()
            if pending:
                chain.reveal_parent()
                os.rmdir(done, dir_fd=chain.below)
                chain.pop()
    finally:
        chain.close()
    os.rmdir(name, dir_fd=parent)


def each_below(top: int, visit: Callable[[os.stat_result], bool]) -> bool:
    """``visit(lstat)`` for every entry beneath the directory ``top`` (a descriptor
    this takes and closes), until it returns True (then True)."""
    chain = Chain(top)
    try:
        pending = [entries_of(top)]
        while pending:
            entries = pending[-1]
            if not entries:
                pending.pop()
                if pending:
                    chain.pop()
                continue
            name, st = entries.pop()
            if visit(st):
                return True
            if stat.S_ISDIR(st.st_mode):
                inner = os.open(name, DIR_FLAGS, dir_fd=chain.top)
                chain.push(inner)
                pending.append(entries_of(inner))
    finally:
        chain.close()
    return False


def entries_of(fd: int) -> list[tuple[str, os.stat_result]]:
    """The entries of a directory with their lstat (taken at once: a descriptor of
    the walk may be closed and opened again as another number before they are used)."""
    with os.scandir(fd) as listing:
        return [(entry.name, entry.stat(follow_symlinks=False)) for entry in listing]
