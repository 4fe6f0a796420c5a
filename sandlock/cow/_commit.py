"""Applying an upper layer to its directory: the changes ``_changes`` finds, each
applied where it is found, file by file, atomically (a rename over the path), and
what changed in the directory since the run began left aside as a conflict.

What is applied leaves the upper layer (moved out, or deleted once copied); what is
left (conflicts, with the directories that lead to them) is still a valid upper
layer for the directory as it now is: ``changes`` of it lists just the conflicts,
and after a commit that failed part-way, just what it had not applied.
The target is only ever reached through directory descriptors, one name at a time
and never following a symlink, so a symlink in it (even one swapped in while the
commit runs) is replaced, never written through.

Nothing the commit writes runs with more than its caller's rights: set-id bits and
file capabilities are dropped, fifos, sockets and devices are left out.
"""

from __future__ import annotations

import errno
import os
import stat

from .._record import record
from ._changes import DROPPED, Change, Listing, escape, shorten
from ._copy import Links, copy_file, copy_xattrs
from ._tree import DIR_FLAGS, each_below, open_directory, remove_tree
from ._walk import OPAQUE, SETID, Node, dir_mode, is_special

_OVERLAY_XATTRS = "user.overlay."  # the layer's bookkeeping: never into the directory
_CAPABILITIES = "security.capability"


@record
class CommitReport:
    """``applied``: the changes made; ``conflicts``: those not made because the
    directory changed there since the run began (they stay in the upper layer);
    ``left_out``: special files (fifos, sockets, devices), never committed;
    ``error``: why the commit stopped part-way ("path: reason"), None if it did not
    (what it had not applied stays in the upper layer)."""

    applied: tuple[Change, ...] = ()
    conflicts: tuple[Change, ...] = ()
    left_out: tuple[Change, ...] = ()
    error: str | None = None


def commit(upper: str, target: str, since_ns: int, *, force: bool = False) -> CommitReport:
    """Apply ``upper`` to ``target``. ``since_ns``: when the run began, as a ctime
    (the filesystem's clock is coarse: take it a few ms early); an entry of the
    target with a ctime from then on is a conflict, unless ``force``."""
    run = Commit(upper, target, since_ns, force)
    error = None
    try:
        run.run()
    except OSError as exc:
        where = target if run.where is None else run.where
        error = f"{shorten(escape(where))}: {exc.strerror or exc}"
    return CommitReport(tuple(sorted(run.found, key=_by_path)),
                        tuple(sorted(run.conflicts, key=_by_path)),
                        tuple(sorted(run.left_out, key=_by_path)), error)


def _by_path(change: Change) -> str:
    return change.path


def _committed(name: str) -> bool:
    """An xattr a copy takes into the directory: not the layer's, no capabilities."""
    return not name.startswith(_OVERLAY_XATTRS) and name != _CAPABILITIES


class Commit(Listing):
    """The walk's hooks, applying. In the target, a parent of None means "not to be
    touched": the directory being walked is a conflict and stays in the upper."""

    def __init__(self, upper: str, target: str, since_ns: int, force: bool) -> None:
        super().__init__(upper, target)
        self.since_ns, self.force = since_ns, force
        self.conflicts: list[Change] = []
        self.left_out: list[Change] = []

    def run(self) -> None:
        root = os.open(self.target, DIR_FLAGS)
        try:
            # renaming is atomic and cheap; across filesystems a copy is renamed into place
            self.dev = os.fstat(root).st_dev
            self.same_fs = os.stat(self.upper).st_dev == self.dev
            self.links = Links(root)
            super().run()
        finally:
            os.close(root)
        self.where = None

    def changed_since(self, node: Node, below: bool) -> bool:
        """Whether the target changed at ``node`` since the run began (``below``: or
        anywhere under the directory there, which the change would delete). A mount
        of another filesystem there, which the run never saw, is never deleted: that
        is a conflict even with ``force``."""
        tst = node.tst
        if tst is None:
            return False
        if below and tst.st_dev != self.dev:
            return True
        if not self.force and tst.st_ctime_ns >= self.since_ns:
            return True
        if not below or not stat.S_ISDIR(tst.st_mode):
            return False
        since_ns, dev = None if self.force else self.since_ns, self.dev
        return each_below(os.open(node.name, DIR_FLAGS, dir_fd=node.parent), lambda st: (
            st.st_dev != dev or (since_ns is not None and st.st_ctime_ns >= since_ns)))

    def delete(self, node: Node, change: object) -> None:
        assert node.parent is not None and isinstance(change, Change)
        self.where = node.path
        if self.changed_since(node, True):
            self.conflicts.append(change)
            if node.ust is None:  # hidden by an opaque dir, which will not stay opaque
                os.mknod(node.name, stat.S_IFCHR, os.makedev(0, 0), dir_fd=node.uparent)
            return
        _remove(node.parent, node.name, node.tst)
        if node.ust is not None:
            os.unlink(node.name, dir_fd=node.uparent)  # the whiteout
        self.found.append(change)

    def discard(self, node: Node) -> None:
        if node.parent is not None:  # else it is part of a conflict, which stays whole
            os.unlink(node.name, dir_fd=node.uparent)

    def place(self, node: Node, change: object) -> None:
        assert node.ust is not None and isinstance(change, Change)
        if node.parent is None or self.changed_since(node, True):
            self.conflicts.append(change)
            return
        if is_special(node.ust):  # nothing to run a program with: left out, said so
            os.unlink(node.name, dir_fd=node.uparent)
            self.left_out.append(change)
            return
        if node.tst is not None and stat.S_ISDIR(node.tst.st_mode):
            remove_tree(node.parent, node.name)
        if self.put(node) and change.note is None:
            change = change.replace(note=DROPPED)
        self.found.append(change)

    def put(self, node: Node) -> bool:
        """The upper entry onto its target path, atomically; whether it had file
        capabilities (left behind)."""
        ust, uparent, parent = node.ust, node.uparent, node.parent
        assert ust is not None and parent is not None
        capable = False
        if stat.S_ISREG(ust.st_mode):  # (only files and dirs carry user xattrs)
            capable = _ready(node, self.upper_path(node))
        if self.same_fs and not capable:
            try:
                os.rename(node.name, node.name, src_dir_fd=uparent, dst_dir_fd=parent)
                return capable
            except OSError as e:
                if e.errno != errno.EXDEV:  # a mount point inside the directory: copy
                    raise
        self.copy_in(node)
        os.unlink(node.name, dir_fd=uparent)
        return capable

    def copy_in(self, node: Node) -> None:
        """Across filesystems: a copy beside the target path, then renamed over it."""
        assert node.ust is not None and node.parent is not None
        for _ in range(10):
            temp = _temp_name(node.name)
            try:
                self.make_copy(node, temp)
                break
            except FileExistsError:
                continue
            except BaseException:
                _unlink_quietly(temp, node.parent)
                raise
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name", node.name)
        try:
            os.rename(temp, node.name, src_dir_fd=node.parent, dst_dir_fd=node.parent)
        except BaseException:
            _unlink_quietly(temp, node.parent)
            raise

    def make_copy(self, node: Node, temp: str) -> None:
        ust, parent = node.ust, node.parent
        assert ust is not None and parent is not None
        if stat.S_ISLNK(ust.st_mode):
            os.symlink(os.readlink(node.name, dir_fd=node.uparent), temp, dir_fd=parent)
            os.utime(temp, ns=(ust.st_atime_ns, ust.st_mtime_ns), dir_fd=parent,
                     follow_symlinks=False)
        elif not self.links.link(ust, parent, temp):  # another name of a file copied already
            ino = copy_file(node.uparent, node.name, parent, temp,
                            stat.S_IMODE(ust.st_mode) & ~SETID, _committed)
            self.links.note(ust, node.path, ino)

    def enter(self, node: Node, change: object) -> tuple[int | None, bool]:
        tst, parent = node.tst, node.parent
        if parent is None:  # inside a conflict
            if change is not None:
                self.conflicts.append(change)  # type: ignore[arg-type]
            return None, True
        if tst is None or not stat.S_ISDIR(tst.st_mode):
            assert change is not None  # a new directory, or one replacing a file or symlink
            if tst is not None:
                if self.changed_since(node, True):
                    self.conflicts.append(change)  # type: ignore[arg-type]
                    return None, True
                os.unlink(node.name, dir_fd=parent)
            self.found.append(change)  # type: ignore[arg-type]
            os.mkdir(node.name, 0o700, dir_fd=parent)  # (owner-only until leave() gives its mode)
            return os.open(node.name, DIR_FLAGS, dir_fd=parent), True
        # a read-only directory is opened up to let the entries in; leave() sets its mode
        return open_directory(parent, node.name, 0o700), False

    def leave(self, node: Node, change: object, tdir: int | None, fresh: bool) -> None:
        if tdir is None:  # a conflict: stays in the upper as it is
            return
        kept = self.settle_new(node, tdir) if fresh else self.settle(node, change, tdir)
        if (kept or not _removed(node)) and not fresh:
            _not_opaque(self.uchain.top)  # type: ignore[arg-type]

    def settle_new(self, node: Node, tdir: int) -> bool:
        """A directory made by the commit gets the upper's xattrs, mode and times,
        once its entries are in (they would change its mtime); a set-group-id bit only
        as mkdir gave it (from its parent)."""
        ust = node.ust
        assert ust is not None
        copy_xattrs(self.uchain.top, tdir, _committed)  # type: ignore[arg-type]
        os.fchmod(tdir, dir_mode(ust) | (os.fstat(tdir).st_mode & stat.S_ISGID))
        os.utime(tdir, ns=(ust.st_atime_ns, ust.st_mtime_ns))
        return False

    def settle(self, node: Node, change: object, tdir: int) -> bool:
        """A directory that was there: its new mode (unless that is a conflict; its
        set-id bits stay its own) and mtime (unless it changed meanwhile); whether the
        upper must keep it."""
        ust, tst = node.ust, node.tst
        assert ust is not None and tst is not None
        changed = self.changed_since(node, False)
        mode = stat.S_IMODE(tst.st_mode)
        if change is not None and changed:
            self.conflicts.append(change)  # type: ignore[arg-type]
        elif change is not None:
            mode = dir_mode(ust) | (mode & SETID)
            self.found.append(change)  # type: ignore[arg-type]
        if mode != stat.S_IMODE(tst.st_mode) or tst.st_mode & 0o700 != 0o700:
            os.fchmod(tdir, mode)
        if not changed:
            os.utime(tdir, ns=(ust.st_atime_ns, ust.st_mtime_ns))
        return change is not None and changed


def _ready(node: Node, path: str) -> bool:
    """An upper file (``path``: ``Walk.upper_path``) made fit to be moved into the
    directory as it is (the layer is private to the store): its overlayfs xattrs and
    set-id bits taken off. Whether it holds file capabilities, which only a copy
    leaves behind."""
    ust = node.ust
    assert ust is not None
    names = os.listxattr(path, follow_symlinks=False)
    for name in names:
        if name.startswith(_OVERLAY_XATTRS):
            os.removexattr(path, name, follow_symlinks=False)
    if ust.st_mode & SETID:
        os.chmod(node.name, stat.S_IMODE(ust.st_mode) & ~SETID, dir_fd=node.uparent)
    return _CAPABILITIES in names


def _remove(parent: int, name: str, tst: os.stat_result | None) -> None:
    if tst is not None and stat.S_ISDIR(tst.st_mode):
        remove_tree(parent, name)
    else:
        os.unlink(name, dir_fd=parent)


def _removed(node: Node) -> bool:
    """Whether an upper directory was empty (all applied) and is now gone."""
    try:
        os.rmdir(node.name, dir_fd=node.uparent)
        return True
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # conflicts left in it
            raise
        return False


def _not_opaque(directory: int) -> None:
    """An opaque upper dir left for its conflicts hides no more than they do: what it
    hid is deleted or whited out, and what it brought is now in the target."""
    try:
        os.removexattr(directory, OPAQUE)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise


def _temp_name(name: str) -> str:
    return f".{name[:40]}.sandlock-{os.urandom(4).hex()}"  # short: names are <= 255 bytes


def _unlink_quietly(name: str, parent: int) -> None:
    try:
        os.unlink(name, dir_fd=parent)
    except OSError:
        pass
