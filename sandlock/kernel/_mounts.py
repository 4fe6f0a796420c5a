"""User, mount and PID namespaces, and the mounts made inside them.

Unprivileged: a process may create a user namespace, map its own uid and gid into it
and, holding every capability there, mount in a mount namespace that namespace owns.
Mounts made there never propagate back: the kernel turns the copied shared mounts
into slaves when the new mount namespace belongs to a less privileged user namespace.
"""

from __future__ import annotations

import ctypes
import os

from ._libc import PR_GET_DUMPABLE, PR_SET_DUMPABLE, prctl, syscall
from ._syscalls import nr

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWTIME = 0x00000080

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000

_MOUNT_ATTR_RDONLY = 0x1
_AT_FDCWD = -100
_OPEN_TREE_CLONE = 0x1
_AT_RECURSIVE = 0x8000
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4


class _MountAttr(ctypes.Structure):
    """struct mount_attr (mount_setattr(2))"""

    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def enter_namespaces(flags: int, inside: tuple[int, int] | None = None) -> None:
    """unshare(2) ``flags`` (CLONE_NEW*); with CLONE_NEWUSER, map our uid and gid to
    themselves, so that files keep their owners and the process its identity, or to
    ``inside`` (uid, gid): one id each either way, so no other is expressible inside.
    Only a single-threaded process may create a user namespace."""
    uid, gid = os.geteuid(), os.getegid()
    inside_uid, inside_gid = inside or (uid, gid)
    syscall(nr("unshare"), flags)
    if flags & CLONE_NEWUSER:
        # /proc/self of a non-dumpable process belongs to root: dumpable while writing.
        dumpable = prctl(PR_GET_DUMPABLE)
        prctl(PR_SET_DUMPABLE, 1)
        try:
            _write("/proc/self/setgroups", b"deny")  # before an unprivileged gid_map
            _write("/proc/self/uid_map", b"%d %d 1" % (inside_uid, uid))
            _write("/proc/self/gid_map", b"%d %d 1" % (inside_gid, gid))
        finally:
            prctl(PR_SET_DUMPABLE, dumpable)


def set_hostname(name: bytes) -> None:
    """The hostname of the caller's UTS namespace (``uname -n``, ``hostname``)."""
    syscall(nr("sethostname"), name, len(name))


# The switches that refuse unprivileged user namespaces: (sysctl, the refusing value).
_USERNS_SWITCHES = (
    ("user.max_user_namespaces", "0"),
    ("kernel.unprivileged_userns_clone", "0"),  # Debian's
    ("kernel.apparmor_restrict_unprivileged_userns", "1"),  # Ubuntu's AppArmor
)


def userns_refusal() -> str | None:
    """Which setting of this machine refuses unprivileged user namespaces, if one does
    (e.g. "sysctl user.max_user_namespaces = 0"), for an error to name."""
    for name, refusing in _USERNS_SWITCHES:
        try:
            with open("/proc/sys/" + name.replace(".", "/"), "rb") as f:
                value = f.read().strip().decode()
        except OSError:
            continue  # not a switch of this kernel
        if value == refusing:
            return f"sysctl {name} = {value}"
    return None


def bind(source: str, target: str, *, recursive: bool = False) -> None:
    """Mount ``source`` (file or directory) over ``target`` (same kind)."""
    flags = MS_BIND | (MS_REC if recursive else 0)
    syscall(nr("mount"), os.fsencode(source), os.fsencode(target), None, flags, None)


def make_read_only(mount_point: str) -> None:
    """Make the mount at ``mount_point`` read-only, and only that: mount_setattr keeps
    the flags the kernel locked on it (nosuid, nodev...), which a remount would have
    to repeat exactly."""
    _set_read_only(mount_point, True)


def make_writable(mount_point: str) -> None:
    """Undo ``make_read_only`` on the mount at ``mount_point`` (a bind inherits the
    read-only flag of the mount it was taken from)."""
    _set_read_only(mount_point, False)


def _set_read_only(mount_point: str, read_only: bool) -> None:
    attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY) if read_only else \
        _MountAttr(attr_clr=_MOUNT_ATTR_RDONLY)
    syscall(nr("mount_setattr"), _AT_FDCWD, os.fsencode(mount_point), 0,
            ctypes.byref(attr), ctypes.sizeof(attr))


def mount_tmpfs(target: str, options: bytes) -> None:
    """An empty tmpfs at ``target`` (gone with the last process of the namespace)."""
    syscall(nr("mount"), b"tmpfs", os.fsencode(target), b"tmpfs",
            MS_NOSUID | MS_NODEV, options)


def mount_overlay(target: str, lower: str, upper: str, work: str) -> None:
    """An overlayfs at ``target``: ``lower`` seen through it, every write landing in
    ``upper`` (``work``: overlayfs's scratch, on upper's file system). ``userxattr``:
    its whiteouts and opaque marks are user.overlay.* xattrs, as an unprivileged
    mount requires (and no redirects or metacopy: a renamed lower directory is EXDEV,
    which tools answer by copying). The paths go into one option string where ','
    ':' and '\\' are separators: callers give /proc/self/fd/N paths."""
    for path in (lower, upper, work):
        if any(c in path for c in ",:\\"):
            raise ValueError(f"overlay layer path needs escaping: {path!r}")
    options = b"lowerdir=%s,upperdir=%s,workdir=%s,userxattr" % (
        os.fsencode(lower), os.fsencode(upper), os.fsencode(work))
    syscall(nr("mount"), b"overlay", os.fsencode(target), b"overlay", 0, options)


def detached_copy(path: str) -> int:
    """A descriptor on a copy of the tree at ``path`` with the mounts beneath it (a
    copy-on-write workspace), attached nowhere (open_tree): it stays what ``path`` was
    after something is mounted over ``path``."""
    return syscall(nr("open_tree"), _AT_FDCWD, os.fsencode(path),
                   _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE)


def attach(tree: int, target: str) -> None:
    """Mount the detached ``tree`` at ``target`` (move_mount); closes ``tree``."""
    try:
        syscall(nr("move_mount"), tree, b"", _AT_FDCWD, os.fsencode(target),
                _MOVE_MOUNT_F_EMPTY_PATH)
    finally:
        os.close(tree)


def mount_proc(target: str, pid_max: int = 0) -> None:
    """A procfs of the caller's PID namespace at ``target``, its sysctls read-only: root
    in the namespace's user namespace may write some (pid_max among them) whatever its
    capabilities. ``pid_max``, if not 0, is set first: the namespace's own (Linux 6.14
    and later; where the kernel has none, nothing is set)."""
    syscall(nr("mount"), b"proc", os.fsencode(target), b"proc",
            MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    sysctls = os.path.join(target, "sys")
    if pid_max:
        try:
            _write(os.path.join(sysctls, "kernel", "pid_max"), b"%d" % pid_max)
        except OSError:
            pass  # (RLIMIT_NPROC still holds those it does not exempt)
    bind(sysctls, sysctls)
    make_read_only(sysctls)


def clocks_from_zero() -> None:
    """After unshare(CLONE_NEWTIME), before the caller's first child: that child's time
    namespace has its monotonic and boot-time clocks start at 0 (offsets by minus their
    value now; the kernel refuses a clock made negative). The vDSO reads them too."""
    import time

    lines = []
    for name, clock in (("monotonic", time.CLOCK_MONOTONIC), ("boottime", time.CLOCK_BOOTTIME)):
        lines.append(b"%s -%d 0" % (name.encode(), int(time.clock_gettime(clock))))
    dumpable = prctl(PR_GET_DUMPABLE)  # (/proc/self of a non-dumpable process is root's)
    prctl(PR_SET_DUMPABLE, 1)
    try:
        _write("/proc/self/timens_offsets", b"\n".join(lines))
    finally:
        prctl(PR_SET_DUMPABLE, dumpable)


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
