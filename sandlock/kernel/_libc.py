"""ctypes access to the kernel entry points the standard library does not wrap.

Everything that needs a raw syscall or prctl goes through here, so that argument
marshalling (the variadic ``syscall`` truncates un-wrapped pointers to 32 bits)
and errno handling are written once.
"""

from __future__ import annotations

import ctypes
import os

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl.restype = ctypes.c_int

# prctl options (linux/prctl.h)
PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_GET_SECCOMP = 21  # answers SECCOMP_MODE_FILTER (2) under a seccomp filter
SECCOMP_MODE_FILTER = 2
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_SET_CHILD_SUBREAPER = 36


class IoVec(ctypes.Structure):
    """struct iovec"""

    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _marshal(arg: object) -> object:
    if arg is None:
        return ctypes.c_void_p(None)
    if isinstance(arg, int):
        return ctypes.c_long(arg)
    return arg  # ctypes pointers, byref() objects and buffers pass as they are


def syscall(nr: int, *args: object) -> int:
    """Invoke syscall ``nr``; raise OSError with the kernel's errno on failure."""
    result = _syscall(ctypes.c_long(nr), *[_marshal(a) for a in args])
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _raise_on_failure(result: int, function: object, args: object) -> int:
    """ctypes errcheck: -1 means failure, with errno saying why."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def syscall_function(nr: int, *argtypes: type) -> Callable[..., int]:
    """Syscall ``nr`` as a function of fixed argument types, for the supervisor's hot
    path: ctypes converts the arguments itself, no marshalling per call. Raises OSError
    like ``syscall``."""
    prototype = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, *argtypes, use_errno=True)
    function = prototype(("syscall", _libc))
    function.errcheck = _raise_on_failure
    import functools  # (here: the start-up path does not make these; functools ~0.5 ms)

    return functools.partial(function, nr)


_ioctl = _libc.ioctl
_ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)
_ioctl.restype = ctypes.c_int
_ioctl.errcheck = _raise_on_failure


def ioctl(fd: int, request: int, argument: int | bytes | ctypes.Array) -> int:
    """ioctl(2): ``argument`` is the value itself (an int), bytes the kernel reads, or a
    ctypes buffer it may fill; raises OSError. Through ctypes (loaded by every run)
    rather than fcntl, a library to load (~0.3 ms) before a supervised command's go;
    ~0.2 µs more a call."""
    return _ioctl(fd, request, argument)


_getsockopt = _libc.getsockopt


def socket_option(fd: int, level: int, option: int) -> int:
    """getsockopt() of an int option on a bare descriptor; raises OSError."""
    value = ctypes.c_int(0)
    size = ctypes.c_uint32(ctypes.sizeof(value))
    if _getsockopt(fd, level, option, ctypes.byref(value), ctypes.byref(size)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return value.value


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2) raising OSError on failure."""
    result = _prctl(option, arg2, arg3, arg4, arg5)  # (converted by argtypes: ~2 us less a call)
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


_ADDRESS_BYTES = {2: 4, 10: 16}  # AF_INET, AF_INET6


def inet_pton(family: int, text: str) -> bytes | None:
    """The C library's reading of an IP address of ``family`` (AF_INET or AF_INET6), or
    None when ``text`` is not one. Through ctypes rather than ``_socket``: the policy
    checks read addresses before the command starts, where loading ``_socket`` costs
    ~0.3 ms."""
    if not text.isascii() or "\0" in text:
        return None
    packed = ctypes.create_string_buffer(16)
    if _libc.inet_pton(family, text.encode(), packed) != 1:
        return None
    return packed.raw[: _ADDRESS_BYTES[family]]


RLIMIT_NPROC = 6


class _RLimit(ctypes.Structure):
    """struct rlimit"""

    _fields_ = [("soft", ctypes.c_ulong), ("hard", ctypes.c_ulong)]


def limit_tasks(count: int) -> None:
    """RLIMIT_NPROC of the calling process, soft and hard: ``count``, or the limit it
    has if that is lower (never raised). Through ctypes: ``resource`` would be one more
    library to load in the command's process before it execs."""
    limit = _RLimit()
    if _libc.getrlimit(RLIMIT_NPROC, ctypes.byref(limit)) != 0:
        raise OSError(ctypes.get_errno(), "getrlimit(RLIMIT_NPROC)")
    limit.soft = limit.hard = min(count, limit.soft, limit.hard)
    if _libc.setrlimit(RLIMIT_NPROC, ctypes.byref(limit)) != 0:
        raise OSError(ctypes.get_errno(), "setrlimit(RLIMIT_NPROC)")


# openat2(2): how a path is resolved (linux/openat2.h).
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    """struct open_how"""

    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def openat2(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    """openat2(2) with ``flags`` (O_*) and ``resolve`` (RESOLVE_*); raises OSError. A
    root's descriptor and RESOLVE_IN_ROOT look a path up as a process whose root that
    is would: its absolute symlinks, and ".." never above it."""
    from ._syscalls import nr

    how = _OpenHow(flags, 0, resolve)
    return syscall(nr("openat2"), dirfd, ctypes.c_char_p(path), ctypes.byref(how), ctypes.sizeof(how))


def filesystem_type(fd: int) -> int:
    """fstatfs(2)'s f_type of the file system ``fd`` is on (PROC_SUPER_MAGIC...)."""
    buffer = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first field
    if _libc.fstatfs(fd, buffer) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int.from_bytes(buffer.raw[:8], "little", signed=True)


_AF_UNIX, _SOCK_SEQPACKET, _SOCK_CLOEXEC = 1, 5, 0o2000000


def seqpacket_pair() -> tuple[int, int]:
    """A connected pair of unix SOCK_SEQPACKET sockets (close-on-exec). Through ctypes
    rather than ``socket``: made before the command starts, where loading ``_socket``
    costs ~0.3 ms."""
    ends = (ctypes.c_int * 2)()
    if _libc.socketpair(_AF_UNIX, _SOCK_SEQPACKET | _SOCK_CLOEXEC, 0, ends) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ends[0], ends[1]


# Descriptors a process leaves to the program it executes, or hands to sandlock.
_CLOSE_RANGE_CLOEXEC = 4  # Linux 5.11
_LAST_FD = 0xFFFFFFFF


def close_on_exec_from(first: int) -> None:
    """Mark every descriptor from ``first`` up close-on-exec, in one call that needs no
    /proc (which the confined child may not be allowed to read)."""
    from ._syscalls import nr

    syscall(nr("close_range"), first, _LAST_FD, _CLOSE_RANGE_CLOEXEC)


def take_fd(pid: int, fd: int) -> int:
    """Our own descriptor (close-on-exec) for process ``pid``'s open file ``fd``: how the
    command's seccomp listener reaches sandlock. Made of what start-up has loaded
    already: the command waits for it."""
    from ._syscalls import nr

    pidfd = os.pidfd_open(pid)
    try:
        return syscall(nr("pidfd_getfd"), pidfd, fd, 0)
    finally:
        os.close(pidfd)
