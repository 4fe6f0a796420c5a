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

from .._grammar import check_printable, words
from .._record import record
from ._inet import (
    Cidr,
    Inet,
    embedded_ipv4,
    is_number,
    read_address,
    read_inet,
    read_network,
    to_address,
    to_network,
)
from ._ports import ALL_PORTS, PortSet, parse_port, parse_ports

TYPE_CHECKING = False  # typing costs ~5 ms to import: policy checks load this module
if TYPE_CHECKING:
    from collections.abc import Iterable
    from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

    IPAddress = IPv4Address | IPv6Address
    IPNetwork = IPv4Network | IPv6Network

    from ..policy import Policy


def __getattr__(name: str) -> object:
    """``IPAddress`` and ``IPNetwork`` for the engine's modules, which import them at
    run time: the ipaddress module is loaded only when they are asked for."""
    if name in ("IPAddress", "IPNetwork"):
        import ipaddress

        kind = "Address" if name == "IPAddress" else "Network"
        return getattr(ipaddress, f"IPv4{kind}") | getattr(ipaddress, f"IPv6{kind}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

TCP, UDP, ICMP = "tcp", "udp", "icmp"
DEFAULT_PROTOCOLS = frozenset({TCP, UDP})
_SCHEMES = {TCP: frozenset({TCP}), UDP: frozenset({UDP}), ICMP: frozenset({ICMP})}

DNS_DEFAULT_PORT = 53
_MAX_NAME = 253
_MAX_LABEL = 63


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
class RuleText:
    """A rule as ``read_allow``/``read_deny`` read it: a NetRule whose network is the
    ``_inet`` integers (``cidr``) rather than an ipaddress object."""

    text: str
    protocols: frozenset[str]
    host: str | None
    cidr: Cidr | None
    ports: PortSet

    @property
    def any_host(self) -> bool:
        return self.host is None and self.cidr is None


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


def unmapped(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address stands for, where it carries one: IPv4-mapped
    (``::ffff:a.b.c.d``) and NAT64 (``64:ff9b::a.b.c.d``, which reaches that IPv4 host
    wherever a NAT64 gateway exists); any other address as it is."""
    if address.version == 6:
        ipv4 = embedded_ipv4((6, int(address)))
        if ipv4 is not None:
            return to_address(ipv4)
    return address


# --- --net-allow, --net-deny ---------------------------------------------------------


def parse_allow(text: str) -> NetRule:
    """A --net-allow rule."""
    return _rule(read_allow(text))


def parse_deny(text: str) -> NetRule:
    """A --net-deny rule: like --net-allow, but the target must be an address, CIDR or *."""
    return _rule(read_deny(text))


def read_allow(text: str) -> RuleText:
    """A --net-allow rule read and checked, its network left as integers (policy checks
    run before the command starts: see ``_inet``)."""
    return _read_rule(text, hostnames=True)


def read_deny(text: str) -> RuleText:
    return _read_rule(text, hostnames=False)


def _rule(read: RuleText) -> NetRule:
    network = None if read.cidr is None else to_network(read.cidr)
    return NetRule(read.text, read.protocols, read.host, network, read.ports)


def _read_rule(text: str, hostnames: bool) -> RuleText:
    if not words(text):  # (and ValueError for a character that does not show)
        raise ValueError("empty rule")
    protocols, rest = _split_scheme(text)
    if not rest:
        raise ValueError(f"no target after the scheme in {text!r} (write {text}* for any host)")
    target, ports_text = _split_target(rest)
    host, cidr = _parse_target(target)
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
    return RuleText(text, protocols, host, cidr, ports)


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
    if slash and not is_number(prefix):
        return False
    return read_inet(address.partition("%")[0], 6) is not None  # a zone is refused later


def _is_port_list(text: str) -> bool:
    try:
        parse_ports(text)
    except ValueError:
        return False
    return True


def _parse_target(target: str) -> tuple[str | None, Cidr | None]:
    """TARGET -> (hostname, None), (None, network) or (None, None) for any host."""
    if target in ("", "*"):
        return None, None
    if target.startswith("["):
        inner = target[1:-1]
        if ":" not in inner:
            raise ValueError(f"{target!r}: brackets are only for IPv6 addresses")
        return None, read_network(inner, 6, "[{}]")
    if ":" in target:  # an unbracketed IPv6 literal let through by _split_target
        return None, read_network(target, 6, "{}")
    if "/" in target or _last_label_is_numeric(target):
        return None, read_network(target, 4, "{}")
    return _hostname(target), None


def _last_label_is_numeric(name: str) -> bool:
    # No top-level domain is numeric, so such a target is meant as an IPv4 address
    # (and refusing it as a name also stops inet_aton spellings such as 0x7f.1).
    return is_number(name.removesuffix(".").rpartition(".")[2])


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


def normalise_name(name: str) -> str:
    """Hostnames compare case-insensitively and without the trailing dot."""
    return name.rstrip(".").lower()


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
    host, addresses = read_resolve(text)
    return ResolveEntry(host, tuple(map(to_address, addresses)))


def read_resolve(text: str) -> tuple[str, tuple[Inet, ...]]:
    """--resolve read and checked: the host and its addresses as ``_inet`` integers."""
    check_printable(text)
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
    return host, tuple(dict.fromkeys(_resolve_address(item) for item in items))


def portless(text: str) -> tuple[str, frozenset[str]] | None:
    """(target, protocols) of an allow rule (valid) naming a host or network without
    ports, i.e. every port of it; None for any other rule."""
    protocols, rest = _split_scheme(text)
    target, ports = _split_target(rest)
    opens_all = ports is None and target not in ("", "*") and ICMP not in protocols
    return (target, protocols) if opens_all else None


def resolved_names(entries: Iterable[str]) -> frozenset[str]:
    """The host names --resolve ``entries`` pin: DNS is never asked for them."""
    return frozenset(read_resolve(entry)[0] for entry in entries)


def _resolve_address(text: str) -> Inet:
    if text.startswith("["):
        raise ValueError(f"{text!r}: write IPv6 addresses without brackets here")
    return _unmapped(read_address(text))


def _unmapped(address: Inet) -> Inet:
    return embedded_ipv4(address) or address


def parse_dns_server(text: str) -> DnsServer:
    """``IP[:PORT]``; an IPv6 address needs brackets when a port is given."""
    address, port = read_dns_server(text)
    return DnsServer(to_address(address), port)


def read_dns_server(text: str) -> tuple[Inet, int]:
    """--dns-server read and checked: its address as ``_inet`` integers, and its port."""
    if not words(text):  # (as a rule: nothing invisible)
        raise ValueError("empty address")
    target, port_text = _split_target(text)
    inner = target[1:-1] if target.startswith("[") else target
    if target.startswith("[") and ":" not in inner:
        raise ValueError(f"{target!r}: brackets are only for IPv6 addresses")
    if "/" in inner:
        raise ValueError(f"{target!r}: expected one address, not a network")
    try:
        address = _unmapped(read_address(inner))
    except ValueError:
        raise ValueError(
            f"{target!r} is not an IP address (sandlock cannot resolve the name of its own "
            "DNS server)"
        ) from None
    if address[1] == 0:
        raise ValueError(f"{target!r} is the unspecified address, not a server")
    port = DNS_DEFAULT_PORT if port_text is None else parse_port(port_text)
    return address, port


def pins_at_start(policy: Policy) -> bool:
    """Whether the policy names hosts that DNS must pin at start: those of its network
    and HTTP rules that --resolve does not pin already (parsed again here: the policy
    checks loaded the grammar, not the engine)."""
    if not (policy.net_allow_specs or policy.has_http_rules):
        return False
    names = {rule.host for rule in map(read_allow, policy.net_allow_specs)
             if rule.host is not None}
    if policy.has_http_rules:  # (the rule grammar imports re: only for these runs)
        from ..proxy import HttpRules

        names |= HttpRules.parse(policy.http_allow, policy.http_deny).concrete_hosts()
    # localhost needs no DNS either (always loopback: _hostsfile)
    return any(not is_localhost(name) for name in names - resolved_names(policy.resolve))


def is_localhost(name: str) -> bool:
    return name == "localhost" or name.endswith(".localhost")
