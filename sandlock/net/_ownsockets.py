"""Unix sockets the sandbox bound itself, and how an address is traced back to one."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading

from .._record import record, replace
from ..kernel import unix_socket_file, unix_socket_name
from ..netcall import AF_UNIX, Deferred, Outcome, SockAddress, Socket, UnixAddress, disconnect, execute

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from ..kernel import SharedDiag
    from ..netcall import ConfinedWorker, Request
    from ..netrules import NetPolicy

    T = TypeVar("T")


@record
class AbstractSocket:
    """A socket the sandbox bound to an abstract name: the kernel's identity of it."""

    inode: int
    cookie: bytes  # sock_diag's cookie: names this socket alone, for good
    nests: tuple[NetPolicy, ...] = ()  # the nested sandboxes its binder was in


class SandboxSockets:
    """Unix sockets the sandbox bound itself: its own IPC, always reachable.

    Recognised by the socket's own inode, read from sandlock's duplicate of it at bind
    time; which socket a file or an abstract name stands for is then asked of the
    kernel (sock_diag, about that one socket), never inferred from a path the sandbox
    could swap or from /proc/net/unix, where a name with a newline forges a line.

    Pathnames: ``files`` (socket files' identities, learnt from the kernel right after
    the binder bound them) only says when the question is worth asking.

    Abstract names (``abstract``: name -> the socket bound to it, with its cookie):
    one is the sandbox's while that very socket is alive (names are unique, and a
    socket keeps its name until it is gone); a name the registry does not hold is
    never asked about.
    """

    SWEEP_AT = 1024  # abstract names remembered before the closed ones are swept out

    def __init__(self) -> None:
        self.sockets: dict[int, None] = {}  # socket inodes bound to files, oldest first
        self.files: set[tuple[int, int]] = set()
        self.abstract: dict[bytes, AbstractSocket] = {}
        self._sweep_at = self.SWEEP_AT
        self._said = False  # that sock_diag does not answer
        self._lock = threading.Lock()  # (an after-check may run on a worker)
        # Where the kernel is asked: a private network's sockets are known to sock_diag
        # only there, through a socket its keeper made in it (None: sandlock's namespace).
        self.shared: SharedDiag | None = None

    def bind(self, worker: ConfinedWorker, request: Request, address: SockAddress) -> Outcome:
        """Bind ``request``'s socket on ``worker``, under the command's own rules (an
        abstract name, netlink: the supervisor's bind of them). A unix socket the sandbox
        binds is its own IPC: remembered, so that the sandbox may reach it without
        --unix-allow (or --allow-ipc, for abstract names). An abstract name, or one the
        kernel chooses (autobind), is bound here: the name it got is then asked of the
        kernel, with the socket's identity."""
        sock = request.socket
        outcome = worker.call(lambda: execute.bind(sock, address))
        if not outcome[1] and isinstance(address, UnixAddress) and sock.family == AF_UNIX:
            self.add_abstract(sock.fd, request.nested)
        return outcome

    # --- pathnames -----------------------------------------------------------------

    def add_file(self, socket_inode: int) -> None:
        """Socket ``socket_inode`` (sandlock's duplicate of it) was just bound to a
        file: remembered, with the file the kernel says it is bound to."""
        file = self._asked(lambda inode: unix_socket_file(inode, self.shared), socket_inode)
        if file is None:
            return
        self.sockets[socket_inode] = None
        self.files.add(file)

    def may_be_ours(self, address: UnixAddress) -> bool:
        return address.identity in self.files

    # --- abstract names ------------------------------------------------------------

    def add_abstract(self, fd: int, nests: tuple[NetPolicy, ...] = ()) -> None:
        """Socket ``fd`` (our duplicate) was just bound, by a name or autobind: remember
        the name the kernel gave it, exactly."""
        inode = os.fstat(fd).st_ino
        found = self._asked(lambda inode: unix_socket_name(inode, shared=self.shared), inode)
        if found is None:
            return
        cookie, name = found
        if not name.startswith(b"\0"):
            return
        with self._lock:
            if len(self.abstract) >= self._sweep_at:
                self._sweep()
            self.abstract[name[1:]] = AbstractSocket(inode, cookie, nests)

    def perform(self, sock: Socket, target: SockAddress, own: bool, connecting: bool,
                operation: Callable[[], Outcome | Deferred], nests: tuple[NetPolicy, ...],
                taken: Callable[[], None]) -> Outcome | Deferred:
        """A connect or send sandlock performs on unix socket ``sock``; ``own``: the
        verdict found ``target`` bound inside the sandbox (``identify``).

        A name the sandbox bound is its own only while the socket it bound there lives:
        once that is closed, anything, a host process too, may take the name. So the
        socket found before the operation must hold the name still after it (then
        nothing else held it in between). If it does not, a host's socket was reached
        in that window: what can be undone is (a connection shut down, a datagram
        association dissolved), ``taken`` says it, and the call fails. A socket the
        kernel bound to a name of its choice on the way (SO_PASSCRED) is remembered as
        the sandbox's, like one it binds."""
        unbound = _unbound(sock.fd)
        outcome = operation()
        if unbound and not _unbound(sock.fd):
            self.add_abstract(sock.fd, nests)
        if not own or not isinstance(target, UnixAddress) or not target.abstract:
            return outcome

        def confirmed(outcome: Outcome) -> Outcome:
            if outcome[1] or self.still_bound(target):
                return outcome
            if connecting:
                disconnect(sock)
            taken()
            return -1, errno.ECONNREFUSED

        if callable(outcome):
            return lambda gone: confirmed(outcome(gone))
        return confirmed(outcome)

    def still_bound(self, address: UnixAddress) -> bool:
        """Whether the socket ``identify`` found at ``address`` holds the name still, so
        that nothing else could have held it in between."""
        entry = self.abstract.get(address.path)
        return entry is not None and entry.inode == address.bound_socket and self._alive(address.path, entry)

    def bound_within(self, address: UnixAddress, nests: tuple[NetPolicy, ...]) -> bool:
        """Whether the sandbox's socket at ``address`` was bound inside every one of ``nests``."""
        entry = self.abstract.get(address.path) if address in self else None
        return entry is not None and all(any(nest is its for its in entry.nests) for nest in nests)

    def _alive(self, name: bytes, entry: AbstractSocket) -> bool:
        found = unix_socket_name(entry.inode, entry.cookie, self.shared)
        if found is not None and found[1] == b"\0" + name:
            return True
        with self._lock:  # closed: never the answer again
            if self.abstract.get(name) is entry:
                del self.abstract[name]
        return False

    def _asked(self, question: Callable[[int], T | None], socket_inode: int) -> T | None:
        """The kernel's answer about a socket held here: None only if it cannot tell
        (then said, once)."""
        try:
            found = question(socket_inode)
        except OSError:
            found = None
        if found is None:
            self._unanswered()
        return found

    def _unanswered(self) -> None:
        if not self._said:
            self._said = True
            print("sandlock: the kernel does not say which name or file a unix socket got "
                  "(sock_diag, CONFIG_UNIX_DIAG): the sandbox's own sockets are out of its "
                  "reach (unless --allow-ipc, for abstract names; --unix-allow, for files)",
                  file=sys.stderr, flush=True)

    def _sweep(self) -> None:
        """Drop the closed sockets (a run binding name after name must not grow this)."""
        for name, entry in list(self.abstract.items()):
            if unix_socket_name(entry.inode, entry.cookie, self.shared) is None:
                del self.abstract[name]
        self._sweep_at = max(self.SWEEP_AT, 2 * len(self.abstract))

    # --- both ----------------------------------------------------------------------

    def __contains__(self, address: UnixAddress) -> bool:
        if address.bound_socket is None:
            return False
        if address.abstract:
            entry = self.abstract.get(address.path)
            return entry is not None and entry.inode == address.bound_socket
        return address.bound_socket in self.sockets

    def identify(self, address: SockAddress | None) -> SockAddress | None:
        """For an address the sandbox may have bound: which of its sockets is bound
        there (asked of the kernel), so that the verdict recognises it by its inode."""
        if not isinstance(address, UnixAddress) or address.unnamed:
            return address
        if address.abstract:  # (the name "" too: sun_path a single NUL)
            entry = self.abstract.get(address.path)
            if entry is None or not self._alive(address.path, entry):
                return address
            return replace(address, bound_socket=entry.inode)
        if not self.may_be_ours(address):
            return address
        for socket_inode in reversed(list(self.sockets)):  # the newest are the likeliest
            file = unix_socket_file(socket_inode, self.shared)
            if file is None:
                self.sockets.pop(socket_inode, None)  # closed: never the answer again
                continue
            if file == address.identity:
                return replace(address, bound_socket=socket_inode)
        return address


_libc = ctypes.CDLL(None, use_errno=True)
_FAMILY_ONLY = 2  # sizeof(sa_family_t): the length of an unbound unix socket's address


def _unbound(fd: int) -> bool:
    """Whether unix socket ``fd`` has no address yet (only the length is asked for)."""
    name = ctypes.create_string_buffer(4)
    length = ctypes.c_uint32(len(name))
    return _libc.getsockname(fd, name, ctypes.byref(length)) == 0 and length.value == _FAMILY_ONLY
