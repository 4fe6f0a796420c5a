"""Parsers for the network options: each turns one option value into an immutable spec.

Pure functions, no I/O. A ``parse_*`` function returns a frozen value or raises
ValueError whose message says what is wrong and quotes the offending text; the caller
turns it into a PolicyError naming the option.

Grammar of ``--net-allow`` and ``--net-deny``::

    [tcp://|udp://|icmp://]TARGET[:PORTS]

TARGET is a hostname, an IPv4 address or CIDR, an IPv6 address or prefix in brackets,
``*`` or nothing (both: any host). An IPv6 address or prefix may go without brackets
when no ports follow and the text cannot be read as ``ADDRESS:PORT``
(``::1``, ``2001:db8::/32``; not ``2001:db8::1:443``). PORTS is ``*`` or a comma list
of ports and ``LO-HI`` ranges; no PORTS means every port. No scheme means TCP and UDP;
``icmp://`` takes no ports.
"""

from __future__ import annotations

from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_network,
)

from .._record import record

TYPE_CHECKING = False  # typing costs ~5 ms to import: policy checks load this module
if TYPE_CHECKING:
    from collections.abc import Iterable
from ._pins import normalise_name
from ._ports import ALL_PORTS, PortSet, parse_port, parse_ports

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

TCP, UDP, ICMP = "tcp", "udp", "icmp"
DEFAULT_PROTOCOLS = frozenset({TCP, UDP})
_SCHEMES = {TCP: frozenset({TCP}), UDP: frozenset({UDP}), ICMP: frozenset({ICMP})}

DNS_DEFAULT_PORT = 53
_MAX_NAME = 253
_MAX_LABEL = 63
# Endpoints are compared unmapped (see unmapped), so a rule inside this prefix could
# never match anything: such rules are refused with the IPv4 spelling as a hint.
_IPV4_MAPPED = IPv6Network("::ffff:0:0/96")


@record
class NetRule:
    """One --net-allow or --net-deny rule.

    ``host`` (a normalised name) and ``network`` are exclusive; neither means any host.
    A single address is stored as a /32 or /128 network.
    """

    text: str  # as the user wrote it: shown in verdicts and notices
    protocols: frozenset[str]
    host: str | None
    network: IPNetwork | None
    ports: PortSet

    @property
    def any_host(self) -> bool:
        return self.host is None and self.network is None


@record
class ResolveEntry:
    """--resolve HOST=IP[,IP...]: HOST pinned to these addresses, without DNS."""

    host: str
    addresses: tuple[IPAddress, ...]


@record
class DnsServer:
    """--dns-server: the upstream server sandlock's resolver asks."""

    address: IPAddress
    port: int = DNS_DEFAULT_PORT


_NAT64_PREFIX = 0x0064FF9B << 96  # 64:ff9b::/96, the well-known NAT64 prefix


def unmapped(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address stands for, where it carries one: IPv4-mapped
    (``::ffff:a.b.c.d``) and NAT64 (``64:ff9b::a.b.c.d``, which reaches that IPv4 host
    wherever a NAT64 gateway exists); any other address as it is."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if int(address) >> 32 == _NAT64_PREFIX >> 32:
            return IPv4Address(int(address) & 0xFFFFFFFF)
    return address


# --- --net-allow, --net-deny ---------------------------------------------------------


def parse_allow(text: str) -> NetRule:
    """A --net-allow rule."""
    return _parse_rule(text, hostnames=True)


def parse_deny(text: str) -> NetRule:
    """A --net-deny rule: like --net-allow, but the target must be an address, CIDR or *."""
    return _parse_rule(text, hostnames=False)


def _parse_rule(text: str, hostnames: bool) -> NetRule:
    if not text.strip():
        raise ValueError("empty rule")
    protocols, rest = _split_scheme(text)
    if not rest:
        raise ValueError(f"no target after the scheme in {text!r} (write {text}* for any host)")
    target, ports_text = _split_target(rest)
    host, network = _parse_target(target)
    if host is not None and not hostnames:
        raise ValueError(
            f"hostnames are not accepted in --net-deny ({host!r}): "
            "name resolution could not be trusted; use an IP or CIDR"
        )
    if ports_text is None:
        ports = ALL_PORTS
    elif protocols == _SCHEMES[ICMP]:
        raise ValueError(f"icmp:// takes no ports, got ':{ports_text}' in {text!r}")
    else:
        ports = parse_ports(ports_text)
    return NetRule(text, protocols, host, network, ports)


def _split_scheme(text: str) -> tuple[frozenset[str], str]:
    scheme, sep, rest = text.partition("://")
    if not sep:
        return DEFAULT_PROTOCOLS, text
    protocols = _SCHEMES.get(scheme.lower())
    if protocols is None:
        raise ValueError(f"unknown scheme '{scheme}://' (expected tcp://, udp:// or icmp://)")
    return protocols, rest


def _split_target(text: str) -> tuple[str, str | None]:
    """``TARGET[:PORTS]`` -> (TARGET, PORTS or None); a bracketed TARGET keeps its brackets."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"missing ']' in {text!r}")
        target, after = text[: end + 1], text[end + 1 :]
        if after and not after.startswith(":"):
            raise ValueError(f"unexpected {after!r} after {target!r} (ports follow a ':')")
        return target, _ports_after_colon(text, after)
    if text.count(":") > 1:
        return _unbracketed_ipv6(text), None
    target, sep, ports = text.partition(":")
    return target, _ports_after_colon(text, sep + ports)


def _ports_after_colon(text: str, suffix: str) -> str | None:
    if not suffix:
        return None
    if suffix == ":":
        raise ValueError(f"nothing after ':' in {text!r} (omit the ':' for every port)")
    return suffix[1:]


def _unbracketed_ipv6(text: str) -> str:
    """Accept ``text`` as an IPv6 address or prefix only if it cannot mean ADDRESS:PORTS."""
    head, _, tail = text.rpartition(":")
    as_whole = _is_ipv6_literal(text)
    as_split = _is_ipv6_literal(head) and _is_port_list(tail)
    if as_whole and as_split:
        raise ValueError(
            f"{text!r} is ambiguous: write [{text}] for the address, "
            f"or [{head}]:{tail} for port {tail}"
        )
    if as_whole:
        return text
    if _is_ipv6_literal(head):
        raise ValueError(f"IPv6 addresses with ports need brackets: write [{head}]:{tail}")
    raise ValueError(f"{text!r} is not an IPv6 address (and a hostname cannot contain ':')")


def _is_ipv6_literal(text: str) -> bool:
    """An IPv6 address, or one followed by a numeric prefix length (checked later)."""
    address, slash, prefix = text.partition("/")
    if slash and not _is_number(prefix):
        return False
    try:
        return isinstance(ip_address(address), IPv6Address)
    except ValueError:
        return False


def _is_port_list(text: str) -> bool:
    try:
        parse_ports(text)
    except ValueError:
        return False
    return True


def _parse_target(target: str) -> tuple[str | None, IPNetwork | None]:
    """TARGET -> (hostname, None), (None, network) or (None, None) for any host."""
    if target in ("", "*"):
        return None, None
    if target.startswith("["):
        inner = target[1:-1]
        if ":" not in inner:
            raise ValueError(f"{target!r}: brackets are only for IPv6 addresses")
        return None, _network(inner, 6, "[{}]")
    if ":" in target:  # an unbracketed IPv6 literal let through by _split_target
        return None, _network(target, 6, "{}")
    if "/" in target or _last_label_is_numeric(target):
        return None, _network(target, 4, "{}")
    return _hostname(target), None


def _network(text: str, version: int, spelling: str) -> IPNetwork:
    """An address or CIDR of IP ``version``; ``spelling`` ("[{}]" or "{}") is how the
    user wrote it, for messages and suggestions."""
    address_text, slash, prefix_text = text.partition("/")
    address = _address(address_text, version)
    bits = address.max_prefixlen
    shown = spelling.format(text)
    if not slash:
        prefix = bits
    elif not _is_number(prefix_text):
        raise ValueError(f"invalid prefix length {'/' + prefix_text!r} in {shown!r}")
    elif len(prefix_text.lstrip("0")) > 3 or int(prefix_text) > bits:
        raise ValueError(
            f"prefix length /{prefix_text} is too long for IPv{version} (at most /{bits}) "
            f"in {shown!r}"
        )
    else:
        prefix = int(prefix_text)
    network = ip_network((address, prefix), strict=False)
    if network.network_address != address:
        raise ValueError(f"{shown!r} has host bits set: did you mean {spelling.format(network)}?")
    _check_reachable(shown, network, bool(slash))
    return network


def _check_reachable(shown: str, network: IPNetwork, cidr: bool) -> None:
    """Refuse targets that endpoints, once canonical, can never be (see _netpolicy)."""
    if network.num_addresses == 1 and network.network_address.is_unspecified:
        loopback = "127.0.0.1" if network.version == 4 else "[::1]"
        raise ValueError(
            f"{shown!r} is the unspecified address; connecting to it reaches this host: "
            f"write {loopback}"
        )
    if isinstance(network, IPv6Network) and network.subnet_of(_IPV4_MAPPED):
        ipv4 = IPv4Network((network.network_address.ipv4_mapped, network.prefixlen - 96))
        plain = ipv4 if cidr else ipv4.network_address
        raise ValueError(f"{shown!r} is an IPv4-mapped IPv6 address: write {plain}")


def _address(text: str, version: int | None = None) -> IPAddress:
    if "%" in text:
        raise ValueError(f"{text!r}: zone indexes ('%...') are not supported")
    try:
        address = ip_address(text)
    except ValueError:
        address = None
    if address is None or version not in (None, address.version):
        kind = f"IPv{version}" if version else "IP"
        raise ValueError(f"{text!r} is not a valid {kind} address")
    return address


def _last_label_is_numeric(name: str) -> bool:
    # No top-level domain is numeric, so such a target is meant as an IPv4 address
    # (and refusing it as a name also stops inet_aton spellings such as 0x7f.1).
    return _is_number(name.removesuffix(".").rpartition(".")[2])


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


# --- hostnames ------------------------------------------------------------------------


def _hostname(text: str) -> str:
    """A DNS hostname (letters, digits, hyphens), normalised; one trailing dot allowed."""
    name = text.removesuffix(".")
    if "*" in name:
        raise ValueError(f"{text!r}: a wildcard is only accepted as the whole target ('*')")
    if not name:
        raise ValueError(f"{text!r} is not a hostname")
    if len(name) > _MAX_NAME:
        raise ValueError(f"hostname {text[:40] + '...'!r} is longer than {_MAX_NAME} characters")
    for label in name.split("."):
        _check_label(label, text)
    if _last_label_is_numeric(name):
        raise ValueError(f"{text!r} is not a hostname (its last label is numeric)")
    return normalise_name(name)


def _check_label(label: str, name: str) -> None:
    if not label:
        raise ValueError(f"empty label in hostname {name!r}")
    if len(label) > _MAX_LABEL:
        raise ValueError(f"label {label[:20] + '...'!r} is longer than {_MAX_LABEL} characters")
    for char in label:
        if not (char.isascii() and (char.isalnum() or char == "-")):
            hint = "" if char.isascii() else " (write internationalised names as xn--...)"
            raise ValueError(f"invalid character {char!r} in hostname {name!r}{hint}")
    if label.startswith("-") or label.endswith("-"):
        raise ValueError(f"label {label!r} in hostname {name!r} starts or ends with '-'")


# --- --resolve, --dns-server ------------------------------------------------------------


def parse_resolve(text: str) -> ResolveEntry:
    """``HOST=IP[,IP...]``; IPv6 addresses without brackets; duplicates dropped."""
    host_text, sep, addresses_text = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected HOST=IP[,IP...]")
    if not host_text:
        raise ValueError(f"{text!r}: no HOST before '='")
    if not addresses_text:
        raise ValueError(f"{text!r}: no address after '='")
    host = _hostname(host_text)
    items = addresses_text.split(",")
    if "" in items:
        raise ValueError(f"empty item in address list {addresses_text!r}")
    addresses = tuple(dict.fromkeys(_resolve_address(item) for item in items))
    return ResolveEntry(host, addresses)


def resolved_names(entries: Iterable[str]) -> frozenset[str]:
    """The host names --resolve ``entries`` pin: DNS is never asked for them."""
    return frozenset(parse_resolve(entry).host for entry in entries)


def _resolve_address(text: str) -> IPAddress:
    if text.startswith("["):
        raise ValueError(f"{text!r}: write IPv6 addresses without brackets here")
    return unmapped(_address(text))


def parse_dns_server(text: str) -> DnsServer:
    """``IP[:PORT]``; an IPv6 address needs brackets when a port is given."""
    if not text:
        raise ValueError("empty address")
    target, port_text = _split_target(text)
    inner = target[1:-1] if target.startswith("[") else target
    if target.startswith("[") and ":" not in inner:
        raise ValueError(f"{target!r}: brackets are only for IPv6 addresses")
    if "/" in inner:
        raise ValueError(f"{target!r}: expected one address, not a network")
    try:
        address = unmapped(_address(inner))
    except ValueError:
        raise ValueError(
            f"{target!r} is not an IP address (sandlock cannot resolve the name of its own "
            "DNS server)"
        ) from None
    if address.is_unspecified:
        raise ValueError(f"{target!r} is the unspecified address, not a server")
    port = DNS_DEFAULT_PORT if port_text is None else parse_port(port_text)
    return DnsServer(address, port)
