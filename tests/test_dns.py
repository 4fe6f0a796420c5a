"""Name pinning (_dns) and the DNS responder (_dnsresponder), against a loopback FakeDns.

Every packet here goes to 127.0.0.1: the upstream is always a FakeDns, and the
system resolvers (resolv.conf) are only ever read, never asked.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from ipaddress import ip_address

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from dnsserver import FakeDns
from sandlock.dns import _dns
from sandlock import Policy
from sandlock.dns._dns import DnsSettings, Upstream, pin_at_start, pinnable
from sandlock.dns._dnsresponder import MAX_QUERY, DnsResponder
from sandlock.netrules._pins import PinTable

ZONE = {
    "api.example.com": ["203.0.113.7", "2001:db8::7"],
    "v4only.example.com": ["203.0.113.8"],
    "private.example.com": ["10.0.0.5", "192.168.1.5"],
    "loopback.example.com": ["127.0.0.1", "::1"],
    "metadata.example.com": ["169.254.169.254", "fe80::1", "fd00:ec2::254"],
    "mixed.example.com": ["203.0.113.9", "169.254.169.254", "10.0.0.9", "0.0.0.0", "224.0.0.1"],
    "mapped.example.com": ["::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:203.0.113.10"],
    "lazy.example.org": ["198.51.100.1", "2001:db8::1"],
    "lazy-private.example.org": ["10.1.2.3", "198.51.100.2"],
    "lazy-denied.example.org": ["198.51.100.66", "198.51.100.3"],
    "many.example.org": [f"198.51.100.{i}" for i in range(1, 61)],
}
IP = ip_address


def settings(fake: FakeDns, **kwargs) -> DnsSettings:
    return DnsSettings(servers=(fake.address,), timeout=0.5, lifetime=1.0, **kwargs)


def short(fake: FakeDns) -> DnsSettings:  # for timeouts
    return DnsSettings(servers=(fake.address,), timeout=0.1, lifetime=0.2)


@pytest.fixture
def fake():
    with FakeDns(ZONE) as server:
        yield server


# --- settings and pinnable -------------------------------------------------------


def test_settings_from_policy_merge_repeated_resolve():
    policy = Policy(resolve=("API.example.com.=10.0.0.1,::1", "api.example.com=169.254.169.254"),
                    dns_servers=("127.0.0.1:5353", "[::1]:53", "127.0.0.1:5353"))
    s = DnsSettings.from_policy(policy)
    assert s.static_pins == {"api.example.com": (IP("10.0.0.1"), IP("::1"), IP("169.254.169.254"))}
    assert s.servers == (("127.0.0.1", 5353), ("::1", 53))
    assert hash(s) == hash(DnsSettings(static=s.static, servers=s.servers))


@pytest.mark.parametrize("address, alone, with_private", [
    ("203.0.113.7", True, True),
    ("2001:db8::7", True, True),
    ("::ffff:203.0.113.7", True, True),
    ("10.1.2.3", False, True),
    ("172.16.0.1", False, True),
    ("172.31.255.255", False, True),
    ("172.32.0.1", True, True),
    ("192.168.0.1", False, True),
    ("100.64.0.1", False, True),
    ("127.0.0.1", False, True),
    ("127.8.9.10", False, True),
    ("::1", False, True),
    ("fc00::1", False, True),
    ("fd12:3456::1", False, True),
    ("::ffff:10.0.0.1", False, True),  # IPv4-mapped: judged as IPv4
    ("::ffff:127.0.0.1", False, True),
    ("169.254.169.254", False, False),
    ("169.254.1.1", False, False),
    ("fe80::1", False, False),
    ("fe80::1%2", False, False),
    ("fd00:ec2::254", False, False),
    ("::ffff:169.254.169.254", False, False),
    ("64:ff9b::a9fe:a9fe", False, False),  # NAT64 of 169.254.169.254
    ("0.0.0.0", False, False),
    ("0.1.2.3", False, False),
    ("::", False, False),
    ("::ffff:0.0.0.0", False, False),
    ("224.0.0.1", False, False),
    ("239.255.255.250", False, False),
    ("255.255.255.255", False, False),
    ("ff02::1", False, False),
])
def test_pinnable(address, alone, with_private):
    assert pinnable(address, allow_private=False) is alone
    assert pinnable(IP(address.partition("%")[0]), allow_private=True) is with_private


# --- the upstream ------------------------------------------------------------------


def test_upstream_takes_the_resolv_conf_read_before_the_command_started():
    """The system's resolv.conf as read before the fork (``SystemFiles``), not as the
    command may have rewritten it since (nothing is asked here)."""
    upstream = Upstream(DnsSettings(), resolv_text="# earlier\nnameserver 192.0.2.53\n")
    assert upstream.servers == (("192.0.2.53", 53),)
    assert Upstream(DnsSettings(), resolv_text="").resolve("x.test").error.startswith(
        "no DNS server configured")


def test_upstream_resolves_a_and_aaaa(fake):
    lookup = Upstream(settings(fake)).resolve("API.example.com.")
    assert lookup.addresses == (IP("203.0.113.7"), IP("2001:db8::7"))
    assert lookup.error is None
    assert fake.queries == [("api.example.com", "A"), ("api.example.com", "AAAA")]


def test_upstream_failures_are_results(fake):
    upstream = Upstream(settings(fake))
    assert upstream.resolve("nx.example.com").error == "NXDOMAIN"
    assert fake.asked("nx.example.com") == ["A"]  # NXDOMAIN: AAAA would say the same
    assert upstream.resolve("a" * 64 + ".example.com") == _dns.Lookup((), "invalid name")
    fake.set("empty.example.com", [])
    assert upstream.resolve("empty.example.com") == _dns.Lookup((), "no address records")


def test_upstream_timeout_is_bounded(fake):
    fake.silent = True
    start = time.monotonic()
    lookup = Upstream(short(fake)).resolve("api.example.com")
    assert lookup == _dns.Lookup((), "timed out")
    # lifetime covers A and AAAA together (+ dnspython's retry back-off: 0.1 s, 0.2 s...)
    assert time.monotonic() - start < 0.4 + 0.5


def test_upstream_falls_back_to_tcp_on_truncation(fake):
    fake.truncate_udp = True
    assert Upstream(settings(fake)).resolve("v4only.example.com").addresses == (IP("203.0.113.8"),)
    assert ("v4only.example.com", "A") in fake.tcp_queries


def test_upstream_reads_system_servers_without_asking(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.9\nsearch corp.example\n")
    assert Upstream(DnsSettings(), resolv_conf=str(conf)).servers == (("127.0.0.9", 53),)
    missing = Upstream(DnsSettings(), resolv_conf=str(tmp_path / "none"))
    assert missing.servers == ()
    assert missing.resolve("api.example.com").addresses == ()
    assert "none" in missing.resolve("api.example.com").error


# --- pinning at start ----------------------------------------------------------------


def test_pin_at_start_static_first_then_resolved(fake):
    table = PinTable()
    s = settings(fake, static=(("api.example.com", (IP("192.0.2.1"),)), ("static.test", (IP("10.9.9.9"),))))
    names = ["api.example.com", "v4only.example.com", "loopback.example.com"]
    warnings = pin_at_start(names, s, table, Upstream(s))
    assert table.snapshot() == {
        "api.example.com": (IP("192.0.2.1"),),  # as written, never asked upstream
        "static.test": (IP("10.9.9.9"),),  # private, but written by the user
        "v4only.example.com": (IP("203.0.113.8"),),
        "loopback.example.com": (),
    }
    assert fake.asked("api.example.com") == []
    assert warnings == ["sandlock: warning: cannot resolve loopback.example.com: all answers "
                        "are private addresses (use --dns-allow-private); it stays unreachable"]


def test_pin_at_start_unresolvable_name_stays_unreachable(fake):
    table = PinTable()
    warnings = pin_at_start(["nx.example.com"], settings(fake), table)
    assert table.addresses("nx.example.com") == ()
    assert warnings == ["sandlock: warning: cannot resolve nx.example.com: NXDOMAIN; "
                        "it stays unreachable"]


@pytest.mark.parametrize("allow_private", [False, True])
def test_pin_at_start_filters_answers(fake, allow_private):
    table = PinTable()
    names = ["private.example.com", "metadata.example.com", "mixed.example.com",
             "mapped.example.com", "loopback.example.com"]
    warnings = pin_at_start(names, settings(fake, allow_private=allow_private), table)
    pins = table.snapshot()
    assert pins["metadata.example.com"] == ()  # never, whatever the flag
    if allow_private:
        # (the order inside one RRset is the server's, not the zone's)
        assert set(pins["private.example.com"]) == {IP("10.0.0.5"), IP("192.168.1.5")}
        assert set(pins["mixed.example.com"]) == {IP("203.0.113.9"), IP("10.0.0.9")}
        assert set(pins["mapped.example.com"]) == {IP("::ffff:10.0.0.1"),
                                                   IP("::ffff:203.0.113.10")}
        assert pins["loopback.example.com"] == (IP("127.0.0.1"), IP("::1"))
        assert warnings == ["sandlock: warning: cannot resolve metadata.example.com: all answers "
                            "are unpinnable (link-local or metadata addresses); "
                            "it stays unreachable"]
    else:
        assert pins["private.example.com"] == ()
        assert pins["mixed.example.com"] == (IP("203.0.113.9"),)
        assert pins["mapped.example.com"] == (IP("::ffff:203.0.113.10"),)
        assert len(warnings) == 3 and "use --dns-allow-private" in warnings[0]


def test_pin_at_start_resolves_concurrently(fake):
    fake.delay = 0.2
    names = [f"n{i}.example.com" for i in range(8)]
    for name in names:
        fake.set(name, ["203.0.113.1"])
    start = time.monotonic()
    assert pin_at_start(names, settings(fake), PinTable()) == []
    assert time.monotonic() - start < 1.2  # sequentially: 8 names x (A + AAAA) x 0.2 s


def test_pin_at_start_without_lookups_builds_no_resolver(monkeypatch):
    monkeypatch.setattr(_dns, "Upstream", None)  # calling it would fail
    table = PinTable()
    s = DnsSettings(static=(("a.test", (IP("192.0.2.1"),)),))
    assert pin_at_start(["A.test."], s, table) == []
    assert table.addresses("a.test") == (IP("192.0.2.1"),)


def test_pin_at_start_timeout_warns(fake):
    fake.silent = True
    table = PinTable()
    warnings = pin_at_start(["api.example.com"], short(fake), table)
    assert warnings == ["sandlock: warning: cannot resolve api.example.com: timed out; "
                        "it stays unreachable"]
    assert table.addresses("api.example.com") == ()


# --- the responder ---------------------------------------------------------------------


class FakePolicy:
    """The NetPolicy duck type: admits names under ``suffix``, minus ``denied`` addresses."""

    def __init__(self, suffix: str = ".example.org", denied: tuple[str, ...] = ()) -> None:
        self.suffix = suffix
        self.denied = {IP(a) for a in denied}
        self.names_asked: list[str] = []

    def admits_name(self, name: str) -> bool:
        self.names_asked.append(name)
        return name.endswith(self.suffix)

    def admits_address(self, address, name=None) -> bool:
        return address not in self.denied


@pytest.fixture
def responder(fake):
    """A started responder over FakeDns, with api/v4only pinned and a few names lazy."""
    s = settings(fake)
    table = PinTable()
    pin_at_start(["api.example.com", "v4only.example.com", "nx.example.com"], s, table)
    fake.queries.clear()
    policy = FakePolicy(denied=("198.51.100.66",))
    with DnsResponder(table, policy, Upstream(s), s) as server:
        server.table, server.fake, server.policy = table, fake, policy
        yield server


def ask(server: DnsResponder, name: str, rdtype: str = "A", tcp: bool = False,
        **kwargs) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **kwargs)
    if tcp:
        host, port = server.tcp_address
        response = dns.query.tcp(query, host, port=port, timeout=3)
    else:
        host, port = server.udp_address
        response = dns.query.udp(query, host, port=port, timeout=3)
    assert response.id == query.id
    assert response.question == query.question
    return response


def addresses(response: dns.message.Message) -> list[str]:
    return [rdata.address for rrset in response.answer for rdata in rrset]


@pytest.mark.parametrize("tcp", [False, True])
def test_pinned_answers(responder, tcp):
    response = ask(responder, "Api.Example.COM", "A", tcp=tcp)
    assert response.rcode() == dns.rcode.NOERROR
    assert addresses(response) == ["203.0.113.7"]
    assert response.answer[0].ttl == 60
    assert response.answer[0].name == dns.name.from_text("Api.Example.COM")  # as asked
    assert response.flags & dns.flags.AA and response.flags & dns.flags.RA
    assert addresses(ask(responder, "api.example.com", "AAAA", tcp=tcp)) == ["2001:db8::7"]
    nodata = ask(responder, "v4only.example.com", "AAAA", tcp=tcp)
    assert (nodata.rcode(), nodata.answer) == (dns.rcode.NOERROR, [])
    assert ask(responder, "nx.example.com", tcp=tcp).rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.queries == []


def test_unlisted_name_is_nxdomain_without_upstream_query(responder):
    response = ask(responder, "unlisted.example.com")
    assert response.rcode() == dns.rcode.NXDOMAIN
    assert ask(responder, "unlisted.example.com", "AAAA").rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.queries == []
    assert responder.table.addresses("unlisted.example.com") is None  # not pinned either


@pytest.mark.parametrize("rdtype", ["TXT", "MX", "ANY", "SRV", "NS", "SOA", "CAA"])
def test_other_types_are_refused_and_never_forwarded(responder, rdtype):
    for name in ("api.example.com", "lazy.example.org", "unlisted.example.com"):
        assert ask(responder, name, rdtype).rcode() == dns.rcode.REFUSED
    assert responder.fake.queries == []


def test_ptr_is_nxdomain_and_never_forwarded(responder):
    responder.policy.suffix = ""  # even a policy admitting every name
    response = ask(responder, "7.113.0.203.in-addr.arpa", "PTR")
    assert response.rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.queries == []


def test_https_and_svcb_say_only_whether_the_name_exists(responder):
    for rdtype in ("HTTPS", "SVCB"):
        pinned = ask(responder, "api.example.com", rdtype)
        assert (pinned.rcode(), pinned.answer) == (dns.rcode.NOERROR, [])
        assert ask(responder, "unlisted.example.com", rdtype).rcode() == dns.rcode.NXDOMAIN
        assert ask(responder, "nx.example.com", rdtype).rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.queries == []


def test_chaos_class_is_refused(responder):
    response = ask(responder, "version.bind", "TXT", rdclass=dns.rdataclass.CH)
    assert response.rcode() == dns.rcode.REFUSED


def test_admitted_name_is_resolved_once_then_pinned(responder):
    fake = responder.fake
    assert addresses(ask(responder, "lazy.example.org")) == ["198.51.100.1"]
    assert addresses(ask(responder, "lazy.example.org", "AAAA")) == ["2001:db8::1"]
    assert fake.asked("lazy.example.org") == ["A", "AAAA"]  # one resolution for both types
    fake.set("lazy.example.org", ["198.51.100.99"])  # rebinding attempt
    assert addresses(ask(responder, "lazy.example.org", tcp=True)) == ["198.51.100.1"]
    assert fake.asked("lazy.example.org") == ["A", "AAAA"]
    assert responder.table.addresses("lazy.example.org") == (IP("198.51.100.1"), IP("2001:db8::1"))


def test_lazy_answers_are_filtered(responder):
    assert addresses(ask(responder, "lazy-private.example.org")) == ["198.51.100.2"]
    assert addresses(ask(responder, "lazy-denied.example.org")) == ["198.51.100.3"]  # policy
    assert responder.table.addresses("lazy-denied.example.org") == (IP("198.51.100.3"),)


def test_lazy_failure_is_pinned_empty_and_asked_once(responder):
    assert ask(responder, "gone.example.org").rcode() == dns.rcode.NXDOMAIN
    responder.fake.set("gone.example.org", ["198.51.100.5"])
    assert ask(responder, "gone.example.org").rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.asked("gone.example.org") == ["A"]
    assert responder.table.addresses("gone.example.org") == ()


def test_lazy_name_first_pin_wins_over_later_start_pin(responder):
    ask(responder, "lazy.example.org")
    assert responder.table.pin("lazy.example.org", (IP("198.51.100.200"),)) == (
        IP("198.51.100.1"), IP("2001:db8::1"))


def test_concurrent_queries_share_one_lookup(responder):
    responder.fake.delay = 0.2
    results: list[list[str]] = []

    def client(rdtype: str, tcp: bool) -> None:
        results.append(addresses(ask(responder, "lazy.example.org", rdtype, tcp=tcp)))

    threads = [threading.Thread(target=client, args=(("A", "AAAA")[i % 2], i % 3 == 0))
               for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == sorted([["198.51.100.1"], ["2001:db8::1"]] * 6)
    assert responder.fake.asked("lazy.example.org") == ["A", "AAAA"]


def test_slow_lookup_does_not_hold_other_answers(responder):
    responder.fake.delay = 0.3
    slow = threading.Thread(target=ask, args=(responder, "lazy.example.org"))
    slow.start()
    time.sleep(0.05)
    start = time.monotonic()
    assert addresses(ask(responder, "api.example.com")) == ["203.0.113.7"]
    assert time.monotonic() - start < 0.2
    slow.join()


def test_names_outside_the_hostname_alphabet_are_never_resolved(responder):
    responder.policy.suffix = ""  # admits every name
    name = dns.name.Name([b"lazy.example", b"org", b""])  # one label holding a dot
    assert ask(responder, name).rcode() == dns.rcode.NXDOMAIN
    assert ask(responder, dns.name.Name([b"a\x00b", b"org", b""])).rcode() == dns.rcode.NXDOMAIN
    assert ask(responder, "*.example.org").rcode() == dns.rcode.NXDOMAIN
    assert ask(responder, ".").rcode() == dns.rcode.NXDOMAIN
    assert responder.fake.queries == []


def test_without_upstream_admitted_names_are_nxdomain(fake):
    table = PinTable()
    with DnsResponder(table, FakePolicy(), None, settings(fake)) as server:
        assert ask(server, "lazy.example.org").rcode() == dns.rcode.NXDOMAIN
    assert fake.queries == []


def test_truncated_over_udp_complete_over_tcp(responder):
    responder.table.pin("many.example.org", tuple(IP(a) for a in ZONE["many.example.org"]))
    plain = ask(responder, "many.example.org", use_edns=False)
    assert plain.flags & dns.flags.TC and plain.answer == []
    assert len(addresses(ask(responder, "many.example.org", use_edns=0, payload=1232))) == 60
    assert len(addresses(ask(responder, "many.example.org", tcp=True))) == 60


def test_several_questions_formerr_and_other_opcodes_notimp(responder):
    query = dns.message.make_query("api.example.com", "A")
    query.question.append(dns.rrset.RRset(query.question[0].name, dns.rdataclass.IN,
                                          dns.rdatatype.AAAA))
    host, port = responder.udp_address
    assert dns.query.udp(query, host, port=port, timeout=3).rcode() == dns.rcode.FORMERR
    notify = dns.message.make_query("api.example.com", "SOA")
    notify.set_opcode(dns.opcode.NOTIFY)
    assert dns.query.udp(notify, host, port=port, timeout=3).rcode() == dns.rcode.NOTIMP


def raw_udp(server: DnsResponder, payload: bytes, timeout: float = 0.15) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(payload, server.udp_address)
        try:
            return sock.recv(65535)
        except TimeoutError:
            return None


def test_malformed_and_oversized_datagrams_are_dropped(responder):
    query = dns.message.make_query("api.example.com", "A").to_wire()
    response = dns.message.make_response(dns.message.from_wire(query)).to_wire()
    for junk in (b"", b"\x00", b"\xff" * 11, query[:-3], query + b"\x00" * MAX_QUERY, response):
        assert raw_udp(responder, junk) is None
    assert dns.message.from_wire(raw_udp(responder, query, timeout=3)).answer  # still serving
    assert responder.fake.queries == []


def tcp_exchange(server: DnsResponder, frames: bytes) -> bytes:
    with socket.create_connection(server.tcp_address, timeout=3) as sock:
        sock.sendall(frames)
        data = b""
        while chunk := sock.recv(65535):
            data += chunk
        return data


def frame(wire: bytes) -> bytes:
    return struct.pack("!H", len(wire)) + wire


def test_tcp_answers_several_queries_then_closes_on_garbage(responder):
    queries = [dns.message.make_query(n, "A") for n in ("api.example.com", "v4only.example.com")]
    data = tcp_exchange(responder, b"".join(frame(q.to_wire()) for q in queries) + frame(b"junk"))
    answers = []
    while data:
        (length,) = struct.unpack("!H", data[:2])
        answers.append(dns.message.from_wire(data[2:2 + length]))
        data = data[2 + length:]
    assert [a.id for a in answers] == [q.id for q in queries]
    assert [addresses(a) for a in answers] == [["203.0.113.7"], ["203.0.113.8"]]


@pytest.mark.parametrize("frames, then_eof", [
    (struct.pack("!H", 0), False),
    (struct.pack("!H", MAX_QUERY + 1) + b"\x00" * (MAX_QUERY + 1), False),
    (struct.pack("!H", 40) + b"\x00" * 10, True),  # a short frame, then end of input
])
def test_tcp_bad_frames_close_the_connection(responder, frames, then_eof):
    with socket.create_connection(responder.tcp_address, timeout=3) as sock:
        sock.sendall(frames)
        if then_eof:
            sock.shutdown(socket.SHUT_WR)
        try:
            assert sock.recv(100) == b""
        except ConnectionResetError:
            pass  # closed with our unread bytes still queued: the kernel resets


def test_queries_wait_for_startup_pinning(fake):
    s = settings(fake)
    table, ready = PinTable(), threading.Event()

    def pin_late() -> None:
        pin_at_start(["api.example.com"], s, table)
        ready.set()

    with DnsResponder(table, FakePolicy(suffix=".none"), Upstream(s), s, ready) as server:
        threading.Timer(0.2, pin_late).start()
        start = time.monotonic()
        assert addresses(ask(server, "api.example.com")) == ["203.0.113.7"]
        assert 0.15 < time.monotonic() - start < 2


def test_startup_pinning_that_never_ends_gives_servfail(fake):
    with DnsResponder(PinTable(), FakePolicy(), None, short(fake), threading.Event()) as server:
        start = time.monotonic()
        assert ask(server, "api.example.com").rcode() == dns.rcode.SERVFAIL
        assert 2.6 < time.monotonic() - start < 4  # lifetime + WAIT_SLACK


def test_policy_error_costs_one_servfail(responder):
    def broken(name):
        raise RuntimeError("bug")

    responder.policy.admits_name = broken
    assert ask(responder, "other.example.org").rcode() == dns.rcode.SERVFAIL
    assert ask(responder, "other.example.org", tcp=True).rcode() == dns.rcode.SERVFAIL
    assert addresses(ask(responder, "api.example.com")) == ["203.0.113.7"]


def test_stop_closes_sockets_and_connections(fake):
    server = DnsResponder(PinTable(), FakePolicy(), None, settings(fake))
    server.start()
    udp, tcp = server.udp_address, server.tcp_address
    assert udp[0] == tcp[0] == "127.0.0.1"
    idle = socket.create_connection(tcp, timeout=3)
    time.sleep(0.05)  # let the connection be accepted
    server.stop()
    assert idle.recv(10) == b""
    idle.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(tcp, timeout=3)
