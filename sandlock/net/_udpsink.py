"""sandlock's UDP sink: where a UDP connect the rules deny leaves its socket.

A UDP connect sends nothing; it sets where the socket's later sends go. glibc's
getaddrinfo connects a UDP socket to each candidate address to learn the source
address it would use (RFC 6724 sorting), then closes it without sending: a server
started with `python3 -m http.server 8000` probes [::]:8000 and 0.0.0.0:8000.
Refusing those connects said "denied" for probes that reach nothing. Instead, the
socket is connected (by sandlock, on its duplicate) to the sink, a UDP socket of
sandlock's on loopback: the call succeeds, every send on the socket can only reach
the sink, and the denial is said (notice, audit record, summary) when the first
datagram arrives there. A probe is never said; a client that sends is, once, and its
datagrams go unanswered (as behind a firewall that drops them). The sink's addresses
are sandlock's own (never reachable directly), and it reads and drops what it gets.

Which socket a datagram came from is its source address (the command's socket,
bound to loopback by the connect), remembered when the socket was parked: for at
most ``MAX_PARKED`` sockets at once, the oldest forgotten first (a probe's socket is
closed at once; a datagram from a forgotten socket is dropped unsaid).
"""

from __future__ import annotations

import os
import select
import socket
import threading

from ..netcall import execute, inet
from ._judge import unparked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netcall import InetAddress, Outcome, Request, SockAddress
    from ._judge import Decision

    Record = Callable[[Request, SockAddress, Decision], None]

MAX_PARKED = 1024
_AF_INET6 = socket.AF_INET6


class UdpSink:
    """The sink's sockets (127.0.0.1, and ::1 where the host has it) and their reader."""

    def __init__(self) -> None:
        self._v4 = _bound(socket.AF_INET, "127.0.0.1")
        try:
            self._v6: socket.socket | None = _bound(_AF_INET6, "::1")
        except OSError:  # no IPv6 loopback: IPv6 sockets reach the IPv4 sink, v4-mapped
            self._v6 = None
        self._lock = threading.Lock()
        self._parked: dict[tuple[str, int], Callable[[], None]] = {}  # source -> say the denial
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._drain, daemon=True, name="sandlock-udp-sink")
        self._thread.start()

    @property
    def addresses(self) -> tuple[InetAddress, InetAddress | None]:
        """(IPv4 sink, IPv6 sink or None): sandlock's own, never reachable directly."""
        v6 = None if self._v6 is None else inet(_AF_INET6, *self._v6.getsockname()[:2])
        return inet(socket.AF_INET, *self._v4.getsockname()), v6

    def park(self, request: Request, decision: Decision, record: Record) -> Outcome:
        """Connect ``request``'s socket here; its first datagram has ``record`` told
        the denial ``decision`` stands for. If it cannot be connected here, the
        connect is refused as the rules said (EACCES), and said now."""
        sock, destination = request.socket, request.address
        denial = unparked(decision)
        target = self._target(sock.family, destination)
        if target is None or execute.connect(sock, target)[1]:
            record(request, destination, denial)
            return -1, denial.error
        try:
            source = _source(sock)
        except OSError:
            return 0, 0  # (nothing can be told of it: its datagrams are dropped unsaid)
        with self._lock:
            self._parked.pop(source, None)  # (the latest socket on that port is the one)
            self._parked[source] = lambda: record(request, destination, denial)
            while len(self._parked) > MAX_PARKED:
                del self._parked[next(iter(self._parked))]
        return 0, 0

    def _target(self, family: int, destination: InetAddress) -> InetAddress | None:
        """The sink of the destination's kind: an IPv4 destination of an IPv6 socket
        (v4-mapped, or an AF_INET address, which the kernel takes there too) must get a
        v4-mapped source (glibc's getaddrinfo asserts it)."""
        v4, v6 = self.addresses
        if family == socket.AF_INET:
            return v4
        if family != _AF_INET6:
            return None
        address = destination.address
        if v6 is not None and address.version == 6 and address.ipv4_mapped is None:
            return v6
        return inet(_AF_INET6, f"::ffff:{v4.address}", v4.port)

    def _drain(self) -> None:
        poller = select.poll()
        sinks = {s.fileno(): s for s in (self._v4, self._v6) if s is not None}
        for fd in (self._wake[0], *sinks):
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._wake[0]:
                    return
                try:
                    _, peer = sinks[fd].recvfrom(1)  # (the rest of the datagram is dropped)
                except OSError:
                    continue
                with self._lock:
                    say = self._parked.pop(_key(peer[0], peer[1]), None)
                if say is not None:
                    say()

    def stop(self) -> None:
        os.write(self._wake[1], b"x")
        self._thread.join()
        for fd in self._wake:
            os.close(fd)
        for sink in (self._v4, self._v6):
            if sink is not None:
                sink.close()


def _bound(family: int, address: str) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    try:
        sock.bind((address, 0))
    except OSError:
        sock.close()
        raise
    return sock


def _source(sock) -> tuple[str, int]:
    """Where the parked socket's datagrams come from, as the sink's recvfrom says it."""
    with socket.socket(sock.family, sock.type, fileno=os.dup(sock.fd)) as view:
        name = view.getsockname()
    return _key(name[0], name[1])


def _key(host: str, port: int) -> tuple[str, int]:
    return (host[7:] if host.startswith("::ffff:") else host), port
