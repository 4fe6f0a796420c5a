"""The network option parsers: what each spec means, and the message for each mistake."""

from __future__ import annotations

import dataclasses
from ipaddress import IPv4Address, IPv6Address, ip_network

import pytest

from sandlock.netrules._spec import (
    ALL_PORTS,
    DnsServer,
    NetRule,
    PortSet,
    ResolveEntry,
    parse_allow,
    parse_deny,
    parse_dns_server,
    parse_ports,
    parse_resolve,
    unmapped,
)

TCP_UDP = frozenset({"tcp", "udp"})


def ports(*ranges: tuple[int, int]) -> PortSet:
    return PortSet(ranges)


# --- --net-allow: what parses, and into what --------------------------------------------


@pytest.mark.parametrize(
    "spec, protocols, host, network, port_set",
    [
        ("api.openai.com:443", TCP_UDP, "api.openai.com", None, ports((443, 443))),
        ("github.com:22,443", TCP_UDP, "github.com", None, ports((22, 22), (443, 443))),
        ("udp://1.1.1.1:53", {"udp"}, None, "1.1.1.1/32", ports((53, 53))),
        ("10.0.0.0/8:443", TCP_UDP, None, "10.0.0.0/8", ports((443, 443))),
        ("*", TCP_UDP, None, None, ALL_PORTS),
        ("*:*", TCP_UDP, None, None, ALL_PORTS),
        (":8080", TCP_UDP, None, None, ports((8080, 8080))),
        ("[::1]:443", TCP_UDP, None, "::1/128", ports((443, 443))),
        ("[2001:db8::/32]:443", TCP_UDP, None, "2001:db8::/32", ports((443, 443))),
        ("[::1]", TCP_UDP, None, "::1/128", ALL_PORTS),
        ("localhost", TCP_UDP, "localhost", None, ALL_PORTS),
        ("tcp://*:80,443,8000-8100", {"tcp"}, None, None, ports((80, 80), (443, 443), (8000, 8100))),
        ("icmp://8.8.8.8", {"icmp"}, None, "8.8.8.8/32", ALL_PORTS),
        ("icmp://*", {"icmp"}, None, None, ALL_PORTS),
        ("TCP://Example.COM.:443", {"tcp"}, "example.com", None, ports((443, 443))),
        ("udp://:53", {"udp"}, None, None, ports((53, 53))),
        ("0.0.0.0/0", TCP_UDP, None, "0.0.0.0/0", ALL_PORTS),
        ("x-1.example:1-65535", TCP_UDP, "x-1.example", None, ALL_PORTS),
        # unbracketed IPv6 without ports, where it cannot be read as ADDRESS:PORTS
        ("::1", TCP_UDP, None, "::1/128", ALL_PORTS),
        ("2001:db8::/32", TCP_UDP, None, "2001:db8::/32", ALL_PORTS),
        ("fe80::1", TCP_UDP, None, "fe80::1/128", ALL_PORTS),
    ],
)
def test_allow_specs(spec, protocols, host, network, port_set):
    rule = parse_allow(spec)
    assert rule == NetRule(
        spec, frozenset(protocols), host, ip_network(network) if network else None, port_set
    )
    assert rule.any_host == (host is None and network is None)


def test_rule_is_frozen_and_keeps_the_users_spelling():
    rule = parse_allow("GitHub.com:443,22,22")
    assert rule.text == "GitHub.com:443,22,22"
    assert rule.host == "github.com"
    assert rule.ports.text == "22,443"
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.host = "evil.example"  # type: ignore[misc]
    assert hash(rule) == hash(parse_allow("GitHub.com:443,22,22"))


# --- --net-allow: each mistake, with its message ----------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty rule"),
        ("   ", "empty rule"),
        ("http://example.com", "unknown scheme 'http://' (expected tcp://, udp:// or icmp://)"),
        ("://example.com", "unknown scheme '://'"),
        ("tcp://", "no target after the scheme in 'tcp://' (write tcp://* for any host)"),
        # ports
        ("example.com:http", "invalid port 'http' (expected a number from 1 to 65535)"),
        ("example.com:-1", "incomplete port range '-1'"),
        ("example.com:8000-", "incomplete port range '8000-'"),
        ("example.com:70000", "port 70000 is out of range (1 to 65535)"),
        ("example.com:99999999999999999999", "is out of range"),
        ("example.com:0", "port 0 is not a port number"),
        ("example.com:0-80", "port 0 is not a port number"),
        ("example.com:90-80", "reversed port range '90-80' (write 80-90)"),
        ("example.com:443,", "empty item in port list '443,'"),
        ("example.com:,443", "empty item in port list ',443'"),
        ("example.com:*,443", "'*' cannot be combined with other ports in '*,443'"),
        ("example.com:443,*", "'*' cannot be combined with other ports in '443,*'"),
        ("example.com:", "nothing after ':' in 'example.com:' (omit the ':' for every port)"),
        ("[::1]:", "nothing after ':' in '[::1]:'"),
        ("example.com:443/path", "invalid port '443/path'"),
        ("example.com:4 43", "invalid port '4 43'"),
        ("icmp://8.8.8.8:7", "icmp:// takes no ports, got ':7' in 'icmp://8.8.8.8:7'"),
        ("icmp://*:*", "icmp:// takes no ports"),
        # networks
        ("10.0.0.0/33", "prefix length /33 is too long for IPv4 (at most /32) in '10.0.0.0/33'"),
        ("10.0.0.0/" + "9" * 5000, "is too long for IPv4"),
        ("[::/129]", "prefix length /129 is too long for IPv6 (at most /128) in '[::/129]'"),
        ("10.0.0.0/x", "invalid prefix length '/x' in '10.0.0.0/x'"),
        ("10.0.0.0/", "invalid prefix length '/' in '10.0.0.0/'"),
        ("10.0.0.1/8", "'10.0.0.1/8' has host bits set: did you mean 10.0.0.0/8?"),
        ("[2001:db8::1/32]:443", "'[2001:db8::1/32]' has host bits set: did you mean [2001:db8::/32]?"),
        ("2001:db8::1/32", "did you mean 2001:db8::/32?"),
        ("256.1.1.1", "'256.1.1.1' is not a valid IPv4 address"),
        ("1.2.3", "'1.2.3' is not a valid IPv4 address"),
        ("010.0.0.1", "'010.0.0.1' is not a valid IPv4 address"),
        ("0x7f.1", "'0x7f.1' is not a valid IPv4 address"),
        ("1.2.3.4.", "'1.2.3.4.' is not a valid IPv4 address"),
        ("example.com/8", "'example.com' is not a valid IPv4 address"),
        ("0.0.0.0", "'0.0.0.0' is the unspecified address; "
                    "connecting to it reaches this host: write 127.0.0.1"),
        ("[::]:80", "'[::]' is the unspecified address; connecting to it reaches this host: write [::1]"),
        ("[::ffff:10.0.0.1]:443", "'[::ffff:10.0.0.1]' is an IPv4-mapped IPv6 address: write 10.0.0.1"),
        ("[::ffff:10.0.0.0/104]", "is an IPv4-mapped IPv6 address: write 10.0.0.0/8"),
        # brackets and unbracketed IPv6
        ("[::1", "missing ']' in '[::1'"),
        ("[::1]443", "unexpected '443' after '[::1]' (ports follow a ':')"),
        ("[1.2.3.4]:80", "'[1.2.3.4]': brackets are only for IPv6 addresses"),
        ("[example.com]", "'[example.com]': brackets are only for IPv6 addresses"),
        ("[]", "'[]': brackets are only for IPv6 addresses"),
        ("[::g]", "'::g' is not a valid IPv6 address"),
        ("2001:db8::1:443", "'2001:db8::1:443' is ambiguous: write [2001:db8::1:443] "
                            "for the address, or [2001:db8::1]:443 for port 443"),
        ("::1:80", "is ambiguous"),
        ("2001:db8::1:443,8443", "IPv6 addresses with ports need brackets: write [2001:db8::1]:443,8443"),
        ("::1:*", "IPv6 addresses with ports need brackets: write [::1]:*"),
        ("2001:db8::/32:443", "IPv6 addresses with ports need brackets: write [2001:db8::/32]:443"),
        ("fe80::1%eth0", "'fe80::1%eth0': zone indexes ('%...') are not supported"),
        ("example.com:443:80",
         "'example.com:443:80' is not an IPv6 address (and a hostname cannot contain ':')"),
        # hostnames
        ("*.github.com", "'*.github.com': a wildcard is only accepted as the whole target ('*')"),
        ("a..b", "empty label in hostname 'a..b'"),
        (".example.com", "empty label in hostname '.example.com'"),
        ("example.com..", "empty label in hostname 'example.com..'"),
        (".", "'.' is not a hostname"),
        ("under_score.example", "invalid character '_' in hostname 'under_score.example'"),
        ("exa mple.com", "invalid character ' ' in hostname 'exa mple.com'"),
        (" example.com", "invalid character ' ' in hostname ' example.com'"),
        ("héllo.example", "invalid character 'é' in hostname 'héllo.example' "
                          "(write internationalised names as xn--...)"),
        ("-a.example", "label '-a' in hostname '-a.example' starts or ends with '-'"),
        ("a-.example", "label 'a-' in hostname 'a-.example' starts or ends with '-'"),
        ("a" * 64 + ".example", "is longer than 63 characters"),
        (".".join(["a" * 63] * 4), "is longer than 253 characters"),
    ],
)
def test_allow_errors(spec, message):
    with pytest.raises(ValueError) as info:
        parse_allow(spec)
    assert message in str(info.value)


def test_hostname_length_limits_are_inclusive():
    assert parse_allow("a" * 63 + ".example").host == "a" * 63 + ".example"
    name = ".".join(["a" * 63] * 3 + ["a" * 61])  # 253 characters
    assert parse_allow(name + ".").host == name


# --- --net-deny ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, network, port_set",
    [
        ("10.0.0.0/8", "10.0.0.0/8", ALL_PORTS),
        ("169.254.169.254", "169.254.169.254/32", ALL_PORTS),
        ("[fd00::/8]:22", "fd00::/8", ports((22, 22))),
        ("*:25", None, ports((25, 25))),
        ("tcp://:25,465,587", None, ports((25, 25), (465, 465), (587, 587))),
    ],
)
def test_deny_specs(spec, network, port_set):
    rule = parse_deny(spec)
    assert rule.host is None
    assert rule.network == (ip_network(network) if network else None)
    assert rule.ports == port_set


@pytest.mark.parametrize("spec", ["metadata.google.internal", "tcp://example.com:443", "localhost"])
def test_deny_refuses_hostnames(spec):
    with pytest.raises(ValueError, match="hostnames are not accepted in --net-deny .*"
                       "name resolution could not be trusted; use an IP or CIDR"):
        parse_deny(spec)


def test_deny_shares_the_grammar_errors():
    with pytest.raises(ValueError, match="has host bits set"):
        parse_deny("10.0.0.1/8")


# --- ports (--net-allow-bind) ---------------------------------------------------------


@pytest.mark.parametrize(
    "text, ranges, shown",
    [
        ("*", ((1, 65535),), "*"),
        ("8080", ((8080, 8080),), "8080"),
        ("3000-3999,8080", ((3000, 3999), (8080, 8080)), "3000-3999,8080"),
        ("443,80,81,82", ((80, 82), (443, 443)), "80-82,443"),
        ("10-20,15-30,31", ((10, 31),), "10-31"),
        ("1-65535", ((1, 65535),), "*"),
        ("0443", ((443, 443),), "443"),
        ("65535", ((65535, 65535),), "65535"),
    ],
)
def test_parse_ports(text, ranges, shown):
    port_set = parse_ports(text)
    assert port_set.ranges == ranges
    assert port_set.text == shown
    assert port_set.all == (shown == "*")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty port list"),
        ("0", "port 0 is not a port number"),
        ("65536", "port 65536 is out of range"),
        ("80,", "empty item in port list '80,'"),
        ("*,80", "'*' cannot be combined"),
        ("http", "invalid port 'http'"),
        ("８０", "invalid port '８０'"),  # non-ASCII digits
        ("9-1", "reversed port range '9-1'"),
    ],
)
def test_parse_ports_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ports(text)


def test_port_set_membership_and_union():
    port_set = parse_ports("22,8000-8100")
    assert 22 in port_set and 8000 in port_set and 8100 in port_set
    assert 23 not in port_set and 0 not in port_set and 7999 not in port_set
    assert 0 not in ALL_PORTS and 65535 in ALL_PORTS
    assert (port_set | parse_ports("23-7999")).ranges == ((22, 8100),)


@pytest.mark.parametrize("ranges", [((0, 1),), ((5, 4),), ((1, 65536),)])
def test_port_set_validates_ranges(ranges):
    with pytest.raises(ValueError, match="invalid port range"):
        PortSet(ranges)


# --- --resolve ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, host, addresses",
    [
        ("db.internal=10.0.0.5", "db.internal", ("10.0.0.5",)),
        ("API.Example.com.=1.2.3.4,2001:db8::1", "api.example.com", ("1.2.3.4", "2001:db8::1")),
        ("x.example=1.2.3.4,1.2.3.4", "x.example", ("1.2.3.4",)),
        ("x.example=::ffff:1.2.3.4", "x.example", ("1.2.3.4",)),  # stored unmapped
        ("blocked.example=0.0.0.0", "blocked.example", ("0.0.0.0",)),  # a sinkhole stays one
    ],
)
def test_parse_resolve(text, host, addresses):
    entry = parse_resolve(text)
    expected = tuple(IPv6Address(a) if ":" in a else IPv4Address(a) for a in addresses)
    assert entry == ResolveEntry(host, expected)


@pytest.mark.parametrize(
    "text, message",
    [
        ("db.internal", "'db.internal': expected HOST=IP[,IP...]"),
        ("=1.2.3.4", "'=1.2.3.4': no HOST before '='"),
        ("db.internal=", "'db.internal=': no address after '='"),
        ("db.internal=1.2.3.4,", "empty item in address list '1.2.3.4,'"),
        ("db.internal=db2.internal", "'db2.internal' is not a valid IP address"),
        ("db.internal=[::1]", "'[::1]': write IPv6 addresses without brackets here"),
        ("db.internal=10.0.0.0/8", "'10.0.0.0/8' is not a valid IP address"),
        ("1.2.3.4=5.6.7.8", "'1.2.3.4' is not a hostname (its last label is numeric)"),
        ("*=1.2.3.4", "a wildcard is only accepted as the whole target"),
        ("bad_name=1.2.3.4", "invalid character '_' in hostname 'bad_name'"),
    ],
)
def test_parse_resolve_errors(text, message):
    with pytest.raises(ValueError) as info:
        parse_resolve(text)
    assert message in str(info.value)


# --- --dns-server ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, address, port",
    [
        ("1.1.1.1", IPv4Address("1.1.1.1"), 53),
        ("10.0.0.2:5353", IPv4Address("10.0.0.2"), 5353),
        ("[2606:4700::1111]:53", IPv6Address("2606:4700::1111"), 53),
        ("[::1]", IPv6Address("::1"), 53),
        ("2001:4860:4860::8888", IPv6Address("2001:4860:4860::8888"), 53),
        ("[::ffff:9.9.9.9]:53", IPv4Address("9.9.9.9"), 53),
    ],
)
def test_parse_dns_server(text, address, port):
    assert parse_dns_server(text) == DnsServer(address, port)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty address"),
        ("dns.google", "'dns.google' is not an IP address "
                       "(sandlock cannot resolve the name of its own DNS server)"),
        ("*", "'*' is not an IP address"),
        (":53", "'' is not an IP address"),
        ("1.1.1.1:0", "port 0 is not a port number"),
        ("1.1.1.1:53,54", "invalid port '53,54'"),
        ("1.1.1.1:", "nothing after ':'"),
        ("2606:4700::1111:53", "is ambiguous: write [2606:4700::1111:53] for the address, "
                               "or [2606:4700::1111]:53 for port 53"),
        ("[1.1.1.1]:53", "'[1.1.1.1]': brackets are only for IPv6 addresses"),
        ("10.0.0.0/8", "'10.0.0.0/8': expected one address, not a network"),
        ("0.0.0.0", "'0.0.0.0' is the unspecified address, not a server"),
        ("[::]:53", "'[::]' is the unspecified address, not a server"),
    ],
)
def test_parse_dns_server_errors(text, message):
    with pytest.raises(ValueError) as info:
        parse_dns_server(text)
    assert message in str(info.value)


def test_unmapped():
    assert unmapped(IPv6Address("::ffff:10.1.2.3")) == IPv4Address("10.1.2.3")
    assert unmapped(IPv6Address("2001:db8::1")) == IPv6Address("2001:db8::1")
    assert unmapped(IPv4Address("10.1.2.3")) == IPv4Address("10.1.2.3")
