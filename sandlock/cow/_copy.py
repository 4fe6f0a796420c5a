"""Copies of an upper layer's files: into the directory (a commit across file
systems, where a rename cannot move them) and into the store (a --max-disk layer,
a tmpfs that ends with the run, kept on disk).

A copy keeps the holes of a sparse file (only its data is read and written:
SEEK_DATA/SEEK_HOLE), and a file with several names is copied once and linked
again, so a copy never takes more real space than the layer did. Everything is
reached through directory descriptors, never following a symlink.
"""

from __future__ import annotations

import errno
import os
import stat

from ._tree import DIR_FLAGS, Chain, at, entries_of, open_directory, open_parent
from ._walk import is_whiteout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_MOST = 1 << 30  # what one sendfile may move


def copy_data(src: int, dst: int) -> None:
    """``src``'s bytes into the empty ``dst``: its data extents only, its holes
    left holes (a 1 TiB sparse file costs what it holds)."""
    size = os.fstat(src).st_size
    offset = 0
    while offset < size:
        try:
            data = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # nothing but a hole to the end
                break
            if e.errno != errno.EINVAL:  # (a file system without SEEK_DATA: all data)
                raise
            data, end = offset, size
        else:
            end = os.lseek(src, data, os.SEEK_HOLE)
        _copy_range(src, dst, data, end - data)
        offset = end
    os.ftruncate(dst, size)


def _copy_range(src: int, dst: int, offset: int, count: int) -> None:
    """In the kernel (sendfile) where it can, else through a buffer."""
    os.lseek(dst, offset, os.SEEK_SET)
    try:
        while count > 0:
            sent = os.sendfile(dst, src, offset, min(count, _MOST))
            if not sent:
                return
            offset, count = offset + sent, count - sent
        return
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    while count > 0:
        chunk = os.pread(src, min(count, _CHUNK), offset)
        if not chunk:
            return
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        offset, count = offset + len(chunk), count - len(chunk)


def copy_xattrs(src: int | str, dst: int | str, keep: Callable[[str], bool]) -> None:
    """The extended attributes of ``src`` that ``keep`` names (a descriptor, or an
    ``at`` path, whose last name is not followed); those ``dst`` refuses
    (security.*, unsupported) are left."""
    for name in os.listxattr(src, follow_symlinks=isinstance(src, int)):
        if keep(name):
            try:
                value = os.getxattr(src, name, follow_symlinks=isinstance(src, int))
                os.setxattr(dst, name, value, follow_symlinks=isinstance(dst, int))
            except OSError:
                pass


def copy_file(uparent: int, name: str, parent: int, temp: str, mode: int,
              keep: Callable[[str], bool]) -> int:
    """The regular file ``name`` of ``uparent`` copied as ``temp`` in ``parent``, with
    permission bits ``mode``, its times and the xattrs ``keep`` names. Returns the
    copy's inode number."""
    src = os.open(name, READ, dir_fd=uparent)
    try:
        ust = os.fstat(src)
        dst = os.open(temp, CREATE, 0o600, dir_fd=parent)
        try:
            copy_data(src, dst)
            copy_xattrs(src, dst, keep)
            os.fchmod(dst, mode)  # after the writes, which would clear set-id bits
            os.utime(dst, ns=(ust.st_atime_ns, ust.st_mtime_ns))
            return os.fstat(dst).st_ino
        finally:
            os.close(dst)
    finally:
        os.close(src)


class Links:
    """Files of the layer with more than one name: where the first was copied, so
    that the others are linked to it, not copied again."""

    def __init__(self, root: int) -> None:
        self.root = root  # the top of the copy: paths are relative to it
        self.copies: dict[tuple[int, int], tuple[str, int]] = {}

    def note(self, st: os.stat_result, path: str, copy_ino: int) -> None:
        if st.st_nlink > 1:
            self.copies.setdefault((st.st_dev, st.st_ino), (path, copy_ino))

    def link(self, st: os.stat_result, parent: int, temp: str) -> bool:
        """``temp`` in ``parent`` made another name of the copy of ``st``'s file;
        False if there is none (or it is no longer where it was put)."""
        if st.st_nlink < 2 or (st.st_dev, st.st_ino) not in self.copies:
            return False
        path, ino = self.copies[(st.st_dev, st.st_ino)]
        try:
            holder, last = open_parent(self.root, path)
        except OSError:
            return False
        try:
            held = os.open(last, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=holder)
        except OSError:
            return False
        finally:
            os.close(holder)
        try:
            if os.fstat(held).st_ino != ino:
                return False
            os.link(f"/proc/self/fd/{held}", temp, dst_dir_fd=parent, follow_symlinks=True)
            return True
        except OSError as e:
            if e.errno != errno.EXDEV:  # (the other name is on another mount: a copy)
                raise
            return False
        finally:
            os.close(held)


def _everything(name: str) -> bool:
    return True


def copy_tree(source: str, destination: str) -> None:
    """Every entry of directory ``source`` into the empty directory ``destination``
    as it is (a layer kept: modes, set-id bits included, times, every xattr, holes,
    hard links, whiteouts, fifos and sockets; a device, never committed, is not)."""
    schain, dchain = Chain(os.open(source, DIR_FLAGS)), Chain(None)
    root = -1
    try:
        root = os.open(destination, DIR_FLAGS)  # (the chain's own may be closed while deep)
        dchain = Chain(os.dup(root))
        links = Links(root)
        pending = [(entries_of(schain.top), "", None)]  # type: ignore[arg-type]
        while pending:
            entries, rel, st = pending[-1]
            if entries:
                name, entry = entries.pop()
                if stat.S_ISDIR(entry.st_mode):
                    _enter(schain, dchain, name, entry)
                    pending.append((entries_of(schain.top), f"{rel}{name}/", entry))  # type: ignore[arg-type]
                else:
                    _copy_entry(schain.top, dchain.top, name, entry, links, rel)  # type: ignore[arg-type]
                continue
            pending.pop()
            if st is not None:
                _settle(dchain.top, st)  # type: ignore[arg-type]
                schain.pop()
                dchain.pop()
    finally:
        schain.close()
        dchain.close()
        if root >= 0:
            os.close(root)


def _enter(schain: Chain, dchain: Chain, name: str, st: os.stat_result) -> None:
    source = open_directory(schain.top, name, 0o500)  # type: ignore[arg-type]  # (the layer is thrown away after)
    schain.push(source)
    copy_to = dchain.top
    assert copy_to is not None
    os.mkdir(name, 0o700, dir_fd=copy_to)
    dchain.push(os.open(name, DIR_FLAGS, dir_fd=copy_to))
    copy_xattrs(source, dchain.top, _everything)  # type: ignore[arg-type]


def _settle(directory: int, st: os.stat_result) -> None:
    os.fchmod(directory, stat.S_IMODE(st.st_mode))
    os.utime(directory, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_entry(sdir: int, ddir: int, name: str, st: os.stat_result, links: Links, rel: str) -> None:
    if stat.S_ISREG(st.st_mode):
        if not links.link(st, ddir, name):
            links.note(st, rel + name, copy_file(sdir, name, ddir, name, stat.S_IMODE(st.st_mode),
                                                 _everything))
        return
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=sdir), name, dir_fd=ddir)
    elif is_whiteout(st) or stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        os.mknod(name, st.st_mode, st.st_rdev, dir_fd=ddir)
        os.chmod(at(ddir, name), stat.S_IMODE(st.st_mode))  # (mknod applied the umask)
        copy_xattrs(at(sdir, name), at(ddir, name), _everything)
    else:
        return  # a device
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=ddir, follow_symlinks=False)
