"""--net-private-loopback from the supervisor's side: which namespace a call is
performed in.

The command's sockets are made in the sandbox's own network namespace, where only
`lo` lives: whatever is done on them reaches the sandbox and nothing else. A
destination of the host's that the rules allow (a host, the DNS responder, the HTTP
proxy, the UDP sink) is reached by a socket sandlock makes in its own namespace,
given the options the command set on its socket, connected there, and installed
under the command's descriptor number before the answer (``kernel.netns``).

The one thing never done: a decision about the private loopback (``PRIVATE_LOOPBACK``)
performed on a socket of the host's, which would reach the host's loopback. Such a
socket is in the command's table only once sandlock put it there (or if the command
was handed one): it is refused that, with EACCES.
"""

from __future__ import annotations

import errno
import os
import select
import socket

from ..kernel import netns
from ..netcall import Socket
from ._judge import PRIVATE_LOOPBACK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..kernel import Listener
    from ._audit import Audit
    from ..netcall import Deferred, Outcome, Request
    from ._judge import Decision

# Options a program sets before connecting that change what the connection does,
# copied to the host's socket: (level, option, size). Buffer sizes are left to the
# kernel (the value read is twice the one set), as are options only root may set.
_SOL_SOCKET, _TCP, _IPV6 = 1, 6, 41
_COPIED = (
    (_SOL_SOCKET, 2, 4), (_SOL_SOCKET, 6, 4), (_SOL_SOCKET, 9, 4),  # REUSEADDR, BROADCAST, KEEPALIVE
    (_SOL_SOCKET, 13, 8), (_SOL_SOCKET, 20, 16), (_SOL_SOCKET, 21, 16),  # LINGER, RCV/SNDTIMEO
)
_COPIED_TCP = ((_TCP, 1, 4), (_TCP, 4, 4), (_TCP, 5, 4), (_TCP, 6, 4), (_TCP, 18, 4))
# NODELAY, KEEPIDLE, KEEPINTVL, KEEPCNT, USER_TIMEOUT
_COPIED_V6 = ((_IPV6, 26, 4),)  # IPV6_V6ONLY: whether v4-mapped destinations connect
_TCP_CLOSE = 7  # tcp_info's tcpi_state of a socket a reset closed


class PrivateNetwork:
    def __init__(self, audit: Audit) -> None:
        self._host = netns.own_network_namespace()
        self._audit = audit  # told of the private loopback's refusals (``_refused``)

    def inside(self, sock: Socket) -> bool:
        """Is ``sock`` (sandlock's duplicate) of the sandbox's namespace?"""
        try:
            namespace = netns.socket_namespace(sock.fd)
        except OSError:
            return False
        return namespace is not None and namespace != self._host

    def connect(self, listener: Listener, request: Request, decision: Decision,
                perform: Callable[[Request], Outcome | Deferred]) -> Outcome | Deferred:
        """A connect ``decision`` allowed, performed in the namespace it is about."""
        inside = self.inside(request.socket)
        if decision.verdict is PRIVATE_LOOPBACK:
            return self._refused(request, decision, perform(request)) if inside else (-1, errno.EACCES)
        if not inside:  # already the host's (one sandlock installed before)
            return perform(request)
        try:
            host = _host_socket(request.socket)
        except OSError as exc:
            return -1, exc.errno or errno.ENOBUFS
        try:
            outcome = perform(request.replace(socket=host))
        except BaseException:
            os.close(host.fd)
            raise
        if callable(outcome):
            return lambda gone: self._installed(listener, request, host, outcome(gone))
        return self._installed(listener, request, host, outcome)

    def send(self, listener: Listener, request: Request, decision: Decision,
             perform: Callable[[Request], Outcome | Deferred]) -> Outcome | Deferred:
        """A message to a destination ``decision`` allowed, sent from the namespace it is
        about: a datagram for the host's leaves a socket of the host's, installed in
        place of the command's first. (A stream socket stays where it is: a send on it
        reaches nothing outside; only a connect makes it the host's.)"""
        sock = request.socket
        if decision.verdict is PRIVATE_LOOPBACK:
            return perform(request) if self.inside(sock) else (-1, errno.EACCES)
        if not decision.allowed or sock.type != socket.SOCK_DGRAM or not self.inside(sock):
            return perform(request)
        try:
            host = _host_socket(sock)
        except OSError as exc:
            return -1, exc.errno or errno.ENOBUFS
        error = _install(listener, request, host)
        if error:
            os.close(host.fd)
            return -1, error
        return _closing(host.fd, perform(request.replace(socket=host)))

    def performs_locally(self, decision: Decision, sock: Socket) -> Outcome | None:
        """A bind or listen: only on a socket of the sandbox's (None: go on)."""
        if decision.verdict is PRIVATE_LOOPBACK and not self.inside(sock):
            return -1, errno.EACCES
        return None

    def _refused(self, request: Request, decision: Decision,
                 outcome: Outcome | Deferred) -> Outcome | Deferred:
        """``outcome``, an ECONNREFUSED in it said (the user may have expected a host's
        service there: ``Audit.private_refused``)."""
        if callable(outcome):
            return lambda gone: self._refused(request, decision, outcome(gone))  # type: ignore[return-value]
        if outcome[1] == errno.ECONNREFUSED or (outcome[1] == errno.EINPROGRESS
                                               and _refused_already(request.socket)):
            self._audit.private_refused(request.notification.pid, decision.protocol,
                                        decision.target or request.address)
        return outcome

    @staticmethod
    def _installed(listener: Listener, request: Request, host: Socket, outcome: Outcome) -> Outcome:
        try:
            value, error = outcome
            if error in (0, errno.EINPROGRESS):
                installed = _install(listener, request, host)
                if installed:
                    return -1, installed
            return value, error
        finally:
            os.close(host.fd)


def _refused_already(sock: Socket) -> bool:
    """Has a non-blocking TCP connect been refused already? On loopback the answer is
    processed before connect() returns (the reset waits in the socket's backlog until
    the call lets the socket go): an error pending and the socket closed. Looked at,
    never consumed (SO_ERROR, which the command reads, is not)."""
    if sock.type != socket.SOCK_STREAM:
        return False
    try:
        ready = select.poll()
        ready.register(sock.fd, select.POLLOUT)
        events = ready.poll(0)
        if not events or not events[0][1] & select.POLLERR:
            return False
        with socket.socket(sock.family, sock.type, sock.protocol, fileno=os.dup(sock.fd)) as view:
            return view.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == _TCP_CLOSE
    except OSError:
        return False


def _closing(fd: int, outcome: Outcome | Deferred) -> Outcome | Deferred:
    """``outcome``, ``fd`` closed once it is known."""
    if not callable(outcome):
        os.close(fd)
        return outcome

    def finish(gone: int) -> Outcome:
        try:
            return outcome(gone)
        finally:
            os.close(fd)

    return finish


def _install(listener: Listener, request: Request, host: Socket) -> int:
    """``host`` at the command's descriptor number; the errno if it could not be."""
    tid, target = request.notification.pid, request.notification.args[0] & 0xFFFFFFFF
    try:
        cloexec = netns.fd_close_on_exec(tid, target)
        netns.install_fd(listener.fd, request.notification.id, host.fd, target, cloexec)
    except OSError as exc:
        return exc.errno or errno.EBADF
    return 0


def _host_socket(sock: Socket) -> Socket:
    """A socket of sandlock's namespace like ``sock``: family, type, protocol, blocking
    mode and the options ``_COPIED`` lists."""
    host = socket.socket(sock.family, sock.type, sock.protocol)
    try:
        with socket.socket(sock.family, sock.type, sock.protocol, fileno=os.dup(sock.fd)) as view:
            copied = _COPIED + (_COPIED_TCP if sock.type == socket.SOCK_STREAM else ())
            for level, option, size in copied + (_COPIED_V6 if sock.family == socket.AF_INET6 else ()):
                try:
                    host.setsockopt(level, option, view.getsockopt(level, option, size))
                except OSError:
                    pass  # (an option this kind of socket lacks)
        host.setblocking(not sock.nonblocking)
    except BaseException:
        host.close()
        raise
    return Socket(host.detach(), sock.family, sock.type, sock.protocol, sock.nonblocking)
