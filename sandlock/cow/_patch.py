"""`sandlock workspace diff --patch`: a unified diff (``diff -uN``) per changed file.

Both sides are opened here, one name at a time and never following a symlink, and
handed to diff as ``/dev/fd/N``: a path of any length works, a symlink the run made
shows as its target (diff would read what it points to), and a fifo is never
opened (diff would wait on it forever).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from ._changes import escape, special_note
from ._tree import DIR_FLAGS, open_parent

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._changes import Change

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def print_patch(upper: str, directory: str, found: Iterable[Change]) -> None:
    sys.stdout.flush()
    uroot = os.open(upper, DIR_FLAGS)
    try:
        troot = os.open(directory, DIR_FLAGS)
        try:
            for change in found:
                if not change.path.endswith("/"):  # a directory's files have lines of their own
                    _one(change, troot, uroot)
        finally:
            os.close(troot)
    finally:
        os.close(uroot)


def _one(change: Change, troot: int, uroot: int) -> None:
    label = escape(change.path)
    before = None if change.kind == "A" else _side(troot, change.path)
    after = None if change.kind == "D" else _side(uroot, change.path)
    held = [fd for fd in (before, after) if fd is not None]
    # An added file comes from /dev/null, a deleted one goes to it (as git and patch(1)
    # write them): named a/PATH, patch would look for a file to change.
    try:
        subprocess.run(["diff", "-uN", "--label", os.devnull if change.kind == "A" else f"a/{label}",
                        "--label", os.devnull if change.kind == "D" else f"b/{label}",
                        _name(before), _name(after)], pass_fds=held, check=False)
    finally:
        for fd in held:
            os.close(fd)


def _name(fd: int | None) -> str:
    return os.devnull if fd is None else f"/dev/fd/{fd}"


def _side(root: int, path: str) -> int | None:
    """What diff reads for ``path`` under ``root``: a regular file's descriptor, else
    a line saying what is there ("symbolic link to ..."); None: nothing there."""
    try:
        parent, name = open_parent(root, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return _text(f"symbolic link to {escape(os.readlink(name, dir_fd=parent))}\n")
        if not stat.S_ISREG(st.st_mode):
            return _text("a directory\n" if stat.S_ISDIR(st.st_mode) else f"{special_note(st)}\n")
        try:
            fd = os.open(name, _READ, dir_fd=parent)
        except OSError as exc:
            return _text(f"(unreadable: {exc.strerror})\n")
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)  # (swapped meanwhile)
        return _text("(not a regular file)\n")
    finally:
        os.close(parent)


def _text(line: str) -> int:
    fd = os.memfd_create("sandlock-diff", os.MFD_CLOEXEC)
    os.write(fd, line.encode())
    return fd
