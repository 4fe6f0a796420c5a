"""Caches whose entries the user's own tools run as they are, unconfined, the next time:
pre-commit's hook repositories (at each ``git commit``), npx's packages (at the next
``npx``). A write grant over them (the default workspace's ``~/.cache`` and ``~/.npm``)
would let the command plant code there. Unlike a build's caches, nothing checks them
against a digest before it runs.

Each one that exists is seen in the sandbox through a private copy-on-write view: an
overlayfs over the host's directory whose upper layer is a tmpfs mounted first on the
same path (the overlay then covers it: no path in the sandbox leads to the layer). The
command's tools use and fill the cache as usual; its writes end with the sandbox, and
the host's cache is never written. One that does not exist is recorded with the autorun
files, and quarantined at the end if the run made it. ``--allow-autorun-writes`` lifts
both, as it does for autorun files.
"""

from __future__ import annotations

import os

from ..kernel import mounts
from ._fspolicy import within

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_O_DIRECTORY_PATH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def executable_caches(home: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """Where pre-commit and npx keep what they run, by the variables that move them."""
    cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    pre_commit = env.get("PRE_COMMIT_HOME") or os.path.join(cache, "pre-commit")
    npm = env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE") or os.path.join(home, ".npm")
    return tuple(path for path in (pre_commit, os.path.join(npm, "_npx")) if os.path.isabs(path))


def under_grants(caches: Iterable[str], writable: Iterable[str],
                 private: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Of ``caches``, those a write grant reaches (not in a private scratch directory,
    whose writes never reach the host; not a grant of its own, the user's word that the
    command may write there): (those that exist, as real paths; those that do not)."""
    roots = [os.path.realpath(path) for path in writable]
    hidden = [os.path.realpath(path) for path in private]
    existing, missing = [], []
    for cache in dict.fromkeys(caches):
        real = os.path.realpath(cache)
        if any(within(real, root) for root in roots) and real not in roots and \
                not any(within(real, scratch) for scratch in hidden):
            (existing if os.path.isdir(real) else missing).append(real)
    return tuple(existing), tuple(missing)


def mount_private_view(path: str, tmpfs_options: bytes) -> None:
    """In the sandbox's mount namespace: ``path`` becomes an overlay of the host's
    directory, its writes in a tmpfs of its own (as the host's, mode and all)."""
    lower = os.open(path, _O_DIRECTORY_PATH)
    try:
        mode = os.stat(lower).st_mode & 0o7777
        mounts.mount_tmpfs(path, tmpfs_options)
        os.mkdir(os.path.join(path, "upper"), mode)
        os.chmod(os.path.join(path, "upper"), mode)  # (not the umask's)
        os.mkdir(os.path.join(path, "work"), 0o700)
        layers = [os.open(os.path.join(path, name), _O_DIRECTORY_PATH) for name in ("upper", "work")]
        try:
            mounts.mount_overlay(path, f"/proc/self/fd/{lower}",
                                 *(f"/proc/self/fd/{fd}" for fd in layers))
        finally:
            for fd in layers:
                os.close(fd)
    finally:
        os.close(lower)
