"""The sandbox's own view of the machine, made in user, mount and PID namespaces.

* its own /proc: a procfs of its PID namespace, where processes outside the sandbox
  do not exist, with the kernel's secrets (kallsyms, keys...) masked;
* private scratch directories: /tmp, /var/tmp and /dev/shm of the default workspace
  are per-run directories mounted over the real ones, with the grants beneath them
  (a workspace under /tmp, sandlock's trust bundle) bound back in;
* autorun files (``_autorun``) bound read-only, repositories pinned.

Four steps, four places: ``plan`` in sandlock's process (all decisions, directories
created); ``enter`` in the keeper (namespaces, mounts); ``complete`` in the
namespace's first process, which alone can mount its procfs; ``remove`` in sandlock
when the run is over. Landlock rules name inodes, so the rules beneath a tree that
was mounted over are added again, by path, once the new tree is in place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..kernel import mounts
from . import _autorun

SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
# Files of /proc that tell the sandbox about the kernel, not about itself: symbol
# addresses, every key the user holds, memory maps of the kernel; masked by an
# unreadable empty file. (/sys/kernel and /sys/firmware are denied by Landlock.)
PROC_MASKED = (
    "kallsyms", "keys", "key-users", "kcore", "modules", "timer_list", "sched_debug",
    "sysrq-trigger", "latency_stats", "kpagecount", "kpageflags", "kpagecgroup",
    "vmallocinfo",
)
_RUN_PREFIX = "sandlock-run-"


@dataclass(frozen=True)
class Entered:
    """Descriptors the keeper opened for the namespace's processes (close-on-exec)."""

    mask_fd: int  # O_PATH on the mask file, no longer in view once /tmp is private
    host_proc_fd: int  # the host's /proc: "self" in it is a process's pid outside

    def host_pid(self) -> int:
        return int(os.readlink("self", dir_fd=self.host_proc_fd))


@dataclass(frozen=True)
class Isolation:
    """What to mount for one run, decided in sandlock's process."""

    run_dirs: tuple[str, ...]  # per-run directories sandlock made, removed by ``remove``
    mask: str  # an empty file nobody may read: what masked /proc files show
    private: tuple[tuple[str, str], ...]  # (per-run directory, scratch path it replaces)
    restored: tuple[tuple[str, str], ...]  # (granted path, its place in a per-run directory)
    protection: _autorun.Protection
    reanchored: tuple[tuple[str, int], ...]  # (path, Landlock access) to add again

    @classmethod
    def plan(cls, *, private: Iterable[str], granted: Iterable[str],
             rules: Iterable[tuple[str, int]], writable: Iterable[str],
             homes: Iterable[str], protect_autorun: bool, unscanned: Iterable[str] = (),
             ) -> Isolation:
        """``private``: scratch paths to replace; ``granted``: existing paths the
        policy grants (those beneath a private path are bound back); ``rules``: the
        compiled Landlock rules; ``writable``: the write grants (for autorun files),
        ``unscanned`` those of them not searched for repositories."""
        token = os.urandom(6).hex()
        base = _make_run_dir("/tmp", token)
        run_dirs = [base]
        mask = os.path.join(base, "mask")
        os.close(os.open(mask, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0))
        replaced = []
        try:
            for scratch in private:
                run_dir = base if scratch == "/tmp" else _make_run_dir(scratch, token)
                if run_dir != base:
                    run_dirs.append(run_dir)
                root = os.path.join(run_dir, "root")
                os.mkdir(root)
                os.chmod(root, 0o1777)  # as the scratch directory it stands for
                replaced.append((root, scratch))
            restored = _restorations(replaced, granted)
        except BaseException:
            _remove_all(run_dirs)
            raise
        moved = ("/proc", *(scratch for _, scratch in replaced))
        reanchored = tuple((path, access) for path, access in rules
                           if any(_within(path, top) for top in moved))
        protection = (_autorun.protect(writable, homes, (*SCRATCH, *unscanned))
                      if protect_autorun else _autorun.Protection())
        return cls(tuple(run_dirs), mask, tuple(replaced), restored, protection, reanchored)

    def enter(self) -> Entered:
        """In the keeper, single-threaded: new user and mount namespaces, then every
        mount but /proc. (The PID namespace comes later, ``enter_pid_namespace``.)"""
        mounts.enter_namespaces(mounts.CLONE_NEWUSER | mounts.CLONE_NEWNS)
        # Opened while the host's /proc and /tmp are still in view (close-on-exec).
        entered = Entered(os.open(self.mask, os.O_PATH | os.O_CLOEXEC),
                          os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        for source, place in self.restored:  # while the granted paths are still visible
            mounts.bind(source, place)
        for root, scratch in self.private:
            mounts.bind(root, scratch, recursive=True)
        for directory in self.protection.pinned:
            mounts.bind(directory, directory)
        for path in self.protection.read_only:
            mounts.bind(path, path)
            mounts.make_read_only(path)
        return entered

    @staticmethod
    def enter_pid_namespace() -> None:
        """The caller's next child is the first process of a new PID namespace. The
        caller can start no thread after this: it does so before."""
        mounts.enter_namespaces(mounts.CLONE_NEWPID)

    def complete(self, entered: Entered, add_rule: Callable[[str, int], None]) -> None:
        """In the first process of the PID namespace: its /proc, masked, and the
        Landlock rules of the trees now mounted over (``add_rule(path, access)``)."""
        mounts.mount_proc("/proc")
        mask = f"/proc/self/fd/{entered.mask_fd}"
        for name in PROC_MASKED:
            path = os.path.join("/proc", name)
            if os.path.exists(path):
                mounts.bind(mask, path)
        for path, access in self.reanchored:
            try:
                add_rule(path, access)
            except FileNotFoundError:
                pass  # not in the new tree: nothing to grant

    def remove(self) -> None:
        """Delete the per-run directories and what the sandbox left in them. Only ever
        from sandlock's own mount namespace: in the sandbox's, the granted paths are
        bound inside them, and a walk would delete the workspace through the binds."""
        _remove_all(self.run_dirs)


def _make_run_dir(parent: str, token: str) -> str:
    path = os.path.join(parent, _RUN_PREFIX + token)
    os.mkdir(path, 0o700)  # fails on anything already there: never someone else's
    return path


def _restorations(replaced: list[tuple[str, str]],
                  granted: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Mount points, made in the per-run directories, for the granted paths beneath a
    replaced scratch path (outermost only: the rest comes with it)."""
    found: list[tuple[str, str]] = []
    for path in sorted({os.path.realpath(p) for p in granted}):
        for root, scratch in replaced:
            if path == scratch or not _within(path, scratch):
                continue
            if any(_within(path, outer) for outer, _ in found) or not os.path.exists(path):
                break
            place = os.path.join(root, os.path.relpath(path, scratch))
            os.makedirs(os.path.dirname(place), exist_ok=True)
            if os.path.isdir(path):
                os.mkdir(place)
            else:
                os.close(os.open(place, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
            found.append((path, place))
            break
    return tuple(found)


def _remove_all(directories: Iterable[str]) -> None:
    for directory in directories:
        _remove_tree(directory)


def _remove_tree(path: str) -> None:
    """rm -rf without following a symlink the sandbox may have planted (fd-relative).
    The usual run leaves an empty scratch directory and the mask: a few syscalls."""
    try:
        for name, remove in (("root", os.rmdir), ("mask", os.unlink)):
            try:
                remove(os.path.join(path, name))
            except FileNotFoundError:
                pass
        os.rmdir(path)
    except FileNotFoundError:
        return
    except OSError:  # not empty: what the sandbox left, mount points of its grants
        for _, dirs, files, parent_fd in os.fwalk(path, topdown=False):
            for name in files:
                os.unlink(name, dir_fd=parent_fd)
            for name in dirs:
                try:
                    os.rmdir(name, dir_fd=parent_fd)
                except NotADirectoryError:  # a symlink to a directory
                    os.unlink(name, dir_fd=parent_fd)
        os.rmdir(path)


def _within(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")
