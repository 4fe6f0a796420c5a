"""Applying an upper layer to its directory: the changes ``_changes`` finds, each
applied where it is found, file by file, atomically (a rename over the path), and
what changed in the directory since the run began left aside as a conflict.

What is applied leaves the upper layer (moved out, or deleted once copied); what is
left (conflicts, with the directories that lead to them) is still a valid upper
layer for the directory as it now is: ``changes`` of it lists just the conflicts.
The target is only ever reached through directory fds opened with O_NOFOLLOW, so a
symlink in it is replaced, never written through.
"""

from __future__ import annotations

import errno
import os
import stat

from .._record import record
from ._changes import OPAQUE, Change, Node, Walk
from ._tree import DIR_FLAGS, remove_tree

_OVERLAY_XATTRS = "user.overlay."  # the layer's bookkeeping: never into the directory
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20


@record
class CommitReport:
    """``applied``: the changes made; ``conflicts``: those not made because the
    directory changed there since the run began (they stay in the upper layer)."""

    applied: tuple[Change, ...] = ()
    conflicts: tuple[Change, ...] = ()


def commit(upper: str, target: str, since_ns: int, *, force: bool = False) -> CommitReport:
    """Apply ``upper`` to ``target``. ``since_ns``: when the run began, as a ctime
    (the filesystem's clock is coarse: take it a few ms early); an entry of the
    target with a ctime from then on is a conflict, unless ``force``."""
    run = Commit(upper, target, since_ns, force)
    run.run()
    return CommitReport(tuple(sorted(run.found, key=_by_path)),
                        tuple(sorted(run.conflicts, key=_by_path)))


def _by_path(change: Change) -> str:
    return change.path


class Commit(Walk):
    """The walk's hooks, applying. In the target, ``tdir`` None means "not to be
    touched": the directory being walked is a conflict and stays in the upper."""

    def __init__(self, upper: str, target: str, since_ns: int, force: bool) -> None:
        super().__init__(upper, target)
        self.since_ns, self.force = since_ns, force
        self.conflicts: list[Change] = []
        # renaming is atomic and cheap; across filesystems a copy is renamed into place
        self.dev = os.stat(target).st_dev
        self.same_fs = os.stat(upper).st_dev == self.dev

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
        since_ns = None if self.force else self.since_ns
        return below and stat.S_ISDIR(tst.st_mode) and _changed_below(node, since_ns, self.dev)

    def delete(self, node: Node, change: Change) -> None:
        assert node.parent is not None
        if self.changed_since(node, True):
            self.conflicts.append(change)
            if node.ust is None:  # hidden by an opaque dir, which will not stay opaque
                os.mknod(node.upath, stat.S_IFCHR, os.makedev(0, 0))
            return
        _remove(node.parent, node.name, node.tst)
        if node.ust is not None:
            os.unlink(node.upath)  # the whiteout
        self.found.append(change)

    def discard(self, node: Node) -> None:
        if node.parent is not None:  # else it is part of a conflict, which stays whole
            os.unlink(node.upath)

    def place(self, node: Node, change: Change) -> None:
        if node.parent is None or self.changed_since(node, True):
            self.conflicts.append(change)
            return
        if node.tst is not None and stat.S_ISDIR(node.tst.st_mode):
            remove_tree(node.parent, node.name)
        self.put(node)
        self.found.append(change)

    def put(self, node: Node) -> None:
        """The upper entry onto its target path, atomically."""
        assert node.ust is not None and node.parent is not None
        if self.same_fs:
            if stat.S_ISREG(node.ust.st_mode):  # only files and dirs carry user xattrs
                _strip(node.upath)
            try:
                os.rename(node.upath, node.name, dst_dir_fd=node.parent)
                return
            except OSError as e:
                if e.errno != errno.EXDEV:  # a mount point inside the directory: copy
                    raise
        _copy_in(node)
        os.unlink(node.upath)

    def enter(self, node: Node, change: Change | None) -> tuple[int | None, bool]:
        tst, parent = node.tst, node.parent
        if parent is None:  # inside a conflict
            if change is not None:
                self.conflicts.append(change)
            return None, True
        if tst is None or not stat.S_ISDIR(tst.st_mode):
            assert change is not None  # a new directory, or one replacing a file or symlink
            if tst is not None:
                if self.changed_since(node, True):
                    self.conflicts.append(change)
                    return None, True
                os.unlink(node.name, dir_fd=parent)
            self.found.append(change)
            return _make_dir(parent, node.name), True
        tdir = os.open(node.name, DIR_FLAGS, dir_fd=parent)
        if tst.st_mode & 0o300 != 0o300:  # read-only: let the entries in, leave() sets the mode
            os.fchmod(tdir, stat.S_IMODE(tst.st_mode) | 0o300)
        return tdir, False

    def leave(self, node: Node, change: Change | None, tdir: int | None, fresh: bool) -> None:
        if tdir is None:  # a conflict: stays in the upper as it is
            return
        try:
            kept = self.settle_new(node, tdir) if fresh else self.settle(node, change, tdir)
        finally:
            os.close(tdir)
        if (kept or not _removed(node.upath)) and not fresh:
            _not_opaque(node.upath)

    def settle_new(self, node: Node, tdir: int) -> bool:
        """A directory made by the commit gets the upper's xattrs, mode and times,
        once its entries are in (they would change its mtime)."""
        ust = node.ust
        assert ust is not None
        _copy_xattrs(node.upath, tdir)
        os.fchmod(tdir, stat.S_IMODE(ust.st_mode))
        os.utime(tdir, ns=(ust.st_atime_ns, ust.st_mtime_ns))
        return False

    def settle(self, node: Node, change: Change | None, tdir: int) -> bool:
        """A directory that was there: its new mode (unless that is a conflict) and
        mtime (unless it changed meanwhile); whether the upper must keep it."""
        ust, tst = node.ust, node.tst
        assert ust is not None and tst is not None
        changed = self.changed_since(node, False)
        mode = stat.S_IMODE(tst.st_mode)
        if change is not None and changed:
            self.conflicts.append(change)
        elif change is not None:
            mode = stat.S_IMODE(ust.st_mode)
            self.found.append(change)
        if mode != stat.S_IMODE(tst.st_mode) or tst.st_mode & 0o300 != 0o300:
            os.fchmod(tdir, mode)
        if not changed:
            os.utime(tdir, ns=(ust.st_atime_ns, ust.st_mtime_ns))
        return change is not None and changed


def _changed_below(node: Node, since_ns: int | None, dev: int) -> bool:
    """Whether anything under a target directory has a ctime from ``since_ns`` on
    (None: whatever its ctime) or is on another filesystem than ``dev``."""
    fd = os.open(node.name, DIR_FLAGS, dir_fd=node.parent)
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                st = entry.stat(follow_symlinks=False)
                if st.st_dev != dev or (since_ns is not None and st.st_ctime_ns >= since_ns):
                    return True
                if stat.S_ISDIR(st.st_mode) and _changed_below(
                        Node("", entry.name, "", None, st, fd), since_ns, dev):
                    return True
    finally:
        os.close(fd)
    return False


def _remove(parent: int, name: str, tst: os.stat_result | None) -> None:
    if tst is not None and stat.S_ISDIR(tst.st_mode):
        remove_tree(parent, name)
    else:
        os.unlink(name, dir_fd=parent)


def _make_dir(parent: int, name: str) -> int:
    """A new target directory, owner-only until leave() gives it its mode."""
    os.mkdir(name, 0o700, dir_fd=parent)
    return os.open(name, DIR_FLAGS, dir_fd=parent)


def _removed(upath: str) -> bool:
    """Whether an upper directory was empty (all applied) and is now gone."""
    try:
        os.rmdir(upath)
        return True
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # conflicts left in it
            raise
        return False


def _not_opaque(upath: str) -> None:
    """An opaque upper dir left for its conflicts hides no more than they do: what it
    hid is deleted or whited out, and what it brought is now in the target."""
    try:
        os.removexattr(upath, OPAQUE, follow_symlinks=False)
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise


def _strip(path: str | int) -> None:
    for name in os.listxattr(path, follow_symlinks=False):
        if name.startswith(_OVERLAY_XATTRS):
            os.removexattr(path, name, follow_symlinks=False)


def _copy_xattrs(src: str | int, dst: int) -> None:
    """The upper entry's own xattrs, not the layer's; those the target refuses
    (security.*, unsupported) are left."""
    for name in os.listxattr(src):
        if not name.startswith(_OVERLAY_XATTRS):
            try:
                os.setxattr(dst, name, os.getxattr(src, name))
            except OSError:
                pass


def _temp_name(name: str) -> str:
    return f".{name[:40]}.sandlock-{os.urandom(4).hex()}"  # short: names are <= 255 bytes


def _copy_in(node: Node) -> None:
    """Across filesystems: a copy beside the target path, then renamed over it."""
    assert node.ust is not None and node.parent is not None
    for _ in range(10):
        temp = _temp_name(node.name)
        try:
            _make_copy(node.upath, temp, node.parent, node.ust)
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


def _make_copy(upath: str, temp: str, parent: int, ust: os.stat_result) -> None:
    times = (ust.st_atime_ns, ust.st_mtime_ns)
    if stat.S_ISREG(ust.st_mode):
        _copy_file(upath, temp, parent, ust)
        return
    if stat.S_ISLNK(ust.st_mode):
        os.symlink(os.readlink(upath), temp, dir_fd=parent)
    else:  # a fifo or socket
        os.mknod(temp, ust.st_mode, dir_fd=parent)
        os.chmod(temp, stat.S_IMODE(ust.st_mode), dir_fd=parent)  # mknod applied the umask
    os.utime(temp, ns=times, dir_fd=parent, follow_symlinks=False)


def _copy_file(upath: str, temp: str, parent: int, ust: os.stat_result) -> None:
    src = os.open(upath, _READ)
    try:
        dst = os.open(temp, _CREATE, 0o600, dir_fd=parent)
        try:
            _copy_bytes(src, dst)
            _copy_xattrs(src, dst)
            os.fchmod(dst, stat.S_IMODE(ust.st_mode))  # after the writes, which clear setuid
            os.utime(dst, ns=(ust.st_atime_ns, ust.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_bytes(src: int, dst: int) -> None:
    """In the kernel (sendfile) where it can, else through a buffer."""
    try:
        while os.sendfile(dst, src, None, 1 << 30):
            pass
        return
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    while chunk := os.read(src, _COPY_CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]


def _unlink_quietly(name: str, parent: int) -> None:
    try:
        os.unlink(name, dir_fd=parent)
    except OSError:
        pass
