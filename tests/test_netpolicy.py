"""The network verdict: NetPolicy decisions on endpoints, with a real PinTable."""

from __future__ import annotations

import dataclasses
from ipaddress import ip_address

import pytest

from sandlock.netrules._netpolicy import (
    DNS_REDIRECT_REASON,
    EPHEMERAL_BIND_REASON,
    ICMP_BIND_REASON,
    Endpoint,
    NetPolicy,
    Verdict,
    canonical_address,
)
from sandlock.netrules._ports import ALL_PORTS, parse_ports
from sandlock.netrules._spec import parse_allow, parse_deny
from sandlock.netrules._pins import PinTable

GITHUB = "140.82.112.3"
MIRROR_ONLY = "140.82.112.9"
EVIL = "203.0.113.66"


@pytest.fixture
def pins() -> PinTable:
    table = PinTable()
    table.pin("github.com", (ip_address(GITHUB), ip_address("2606:50c0::1")))
    table.pin("mirror.example", (ip_address(GITHUB), ip_address(MIRROR_ONLY)))  # a shared CDN
    table.pin("evil.example", (ip_address(EVIL),))
    table.pin("localhost", (ip_address("127.0.0.1"), ip_address("::1")))
    table.pin("dns.example", (ip_address("192.0.2.53"),))
    return table


def allow(*specs: str, **kwargs: object) -> NetPolicy:
    return NetPolicy(allow=tuple(map(parse_allow, specs)), **kwargs)


def deny(*specs: str) -> NetPolicy:
    return NetPolicy(deny=tuple(map(parse_deny, specs)))


def ep(protocol: str, address: str, port: int = 0) -> Endpoint:
    return Endpoint(protocol, ip_address(address), port)


# --- canonical addresses and endpoints ---------------------------------------------------


@pytest.mark.parametrize(
    "given, canonical",
    [
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("0.0.0.0", "127.0.0.1"),
        ("::", "::1"),
        ("::ffff:0.0.0.0", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("2001:db8::1", "2001:db8::1"),
        ("127.0.0.2", "127.0.0.2"),
    ],
)
def test_canonical_address(given, canonical):
    assert canonical_address(ip_address(given)) == ip_address(canonical)


@pytest.mark.parametrize(
    "protocol, port, message",
    [("sctp", 80, "unknown protocol 'sctp'"), ("tcp", 65536, "port 65536"), ("udp", -1, "port -1")],
)
def test_endpoint_validation(protocol, port, message):
    with pytest.raises(ValueError, match=message):
        Endpoint(protocol, ip_address("10.0.0.1"), port)


# --- allow mode ----------------------------------------------------------------------

ALLOW_RULES = (
    "github.com:22,443",
    "tcp://10.0.0.0/8:8000-8100",
    "[2001:db8::/32]:443",
    "icmp://8.8.8.8",
    "udp://203.0.113.7:4000",
)


@pytest.mark.parametrize(
    "endpoint, allowed, reason, hostname",
    [
        # a hostname rule matches the addresses pinned for the name
        (ep("tcp", GITHUB, 443), True, "--net-allow github.com:22,443", "github.com"),
        (ep("tcp", "2606:50c0::1", 22), True, "--net-allow github.com:22,443", "github.com"),
        (ep("udp", GITHUB, 443), True, "--net-allow github.com:22,443", "github.com"),
        (ep("tcp", f"::ffff:{GITHUB}", 443), True, "--net-allow github.com:22,443", "github.com"),
        (ep("tcp", GITHUB, 80), False, "no --net-allow rule", "github.com"),
        (ep("tcp", EVIL, 443), False, "no --net-allow rule", "evil.example"),
        (ep("tcp", MIRROR_ONLY, 443), False, "no --net-allow rule", "mirror.example"),
        (ep("tcp", "198.51.100.1", 443), False, "no --net-allow rule", None),
        # networks, ports and protocols
        (ep("tcp", "10.1.2.3", 8000), True, "--net-allow tcp://10.0.0.0/8:8000-8100", None),
        (ep("tcp", "10.255.255.255", 8100), True, "--net-allow tcp://10.0.0.0/8:8000-8100", None),
        (ep("tcp", "10.1.2.3", 8101), False, "no --net-allow rule", None),
        (ep("udp", "10.1.2.3", 8050), False, "no --net-allow rule", None),
        (ep("tcp", "11.0.0.1", 8050), False, "no --net-allow rule", None),
        (ep("tcp", "::ffff:10.1.2.3", 8050), True, "--net-allow tcp://10.0.0.0/8:8000-8100", None),
        (ep("udp", "2001:db8:ffff::5", 443), True, "--net-allow [2001:db8::/32]:443", None),
        (ep("tcp", "2001:db9::5", 443), False, "no --net-allow rule", None),
        (ep("udp", "203.0.113.7", 4000), True, "--net-allow udp://203.0.113.7:4000", None),
        (ep("tcp", "203.0.113.7", 4000), False, "no --net-allow rule", None),
        # ICMP: protocol and address only
        (ep("icmp", "8.8.8.8"), True, "--net-allow icmp://8.8.8.8", None),
        (ep("icmp", "8.8.8.8", 1234), True, "--net-allow icmp://8.8.8.8", None),
        (ep("icmp", "8.8.4.4"), False, "no --net-allow rule", None),
        (ep("icmp", GITHUB), False, "no --net-allow rule", "github.com"),  # no scheme: TCP, UDP
        (ep("tcp", "8.8.8.8", 443), False, "no --net-allow rule", None),
    ],
)
def test_allow_mode(pins, endpoint, allowed, reason, hostname):
    assert allow(*ALLOW_RULES).connect(endpoint, pins) == Verdict(allowed, reason, hostname)


def test_pinned_name_matches_even_on_a_shared_address(pins):
    # GITHUB is pinned for github.com and mirror.example: the rule's name is reported.
    verdict = allow("mirror.example:443").connect(ep("tcp", GITHUB, 443), pins)
    assert verdict == Verdict(True, "--net-allow mirror.example:443", "mirror.example")
    verdict = allow("github.com:443").connect(ep("tcp", GITHUB, 443), pins)
    assert verdict.hostname == "github.com"


def test_unpinned_hostname_matches_nothing(pins):
    policy = allow("api.openai.com:443")
    assert not policy.connect(ep("tcp", EVIL, 443), pins).allowed
    pins.pin("api.openai.com", (ip_address("104.18.0.1"),))
    assert policy.connect(ep("tcp", "104.18.0.1", 443), pins).allowed


def test_first_matching_rule_is_the_reason(pins):
    policy = allow("github.com:443", "*:443")
    assert policy.connect(ep("tcp", GITHUB, 443), pins).reason == "--net-allow github.com:443"
    assert policy.connect(ep("tcp", EVIL, 443), pins).reason == "--net-allow *:443"


@pytest.mark.parametrize(
    "rule, address",
    [
        ("tcp://127.0.0.1:8080", "0.0.0.0"),
        ("tcp://[::1]:8080", "::"),
        ("localhost:8080", "0.0.0.0"),
        ("localhost:8080", "::"),
        ("tcp://127.0.0.1:8080", "::ffff:0.0.0.0"),
    ],
)
def test_unspecified_destination_is_the_local_host(pins, rule, address):
    assert allow(rule).connect(ep("tcp", address, 8080), pins).allowed


def test_unspecified_destination_is_not_any_host(pins):
    assert not allow("tcp://10.0.0.0/8").connect(ep("tcp", "0.0.0.0", 80), pins).allowed


def test_any_host_rules(pins):
    policy = allow(":8080", "udp://*")
    assert policy.connect(ep("tcp", EVIL, 8080), pins) == Verdict(True, "--net-allow :8080", "evil.example")
    assert policy.connect(ep("udp", "198.51.100.1", 9), pins).reason == "--net-allow udp://*"
    assert not policy.connect(ep("tcp", EVIL, 8081), pins).allowed


def test_no_rules_means_no_network(pins):
    policy = NetPolicy()
    assert policy.connect(ep("tcp", GITHUB, 443), pins) == Verdict(False, "no --net-allow rule", "github.com")
    assert policy.connect(ep("udp", "0.0.0.0", 9), pins) == Verdict(False, "no --net-allow rule", "localhost")
    assert policy.connect(ep("icmp", "::1"), pins) == Verdict(False, "no --net-allow rule", "localhost")


# --- deny mode -----------------------------------------------------------------------

DENY_RULES = ("10.0.0.0/8", "tcp://*:25", "[fd00::/8]:22")


@pytest.mark.parametrize(
    "endpoint, allowed, reason, hostname",
    [
        (ep("tcp", "10.1.2.3", 443), False, "--net-deny 10.0.0.0/8", None),
        (ep("udp", "10.1.2.3", 9), False, "--net-deny 10.0.0.0/8", None),
        (ep("tcp", "::ffff:10.1.2.3", 443), False, "--net-deny 10.0.0.0/8", None),
        (ep("tcp", EVIL, 25), False, "--net-deny tcp://*:25", "evil.example"),
        (ep("udp", EVIL, 25), True, "no --net-deny rule", "evil.example"),
        (ep("tcp", EVIL, 443), True, "no --net-deny rule", "evil.example"),
        (ep("tcp", "fd12::1", 22), False, "--net-deny [fd00::/8]:22", None),
        (ep("tcp", "fd12::1", 23), True, "no --net-deny rule", None),
        (ep("tcp", "11.0.0.1", 443), True, "no --net-deny rule", None),
        # a rule without scheme covers TCP and UDP only
        (ep("icmp", "10.1.2.3"), True, "no --net-deny rule", None),
    ],
)
def test_deny_mode(pins, endpoint, allowed, reason, hostname):
    assert deny(*DENY_RULES).connect(endpoint, pins) == Verdict(allowed, reason, hostname)


def test_deny_icmp_needs_its_scheme(pins):
    assert not deny("icmp://10.0.0.0/8").connect(ep("icmp", "10.1.2.3"), pins).allowed


def test_deny_does_not_match_names(pins):
    # evil.example is pinned to EVIL, but a deny rule only ever names addresses.
    assert deny("198.51.100.0/24").connect(ep("tcp", EVIL, 443), pins).allowed


# --- DNS -------------------------------------------------------------------------------


def redirected(hostname: str | None = None) -> Verdict:
    return Verdict(True, DNS_REDIRECT_REASON, hostname, redirect_dns=True)


@pytest.mark.parametrize(
    "policy, endpoint, expected",
    [
        (NetPolicy(), ep("udp", "8.8.8.8", 53), redirected()),
        (NetPolicy(), ep("tcp", "2001:4860:4860::8888", 53), redirected()),
        (NetPolicy(), ep("udp", "127.0.0.53", 53), redirected()),
        (NetPolicy(), ep("udp", "192.0.2.53", 53), redirected("dns.example")),
        # an explicit address or CIDR with 53 in its port list goes direct
        (allow("udp://10.0.0.2:53"), ep("udp", "10.0.0.2", 53),
         Verdict(True, "--net-allow udp://10.0.0.2:53")),
        (allow("10.0.0.0/24:53,853"), ep("tcp", "10.0.0.9", 53),
         Verdict(True, "--net-allow 10.0.0.0/24:53,853")),
        (allow("[2001:db8::53]:53"), ep("udp", "2001:db8::53", 53),
         Verdict(True, "--net-allow [2001:db8::53]:53")),
        (allow("10.0.0.2:1-100"), ep("udp", "10.0.0.2", 53), Verdict(True, "--net-allow 10.0.0.2:1-100")),
        # ... but not for another protocol, another address, all ports, a name or any host
        (allow("udp://10.0.0.2:53"), ep("tcp", "10.0.0.2", 53), redirected()),
        (allow("udp://10.0.0.2:53"), ep("udp", "10.0.0.3", 53), redirected()),
        (allow("10.0.0.2"), ep("udp", "10.0.0.2", 53), redirected()),
        (allow("10.0.0.2:*"), ep("udp", "10.0.0.2", 53), redirected()),
        (allow("dns.example:53"), ep("udp", "192.0.2.53", 53), redirected("dns.example")),
        (allow(":53"), ep("udp", "8.8.8.8", 53), redirected()),
        (allow("*"), ep("tcp", "8.8.8.8", 53), redirected()),
        # deny mode: always redirected, even to a denied address
        (deny("*"), ep("udp", "8.8.8.8", 53), redirected()),
        (deny("10.0.0.0/8:53"), ep("udp", "10.0.0.2", 53), redirected()),
    ],
)
def test_dns(pins, policy, endpoint, expected):
    assert policy.connect(endpoint, pins) == expected


def test_icmp_has_no_dns(pins):
    assert not NetPolicy().connect(ep("icmp", "8.8.8.8", 53), pins).allowed


# --- bind ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bind_ports, endpoint, expected",
    [
        (None, ep("tcp", "0.0.0.0", 8080), Verdict(False, "no --net-allow-bind")),
        (None, ep("tcp", "0.0.0.0", 0), Verdict(True, EPHEMERAL_BIND_REASON)),
        (None, ep("udp", "127.0.0.1", 0), Verdict(True, EPHEMERAL_BIND_REASON)),
        (None, ep("icmp", "0.0.0.0", 7), Verdict(True, ICMP_BIND_REASON)),
        ("3000-3999", ep("tcp", "127.0.0.1", 3000), Verdict(True, "--net-allow-bind 3000-3999")),
        ("3000-3999", ep("udp", "::", 3999), Verdict(True, "--net-allow-bind 3000-3999")),
        ("3000-3999", ep("tcp", "127.0.0.1", 4000),
         Verdict(False, "port 4000 not in --net-allow-bind 3000-3999")),
        ("*", ep("tcp", "0.0.0.0", 80), Verdict(True, "--net-allow-bind *")),
    ],
)
def test_bind(bind_ports, endpoint, expected):
    policy = NetPolicy(bind_ports=parse_ports(bind_ports) if bind_ports else None)
    assert policy.bind(endpoint) == expected


def test_bind_is_independent_of_connect_rules():
    assert not allow("*").bind(ep("tcp", "0.0.0.0", 8080)).allowed
    assert deny("10.0.0.0/8").bind(ep("tcp", "0.0.0.0", 8080)) == Verdict(False, "no --net-allow-bind")


# --- unix sockets --------------------------------------------------------------------


@pytest.fixture
def unix_policy() -> NetPolicy:
    return NetPolicy(unix_paths=("/run/user/1000/bus", "/tmp//x/../app.sock", "/tmp/app.sock"))


def test_unix_paths_are_normalised(unix_policy):
    assert unix_policy.unix_paths == ("/run/user/1000/bus", "/tmp/app.sock")


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/tmp/app.sock", Verdict(True, "--unix-allow /tmp/app.sock")),
        ("/tmp/./app.sock", Verdict(True, "--unix-allow /tmp/app.sock")),
        ("//tmp/app.sock", Verdict(True, "--unix-allow /tmp/app.sock")),
        ("/run/user/1000/bus", Verdict(True, "--unix-allow /run/user/1000/bus")),
        ("/tmp/other.sock", Verdict(False, "no --unix-allow rule")),
        ("/tmp", Verdict(False, "no --unix-allow rule")),
        ("/run/user/1000/bus/x", Verdict(False, "no --unix-allow rule")),
        ("tmp/app.sock", Verdict(False, "unix socket path 'tmp/app.sock' is not absolute")),
    ],
)
def test_unix_connect(unix_policy, path, expected):
    assert unix_policy.unix_connect(path) == expected


def test_unix_paths_must_be_absolute():
    with pytest.raises(ValueError, match="unix socket path 'app.sock' is not absolute"):
        NetPolicy(unix_paths=("app.sock",))


def test_unix_paths_are_kept_when_everything_inet_is_allowed():
    policy = allow("*", unix_paths=("/tmp/app.sock",))
    assert not policy.unix_connect("/tmp/other.sock").allowed


# --- names and addresses for the DNS responder ----------------------------------------


def test_hostnames():
    assert allow("GitHub.com:443", "github.com:22", "api.openai.com", "10.0.0.0/8", "*:80").hostnames() == {
        "github.com",
        "api.openai.com",
    }
    assert deny("10.0.0.0/8").hostnames() == frozenset()
    assert NetPolicy().hostnames() == frozenset()


@pytest.mark.parametrize(
    "policy, name, admitted",
    [
        (allow("github.com:443", "10.0.0.0/8"), "github.com", True),
        (allow("github.com:443", "10.0.0.0/8"), "GitHub.COM.", True),
        (allow("github.com:443", "10.0.0.0/8"), "api.github.com", False),
        (allow("github.com:443", "10.0.0.0/8"), "secret.attacker.example", False),
        (allow("github.com:443", ":8080"), "secret.attacker.example", True),
        (allow("icmp://*"), "anything.example", True),
        (deny("10.0.0.0/8"), "anything.example", True),
        (NetPolicy(), "github.com", False),
    ],
)
def test_admits_name(policy, name, admitted):
    assert policy.admits_name(name) is admitted


@pytest.mark.parametrize(
    "policy, address, admitted",
    [
        # deny mode: refused only where every TCP and UDP port is denied
        (deny("10.0.0.0/8"), "10.1.2.3", False),
        (deny("10.0.0.0/8"), "::ffff:10.1.2.3", False),
        (deny("10.0.0.0/8"), "11.0.0.1", True),
        (deny("10.0.0.0/8:22"), "10.1.2.3", True),
        (deny("udp://10.0.0.0/8"), "10.1.2.3", True),
        (deny("tcp://*:25"), "10.1.2.3", True),
        (deny("*"), "10.1.2.3", False),
        (deny("127.0.0.0/8"), "0.0.0.0", False),
        # allow mode: only what a rule reaches without a name
        (allow("10.0.0.0/8:443", "github.com"), "10.1.2.3", True),
        (allow("10.0.0.0/8:443", "github.com"), GITHUB, False),
        (allow("github.com", ":8080"), EVIL, True),
        (allow("tcp://127.0.0.1:80"), "0.0.0.0", True),
        (NetPolicy(), "10.1.2.3", False),
    ],
)
def test_admits_address(policy, address, admitted):
    assert policy.admits_address(ip_address(address)) is admitted


# --- construction ----------------------------------------------------------------------


def test_allow_and_deny_are_exclusive():
    with pytest.raises(ValueError, match="--net-allow and --net-deny cannot be combined"):
        NetPolicy(allow=(parse_allow("github.com"),), deny=(parse_deny("10.0.0.0/8"),))


def test_deny_rules_cannot_name_hosts():
    with pytest.raises(ValueError, match="--net-deny github.com: hostnames are not accepted"):
        NetPolicy(deny=(parse_allow("github.com"),))


def test_policy_is_frozen_and_hashable():
    policy = allow("github.com:443", bind_ports=ALL_PORTS, unix_paths=["/tmp/a"])
    assert policy.unix_paths == ("/tmp/a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.allow = ()  # type: ignore[misc]
    assert hash(policy) == hash(allow("github.com:443", bind_ports=ALL_PORTS, unix_paths=("/tmp/a",)))


def test_nat64_addresses_are_judged_as_the_ipv4_they_reach():
    denied = NetPolicy(deny=(parse_deny("10.0.0.0/8"),))
    endpoint = Endpoint("tcp", canonical_address(ip_address("64:ff9b::a00:1")), 443)
    assert endpoint.address == ip_address("10.0.0.1")
    assert not denied.connect(endpoint, PinTable()).allowed
