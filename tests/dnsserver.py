"""A small authoritative DNS server for tests, on loopback, built on dnspython.

``FakeDns({"api.example.com": ["203.0.113.7", "2001:db8::7"]})`` answers A and AAAA
from the zone (NXDOMAIN for other names, NOERROR-empty for a missing family) and TXT
with ``"fake"`` for zone names, over UDP and TCP on one ephemeral port of 127.0.0.1.
``queries`` logs every question received, so a test can prove what was (or was not)
asked upstream. Knobs: ``set`` changes an answer mid-run (rebinding), ``delay`` holds
each answer, ``truncate_udp`` forces clients over to TCP, ``silent`` never answers.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
import time
from ipaddress import ip_address

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

from sandlock.dns._dnsresponder import _receive  # read exactly n bytes (TCP framing)

TTL = 300


class FakeDns:
    def __init__(self, zone: dict[str, list[str]], host: str = "127.0.0.1") -> None:
        self._zone = {_key(name): list(addresses) for name, addresses in zone.items()}
        self._lock = threading.Lock()
        self.host = host
        self.queries: list[tuple[str, str]] = []  # (name, qtype), every transport
        self.tcp_queries: list[tuple[str, str]] = []
        self.delay = 0.0
        self.truncate_udp = False
        self.silent = False
        self._udp, self._tcp = _bind_pair(host)
        self._wake = os.pipe()
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> tuple[str, int]:
        return self._udp.getsockname()

    def set(self, name: str, addresses: list[str] | None) -> None:
        """Change (None: remove) a name's answers from now on."""
        with self._lock:
            if addresses is None:
                self._zone.pop(_key(name), None)
            else:
                self._zone[_key(name)] = list(addresses)

    def asked(self, name: str) -> list[str]:
        """The query types asked for ``name`` so far."""
        return [qtype for qname, qtype in list(self.queries) if qname == _key(name)]

    def __enter__(self) -> FakeDns:
        for target in (self._serve_udp, self._serve_tcp):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        os.write(self._wake[1], b"x")
        for thread in self._threads:
            thread.join()
        for fd in self._wake:
            os.close(fd)
        self._udp.close()
        self._tcp.close()

    # --- serving ------------------------------------------------------------------

    def _readable(self, sock: socket.socket) -> bool:
        """Wait for ``sock``; False once the server is stopping."""
        ready, _, _ = select.select([sock, self._wake[0]], [], [])
        return self._wake[0] not in ready

    def _serve_udp(self) -> None:
        while self._readable(self._udp):
            wire, peer = self._udp.recvfrom(65535)
            threading.Thread(target=self._answer_datagram, args=(wire, peer), daemon=True).start()

    def _answer_datagram(self, wire: bytes, peer: tuple) -> None:
        response = self._answer(wire, tcp=False)
        if response is not None:
            try:
                self._udp.sendto(response, peer)
            except OSError:
                pass  # stopped meanwhile

    def _serve_tcp(self) -> None:
        while self._readable(self._tcp):
            connection, _ = self._tcp.accept()
            threading.Thread(target=self._serve_connection, args=(connection,),
                             daemon=True).start()

    def _serve_connection(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            try:
                while header := _receive(connection, 2):
                    wire = _receive(connection, struct.unpack("!H", header)[0])
                    response = self._answer(wire, tcp=True) if wire else None
                    if response is None:
                        return
                    connection.sendall(struct.pack("!H", len(response)) + response)
            except OSError:
                return

    def _answer(self, wire: bytes, tcp: bool) -> bytes | None:
        try:
            query = dns.message.from_wire(wire)
            question = query.question[0]
        except Exception:
            return None  # not for this server to judge: tests send it well-formed queries
        asked = (_key(question.name.to_text()), dns.rdatatype.to_text(question.rdtype))
        self.queries.append(asked)
        if tcp:
            self.tcp_queries.append(asked)
        if self.silent:
            return None
        time.sleep(self.delay)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if self.truncate_udp and not tcp:
            response.flags |= dns.flags.TC
            return response.to_wire()
        with self._lock:
            addresses = self._zone.get(asked[0])
        if addresses is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
        else:
            rdatas = _records(question.rdtype, addresses)
            if rdatas:
                response.answer.append(dns.rrset.from_text_list(
                    question.name, TTL, "IN", question.rdtype, rdatas))
        return response.to_wire()


def _records(rdtype: int, addresses: list[str]) -> list[str]:
    if rdtype == dns.rdatatype.TXT:
        return ['"fake"']
    version = {dns.rdatatype.A: 4, dns.rdatatype.AAAA: 6}.get(rdtype)
    return [a for a in addresses if ip_address(a).version == version]


def _key(name: str) -> str:
    return name.rstrip(".").lower()


def _bind_pair(host: str) -> tuple[socket.socket, socket.socket]:
    """UDP and TCP sockets on the same ephemeral port (a resolver uses one port for both)."""
    for _ in range(50):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((host, 0))
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            tcp.bind((host, udp.getsockname()[1]))
        except OSError:
            udp.close()
            tcp.close()
            continue
        tcp.listen(16)
        return udp, tcp
    raise OSError("no port free for both UDP and TCP")
