"""The two trees side by side: an overlayfs upper layer (userxattr mode) and the
directory it was mounted over, each difference handed to a hook (``_changes`` lists
them, ``_commit`` applies them).

The upper layer's format: a whiteout (character device 0:0) deletes the lower entry
of its name; a directory with ``user.overlay.opaque`` = ``y`` replaces the lower one
and hides its contents; any other entry is the new version of its path (a copy-up is
a full copy, even when nothing was written to it).

Both trees are reached only through directory descriptors (``_tree.Chain``), one name
at a time, never following a symlink, and the walk keeps its own stack: any depth,
any length of path, and a symlink in either tree can never lead it (or a commit's
writes) outside.
"""

from __future__ import annotations

import os
import stat

from ._tree import DIR_FLAGS, Chain, at, entries_of

OPAQUE = "user.overlay.opaque"
SETID = stat.S_ISUID | stat.S_ISGID
_CHUNK = 1 << 16  # content comparison reads this much of each file at a time


class Node:
    """One entry being compared: its upper directory (a descriptor) and name, its path
    relative to the top ("/"-separated, a directory's ending with "/"), its upper and
    target lstat (None: absent; no upper lstat for a target entry an opaque directory
    hides) and the target directory holding it (a descriptor; None: there is none).
    The descriptors are the walk's, valid while the hook runs."""

    __slots__ = ("uparent", "name", "path", "ust", "tst", "parent")

    def __init__(self, uparent: int, name: str, path: str, ust: os.stat_result | None,
                 tst: os.stat_result | None, parent: int | None) -> None:
        self.uparent, self.name, self.path = uparent, name, path
        self.ust, self.tst, self.parent = ust, tst, parent


class _Frame:
    """A directory being walked: its node (None: the top), change, whether the target
    has nothing there (``fresh``), its entries and the next one, its upper mode to
    restore once done (None: untouched)."""

    __slots__ = ("node", "change", "fresh", "entries", "next", "restore")

    def __init__(self, node: Node | None, change: object, fresh: bool,
                 entries: list[tuple[str, os.stat_result]], restore: int | None) -> None:
        self.node, self.change, self.fresh = node, change, fresh
        self.entries, self.next, self.restore = entries, 0, restore


def is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_special(st: os.stat_result) -> bool:
    """Neither a file, a directory nor a symlink: a fifo, socket or device."""
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode))


def is_opaque(directory: int) -> bool:
    try:
        return os.getxattr(directory, OPAQUE) == b"y"
    except OSError:  # ENODATA: not opaque
        return False


def lstat_at(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def path_of(rel: str, name: str, st: os.stat_result) -> str:
    return rel + name + "/" if stat.S_ISDIR(st.st_mode) else rel + name


def dir_mode(st: os.stat_result) -> int:
    """A directory's permission bits as the commit compares and applies them: set-id
    bits are the directory's own in the target (a set-group-id one comes from its
    parent), never the run's."""
    return stat.S_IMODE(st.st_mode) & ~SETID


class Walk:
    """Compares ``upper`` with ``target``; the hooks below are called for each
    difference (this class's do nothing but open what is walked)."""

    def __init__(self, upper: str, target: str | None) -> None:
        self.upper, self.target = upper, target  # (no target: every entry is new)
        self.where: str | None = None  # the path being looked at (for an error)

    def run(self) -> None:
        uchain = Chain(os.open(self.upper, DIR_FLAGS))
        try:
            tchain = Chain(None if self.target is None else os.open(self.target, DIR_FLAGS))
        except BaseException:
            uchain.close()
            raise
        self.uchain, self.tchain = uchain, tchain
        # the top's own attributes are sandlock's upper dir's, not the run's: not compared
        stack = [self._frame(None, None, False, "", False, None)]
        try:
            while stack:
                frame = stack[-1]
                if frame.next < len(frame.entries):
                    name, ust = frame.entries[frame.next]
                    frame.next += 1
                    inner = self._entry(frame, name, ust)
                    if inner is not None:
                        stack.append(inner)
                    continue
                stack.pop()
                if stack:
                    self._finish(frame)
        except BaseException:
            self._unwind(stack[1:])
            raise
        finally:
            uchain.close()
            tchain.close()

    def _frame(self, node: Node | None, change: object, fresh: bool, rel: str, opaque: bool,
               restore: int | None) -> _Frame:
        top = self.uchain.top
        assert top is not None
        entries = entries_of(top)
        if opaque and not fresh:
            self.hide({name for name, _ in entries}, rel)
        return _Frame(node, change, fresh, entries, restore)

    def _entry(self, frame: _Frame, name: str, ust: os.stat_result) -> _Frame | None:
        uparent, parent = self.uchain.top, self.tchain.top
        assert uparent is not None
        rel = "" if frame.node is None else frame.node.path
        tst = None if frame.fresh or parent is None else lstat_at(parent, name)
        node = Node(uparent, name, rel + name, ust, tst, parent)
        self.where = node.path
        if is_whiteout(ust):
            self.whiteout(node, rel)
        elif stat.S_ISDIR(ust.st_mode):
            return self._subdir(node)
        else:
            self.nondir(node)
        return None

    def _subdir(self, node: Node) -> _Frame:
        node.path += "/"
        ust, tst = node.ust, node.tst
        assert ust is not None
        if tst is None:
            change: object = self.change("A", node)
        elif not stat.S_ISDIR(tst.st_mode) or dir_mode(tst) != dir_mode(ust):
            change = self.change("M", node)  # a file or symlink (even to a directory) replaced
        else:
            change = None
        restore = None
        if ust.st_mode & 0o700 != 0o700:  # the run locked it: opened up, restored after
            os.chmod(node.name, stat.S_IMODE(ust.st_mode) | 0o700, dir_fd=node.uparent)
            restore = stat.S_IMODE(ust.st_mode)
        tdir, fresh = self.enter(node, change)
        try:
            self.uchain.push(os.open(node.name, DIR_FLAGS, dir_fd=node.uparent))
        except BaseException:
            if tdir is not None:
                os.close(tdir)
            raise
        self.tchain.push(tdir)
        try:
            opaque = not fresh and is_opaque(self.uchain.top)  # type: ignore[arg-type]
            return self._frame(node, change, fresh, node.path, opaque, restore)
        except BaseException:  # (not on the stack yet: _unwind would not see it)
            if restore is not None:
                os.fchmod(self.uchain.top, restore)  # type: ignore[arg-type]
            self.uchain.pop()
            self.tchain.pop()
            raise

    def _finish(self, frame: _Frame) -> None:
        """A directory whose entries are done: its hook, its upper mode, then up."""
        node = frame.node
        assert node is not None
        self.where = node.path
        self.uchain.reveal_parent()
        self.tchain.reveal_parent()
        node.uparent, node.parent = self.uchain.below, self.tchain.below  # type: ignore[assignment]
        try:
            self.leave(node, frame.change, self.tchain.top, frame.fresh)
        finally:
            if frame.restore is not None:
                os.fchmod(self.uchain.top, frame.restore)  # type: ignore[arg-type]
            self.uchain.pop()
            self.tchain.pop()

    def _unwind(self, frames: list[_Frame]) -> None:
        """After a failure: the upper directories opened up get their modes back."""
        for frame in reversed(frames):
            try:
                if frame.restore is not None:
                    os.fchmod(self.uchain.top, frame.restore)  # type: ignore[arg-type]
                self.uchain.pop()
            except OSError:
                return

    def upper_path(self, node: Node) -> str:
        """A path to the upper entry, for the calls that take no directory descriptor
        (xattrs): the layer's own when it is short (half the cost of one through
        /proc), else through its directory's descriptor. (The layer is the store's,
        private: no one swaps a name in it.)"""
        full = f"{self.upper}/{node.path}"
        return full if len(full) < 1000 else at(node.uparent, node.name)  # (< PATH_MAX bytes)

    def nondir(self, node: Node) -> None:
        if node.tst is not None and unchanged(node):
            self.discard(node)
        else:
            self.place(node, self.change("M" if node.tst is not None else "A", node))

    # The hooks: what to do with each difference.

    def change(self, kind: str, node: Node) -> object:
        """What a difference is called (``_changes.Change``)."""
        return kind

    def hide(self, kept: set[str], rel: str) -> None:
        """An opaque directory over a target directory: what the upper lacks is deleted."""
        tdir, udir = self.tchain.top, self.uchain.top
        assert tdir is not None and udir is not None
        with os.scandir(tdir) as listing:
            gone = [(entry.name, entry.stat(follow_symlinks=False)) for entry in listing
                    if entry.name not in kept]
        for name, tst in gone:  # (udir: where a whiteout would keep the deletion)
            node = Node(udir, name, path_of(rel, name, tst), None, tst, tdir)
            self.delete(node, self.change("D", node))

    def whiteout(self, node: Node, rel: str) -> None:
        if node.tst is None:
            self.discard(node)  # deleted something the target no longer has
        else:
            node.path = path_of(rel, node.name, node.tst)
            self.delete(node, self.change("D", node))

    def delete(self, node: Node, change: object) -> None:
        """A target entry to delete (a whiteout's, or one an opaque dir hides)."""

    def discard(self, node: Node) -> None:
        """An upper entry that changes nothing."""

    def place(self, node: Node, change: object) -> None:
        """A file, symlink or special file to put at its path."""

    def enter(self, node: Node, change: object) -> tuple[int | None, bool]:
        """A directory about to be walked: the target directory (a descriptor the walk
        then owns) its entries go in, and whether it is fresh (known empty)."""
        if node.tst is None or not stat.S_ISDIR(node.tst.st_mode):
            return None, True
        try:
            return os.open(node.name, DIR_FLAGS, dir_fd=node.parent), False
        except PermissionError:  # a directory of the target locked against its owner:
            return None, True    # what is beneath it is listed as new

    def leave(self, node: Node, change: object, tdir: int | None, fresh: bool) -> None:
        """A directory whose entries are done (``tdir``: its target directory)."""


def unchanged(node: Node) -> bool:
    """A copy-up that changed nothing: same type, mode, size and mtime (a touch is a
    change), then the same content or symlink target."""
    ust, tst = node.ust, node.tst
    assert ust is not None and tst is not None and node.parent is not None
    if (ust.st_mode != tst.st_mode or ust.st_size != tst.st_size
            or ust.st_mtime_ns != tst.st_mtime_ns):
        return False
    if stat.S_ISLNK(ust.st_mode):
        return os.readlink(node.name, dir_fd=node.uparent) == os.readlink(node.name, dir_fd=node.parent)
    if stat.S_ISREG(ust.st_mode):
        return _same_content(node)
    return True  # a fifo or socket has no content


def _same_content(node: Node) -> bool:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        theirs = os.open(node.name, flags, dir_fd=node.parent)
    except OSError:  # unreadable (or gone): count it changed, the commit will tell
        return False
    try:
        ours = os.open(node.name, flags, dir_fd=node.uparent)
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
