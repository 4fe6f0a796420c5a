"""What an overlayfs upper layer (userxattr mode) changes in the directory it was
mounted over: A added, M modified, D deleted, one line per path.

The upper layer's format: a whiteout (character device 0:0) deletes the lower entry
of its name; a directory with ``user.overlay.opaque`` = ``y`` replaces the lower one
and hides its contents; any other entry is the new version of its path (a copy-up is
a full copy, even when nothing was written to it). ``Walk`` compares the layer with
the directory, the two trees side by side, and hands each difference to a hook: here
the hooks only record, ``_commit`` overrides them to apply. Symlinks are never
followed in either tree: a target directory is entered only through a file
descriptor opened with O_NOFOLLOW, so a symlink in the directory can never lead the
walk (or a commit's writes) outside it.
"""

from __future__ import annotations

import os
import stat

from .._record import record
from ._tree import DIR_FLAGS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

OPAQUE = "user.overlay.opaque"
_CHUNK = 1 << 16  # content comparison reads this much of each file at a time
_UNITS = "KMGTPE"


@record
class Change:
    """``kind``: "A" added, "M" modified (content, type, mode or symlink target), "D"
    deleted; ``path``: relative to the directory, "/"-separated, a directory's ending
    with "/"; ``size``: the new size of a file (of a symlink: its target's length),
    None for a deletion or a directory."""

    kind: str
    path: str
    size: int | None = None


class Node:
    """One entry being compared: its upper path, its name, its change path, its upper
    and target lstat (None: absent; no upper lstat for a target entry an opaque
    directory hides) and the target directory holding it (an fd; None: there is none)."""

    __slots__ = ("upath", "name", "path", "ust", "tst", "parent")

    def __init__(self, upath: str, name: str, path: str, ust: os.stat_result | None,
                 tst: os.stat_result | None, parent: int | None) -> None:
        self.upath, self.name, self.path = upath, name, path
        self.ust, self.tst, self.parent = ust, tst, parent


def is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:  # ENODATA: not opaque
        return False


def lstat_at(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def path_of(rel: str, name: str, st: os.stat_result) -> str:
    return rel + name + "/" if stat.S_ISDIR(st.st_mode) else rel + name


class Walk:
    """Compares ``upper`` with ``target``; each hook gets the entry (a ``Node``) and
    its ``Change``. The hooks of this class record the changes in ``found``."""

    def __init__(self, upper: str, target: str) -> None:
        self.upper, self.target = upper, target
        self.found: list[Change] = []

    def run(self) -> None:
        root = os.open(self.target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:  # the root's own attributes are sandlock's upper dir's, not the run's: not compared
            self.walk(self.upper, root, False, "", False)
        finally:
            os.close(root)

    def walk(self, updir: str, tdir: int | None, fresh: bool, rel: str, opaque: bool) -> None:
        """``updir`` against target directory ``tdir``; ``fresh``: the target has
        nothing there (a new or replaced directory), so no lookup is needed."""
        with os.scandir(updir) as listing:
            entries = list(listing)
        if opaque and not fresh:
            self.hide(updir, tdir, {entry.name for entry in entries}, rel)
        for entry in entries:
            ust = entry.stat(follow_symlinks=False)
            tst = None if fresh or tdir is None else lstat_at(tdir, entry.name)
            node = Node(entry.path, entry.name, rel + entry.name, ust, tst, tdir)
            if is_whiteout(ust):
                self.whiteout(node, rel)
            elif stat.S_ISDIR(ust.st_mode):
                self.subdir(node)
            else:
                self.nondir(node)

    def hide(self, updir: str, tdir: int | None, kept: set[str], rel: str) -> None:
        """An opaque directory over a target directory: what the upper lacks is deleted."""
        with os.scandir(tdir) as listing:
            gone = [(entry.name, entry.stat(follow_symlinks=False)) for entry in listing
                    if entry.name not in kept]
        for name, tst in gone:
            # upath: where a whiteout would keep the deletion, should it conflict
            node = Node(os.path.join(updir, name), name, path_of(rel, name, tst), None, tst, tdir)
            self.delete(node, Change("D", node.path))

    def whiteout(self, node: Node, rel: str) -> None:
        if node.tst is None:
            self.discard(node)  # deleted something the target no longer has
        else:
            node.path = path_of(rel, node.name, node.tst)
            self.delete(node, Change("D", node.path))

    def subdir(self, node: Node) -> None:
        node.path += "/"
        ust, tst = node.ust, node.tst
        assert ust is not None
        if tst is None:
            change: Change | None = Change("A", node.path)
        elif not stat.S_ISDIR(tst.st_mode):  # a file or symlink (even to a directory) replaced
            change = Change("M", node.path)
        elif stat.S_IMODE(tst.st_mode) != stat.S_IMODE(ust.st_mode):
            change = Change("M", node.path)
        else:
            change = None
        restore = _let_in(node.upath, ust)
        try:
            tdir, fresh = self.enter(node, change)
            try:
                self.walk(node.upath, tdir, fresh, node.path, not fresh and is_opaque(node.upath))
            except BaseException:
                if tdir is not None:  # no settling a directory half done
                    os.close(tdir)
                raise
            self.leave(node, change, tdir, fresh)
        finally:
            if restore:
                _chmod_if_there(node.upath, stat.S_IMODE(ust.st_mode))

    def nondir(self, node: Node) -> None:
        assert node.ust is not None
        size = node.ust.st_size
        if node.tst is None:
            self.place(node, Change("A", node.path, size))
        elif unchanged(node):
            self.discard(node)
        else:
            self.place(node, Change("M", node.path, size))

    # The hooks: what to do with each difference.

    def delete(self, node: Node, change: Change) -> None:
        """A target entry to delete (a whiteout's, or one an opaque dir hides)."""
        self.found.append(change)

    def discard(self, node: Node) -> None:
        """An upper entry that changes nothing."""

    def place(self, node: Node, change: Change) -> None:
        """A file, symlink or special file to put at its path."""
        self.found.append(change)

    def enter(self, node: Node, change: Change | None) -> tuple[int | None, bool]:
        """A directory about to be walked: the target directory fd its entries go in,
        and whether that directory is fresh (known empty)."""
        if change is not None:
            self.found.append(change)
        if node.tst is None or not stat.S_ISDIR(node.tst.st_mode):
            return None, True
        return os.open(node.name, DIR_FLAGS, dir_fd=node.parent), False

    def leave(self, node: Node, change: Change | None, tdir: int | None, fresh: bool) -> None:
        """A directory whose entries are done."""
        if tdir is not None:
            os.close(tdir)


def _let_in(upath: str, ust: os.stat_result) -> bool:
    """Whether an upper directory the run made unreadable or unwritable for its owner
    had to be opened up to be walked and emptied (its mode is restored after)."""
    if ust.st_mode & 0o700 == 0o700:
        return False
    os.chmod(upath, stat.S_IMODE(ust.st_mode) | 0o700)
    return True


def _chmod_if_there(path: str, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except FileNotFoundError:  # committed and removed
        pass


def unchanged(node: Node) -> bool:
    """A copy-up that changed nothing: same type, mode, size and mtime (a touch is a
    change), then the same content or symlink target."""
    ust, tst = node.ust, node.tst
    assert ust is not None and tst is not None and node.parent is not None
    if (ust.st_mode != tst.st_mode or ust.st_size != tst.st_size
            or ust.st_mtime_ns != tst.st_mtime_ns):
        return False
    if stat.S_ISLNK(ust.st_mode):
        return os.readlink(node.upath) == os.readlink(node.name, dir_fd=node.parent)
    if stat.S_ISREG(ust.st_mode):
        return _same_content(node.upath, node.name, node.parent)
    return True  # a fifo or socket has no content


def _same_content(upath: str, name: str, parent: int) -> bool:
    try:
        theirs = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError:  # unreadable (or gone): count it changed, the commit will tell
        return False
    try:
        ours = os.open(upath, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            while True:
                a, b = os.read(ours, _CHUNK), os.read(theirs, _CHUNK)
                if a != b:
                    return False
                if not a:
                    return True
        finally:
            os.close(ours)
    finally:
        os.close(theirs)


def changes(upper: str, target: str) -> list[Change]:
    """What applying ``upper`` to ``target`` would change, sorted by path."""
    walk = Walk(upper, target)
    walk.run()
    return sorted(walk.found, key=lambda change: change.path)


def human_size(size: int | None) -> str:
    """512, 1.2K, 3.4M, 1.0G; "-" for none."""
    if size is None:
        return "-"
    if size < 1024:
        return str(size)
    value = float(size)
    for unit in _UNITS:
        value /= 1024
        if round(value, 1) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")


def format_changes(changes: Iterable[Change]) -> list[str]:
    """One line per change: kind, size right-aligned, path ("A     1.2K src/new.c")."""
    return [f"{change.kind} {human_size(change.size):>8} {change.path}" for change in changes]
