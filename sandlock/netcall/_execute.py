"""Execute: the code that acts on the child's behalf, on its duplicated socket (with
``_sending``, which sends).

Every operation uses the supervisor's own copies (addresses, bytes, descriptors) made
by materialize; nothing is read from the child here (but the bytes of a send, which
nothing judges: ``_payload``). Results come back as (value, errno) for the
notification reply.
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import select
import socket
import stat
import threading
from collections.abc import Callable

from ..kernel import PR_SET_NO_NEW_PRIVS, IoVec, nr, prctl, syscall
from . import _sockaddr
from ._materialize import Message, Socket
from ._sockaddr import InetAddress, SockAddress, UnixAddress

Outcome = tuple[int, int]  # (return value, errno): errno 0 means success
# What remains of an operation on a blocking socket that has to wait: run on a worker,
# given a pidfd of the calling thread (readable once it is gone: killed).
Deferred = Callable[[int], Outcome]

_libc = ctypes.CDLL(None, use_errno=True)  # ctypes releases the GIL during these calls
_libc.sendmsg.restype = ctypes.c_ssize_t
_O_PATH = 0o10000000
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_AT_FDCWD = -100
_SOCK_STREAM, _SOCK_DGRAM = 1, 2
_UNSPEC_ADDRESS = bytes(16)  # family AF_UNSPEC: connect() dissolves a datagram association
_AF_INET, _AF_INET6 = 2, 10
_SOL_SOCKET, _SO_ERROR = 1, 4
_MSG_DONTWAIT = 0x40
INLINE_WAIT_MS = 1  # a loopback handshake is over by then; anything slower waits on a worker
_BACKLOG_RETRY_MS = 10  # a full unix backlog gives no readiness event: try again this often


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(IoVec)), ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t), ("flags", ctypes.c_int),
    ]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _outcome(result: int) -> Outcome:
    return (result, 0) if result >= 0 else (-1, ctypes.get_errno())


def connect(sock: Socket, address: SockAddress) -> Outcome | Deferred:
    """connect(); on a blocking stream socket, without blocking this thread.

    The connection is started non-blocking (the flag is set on the shared file for the
    duration of the call only: the command is inside this very syscall) and, if the
    handshake is not over at once (loopback usually is), finished on a worker.
    """
    if sock.nonblocking or sock.type != _SOCK_STREAM:
        return _connect_now(sock.fd, address)
    value, error = _connect_without_blocking(sock.fd, address)
    if error == errno.EINPROGRESS:
        return completed(sock.fd, INLINE_WAIT_MS) or (lambda gone: completed(sock.fd, -1, gone))
    if error == errno.EAGAIN:  # a unix listener's backlog is full: wait, as the kernel would
        return lambda gone: _until_done(gone, lambda: _connect_without_blocking(sock.fd, address),
                                        retry_ms=_BACKLOG_RETRY_MS)
    return value, error


def _connect_without_blocking(fd: int, address: SockAddress) -> Outcome:
    blocking = os.get_blocking(fd)  # (O_NONBLOCK through fcntl, without the module)
    os.set_blocking(fd, False)
    try:
        return _connect_now(fd, address)
    finally:
        os.set_blocking(fd, blocking)


def _until_done(gone: int, attempt: Callable[[], Outcome], *, retry_ms: int) -> Outcome:
    """Repeat a non-blocking ``attempt`` while it would block, every ``retry_ms``. Ends
    (EINTR, nobody left to tell) as soon as the caller is gone, so nothing is connected
    for a dead command."""
    poller = select.poll()
    if gone >= 0:
        poller.register(gone, select.POLLIN)
    while True:
        value, error = attempt()
        if error not in (errno.EAGAIN, errno.EWOULDBLOCK):
            return value, error
        if any(ready == gone for ready, _ in poller.poll(retry_ms)):
            return -1, errno.EINTR


def _connect_now(fd: int, address: SockAddress) -> Outcome:
    if isinstance(address, InetAddress):  # the common case: no file to open
        raw = _sockaddr.encode(address)
        return _outcome(_libc.connect(fd, raw, len(raw)))
    with _kernel_address(address) as raw:
        if isinstance(raw, int):
            return -1, raw
        return _outcome(_libc.connect(fd, raw, len(raw)))


def completed(fd: int, timeout_ms: int, gone: int = -1) -> Outcome | None:
    """The result of a connect in progress, once the socket is writable (None: not yet).

    ``gone`` (a pidfd) readable: the caller was killed. Stop waiting (EINTR, nobody is
    left to tell), so that our duplicate is closed and cannot keep the socket alive to
    connect later: natively the socket would have died with the command.
    """
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if gone >= 0:
        poller.register(gone, select.POLLIN)
    events = dict(poller.poll(timeout_ms))
    if not events:
        return None
    if gone >= 0 and gone in events:
        return -1, errno.EINTR
    if events.get(fd) == select.POLLOUT:  # no POLLERR: no error is pending, it connected
        return 0, 0
    error = socket_error(fd)
    return (-1, error) if error else (0, 0)


def socket_error(fd: int) -> int:
    value = ctypes.c_int(0)
    size = ctypes.c_uint32(ctypes.sizeof(value))
    _libc.getsockopt(fd, _SOL_SOCKET, _SO_ERROR, ctypes.byref(value), ctypes.byref(size))
    return value.value


def socket_inode(sock: Socket) -> int:
    return os.fstat(sock.fd).st_ino


def bind(sock: Socket, address: SockAddress) -> Outcome:
    raw = _sockaddr.encode(address)
    return _outcome(_libc.bind(sock.fd, raw, len(raw)))


def disconnect(sock: Socket) -> None:
    """Undo a connect as far as can be: a connection is shut down both ways, a
    datagram association dissolved (connect to AF_UNSPEC)."""
    if sock.type == _SOCK_DGRAM:
        _libc.connect(sock.fd, _UNSPEC_ADDRESS, len(_UNSPEC_ADDRESS))
    else:
        _libc.shutdown(sock.fd, socket.SHUT_RDWR)


def local_address_for_redirect(sock: Socket) -> tuple[str, int] | int:
    """Where the proxy will see ``sock`` connect from, binding it to loopback first if
    it is unbound: the proxy must learn the route before the connection arrives, so
    the source address has to be known before the connect. An errno if unbindable.

    IPv6 sockets bind the v4-mapped loopback (and reach the proxy's IPv4 listener)
    unless IPV6_V6ONLY is set; the address returned is unmapped either way.
    """
    ip, port = _local_address(sock)
    if port == 0:
        loopback = "::1" if sock.family == _AF_INET6 and _v6_only(sock.fd) else "127.0.0.1"
        error = bind(sock, _sockaddr.inet(sock.family, loopback, 0))[1]
        if error:
            return error
        ip, port = _local_address(sock)
    if ip in ("0.0.0.0", "::"):  # bound to the wildcard: loopback is what connects
        ip = "127.0.0.1" if sock.family == _AF_INET or not _v6_only(sock.fd) else "::1"
    return (ip[7:] if ip.startswith("::ffff:") else ip), port


def local_port(sock: Socket) -> int:
    return _local_address(sock)[1]


def _local_address(sock: Socket) -> tuple[str, int]:
    with socket.socket(sock.family, sock.type, fileno=os.dup(sock.fd)) as view:
        name = view.getsockname()
    return name[0], name[1]


def _v6_only(fd: int) -> bool:
    with socket.socket(_AF_INET6, _SOCK_STREAM, fileno=os.dup(fd)) as view:
        return bool(view.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))


def listen(sock: Socket, backlog: int) -> Outcome:
    return _outcome(_libc.listen(sock.fd, backlog))


def send_now(fd: int, message: Message, flags: int) -> Outcome:
    buffers = [ctypes.create_string_buffer(chunk, len(chunk)) for chunk in message.data]
    iov = (IoVec * max(len(buffers), 1))(*(
        IoVec(ctypes.addressof(b), len(chunk)) for b, chunk in zip(buffers, message.data)))
    control = ctypes.create_string_buffer(message.control, len(message.control)) if message.control else None
    with _kernel_address(message.destination) as raw:
        if isinstance(raw, int):
            return -1, raw
        name = ctypes.create_string_buffer(raw, len(raw)) if raw else None
        header = _MsgHdr(
            ctypes.addressof(name) if name else None, len(raw or b""),
            iov, len(buffers),
            ctypes.addressof(control) if control else None, len(message.control), 0,
        )
        return _outcome(_libc.sendmsg(fd, ctypes.byref(header), flags))


class _kernel_address:
    """The sockaddr bytes to hand the kernel, or an errno.

    A unix pathname is reached through an O_PATH descriptor opened with
    RESOLVE_NO_SYMLINKS on the path the verdict saw (already symlink-free), so a
    symlink planted since then cannot redirect sandlock, which is not confined by
    the child's Landlock rules, to another socket.
    """

    def __init__(self, address: SockAddress | None) -> None:
        self._address = address
        self._fd = -1

    def __enter__(self) -> bytes | int | None:
        address = self._address
        if address is None:
            return None
        if isinstance(address, UnixAddress) and not address.abstract and address.path:
            try:
                self._fd = _open_socket_file(address, address.identity)
            except OSError as exc:
                return exc.errno or errno.ECONNREFUSED
            return _sockaddr.encode(_sockaddr.unix_path(f"/proc/self/fd/{self._fd}"))
        return _sockaddr.encode(address)

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)


def _open_socket_file(address: UnixAddress, identity: tuple[int, int] | None) -> int:
    """An O_PATH fd on the socket file at ``address``, which must still be the file the
    verdict judged (``identity``: st_dev, st_ino), reached without any symlink."""
    fd = _open_beneath(address.root, address.path, 0)
    found = os.fstat(fd)
    if not stat.S_ISSOCK(found.st_mode) or (
            identity is not None and (found.st_dev, found.st_ino) != identity):
        os.close(fd)
        raise OSError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))
    return fd


def _open_beneath(root: bytes, path: bytes, flags: int) -> int:
    """O_PATH on ``path`` without following any symlink; beneath ``root`` if given."""
    how = _OpenHow(_O_PATH | os.O_CLOEXEC | flags, 0, _RESOLVE_NO_SYMLINKS)
    if not root:
        return syscall(nr("openat2"), _AT_FDCWD, path, ctypes.byref(how), ctypes.sizeof(how))
    root_fd = os.open(root, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        how.resolve |= _RESOLVE_BENEATH
        return syscall(nr("openat2"), root_fd, path.lstrip(b"/") or b".",
                       ctypes.byref(how), ctypes.sizeof(how))
    finally:
        os.close(root_fd)


class ConfinedWorker:
    """A sandlock thread under the command's own Landlock rules.

    Binding a unix socket to a path creates a file: that is the filesystem policy's
    decision, so sandlock performs it from a thread restricted exactly like the
    command (Landlock and no_new_privs are per thread), never from an unconfined one.
    """

    def __init__(self, restrict: Callable[[], None] | None) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(restrict,), daemon=True,
                                        name="sandlock-confined")
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self, restrict: Callable[[], None] | None) -> None:
        try:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            if restrict is not None:
                restrict()
        except BaseException as exc:  # noqa: BLE001 - reported to the creating thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        while (job := self._jobs.get()) is not None:
            job()

    def call(self, function: Callable[[], Outcome]) -> Outcome:
        """``function()`` on the confined thread; its exception is raised here."""
        done = threading.Event()
        result: list[Outcome] = []
        failure: list[BaseException] = []

        def job() -> None:
            try:
                result.append(function())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                failure.append(exc)
            finally:
                done.set()

        self._jobs.put(job)
        done.wait()
        if failure:
            raise failure[0]
        return result[0]

    def stop(self) -> None:
        self._jobs.put(None)
