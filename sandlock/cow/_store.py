"""The per-user store of copy-on-write workspaces: one directory per run with a
workdir, ``ROOT/ID``, holding

* ``layer/upper`` and ``layer/work``: overlayfs's upper and work directories (with
  --max-disk, ``layer`` is covered by a tmpfs of that size inside the sandbox's mount
  namespace, and ``layer/upper`` here is filled only when the workspace is kept);
* ``meta.json``: the directory it captures, when the run began (``since_ns``: a
  change to the directory with a ctime from then on is a conflict), its state.

A run holds an exclusive flock on ``ROOT/ID`` while it lives, so a workspace is
"running" exactly when its lock is taken: a crashed run's workspace is "interrupted",
its directory untouched, and can be looked at, committed or aborted like a kept one.
ROOT (``confinement.workspace_store``) is denied in every policy: the sandbox never writes
a layer but through its overlay.
"""

from __future__ import annotations

import fcntl
import os

from .._errors import EXIT_USAGE, SandlockError
from .._hostfile import write_file
from ._tree import DIR_FLAGS, remove_tree

RUNNING, KEPT, CONFLICTS, INTERRUPTED = "running", "kept", "conflicts", "interrupted"


class WorkspaceError(SandlockError):
    """A workspace that cannot be made, found or applied (the message says why)."""

    exit_code = EXIT_USAGE


class Workspace:
    """One workspace of the store; ``lock()`` before changing it."""

    def __init__(self, root: str, ident: str, meta: dict) -> None:
        self.root = root
        self.id = ident
        self.path = os.path.join(root, ident)
        self.directory: str = meta["dir"]
        self.since_ns: int = meta["since_ns"]
        self.created: float = meta["created"]
        self.max_disk: int | None = meta.get("max_disk")
        self._state: str = meta["state"]
        self._lock_fd = -1

    @property
    def layer(self) -> str:
        return os.path.join(self.path, "layer")

    @property
    def upper(self) -> str:
        return os.path.join(self.layer, "upper")

    @property
    def work(self) -> str:
        return os.path.join(self.layer, "work")

    @property
    def state(self) -> str:
        """running, kept, conflicts (kept with what could not be committed) or
        interrupted (its run ended without saying)."""
        if self._lock_fd >= 0:
            return self._state
        if self._state == RUNNING:
            return RUNNING if self._locked_elsewhere() else INTERRUPTED
        return self._state

    @classmethod
    def create(cls, root: str, directory: str, max_disk: int | None) -> Workspace:
        """A new, locked workspace for ``directory`` (a real, absolute path)."""
        try:
            os.makedirs(root, 0o700, exist_ok=True)
            os.chmod(root, 0o700)
        except OSError as exc:
            raise WorkspaceError(f"--workdir: cannot make the workspace store {root} "
                                 f"({exc.strerror}); XDG_STATE_HOME chooses where it is") from None
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(directory))
        ident = f"{name[:32] or 'root'}-{os.urandom(3).hex()}"
        path = os.path.join(root, ident)
        os.mkdir(path, 0o700)
        os.makedirs(os.path.join(path, "layer", "upper"), 0o755)
        os.mkdir(os.path.join(path, "layer", "work"), 0o700)
        # Taken from the file system's own clock: a change to the directory from now
        # on has a ctime >= this (the same coarse clock, never earlier).
        since_ns = os.stat(os.path.join(path, "layer", "work")).st_ctime_ns
        meta = {"dir": directory, "since_ns": since_ns, "created": since_ns / 1e9,
                "state": RUNNING, "max_disk": max_disk}
        workspace = cls(root, ident, meta)
        workspace.lock()
        workspace._save()
        return workspace

    @classmethod
    def open(cls, root: str, ident: str) -> Workspace:
        if not ident or "/" in ident or ident.startswith("."):
            raise WorkspaceError(f"{ident!r} is not a workspace id (`sandlock workspace list`)")
        import json  # (not on a run's start-up path: only reading needs it)

        try:
            with open(os.path.join(root, ident, "meta.json"), encoding="utf-8") as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise WorkspaceError(f"no workspace {ident!r} (`sandlock workspace list`)") from None
        except (OSError, ValueError) as exc:
            raise WorkspaceError(f"workspace {ident!r} is unreadable: {exc}") from None
        return cls(root, ident, meta)

    @classmethod
    def all(cls, root: str) -> list[Workspace]:
        """Every workspace of the store, oldest first."""
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            try:
                found.append(cls.open(root, name))
            except WorkspaceError:
                continue  # not a workspace (or half made): not listed
        return sorted(found, key=lambda w: w.since_ns)

    def lock(self) -> None:
        """Exclusively this process's until ``unlock`` or exit (WorkspaceError if a
        running sandbox or another command holds it)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkspaceError(f"workspace {self.id} is in use (its run is still going, "
                                 "or another sandlock command holds it)") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def mark(self, state: str) -> None:
        self._state = state
        self._save()

    def remove(self) -> None:
        """Delete the workspace and everything captured in it."""
        trash = f".removed-{self.id}"
        os.rename(self.path, os.path.join(self.root, trash))  # unlisted at once, whatever follows
        self.unlock()
        root = os.open(self.root, DIR_FLAGS)
        try:
            remove_tree(root, trash)
        except OSError:
            pass  # (left as .removed-ID, never listed)
        finally:
            os.close(root)

    def _locked_elsewhere(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def _save(self) -> None:
        # JSON written by hand: the json module costs ~3 ms of a run's start-up.
        meta = (f'{{"dir": {_json_string(self.directory)}, "since_ns": {self.since_ns}, '
                f'"created": {self.created!r}, "state": "{self._state}", '
                f'"max_disk": {"null" if self.max_disk is None else self.max_disk}}}\n')
        write_file(os.path.join(self.path, "meta.json"), meta.encode("utf-8", "surrogateescape"))


def _json_string(text: str) -> str:
    """``text`` as a JSON string literal (undecodable bytes of a path stay escaped as
    lone surrogates, which json.load gives back)."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char < " " or "\ud800" <= char <= "\udfff":
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'
