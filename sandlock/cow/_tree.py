"""Directory trees reached only through descriptors that never follow a symlink:
shared by the commit (a target's trees) and the store (a workspace's own)."""

from __future__ import annotations

import os
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(parent: int, name: str) -> None:
    """Delete a directory and all under it, never through a symlink."""
    fd = open_directory(parent, name)
    try:
        if os.fstat(fd).st_mode & 0o300 != 0o300:  # read-only (a Go module cache): open it up
            os.fchmod(fd, 0o700)
        with os.scandir(fd) as listing:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
        for child, is_dir in entries:
            if is_dir:
                remove_tree(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def open_directory(parent: int, name: str) -> int:
    """The directory ``name`` of ``parent``, made searchable if it was not (overlayfs
    leaves its work directory mode 000; a run may have locked one of its own)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise
        os.chmod(name, 0o700, dir_fd=parent)
        return os.open(name, DIR_FLAGS, dir_fd=parent)
