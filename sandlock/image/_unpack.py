"""A layer applied to a root: its whiteouts first (they remove what lower layers
made), then its entries, all through descriptors.

Nothing is ever written outside the root, whatever the tar says:
* a name with a ``..`` component, an absolute name, or an empty or NUL-bearing one
  refuses the whole image (ImageError naming the entry): no tool makes such a layer;
* the directory an entry goes in is looked up from the root's descriptor with
  RESOLVE_IN_ROOT (the lookup of a process whose root that is: a symlink an earlier
  entry made, absolute or ``..``-laden, resolves inside the root), magic links refused;
* the entry itself is made by name in that directory (O_EXCL, O_NOFOLLOW; what was
  there removed first, never followed), a hard link's source looked up the same way;
* symlinks are stored as written: they are the image's, resolved inside its root
  when the command runs there.
Devices are left out (an unprivileged user cannot make them; the sandbox's /dev is
bound over the image's), owners are the user's, set-id bits are dropped; directory
modes are set once every layer is in (``finish``), so that a read-only directory of a
lower layer still takes a later layer's files.
"""

from __future__ import annotations

import os
import stat
import tarfile

from ..cow import remove_tree
from ..kernel import RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, openat2
from ._reference import ImageError

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_KEPT_MODE = 0o1777  # no set-uid, no set-gid
_CHUNK = 1 << 20


def entry_names(member: tarfile.TarInfo) -> list[str]:
    """The components of a tar entry's name; ImageError for one that could leave the
    root (absolute, ``..``) or is not a name."""
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    if not name or "\0" in name or name.startswith("/"):
        raise ImageError(f"layer entry {member.name!r}: an absolute or empty name")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ImageError(f"layer entry {member.name!r}: a '..' component")
    return parts


class Unpacker:
    """Applies layers to the root directory ``root_fd`` (an O_PATH descriptor)."""

    def __init__(self, root_fd: int) -> None:
        self._root = root_fd
        self._modes: dict[str, int] = {}  # directory -> its mode, set at the end

    def whiteouts(self, tar: tarfile.TarFile) -> None:
        """Pass 1: what the layer's whiteouts remove from the layers below."""
        for member in tar:
            parts = entry_names(member)
            if not parts:
                continue  # the root itself
            base = parts[-1]
            if base == OPAQUE:
                self._empty(parts[:-1])
            elif base.startswith(WHITEOUT):
                self._remove(parts[:-1], base[len(WHITEOUT):])

    def entries(self, tar: tarfile.TarFile) -> None:
        """Pass 2: the layer's files, directories and links."""
        for member in tar:
            parts = entry_names(member)
            if not parts or parts[-1].startswith(WHITEOUT):
                continue  # (the root itself; whiteouts: pass 1)
            parent = self._directory(parts[:-1], create=True)
            try:
                self._make(parent, parts, member, tar)
            finally:
                os.close(parent)

    def finish(self) -> None:
        """Directory modes, deepest first (a read-only parent set last)."""
        for path in sorted(self._modes, key=lambda p: -p.count("/")):
            try:
                fd = openat2(self._root, os.fsencode(path), os.O_RDONLY | os.O_DIRECTORY
                             | os.O_NOFOLLOW | os.O_CLOEXEC, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
            except OSError:
                continue  # (replaced since by a later layer)
            try:
                os.fchmod(fd, self._modes[path])
            finally:
                os.close(fd)

    # --- one entry -------------------------------------------------------------------

    def _make(self, parent: int, parts: list[str], member: tarfile.TarInfo,
              tar: tarfile.TarFile) -> None:
        name = parts[-1]
        mode = member.mode & _KEPT_MODE
        if member.isdir():
            if not self._is_directory(parent, name):
                self._clear(parent, name)
                os.mkdir(name, 0o700, dir_fd=parent)
            self._modes["/".join(parts)] = mode
            return
        if member.isdev():
            return  # (see the module's doc)
        self._clear(parent, name)
        if member.issym():
            os.symlink(member.linkname, name, dir_fd=parent)
        elif member.islnk():
            self._hard_link(parent, name, member)
        elif member.isfifo():
            os.mkfifo(name, mode, dir_fd=parent)
        elif member.isreg():
            self._write(parent, name, mode, tar.extractfile(member))
        else:
            raise ImageError(f"layer entry {member.name!r}: an entry of unknown type")

    def _write(self, parent: int, name: str, mode: int, data: object) -> None:
        fd = os.open(name, _CREATE, 0o600, dir_fd=parent)
        try:
            if data is not None:
                while chunk := data.read(_CHUNK):  # type: ignore[attr-defined]
                    os.write(fd, chunk)  # (a regular file: short writes only on errors)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def _hard_link(self, parent: int, name: str, member: tarfile.TarInfo) -> None:
        source = entry_names(tarfile.TarInfo(member.linkname))
        source_dir = self._directory(source[:-1], create=False)
        try:
            os.link(source[-1], name, src_dir_fd=source_dir, dst_dir_fd=parent,
                    follow_symlinks=False)
        finally:
            os.close(source_dir)

    # --- lookups and removals -------------------------------------------------------

    def _directory(self, parts: list[str], *, create: bool) -> int:
        """The directory ``parts`` names in the root, as the root's processes would find
        it; missing ones made (``create``)."""
        fd = os.dup(self._root)
        try:
            for index, part in enumerate(parts):
                path = os.fsencode("/".join(parts[: index + 1]))
                try:
                    inner = openat2(self._root, path, _PATH_DIR, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    inner = os.open(part, _PATH_DIR | os.O_NOFOLLOW, dir_fd=fd)
                except NotADirectoryError:
                    raise ImageError(f"layer entry beneath {'/'.join(parts)}: "
                                     f"{path.decode(errors='replace')} is not a directory") from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _is_directory(parent: int, name: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def _clear(self, parent: int, name: str) -> None:
        """Whatever is at ``name`` removed (a directory with all beneath it), never
        followed."""
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            remove_tree(parent, name)
        else:
            os.unlink(name, dir_fd=parent)

    def _remove(self, parts: list[str], name: str) -> None:
        if not name or name in (".", ".."):
            raise ImageError(f"whiteout {'/'.join([*parts, WHITEOUT + name])!r}: of no name")
        try:
            parent = self._directory(parts, create=False)
        except (FileNotFoundError, ImageError):
            return  # nothing below to remove
        try:
            self._clear(parent, name)
        finally:
            os.close(parent)

    def _empty(self, parts: list[str]) -> None:
        try:
            directory = self._directory(parts, create=False)
        except (FileNotFoundError, ImageError):
            return
        try:
            listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
            try:
                names = os.listdir(listing)
            finally:
                os.close(listing)
            for name in names:
                self._clear(directory, name)
        finally:
            os.close(directory)
