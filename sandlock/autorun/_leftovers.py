"""What the command left for the user's own tools to run later: the end check.

At start, autorun files that exist are bound read-only; those that do not cannot be
(``_autorun``). So once the sandbox is gone, with no process of it left to race, this
looks where they would be: what was made there is quarantined (renamed in place,
``NAME.sandlock-quarantined-ID``: a name no tool reads; same directory, so one atomic
rename that moves nothing across file systems), and a repository made during the run
is neutralised (``_vetting``). Each is said on stderr in one line and recorded in the
audit log; ``--allow-autorun-writes`` turns the whole check off.

Every path is walked from its write grant one component at a time without following
a symbolic link: a link made during the run on the way is itself what is quarantined,
and a link is renamed, never what it points to. A run with a copy-on-write workdir is
checked in its layer, before it is committed (``check_layer``): what it wrote there is
all it wrote. Cost: a few stat calls per recorded place, a listing of each scanned
directory, an index read only where the run changed it.
"""

from __future__ import annotations

import os
import stat

from ._vetting import Check

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ._autorun import StartRecord

QUARANTINED = ".sandlock-quarantined-"
_O_PATH_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MAX_ENTRIES = 4096


class Leftovers:
    """The end check of one run."""

    def __init__(self, record: StartRecord, audit: AuditLog | None) -> None:
        self.record, self.audit = record, audit
        self.run_id = os.urandom(4).hex()
        self.layered: str | None = None  # the copy-on-write workdir, checked in its layer

    def check(self) -> str | None:
        """The write grants written on the host (the workdir's layer aside); the notice."""
        roots = sorted((root for root in self.record.roots  # (outermost first)
                        if self.layered is None or not _within(root, self.layered)), key=len)
        views: dict[str, View] = {}

        def locate(path: str) -> tuple[View, str] | None:
            if self.layered is not None and _within(path, self.layered):
                return None
            root = next((root for root in roots if _within(path, root)), None)
            if root is None:
                return None
            if root not in views:
                views[root] = View(root, root, False, self.record.since_ns, self.run_id)
            return views[root], _relative(path, root)

        return self._run(locate, views)

    def check_layer(self, directory: str, upper: str) -> str | None:
        """The workdir ``directory`` as its layer ``upper`` changes it; the notice."""
        view = View(directory, upper, True, self.record.since_ns, self.run_id)

        def locate(path: str) -> tuple[View, str] | None:
            if not _within(path, directory):
                return None
            return view, _relative(path, directory)

        return self._run(locate, {directory: view})

    def _run(self, locate: Callable[[str], tuple[View, str] | None], views: dict[str, View],
             ) -> str | None:
        check = Check(self.record, locate)
        lines = []
        try:
            check.run()
        except OSError as exc:  # (what was found before is said; the failure too, loudly)
            lines.append(f"sandlock: the end check of what the run left failed at "
                         f"{exc.filename or '?'} ({exc.strerror}): look there before using it")
        except Exception as exc:  # (a bug: said in one line, not a traceback at the exit)
            lines.append(f"sandlock: the end check of what the run left failed "
                         f"({type(exc).__name__}: {exc}): look at the run's write grants")
        finally:
            for view in views.values():
                view.close()
        for path, renamed, why in check.found:
            if renamed == path:  # (it could not be renamed: why says so)
                lines.append(f"sandlock: left in place {path}: {why}: look at it before using it")
            else:
                lines.append(f"sandlock: quarantined {path}: {why}; renamed "
                             f"{os.path.basename(renamed)} (rename it back to keep it)")
            if self.audit is not None:
                self.audit.write({"event": "quarantine", "path": path, "renamed": renamed,
                                  "reason": why})
        if check.unchecked:
            lines.append(f"sandlock: the run made more repositories than the end check vets "
                         f"({len(check.vetted)}); not vetted: {', '.join(check.unchecked[:3])}"
                         f"{', ...' if len(check.unchecked) > 3 else ''}")
        return "\n".join(lines) or None


def check_kept_layer(directory: str, upper: str) -> str | None:
    """The end check of a kept workspace's layer, before `sandlock workspace commit`
    applies it (its run may have been interrupted before its own check): what the
    directory holds now stands for the start. The notice, if anything was found."""
    from ._autorun import protect

    record = protect([directory], ()).record
    return None if record is None else Leftovers(record, None).check_layer(directory, upper)


class Entry:
    """A file found in a view: its directory (a descriptor), name, lstat, path."""

    __slots__ = ("parent", "name", "st", "rel")

    def __init__(self, parent: int, name: str, st: os.stat_result, rel: str) -> None:
        self.parent, self.name, self.st, self.rel = parent, name, st, rel

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


class View:
    """The files under ``directory`` as the run left them: the directory itself, or
    (``layer``) its copy-on-write layer ``root``, which holds only what the run wrote
    (a whiteout, a deletion, is nothing there). Paths are relative to it."""

    def __init__(self, directory: str, root: str, layer: bool, since_ns: int, run_id: str) -> None:
        self.directory, self.layer, self.since_ns, self.run_id = directory, layer, since_ns, run_id
        self._dirs: dict[str, int | Entry | None] = {}
        try:
            self._dirs[""] = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self._dirs[""] = None

    def host(self, rel: str) -> str:
        return os.path.join(self.directory, rel) if rel else self.directory

    def written(self, entry: Entry) -> bool:
        """Made or changed during the run (a file's ctime cannot be set back)."""
        return self.layer or entry.st.st_ctime_ns >= self.since_ns

    def lookup(self, rel: str) -> Entry | None:
        """The entry at ``rel``; if a directory on the way is a symbolic link, that link."""
        parent = self._dir(os.path.dirname(rel))
        if not isinstance(parent, int):
            return parent
        return self._entry(parent, os.path.basename(rel), rel)

    def _entry(self, parent: int, name: str, rel: str) -> Entry | None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return None
        if self.layer and stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            return None  # a whiteout
        return Entry(parent, name, st, rel)

    def _dir(self, rel: str) -> int | Entry | None:
        if rel in self._dirs:
            return self._dirs[rel]
        parent = self._dir(os.path.dirname(rel))
        found: int | Entry | None = parent
        if isinstance(parent, int):
            name = os.path.basename(rel)
            try:
                found = os.open(name, _O_PATH_DIRECTORY, dir_fd=parent)
            except OSError:
                entry = self._entry(parent, name, rel)
                found = entry if entry is not None and entry.is_link else None
        self._dirs[rel] = found
        return found

    def identity(self, rel: str) -> tuple[int, int] | None:
        """A directory's (inode, ctime), reached without following a link."""
        fd = self._dir(rel)
        if not isinstance(fd, int):
            return None
        st = os.fstat(fd)
        return st.st_ino, st.st_ctime_ns

    def names(self, rel: str, directories: bool = False) -> list[str]:
        """What the directory ``rel`` holds (at most 4096; ``directories``: only those)."""
        fd = self._dir(rel)
        if not isinstance(fd, int):
            return []
        try:
            listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return []
        try:
            with os.scandir(listing) as entries:
                return [entry.name for _, entry in zip(range(_MAX_ENTRIES), entries)
                        if not directories or entry.is_dir(follow_symlinks=False)]
        except OSError:
            return []
        finally:
            os.close(listing)

    def repositories(self, rel: str) -> list[str]:
        """The directory ``rel`` and those of its direct subdirectories (at most 4096)
        that hold a ``.git``: one stat each (a subdirectory listed as a directory is not
        a link, and nothing is left to swap it: its name is not walked again)."""
        fd = self._dir(rel)
        if not isinstance(fd, int):
            return []
        candidates = ["", *self.names(rel, True)]
        found = []
        for name in candidates:
            try:
                os.stat(f"{name}/.git" if name else ".git", dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            found.append(os.path.join(rel, name) if name else rel)
        return found

    def read(self, entry: Entry, limit: int) -> bytes | None:
        """A regular file's bytes (None: not one, or larger than ``limit``)."""
        try:
            fd = os.open(entry.name, _O_READ, dir_fd=entry.parent)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, size = [], 0
            while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks) if size <= limit else None
        except OSError:
            return None
        finally:
            os.close(fd)

    def quarantine(self, entry: Entry) -> str:
        """Rename ``entry`` (itself, never what a link points to) to a name no tool
        reads, in its directory; its new path."""
        new = f"{entry.name}{QUARANTINED}{self.run_id}"
        number = 1
        while self._entry(entry.parent, new, "") is not None:
            number += 1
            new = f"{entry.name}{QUARANTINED}{self.run_id}-{number}"
        os.rename(entry.name, new, src_dir_fd=entry.parent, dst_dir_fd=entry.parent)
        for rel in [rel for rel in self._dirs if rel and _within(rel, entry.rel)]:
            found = self._dirs.pop(rel)
            if isinstance(found, int):
                os.close(found)
        return os.path.join(os.path.dirname(self.host(entry.rel)), new)

    def create(self, parent: int, name: str, text: str) -> None:
        """A new file (never through a link, never over one), owned as its directory is."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=parent)
        try:
            os.write(fd, text.encode("utf-8", "surrogateescape"))
            if os.geteuid() == 0:  # root in someone's repository: theirs, not root's
                owner = os.fstat(parent)
                os.fchown(fd, owner.st_uid, owner.st_gid)
        finally:
            os.close(fd)

    def close(self) -> None:
        for found in self._dirs.values():
            if isinstance(found, int):
                os.close(found)
        self._dirs.clear()


def _relative(path: str, ancestor: str) -> str:
    """``path`` (within ``ancestor``, both absolute and normal) relative to it."""
    return "" if path == ancestor else path[len(ancestor.rstrip("/")) + 1:]


def _within(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")
