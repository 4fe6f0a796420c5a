"""Checks of the fields upstream Sandlock's Policy has and sandlock holds its own way
(``_upstream``): loaded only by a policy that sets one."""

from __future__ import annotations

import os

from .._errors import PolicyError
from . import _values as check

_GLOB = frozenset("*?[")
_BRANCHFS = "fuse.branchfs"  # the file system type a BranchFS mount shows in mountinfo


def notif_paths(name: str, value: object) -> tuple[str, ...]:
    """The paths upstream's NotifPolicy (or a policy file's list) denies: absolute
    paths, a directory written with or without its "/"; no glob (a pattern would need
    a judgment of every open, which sandlock makes by path rules, not at open time)."""
    if type(value).__name__ == "NotifPolicy":
        from ._upstream import denied_paths

        value = denied_paths(name, value)
    for path in check.strings(name, value):
        if not os.path.isabs(path):
            raise PolicyError(name, f"{path}: expected an absolute path")
        if _GLOB & set(path):
            raise PolicyError(name, f"{path}: patterns are not supported (name each path; "
                              "a directory ending in / covers what is beneath it)")
    return check.absolute_paths(name, [path.rstrip("/") or "/" for path in value])  # type: ignore[union-attr]


def check_branchfs(workdir: str) -> None:
    """BRANCHFS: the workdir must be on a BranchFS mount (a FUSE file system of type
    fuse.branchfs, as /proc/self/mountinfo lists it); sandlock mounts none itself."""
    mount = _mount_of(workdir)
    if mount != _BRANCHFS:
        raise PolicyError("fs_isolation", f"branchfs: {workdir} is not on a BranchFS mount "
                          f"(it is on {mount or 'an unknown file system'}); sandlock mounts no "
                          "BranchFS itself: mount one with branchfs, or use overlayfs")


def _mount_of(path: str) -> str:
    """The file system type of the mount holding ``path`` (the longest mount point
    above it, the last one mounted there)."""
    found, depth = "", -1
    with open("/proc/self/mountinfo", "rb") as file:
        for line in file.read().decode("utf-8", "replace").splitlines():
            fields = line.split(" ")
            separator = fields.index("-")
            point = _unescaped(fields[4])
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= depth:
                found, depth = fields[separator + 1], len(point)
    return found


def _unescaped(field: str) -> str:
    """mountinfo's octal escapes (a space is \\040)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field
