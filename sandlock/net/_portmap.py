"""--port-remap: the sandbox's own virtual TCP port space.

A TCP bind to port V is performed by the supervisor (as every bind is) on a real port:
V itself while it is free (no cost on the data path, and the host reaches it where
the command said), else (taken, or privileged for sandlock's user) a free port the
kernel chooses; the sandbox's virtual port
V then stands for that real port R. Inside the sandbox the virtual port is what is
seen and used: getsockname of a socket bound that way (and getpeername of a
connection to one, on loopback) say V; a connect to V on loopback goes to R. The
host finds R with ``Sandbox.ports()``. Two sandboxes may therefore both serve on
8080 at once (upstream Sandlock's ``port_remap``).

A second bind to V while a socket the sandbox bound to V still exists goes to the same
R, so the kernel answers it as it would have (EADDRINUSE, or SO_REUSEADDR's and
IPV6_V6ONLY's success); once none is left, V is bound afresh. Which sockets are left
is asked of the kernel (sock_diag, by socket cookie). Port 0 and UDP are not remapped.
"""

from __future__ import annotations

import errno
import threading

from .._record import replace
from ..netcall import InetAddress, asked_name, encode_address, execute, give_name, local_port, parse_address
from ..netrules import canonical_address

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..netcall import Outcome, Request, SockAddress, Socket

_ELSEWHERE = (errno.EADDRINUSE, errno.EACCES)  # a virtual port bound on another real one
MAX_PORTS = 4096  # virtual ports remembered at once; those with no socket left go first


class PortMap:
    """One sandbox's virtual ports and the real ones bound for them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._real: dict[int, int] = {}  # virtual -> real
        self._virtual: dict[int, int] = {}  # real -> virtual
        self._cookies: dict[int, set[int]] = {}  # virtual -> cookies of the sockets bound

    def ports(self) -> dict[int, int]:
        """virtual -> real, for each port the sandbox bound (``Sandbox.ports()``); one
        it closed stays until bound again (asking the kernel here would leave a netlink
        socket to the caller's thread)."""
        with self._lock:
            return dict(self._real)

    # --- bind ----------------------------------------------------------------------

    def bind(self, sock: Socket, address: InetAddress) -> Outcome:
        """Bind ``sock`` (sandlock's duplicate of a TCP socket) for virtual ``address``."""
        from ..kernel import socket_cookie

        virtual = address.port
        if virtual == 0:
            return execute.bind(sock, address)
        with self._lock:
            real = self._real.get(virtual, virtual)
        outcome = execute.bind(sock, replace(address, port=real))
        # Taken, or privileged (below ip_unprivileged_port_start, for a user without
        # CAP_NET_BIND_SERVICE): a free one stands for it, unless the sandbox holds it.
        if outcome[1] in _ELSEWHERE and not self._held(virtual, real):
            outcome = execute.bind(sock, replace(address, port=0))
        if outcome[1]:
            return outcome
        try:
            real, cookie = local_port(sock), socket_cookie(sock.fd)
        except OSError:
            return outcome  # (bound: what getsockname says then is the real port)
        self._remember(virtual, real, cookie)
        return outcome

    def _remember(self, virtual: int, real: int, cookie: int) -> None:
        with self._lock:
            if self._real.get(virtual) != real:
                self._forget(virtual)
                self._forget(self._virtual.get(real))
                if len(self._real) >= MAX_PORTS:
                    self._forget_unheld()
            self._real[virtual], self._virtual[real] = real, virtual
            self._cookies.setdefault(virtual, set()).add(cookie)

    def _forget(self, virtual: int | None) -> None:
        if virtual is not None and virtual in self._real:
            self._virtual.pop(self._real.pop(virtual), None)
            self._cookies.pop(virtual, None)

    def _forget_unheld(self) -> None:
        for virtual, real in list(self._real.items())[: MAX_PORTS // 4]:
            if not self._held(virtual, real, locked=True):
                self._forget(virtual)
        while len(self._real) >= MAX_PORTS:  # all held: the oldest go
            self._forget(next(iter(self._real)))

    def _held(self, virtual: int, real: int, *, locked: bool = False) -> bool:
        """Is a socket the sandbox bound for ``virtual`` still there, on ``real``?"""
        from ..kernel import tcp_sockets

        try:
            alive = {cookie for _, cookie in tcp_sockets(real)}
        except OSError:
            return False
        if locked:
            return not alive.isdisjoint(self._cookies.get(virtual, ()))
        with self._lock:
            return not alive.isdisjoint(self._cookies.get(virtual, ()))

    # --- what the sandbox sees and reaches -----------------------------------------------

    def virtual_address(self, address: SockAddress | None, sock: Socket) -> SockAddress | None:
        """``address``, where ``sock`` (sandlock's duplicate) is bound, with its virtual
        port if it is one of the sockets bound for one, or accepted by one."""
        from ..kernel import socket_cookie

        if not isinstance(address, InetAddress):
            return address
        with self._lock:
            virtual = self._virtual.get(address.port)
            cookies = self._cookies.get(virtual, set()) if virtual is not None else set()
        if virtual is None:
            return address
        try:
            bound_for_it = socket_cookie(sock.fd) in cookies
        except OSError:
            return address
        # One it accepted shares the port: while a socket bound for V holds R, every
        # socket on R is one of these (the kernel gives no connect a port bound so).
        if not bound_for_it and not self._held(virtual, address.port):
            return address
        return replace(address, port=virtual)

    def real_address(self, address: SockAddress | None) -> SockAddress | None:
        """Where a connect to ``address`` goes: a virtual port on loopback (or the
        unspecified address, which means it) is its real one, if the sandbox listens
        there (the supervisor asks the kernel: ``SandboxListeners``); else ``address``."""
        if not isinstance(address, InetAddress) or not _local(address):
            return address
        with self._lock:
            real = self._real.get(address.port)
        return address if real is None or real == address.port else replace(address, port=real)

    def peer_address(self, address: SockAddress | None) -> SockAddress | None:
        """A peer's address as the sandbox sees it: the sandbox's own server, reached on
        loopback, at its virtual port."""
        if not isinstance(address, InetAddress) or not _local(address):
            return address
        with self._lock:
            virtual = self._virtual.get(address.port)
        if virtual is None or not self._held(virtual, address.port):
            return address
        return replace(address, port=virtual)

    def answer_name(self, request: Request) -> Outcome:
        """A getsockname/getpeername the supervisor hands over: the name, at its virtual port."""
        raw = asked_name(request)
        if isinstance(raw, int):
            return -1, raw
        return give_name(request, self.name(raw, request.socket, request.syscall == "getpeername"))

    def name(self, raw: bytes, sock: Socket, peer: bool) -> bytes:
        """A getsockname's or (``peer``) getpeername's raw sockaddr on ``sock``, as the
        sandbox sees it."""
        try:
            address = parse_address(raw)
        except ValueError:
            return raw
        seen = self.peer_address(address) if peer else self.virtual_address(address, sock)
        return raw if seen is address else encode_address(seen)


def _local(address: InetAddress) -> bool:
    where = canonical_address(address.address)
    return where.is_loopback or where.is_unspecified
