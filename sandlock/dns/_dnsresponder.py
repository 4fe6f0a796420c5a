"""The DNS responder: answers the child's DNS queries from the pinned table.

The supervisor redirects every DNS packet of the child (UDP and TCP, port 53 of any
address) here, on loopback. Answers come from the ``PinTable`` only, so the child
sees exactly the addresses the network verdict will let it reach:

* A/AAAA of a pinned name: its pinned addresses of that family (NOERROR without
  answer when it has none of that family; NXDOMAIN when pinned empty).
* a name not pinned: if ``policy.admits_name(name)``, taken from the hosts file as
  written (``_hostsfile``: localhost, and /etc/hosts in nsswitch's order) or resolved
  through upstream once (concurrent askers share the lookup), filtered by ``pinnable``
  and ``policy.admits_address``, pinned (first pin wins), answered; otherwise NXDOMAIN
  without any upstream query, and ``on_refused`` is told the name.
* HTTPS/SVCB: the same name check, never data: NOERROR-empty when the name has
  addresses (clients then use A/AAAA at once), NXDOMAIN otherwise.
* PTR: NXDOMAIN, never asked upstream (glibc's getnameinfo then falls back to the
  numeric address; REFUSED made it fail with EAI_AGAIN).
* every other type (TXT, MX, ANY, SRV...) or class: REFUSED. Several questions:
  FORMERR. Other opcodes: NOTIMP. Malformed or oversized packets, and responses:
  dropped (UDP) or the connection closed (TCP).

Queries in the everyday shape are read and answered by ``_dnswire`` (no dnspython:
its ~45 ms import is not on a command's first lookup); others by dnspython
(``_dnsmessage``). Both go through the same decision (``_decide``).

``policy`` is any object with ``admits_name(name: str) -> bool`` and
``admits_address(address: IPv4Address | IPv6Address, name: str) -> bool`` (``netrules.NetPolicy``
in sandlock; a duck type so that the two modules do not depend on each other).
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading

from . import _dnswire
from ._dns import DnsSettings, Upstream, pinnable
from ._hostsfile import UNUSED, HostsFile
from ._dnswire import AAAA, HTTPS, IN, NOERROR, NXDOMAIN, PTR, REFUSED, SERVFAIL, SVCB, A

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on a first lookup's path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Union

    from ..netrules import IPAddress, PinTable
    from ._dnsmessage import FullQuery
    from ._dnswire import SimpleQuery

    Query = Union[SimpleQuery, FullQuery]

MAX_QUERY = 4096  # real queries are < 600 bytes, even padded
UDP_PLAIN_SIZE = 512  # without EDNS (RFC 1035)
UDP_MAX_SIZE = 1232  # the DNS flag day 2020 payload: never fragmented
TCP_MAX_SIZE = 65535
TCP_IDLE_TIMEOUT = 10.0
MAX_CONNECTIONS = 32  # TCP connections served at once; more are closed at once
MAX_PENDING = 64  # UDP queries waiting (for start-up pinning or upstream) at once
WAIT_SLACK = 2.5  # beyond settings.lifetime: dnspython's retry back-off may overrun it by 2 s

_ADDRESS_TYPES = {A: 4, AAAA: 6}
_LOOKUP_TYPES = frozenset({A, AAAA, HTTPS, SVCB})  # answered from the pinned table


class DnsResponder:
    """A DNS server on 127.0.0.1 (UDP and TCP, ephemeral ports) answering from ``table``.

    ``upstream`` None: names not pinned are never resolved (NXDOMAIN). ``ready``: set
    when start-up pinning is done; queries wait for it (at most ``settings.lifetime``
    + ``WAIT_SLACK``, then SERVFAIL).
    """

    def __init__(
        self,
        table: PinTable,
        policy: Any,  # admits_name(str) -> bool, admits_address(IPAddress, str) -> bool
        upstream: Upstream | None,
        settings: DnsSettings,
        ready: threading.Event | None = None,
        hosts: HostsFile | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._table = table
        self._hosts = hosts or HostsFile("", UNUSED)  # (localhost is loopback even so)
        self._on_refused = on_refused  # told each name asked for that no rule admits
        self._policy = policy
        self._upstream = upstream
        self._settings = settings
        self._ready = ready
        self._wait_limit = settings.lifetime + WAIT_SLACK
        self._lookups: dict[str, threading.Event] = {}  # lazy resolutions in flight
        self._lock = threading.Lock()
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self._connection_slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._connections: set[socket.socket] = set()
        self._udp: socket.socket | None = None
        self._tcp: socket.socket | None = None
        self._wake: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        self._udp = _bind(socket.SOCK_DGRAM)
        self._tcp = _bind(socket.SOCK_STREAM)
        self._tcp.listen(64)
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="sandlock-dns")
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        os.write(self._wake[1], b"x")
        self._thread.join()
        with self._lock:
            for connection in self._connections:
                _shutdown(connection)  # wakes its thread, which closes it
        for fd in self._wake:
            os.close(fd)
        self._udp.close()
        self._tcp.close()
        self._thread = None

    def __enter__(self) -> DnsResponder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def udp_address(self) -> tuple[str, int]:
        return self._udp.getsockname()

    @property
    def tcp_address(self) -> tuple[str, int]:
        return self._tcp.getsockname()

    # --- transports -----------------------------------------------------------------

    def _serve(self) -> None:
        poller = select.poll()
        for fd in (self._wake[0], self._udp.fileno(), self._tcp.fileno()):
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._wake[0]:
                    return
                if fd == self._udp.fileno():
                    self._on_datagram()
                else:
                    self._on_connection()

    def _on_datagram(self) -> None:
        try:
            wire, peer = self._udp.recvfrom(MAX_QUERY + 1)
        except OSError:
            return
        query = _parse(wire)
        if query is None:
            return
        try:
            later = self._may_block(query)
        except Exception:
            later = False  # respond() turns the same failure into SERVFAIL
        if not later:
            self._reply_datagram(query, peer)
        elif self._pending.acquire(blocking=False):  # else overloaded: drop, the client retries
            if not _spawn(self._reply_datagram_later, query, peer):
                self._pending.release()

    def _reply_datagram_later(self, query: Query, peer: tuple) -> None:
        try:
            self._reply_datagram(query, peer)
        finally:
            self._pending.release()

    def _reply_datagram(self, query: Query, peer: tuple) -> None:
        payload = query.payload if query.payload is not None else UDP_PLAIN_SIZE
        wire = self.respond(query, max(UDP_PLAIN_SIZE, min(payload, UDP_MAX_SIZE)))
        try:
            self._udp.sendto(wire, peer)
        except OSError:
            pass  # the asker is gone or its buffer is full: like a lost datagram

    def _on_connection(self) -> None:
        try:
            connection, _ = self._tcp.accept()
        except OSError:
            return
        if not self._connection_slots.acquire(blocking=False):
            connection.close()
            return
        with self._lock:
            self._connections.add(connection)
        if not _spawn(self._serve_connection, connection):
            with self._lock:
                self._connections.discard(connection)
            connection.close()
            self._connection_slots.release()

    def _serve_connection(self, connection: socket.socket) -> None:
        """Length-framed queries (RFC 1035 4.2.2), answered in order, until EOF or error."""
        try:
            connection.settimeout(TCP_IDLE_TIMEOUT)
            while True:
                header = _receive(connection, 2)
                if header is None:
                    return
                (length,) = struct.unpack("!H", header)
                wire = _receive(connection, length) if 0 < length <= MAX_QUERY else None
                query = _parse(wire) if wire is not None else None
                if query is None:
                    return
                response = self.respond(query, TCP_MAX_SIZE)
                connection.sendall(struct.pack("!H", len(response)) + response)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()
            self._connection_slots.release()

    # --- answers --------------------------------------------------------------------

    def respond(self, query: Query, max_size: int) -> bytes:
        """The wire response to a parsed query, at most ``max_size`` bytes (else TC)."""
        try:
            rcode, authoritative, addresses = self._decide(query)
        except Exception:  # a bug (or a policy error) must cost one answer, not the server
            rcode, authoritative, addresses = SERVFAIL, False, []
        return query.encode(rcode, authoritative, addresses, max_size)

    def _decide(self, query: Query) -> tuple[int, bool, list[IPAddress]]:
        """(RCODE, authoritative, the addresses to answer with)."""
        if query.early_rcode is not None:
            return query.early_rcode, False, []
        if query.rdclass == IN and query.rdtype == PTR:
            return NXDOMAIN, False, []  # no reverse names, ever
        if query.rdclass != IN or query.rdtype not in _LOOKUP_TYPES:
            return REFUSED, False, []
        if self._ready is not None and not self._ready.wait(self._wait_limit):
            return SERVFAIL, False, []
        name = query.hostname
        if not name:
            self._refused(query.asked_name())  # a name no rule can name (see _dnswire)
            return NXDOMAIN, True, []
        addresses = self._addresses(name)
        if addresses is None:
            return SERVFAIL, False, []
        # Authoritative: the pinned table is the authority for this run.
        if not addresses:
            return NXDOMAIN, True, []
        family = _ADDRESS_TYPES.get(query.rdtype)
        answer = [a for a in addresses if a.version == family]
        self._table.answered(name, answer)  # the name an audit record gives these
        return NOERROR, True, answer

    def _refused(self, name: str) -> None:
        if self._on_refused is not None:
            self._on_refused(name)

    def _may_block(self, query: Query) -> bool:
        """Would answering wait (start-up pinning, upstream)? Then not on the serving thread."""
        if self._ready is not None and not self._ready.is_set():
            return True
        if query.early_rcode is not None or self._upstream is None:
            return False
        if query.rdtype not in _LOOKUP_TYPES:
            return False
        name = query.hostname
        return (bool(name) and self._table.addresses(name) is None
                and self._policy.admits_name(name))

    def _addresses(self, name: str) -> tuple[IPAddress, ...] | None:
        """Pinned addresses of ``name`` (empty: NXDOMAIN); None: the lookup did not finish."""
        addresses = self._table.addresses(name)
        if addresses is not None:
            return addresses
        if not self._policy.admits_name(name):
            self._refused(name)
            return ()  # NXDOMAIN: nothing asked upstream, nothing pinned
        if self._upstream is None:
            return ()
        return self._pin_lazily(name)

    def _pin_lazily(self, name: str) -> tuple[IPAddress, ...] | None:
        # One lookup per name: the first asker resolves, the others wait for its pin.
        with self._lock:
            addresses = self._table.addresses(name)  # pinned while we were not looking?
            if addresses is not None:
                return addresses
            done = self._lookups.get(name)
            owner = done is None
            if owner:
                done = self._lookups[name] = threading.Event()
        if not owner:
            done.wait(self._wait_limit)
            return self._table.addresses(name)
        try:
            written = self._hosts.before_dns(name)  # the user's own: pinned as written
            if written is not None:
                return self._table.pin(name, written)
            lookup = self._upstream.resolve(name)
            kept = tuple(a for a in lookup.addresses
                         if pinnable(a, self._settings.allow_private)
                         and self._policy.admits_address(a, name))
            # Failures are pinned too (empty): asked once, so the child cannot make
            # sandlock query upstream again and again for the same name.
            return self._table.pin(name, kept or self._hosts.after_dns(name))
        finally:
            with self._lock:
                del self._lookups[name]
            done.set()


def _parse(wire: bytes) -> Query | None:
    """A query, or None for anything to drop: malformed, oversized, or a response."""
    if len(wire) > MAX_QUERY:
        return None
    query = _dnswire.parse(wire)
    if query is not None:
        return query
    from . import _dnsmessage  # dnspython: only for queries out of the everyday shape

    return _dnsmessage.parse(wire)


def _spawn(target, *args: object) -> bool:
    try:
        threading.Thread(target=target, args=args, daemon=True, name="sandlock-dns").start()
    except RuntimeError:  # no thread left: treated like an overload
        return False
    return True


def _bind(kind: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)  # the serving thread only reads what poll says is there
    return sock


def _receive(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _shutdown(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
