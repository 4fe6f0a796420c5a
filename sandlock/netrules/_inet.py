"""IP addresses and networks as plain integers: read (by the C library), checked, written.

The rule grammar (``_spec``) checks every address of a policy before the command
starts, where the ``ipaddress`` module (with ``functools`` and ``collections``) would
cost ~3 ms of every run's start-up. So the grammar reads addresses with the C
library's ``inet_pton`` into ``Inet`` pairs and ``Cidr`` triples, and only the network
engine, built after the command has exec'd, turns them into ``ipaddress`` objects
(``to_address``, ``to_network``).
"""

from __future__ import annotations

from .._grammar import is_digits
from ..kernel import inet_pton

TYPE_CHECKING = False  # typing costs ~5 ms to import: policy checks load this module
if TYPE_CHECKING:
    from ._spec import IPAddress, IPNetwork

Inet = tuple[int, int]  # (IP version: 4 or 6, the address as an integer)
Cidr = tuple[int, int, int]  # (IP version, the network's first address, prefix length)

BITS = {4: 32, 6: 128}
_FAMILY = {4: 2, 6: 10}  # AF_INET, AF_INET6
_V4_MAPPED = 0xFFFF  # ::ffff:a.b.c.d, the upper 96 bits
_NAT64 = 0x0064FF9B << 64  # 64:ff9b::a.b.c.d (the well-known NAT64 prefix): the upper 96 bits


def read_address(text: str, version: int | None = None) -> Inet:
    """An address of IP ``version`` (either when None); ValueError saying why not."""
    if "%" in text:
        raise ValueError(f"{text!r}: zone indexes ('%...') are not supported")
    address = read_inet(text, version)
    if address is None:
        kind = f"IPv{version}" if version else "IP"
        raise ValueError(f"{text!r} is not a valid {kind} address")
    return address


def read_network(text: str, version: int, spelling: str) -> Cidr:
    """An address or CIDR of IP ``version``; ``spelling`` ("[{}]" or "{}") is how the
    user wrote it, for messages and suggestions."""
    address_text, slash, prefix_text = text.partition("/")
    _, address = read_address(address_text, version)
    bits = BITS[version]
    shown = spelling.format(text)
    if not slash:
        prefix = bits
    elif not is_number(prefix_text):
        raise ValueError(f"invalid prefix length {'/' + prefix_text!r} in {shown!r}")
    elif len(prefix_text.lstrip("0")) > 3 or int(prefix_text) > bits:
        raise ValueError(
            f"prefix length /{prefix_text} is too long for IPv{version} (at most /{bits}) "
            f"in {shown!r}"
        )
    else:
        prefix = int(prefix_text)
    if address & host_mask(version, prefix):
        first = (version, address & ~host_mask(version, prefix), prefix)
        raise ValueError(f"{shown!r} has host bits set: did you mean "
                         f"{spelling.format(cidr_text(first))}?")
    _check_reachable(shown, (version, address, prefix), bool(slash))
    return version, address, prefix


def _check_reachable(shown: str, network: Cidr, cidr: bool) -> None:
    """Refuse targets that endpoints, once canonical, can never be (see _netpolicy)."""
    version, address, prefix = network
    if prefix == BITS[version] and address == 0:
        loopback = "127.0.0.1" if version == 4 else "[::1]"
        raise ValueError(
            f"{shown!r} is the unspecified address; connecting to it reaches this host: "
            f"write {loopback}"
        )
    if is_v4_mapped(network):  # endpoints are compared unmapped: it could match nothing
        ipv4 = embedded_ipv4((version, address))
        plain = cidr_text((*ipv4, prefix - 96)) if cidr else inet_text(ipv4)
        raise ValueError(f"{shown!r} is an IPv4-mapped IPv6 address: write {plain}")


is_number = is_digits  # (ASCII digits: the one grammar of numbers, sandlock._grammar)


def read_inet(text: str, version: int | None = None) -> Inet | None:
    """``text`` as an address of IP ``version`` (either when None), or None when it is
    not one. inet_pton reads only the plain spellings, as ipaddress does: four decimal
    parts without leading zeros, and RFC 4291's IPv6 forms (tests compare the two)."""
    if version is None:
        version = 6 if ":" in text else 4
    packed = inet_pton(_FAMILY[version], text)
    return None if packed is None else (version, int.from_bytes(packed, "big"))


def inet_text(inet: Inet) -> str:
    import _socket  # for messages only

    version, value = inet
    return _socket.inet_ntop(_FAMILY[version], value.to_bytes(BITS[version] // 8, "big"))


def cidr_text(cidr: Cidr) -> str:
    version, value, prefix = cidr
    return f"{inet_text((version, value))}/{prefix}"


def host_mask(version: int, prefix: int) -> int:
    """The bits of an address that a /prefix network leaves to its hosts."""
    return (1 << (BITS[version] - prefix)) - 1


def embedded_ipv4(inet: Inet) -> Inet | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped or NAT64), if any."""
    version, value = inet
    if version == 6 and value >> 32 in (_V4_MAPPED, _NAT64):
        return 4, value & 0xFFFFFFFF
    return None


def is_v4_mapped(cidr: Cidr) -> bool:
    """Whether every address of ``cidr`` is inside ::ffff:0:0/96."""
    version, value, prefix = cidr
    return version == 6 and prefix >= 96 and value >> 32 == _V4_MAPPED


def to_address(inet: Inet) -> IPAddress:
    from ipaddress import IPv4Address, IPv6Address  # the engine's side: after exec

    version, value = inet
    return IPv4Address(value) if version == 4 else IPv6Address(value)


def to_network(cidr: Cidr) -> IPNetwork:
    from ipaddress import IPv4Network, IPv6Network

    version, value, prefix = cidr
    return IPv4Network((value, prefix)) if version == 4 else IPv6Network((value, prefix))
