"""The TCP ports the sandbox listens on itself: reachable from inside, on loopback.

A dev server in the sandbox (`python3 -m http.server 8000` under `--net-bind 8000`)
and a client in the same sandbox are its own IPC, as its unix sockets are: the
client may connect to that port on loopback (127.0.0.0/8, ::1, and the unspecified
address, which means loopback) without a --net-allow rule, but only to the sandbox's
own listener. The supervisor performs every listen(), so it knows each listening
socket it made (its inode and cookie, which the kernel never gives another socket);
whether the port is still the sandbox's is asked of the kernel (sock_diag) at each
connect, before and after it: every socket listening on that port, on any address,
must be one of the sandbox's. A host service that took the port after the sandbox's
listener closed, or that shares it (SO_REUSEPORT), is not reached this way.
"""

from __future__ import annotations

import errno
import os
import threading

from ..netcall import InetAddress, disconnect, local_port
from ..netcall import connect as _connect
from ..netrules import Verdict, canonical_address
from ._judge import LISTENER_TAKEN_REASON, OWN_LISTENER_REASON, Decision

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netcall import Deferred, Outcome, Request, Socket

MAX_PORTS = 1024  # ports remembered at once; the oldest are asked about first when full


class SandboxListeners:
    """The sandbox's listening TCP sockets, by port (the supervisor adds them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ports: dict[int, set[tuple[int, int]]] = {}  # port -> {(inode, cookie)}

    def __contains__(self, port: int) -> bool:
        return port in self._ports

    def add(self, sock: Socket) -> None:
        """``sock`` (the supervisor's duplicate) now listens: remembered by its port."""
        from ..kernel import socket_cookie  # (only runs that listen load it)

        try:
            port = local_port(sock)
            identity = (os.fstat(sock.fd).st_ino, socket_cookie(sock.fd))
        except OSError:
            return  # (no SO_COOKIE: not remembered, so never reachable this way)
        with self._lock:
            if port not in self._ports and len(self._ports) >= MAX_PORTS:
                self._forget_closed()
            self._ports.setdefault(port, set()).add(identity)

    def owns(self, port: int) -> bool:
        """Is every socket listening on ``port`` one of the sandbox's (and is there one)?"""
        from ..kernel import tcp_listeners

        try:
            found = tcp_listeners(port)
        except OSError:
            return False  # the kernel cannot say: not reachable this way
        with self._lock:
            mine = self._ports.get(port)
            if mine is None:
                return False
            mine &= found  # those closed since are forgotten
            if not mine:
                del self._ports[port]
        return bool(found) and found <= mine

    def _forget_closed(self) -> None:
        from ..kernel import tcp_listeners

        for port in list(self._ports)[: MAX_PORTS // 4]:
            try:
                alive = self._ports[port] & tcp_listeners(port)
            except OSError:
                alive = set()
            if alive:
                self._ports[port] = alive
            else:
                del self._ports[port]
        while len(self._ports) >= MAX_PORTS:  # all alive: the oldest go
            del self._ports[next(iter(self._ports))]

    def reach(self, syscall: str, address: object, decision: Decision) -> Decision:
        """``decision`` (a refusal), or an allowed one when it is a TCP connect to the
        sandbox's own listener on loopback (asked of the kernel now)."""
        if (syscall != "connect" or decision.protocol != "tcp" or not isinstance(address, InetAddress)
                or address.port not in self._ports):
            return decision
        if not canonical_address(address.address).is_loopback or not self.owns(address.port):
            return decision
        verdict = Verdict(True, OWN_LISTENER_REASON, decision.verdict.hostname)
        return Decision(True, decision.target or address, verdict, "tcp")

    def connect(self, request: Request, target: InetAddress,
                record: Callable[[Request, InetAddress, Decision], None]) -> Outcome | Deferred:
        """Perform an allowed ``reach``'s connect, then ask the kernel again: should the
        sandbox's listener have closed and another taken its port meanwhile, the
        connection is shut down at once and the call fails (ECONNREFUSED, and a
        denial is recorded)."""
        sock = request.socket
        outcome = _connect(sock, target)
        if callable(outcome):  # (a blocking socket, finished on a worker)
            return lambda gone: self._checked(request, target, outcome(gone), record)
        return self._checked(request, target, outcome, record)

    def _checked(self, request: Request, target: InetAddress, outcome: Outcome,
                 record: Callable[[Request, InetAddress, Decision], None]) -> Outcome:
        if outcome[1] not in (0, errno.EINPROGRESS) or self.owns(target.port):
            return outcome
        disconnect(request.socket)
        verdict = Verdict(False, LISTENER_TAKEN_REASON)
        record(request, request.address, Decision(False, None, verdict, "tcp", errno.ECONNREFUSED))
        return -1, errno.ECONNREFUSED
