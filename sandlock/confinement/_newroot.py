"""Another root for the command (``--chroot DIR``, ``--image REF``): DIR, or an image's
unpacked root, becomes ``/`` for init and the command, in the sandbox's mount namespace.

Made by init, before it forks the command: the tree is taken (open_tree) before any
mask covers its path, attached over that path, made read-only, and given the sandbox's
own /proc and /dev (bound from the namespace's: the same masks, the same device
grants) and a /tmp of its own (an empty tmpfs). Landlock rules name inodes: the root
is granted read and execute, its /tmp everything, by rules init adds before the
command restricts itself; every other rule of the policy names the host's files,
which no path of the new root leads to. Then chroot: the command holds no capability
(it could not chroot again), and init, outside its Landlock domain and not dumpable,
is neither traceable nor readable through /proc/1/root.
"""

from __future__ import annotations

import os

from ..kernel import landlock, mounts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_READ = landlock.FS_READ_FILE | landlock.FS_READ_DIR | landlock.FS_EXECUTE
_EVERYTHING = (1 << 16) - 1  # (narrowed to what the ruleset handles)
_TMP_OPTIONS = b"mode=1777,size=50%"
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
# Bound from the sandbox's own namespace, where the root has a directory for them.
_BOUND = ("proc", "dev")


class NewRoot:
    """``path``: the directory on the host; ``cwd``: where the command starts in it."""

    def __init__(self, path: str, cwd: str = "/") -> None:
        self.path = path
        self.cwd = cwd
        self._tree = -1

    def take(self) -> None:
        """In init, before any mount: the tree at ``path`` as it is on the host."""
        self._tree = mounts.detached_copy(self.path)

    def enter(self, add_rule: Callable[[str, int], None]) -> None:
        """In init, once the sandbox's mounts are made: the root attached, furnished,
        granted, and entered (chroot, chdir)."""
        root = _mount_point(self.path)
        mounts.attach(self._tree, root)
        self._tree = -1
        mounts.make_read_only(root)
        top = os.open(root, _DIRECTORY)
        try:
            for name in _BOUND:
                _furnish(top, name, lambda target, name=name: mounts.bind(
                    "/" + name, target, recursive=True))
            add_rule(f"/proc/self/fd/{top}", _READ)
            _furnish(top, "tmp", lambda target: mounts.mount_tmpfs(target, _TMP_OPTIONS),
                     lambda target: add_rule(target, _EVERYTHING))
            os.fchdir(top)
        finally:
            os.close(top)
        os.chroot(".")
        os.chdir("/")


def _furnish(top: int, name: str, mount: Callable[[str], None],
             grant: Callable[[str], None] | None = None) -> None:
    """``mount`` over the root's directory ``name``, if it has one: reached by
    descriptor, never through a symlink (one planted there would lead to the host's
    tree, which the mount, or the grant made after it, would then be about)."""
    try:
        fd = os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    except OSError:
        return  # (none, or a symlink: left as it is)
    try:
        mount(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    if grant is not None:  # the mount's own root, looked up again through it
        mounted = os.open(name, _DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        try:
            grant(f"/proc/self/fd/{mounted}")
        finally:
            os.close(mounted)


def _mount_point(path: str) -> str:
    """Where to attach the root: its own path, or, where the namespace does not show it
    (beneath a private /tmp, or a mask: the image store is denied in every policy), the
    nearest directory above it that it shows; covered in this namespace only, and only
    init and the command, chrooted away from it, are ever there."""
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def new_root(chroot: str | None, image: str | None) -> NewRoot | None:
    """The run's other root, if its policy names one: an image is unpacked (or found
    unpacked) in sandlock's per-user store first (``sandlock.image``)."""
    if chroot is not None:
        return NewRoot(chroot)
    if image is None:
        return None
    from ..image import unpacked_image
    from ._fspolicy import image_store

    unpacked = unpacked_image(image, image_store(os.environ, os.path.expanduser("~")))
    return NewRoot(unpacked.root, unpacked.cwd)
