"""Files sandlock writes on the host, never through a link a command could have planted.

A confined command writes its workspace, and sandlock (unconfined) writes files there
too: ``learn -o``, ``--audit``, ``--http-ca-out``, ``ca export``. A symlink the command
left at such a name, or at a directory on its way, would have sandlock write what it
chose (a policy, a JSON line, a certificate) into ``~/.bashrc``. So every such file is
reached through ``Output``:

* the directory is opened once (an O_PATH descriptor, before the command starts where
  the file is written after it), walking the path one component at a time: a symlink
  is followed only where the directory holding it is root's and no one else may write
  it (``/home -> /usr/home``, the system's); one in a directory the user, and so a
  command of theirs, can write is refused;
* the file itself is never a link: a whole file is written to a new file beside it
  (O_EXCL, O_NOFOLLOW) and renamed over the name (which replaces a link, never writes
  through it); an appended file is opened with O_NOFOLLOW once and the descriptor
  kept, never reopened by name;
* an existing target that is not a regular file of the user's is refused, before
  anything is written (an appended one also with other hard links).

Errors are ``OSError``s (``UnsafeOutput`` for a refusal), whose ``strerror`` says why.
"""

from __future__ import annotations

import errno
import os
import stat

_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK
           | os.O_CLOEXEC)
MAX_LINKS = 40  # the kernel's own bound on symlinks in one lookup


class UnsafeOutput(OSError):
    """The path is refused (a link where none may be, not a regular file of yours)."""


class Output:
    """The file ``path`` names, to be written later: its directory held open, the
    file's name checked. Close it (or use ``with``) when done."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        directory, name = os.path.split(path)
        if name in ("", ".", ".."):
            raise UnsafeOutput(errno.EISDIR, "not a file name")
        self.path = path
        self.name = name
        self.dir_fd = open_directory(directory or ".")
        try:
            self.check()
            if not os.access(".", os.W_OK, dir_fd=self.dir_fd):
                raise OSError(errno.EACCES, f"cannot create files in {directory or '.'}")
        except BaseException:
            self.close()
            raise

    def check(self) -> None:
        """UnsafeOutput if the name holds something else than a regular file of yours."""
        try:
            info = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        _check_file(info)

    def replace(self, data: bytes, mode: int = 0o666, *, exact: bool = False,
                durable: bool = False) -> None:
        """The file becomes ``data``, whole (a reader sees the old file or the new one)."""
        self.commit(self.stage(data, mode, exact=exact, durable=durable))

    def stage(self, data: bytes, mode: int = 0o666, *, exact: bool = False,
              durable: bool = False) -> str:
        """``data`` in a new file beside the target, whose name is returned for
        ``commit``. ``mode`` is narrowed by the umask unless ``exact``."""
        while True:
            temporary = f".{self.name[:200]}.{os.urandom(4).hex()}.new"
            try:
                fd = os.open(temporary, _CREATE, mode, dir_fd=self.dir_fd)
                break
            except FileExistsError:
                continue
        try:
            if exact:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        except BaseException:
            self.discard(temporary)
            raise
        finally:
            os.close(fd)
        return temporary

    def commit(self, temporary: str) -> None:
        """Rename a staged file over the target: whatever is there (a file, a link) is
        replaced, never written through."""
        os.rename(temporary, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)

    def discard(self, temporary: str) -> None:
        try:
            os.unlink(temporary, dir_fd=self.dir_fd)
        except OSError:
            pass

    def append(self, mode: int = 0o666) -> int:
        """A descriptor appending to the file (created if missing): keep it for every
        record, never open the name again."""
        self.check()  # before opening: a device or a FIFO is never opened
        fd = os.open(self.name, _APPEND, mode, dir_fd=self.dir_fd)
        try:
            _check_file(os.fstat(fd), single_link=True)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Output:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def write_file(path: str | os.PathLike[str], data: bytes, mode: int = 0o666, *,
               exact: bool = False, durable: bool = False) -> None:
    """``path`` becomes ``data`` (``Output.replace``), in one call."""
    with Output(path) as output:
        output.replace(data, mode, exact=exact, durable=durable)


def open_directory(path: str) -> int:
    """An O_PATH descriptor on the directory ``path`` (relative: to the current
    directory), reached through no symlink but the system's (see the module's doc)."""
    fd = os.open("/" if path.startswith("/") else ".", _DIRECTORY)
    parts = path.split("/")
    walked = "" if path.startswith("/") else "."
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name in ("", "."):
                continue
            shown = f"{walked.rstrip('/')}/{name}"
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, f"too many symbolic links in {path}")
                target = os.readlink(name, dir_fd=fd)
                if not _system_directory(os.fstat(fd)):
                    raise UnsafeOutput(errno.ELOOP, f"{shown} is a symbolic link in a directory you can "
                                       f"write (sandlock writes through no such link: name the "
                                       f"directory it leads to, {os.path.realpath(shown)})")
                if target.startswith("/"):
                    fd = _moved(fd, os.open("/", _DIRECTORY))
                    walked = ""
                parts[:0] = target.split("/")
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise OSError(errno.ENOTDIR, f"{shown} is not a directory")
            fd = _moved(fd, os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=fd))
            walked = shown
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_directory(prefix: str = "sandlock-") -> str:
    """A new 0700 directory of sandlock's own in $TMPDIR (or /tmp), as
    tempfile.mkdtemp makes one, without its imports (random, shutil and the
    compression modules they load: ~5 ms, and every page a long-lived sandbox's
    processes inherit is copied by each of their forks). mkdir never follows a link
    at the name: a name taken, by whatever, is passed over."""
    parent = os.environ.get("TMPDIR") or "/tmp"
    while True:
        path = os.path.join(parent, f"{prefix}{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _moved(old: int, new: int) -> int:
    os.close(old)
    return new


def _system_directory(info: os.stat_result) -> bool:
    """A directory only root may change: a symlink in it is the system's, not one a
    command of the user's could have left (docs/usage.md: as root, this holds for every
    directory of root's)."""
    return info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _check_file(info: os.stat_result, *, single_link: bool = False) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeOutput(errno.ELOOP, "it is a symbolic link (sandlock writes through none: "
                           "remove it, or name another file)")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeOutput(errno.EINVAL, "it is not a regular file")
    if info.st_uid != os.geteuid():
        raise UnsafeOutput(errno.EPERM, f"it belongs to uid {info.st_uid}, not to you")
    if single_link and info.st_nlink > 1:
        raise UnsafeOutput(errno.EMLINK, "it has other hard links (sandlock would write "
                           "into those files too)")
