"""Landlock kernel interface: constants, structures and the three syscalls.

No policy lives here (that is ``_fspolicy``); this module only says what the
running kernel supports and turns access masks into a ruleset.  It is imported
on every run, so it depends on nothing heavier than ctypes.

Usage: build a :class:`Ruleset` in the parent, fork, and in the child set
no_new_privs and call :meth:`Ruleset.restrict_self` before exec.  The ruleset fd
is close-on-exec, so the confined program never sees it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from .._errors import SetupError
from . import _libc
from ._syscalls import nr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# landlock_create_ruleset() flag: return the ABI version instead of a ruleset.
_CREATE_RULESET_VERSION = 1 << 0

# landlock_add_rule() rule types.
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

# Filesystem access rights (ABI 1 unless noted).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: rename/link across directories
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

# Network access rights (ABI 4).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1

# IPC scopes (ABI 6).
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# landlock_restrict_self() flags (ABI 7): audit logging controls.
RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1 << 0
RESTRICT_SELF_LOG_NEW_EXEC_ON = 1 << 1
RESTRICT_SELF_LOG_SUBDOMAINS_OFF = 1 << 2

# The only rights the kernel accepts in a rule on a non-directory (others: EINVAL).
FS_FILE_ACCESS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_FS_READ = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE

# Filesystem rights each ABI level introduced.
_FS_ADDED = {
    1: FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR
    | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK
    | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM,
    2: FS_REFER,
    3: FS_TRUNCATE,
    5: FS_IOCTL_DEV,
}
_NET_ABI = 4
_SCOPE_ABI = 6

# What each ABI level adds, for `sandlock check`.
ABI_FEATURES: dict[int, str] = {
    1: "filesystem access control (Linux 5.13)",
    2: "rename and link across directories (refer, Linux 5.19)",
    3: "file truncation control (Linux 6.2)",
    4: "TCP bind and connect control (Linux 6.7)",
    5: "ioctl control on devices (Linux 6.10)",
    6: "IPC scoping: abstract unix sockets and signals (Linux 6.12)",
    7: "audit logging controls (Linux 6.15)",
}


def abi_version() -> int:
    """The Landlock ABI of the running kernel; 0 when absent or disabled at boot."""
    try:
        return _libc.syscall(nr("landlock_create_ruleset"), None, 0, _CREATE_RULESET_VERSION)
    except OSError:  # ENOSYS: not built in; EOPNOTSUPP: not enabled (lsm=)
        return 0


def fs_handled(abi: int) -> int:
    """Every filesystem right ``abi`` can restrict (the handled mask)."""
    mask = 0
    for level, rights in _FS_ADDED.items():
        if level <= abi:
            mask |= rights
    return mask


def fs_read_access(abi: int) -> int:
    """Rights of a read grant: read files, list directories, execute."""
    return _FS_READ & fs_handled(abi)


def fs_write_access(abi: int) -> int:
    """Rights of a write grant: read plus every write-ish right ``abi`` knows, but
    creating device nodes (no ordinary program needs it; with CAP_MKNOD it would open
    any device of the machine)."""
    return fs_handled(abi) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)


def net_handled(abi: int) -> int:
    """Network rights ``abi`` can restrict."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= _NET_ABI else 0


def scopes_supported(abi: int) -> int:
    """IPC scopes ``abi`` supports."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= _SCOPE_ABI else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # ABI 4
        ("scoped", ctypes.c_uint64),  # ABI 6
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _ruleset_attr_size(abi: int) -> int:
    """The struct size this ABI knows (older kernels reject a longer one)."""
    if abi >= _SCOPE_ABI:
        return ctypes.sizeof(_RulesetAttr)
    if abi >= _NET_ABI:
        return _RulesetAttr.scoped.offset
    return _RulesetAttr.handled_access_net.offset


def _check_supported(abi: int, handled_fs: int, handled_net: int, scoped: int) -> None:
    """SetupError naming the first thing asked for that this kernel cannot enforce."""
    if abi == 0:
        raise SetupError("Landlock is unavailable: the kernel lacks it or it is not enabled (lsm=)")
    if handled_fs & ~fs_handled(abi):
        raise SetupError(f"filesystem rights {handled_fs:#x} need a newer Landlock ABI than {abi}")
    if handled_net & ~net_handled(abi):
        raise SetupError(f"TCP port rules need Landlock ABI {_NET_ABI}; this kernel has ABI {abi}")
    if scoped & ~scopes_supported(abi):
        raise SetupError(f"IPC scoping needs Landlock ABI {_SCOPE_ABI}; this kernel has ABI {abi}")


def restrict_self(ruleset_fd: int, flags: int = 0) -> None:
    """Confine the calling thread with the ruleset behind ``ruleset_fd``."""
    try:
        _libc.syscall(nr("landlock_restrict_self"), ruleset_fd, flags)
    except OSError as exc:
        raise _not_enforced(exc) from None


def _not_enforced(exc: OSError) -> SetupError:
    hint = " (set no_new_privs first)" if exc.errno == errno.EPERM else ""
    return SetupError(f"cannot enforce the Landlock ruleset: {exc.strerror}{hint}")


class Ruleset:
    """A Landlock ruleset fd: create, add rules, then restrict_self in the child."""

    def __init__(self, handled_fs: int, handled_net: int = 0, scoped: int = 0) -> None:
        self._fd = -1
        abi = abi_version()
        _check_supported(abi, handled_fs, handled_net, scoped)
        self.handled_fs = handled_fs
        self.handled_net = handled_net
        self.scoped = scoped
        attr = _RulesetAttr(handled_fs, handled_net, scoped)
        try:
            fd = _libc.syscall(
                nr("landlock_create_ruleset"), ctypes.byref(attr), _ruleset_attr_size(abi), 0
            )
        except OSError as exc:
            raise SetupError(f"cannot create a Landlock ruleset: {exc.strerror}") from None
        self._fd = fd
        # The kernel creates it O_CLOEXEC; make sure, since the exec'd program
        # must never hold the means to build its own (looser) domain stack.
        if os.get_inheritable(fd):
            os.set_inheritable(fd, False)

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("Landlock ruleset is closed")
        return self._fd

    def allow_path(self, path: str, access: int) -> tuple[tuple[int, int], int]:
        """Allow ``access`` beneath ``path`` (the path itself if not a directory).

        Rights the ruleset does not handle are dropped (they are never denied
        anyway), and so are directory-only rights on a non-directory, which the
        kernel would reject.  Returns ((st_dev, st_ino) of the file the rule is
        on, the rights granted there).  OSError from opening ``path`` propagates.
        """
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            access &= self.handled_fs
            if not stat.S_ISDIR(info.st_mode):
                access &= FS_FILE_ACCESS
            if access:  # an empty rule is an error (ENOMSG) and grants nothing
                self._add_rule(_RULE_PATH_BENEATH, _PathBeneathAttr(access, fd), path)
            return (info.st_dev, info.st_ino), access
        finally:
            os.close(fd)

    def allow_port(self, port: int, access: int) -> None:
        """Allow the network ``access`` (NET_* rights) on TCP ``port``."""
        if not 0 <= port <= 0xFFFF:
            raise ValueError(f"TCP port out of range: {port}")
        access &= self.handled_net
        if access:
            self._add_rule(_RULE_NET_PORT, _NetPortAttr(access, port), f"port {port}")

    def _add_rule(self, rule_type: int, attr: ctypes.Structure, what: str) -> None:
        try:
            _libc.syscall(nr("landlock_add_rule"), self.fileno(), rule_type, ctypes.byref(attr), 0)
        except OSError as exc:
            raise SetupError(f"cannot add a Landlock rule for {what}: {exc.strerror}") from None

    def restrict_self(self, flags: int = 0) -> None:
        """Confine the calling thread (and what it execs); no_new_privs must be set."""
        restrict_self(self.fileno(), flags)

    def restricter(self) -> Callable[[], None]:
        """``restrict_self()`` made ready once for many forked processes to call (a
        long-lived sandbox's resident puts each process it forks in this layer): the
        ctypes call prepared in advance costs a fork ~30 µs less, mostly copy-on-write
        faults that marshalling each call would take."""
        enforce = _libc.syscall_function(nr("landlock_restrict_self"), ctypes.c_int, ctypes.c_uint)
        fd = self.fileno()

        def restrict() -> None:
            try:
                enforce(fd, 0)
            except OSError as exc:
                raise _not_enforced(exc) from None

        return restrict

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Ruleset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
