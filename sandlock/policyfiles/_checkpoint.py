"""A checkpoint of a sandbox, as far as sandlock can take one without root, CRIU or
ptrace: its policy and the application's state (what ``save_fn`` returned, taken
while every process of the sandbox was stopped). ``sb.checkpoint()`` makes one
(sandlock.api); ``Sandbox.restore(cp, restore_fn=...)`` starts again from it.

What it does not hold, and why (docs/api.md, "Checkpoints"): the processes' memory,
registers and descriptors (dumping them needs ptrace, which sandlock's supervisor
model does not use, or CRIU and its privileges), and the workspace's pending changes
(a copy-on-write upper layer belongs to the run that made it; the application saves
what it needs of it). On disk, a checkpoint is a directory of the store:
``meta.json``, ``policy.toml`` (a policy file, read back with its checks) and
``app_state.bin`` when there is state; each written without following links.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from pathlib import Path

from .._hostfile import open_directory, write_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..policy import Policy

FORMAT = 1  # meta.json's "format": what this version reads
MAX_NAME = 255  # a name is one directory entry
_APP_STATE, _META, _POLICY = "app_state.bin", "meta.json", "policy.toml"


def store_directory(env: Mapping[str, str] = os.environ) -> str:
    """Where checkpoints are saved by default: $XDG_DATA_HOME/sandlock/checkpoints."""
    data = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG spec: a relative value is ignored
        data = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "sandlock", "checkpoints")


class Checkpoint:
    """A sandbox's policy and its application's state (``app_state``: the bytes
    ``save_fn`` returned, or None); ``name`` once saved or loaded, else ""."""

    def __init__(self, policy: Policy, app_state: bytes | None = None, *,
                 argv: tuple[str, ...] | None = None, name: str = "",
                 created: float | None = None) -> None:
        if app_state is not None and not isinstance(app_state, (bytes, bytearray, memoryview)):
            raise TypeError(f"app_state: save_fn must return bytes (or None), "
                            f"got {type(app_state).__name__}")
        self.policy = policy
        self.app_state = None if app_state is None else bytes(app_state)
        self.argv = argv  # the command the sandbox ran (popen/create's), for the record
        self.name = name
        self.created = time.time() if created is None else created

    def save(self, name: str, *, store: str | os.PathLike[str] | None = None) -> Path:
        """Write it as ``name`` in ``store`` (default: ``store_directory()``), replacing a
        checkpoint of that name; returns its directory."""
        from ._toml import dumps

        directory = _checkpoint_path(name, store, create=True)
        meta = {"format": FORMAT, "name": name, "created": self.created,
                "argv": list(self.argv) if self.argv is not None else None}
        write_file(directory / _POLICY, dumps(self.policy).encode(), 0o600)
        write_file(directory / _META, json.dumps(meta, indent=1).encode() + b"\n", 0o600)
        if self.app_state is not None:
            write_file(directory / _APP_STATE, self.app_state, 0o600)
        else:
            _remove(directory, _APP_STATE)  # (a previous checkpoint's, of that name)
        self.name = name
        return directory

    @classmethod
    def load(cls, name: str, *, store: str | os.PathLike[str] | None = None,
             restore_fn: Callable[[bytes], object] | None = None) -> Checkpoint:
        """The checkpoint saved as ``name``; ``restore_fn(app_state)`` is called with its
        state when both are there. FileNotFoundError if there is none."""
        from ._file import load
        from ._sources import merge

        directory = _checkpoint_path(name, store)
        meta = json.loads(_read(directory, _META))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{directory / _META}: format {meta.get('format')!r}, "
                             f"this sandlock reads {FORMAT}")
        policy = merge([load(str(directory / _POLICY)).settings])
        try:
            state: bytes | None = _read(directory, _APP_STATE)
        except FileNotFoundError:
            state = None
        argv = meta.get("argv")
        checkpoint = cls(policy, state, argv=tuple(argv) if argv is not None else None,
                         name=name, created=meta.get("created"))
        if restore_fn is not None and state is not None:
            restore_fn(state)
        return checkpoint

    @staticmethod
    def list(*, store: str | os.PathLike[str] | None = None) -> list[str]:
        """The names of the checkpoints saved in ``store``, sorted."""
        where = os.fspath(store) if store is not None else store_directory()
        try:
            entries = os.listdir(where)
        except FileNotFoundError:
            return []
        return sorted(entry for entry in entries
                      if os.path.isfile(os.path.join(where, entry, _META)))

    @staticmethod
    def delete(name: str, *, store: str | os.PathLike[str] | None = None) -> None:
        """Remove the checkpoint ``name`` (its files, then its directory)."""
        directory = _checkpoint_path(name, store)
        if not (directory / _META).is_file():
            raise FileNotFoundError(errno.ENOENT, "no such checkpoint", str(directory))
        for entry in (_APP_STATE, _META, _POLICY):
            _remove(directory, entry)
        os.rmdir(directory)

    def __repr__(self) -> str:
        size = "None" if self.app_state is None else f"{len(self.app_state)} bytes"
        return f"<sandlock.Checkpoint name={self.name!r} app_state={size}>"


def _checkpoint_path(name: object, store: str | os.PathLike[str] | None, *,
                     create: bool = False) -> Path:
    """The directory of checkpoint ``name``: one entry of the store, checked."""
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name
            or len(name.encode(errors="surrogateescape")) > MAX_NAME):
        raise ValueError(f"name: a checkpoint's name is one file name (no '/', at most "
                         f"{MAX_NAME} bytes), got {name!r}")
    where = Path(os.fspath(store) if store is not None else store_directory())
    if create:
        _make_store(where, name)
    return where / name


def _make_store(where: Path, name: str) -> None:
    """The store and the checkpoint's directory in it (0700), created through no link a
    command could have left (``open_directory`` refuses one in a directory you write)."""
    os.makedirs(where, mode=0o700, exist_ok=True)
    store = open_directory(str(where))
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=store)
        except FileExistsError:
            info = os.stat(name, dir_fd=store, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                raise OSError(errno.ENOTDIR, f"{where / name} is not a directory (a link?)") from None
    finally:
        os.close(store)


def _read(directory: Path, entry: str) -> bytes:
    """A file of the checkpoint, opened without following a link."""
    dir_fd = open_directory(str(directory))
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with open(fd, "rb") as file:
        return file.read()


def _remove(directory: Path, entry: str) -> None:
    dir_fd = open_directory(str(directory))
    try:
        os.unlink(entry, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dir_fd)
