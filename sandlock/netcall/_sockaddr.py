"""Socket addresses as bytes <-> owned values (pure: no I/O).

The supervisor copies a sockaddr out of the child exactly once and from then on works
only with these values; ``encode`` rebuilds the bytes it passes to the kernel itself.
"""

from __future__ import annotations

import struct
from ipaddress import IPv4Address, IPv6Address, ip_address

from .._record import record

AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 0, 1, 2, 10, 16
_FAMILY = struct.Struct("=H")
_INET = struct.Struct("!H4s")  # port, address (after the family)
_INET6 = struct.Struct("!HI16s")  # port, flowinfo, address; then the scope id
_SCOPE = struct.Struct("=I")  # sin6_scope_id is in host order
SUN_PATH_MAX = 108


@record
class InetAddress:
    family: int  # AF_INET or AF_INET6
    address: IPv4Address | IPv6Address
    port: int
    flowinfo: int = 0
    scope_id: int = 0


@record
class UnixAddress:
    path: bytes  # without the leading NUL for abstract names
    abstract: bool  # Linux abstract namespace (sun_path starts with NUL)
    # (st_dev, st_ino) of the socket file the path named when it was copied: the
    # execution refuses to reach any other file.
    identity: tuple[int, int] | None = None
    # The inode of the socket bound at this address, where it had to be known (to
    # recognise sockets the sandbox bound itself).
    bound_socket: int | None = None
    # Where sandlock reaches ``path`` as the command sees it: the command's root
    # (b"/proc/PID/root"; its mount namespace has its own /tmp), or b"" for our own.
    root: bytes = b""

    @property
    def reachable(self) -> bytes:
        """``path`` as sandlock can open it (through ``root``)."""
        return self.root + self.path

    @property
    def unnamed(self) -> bool:
        """sizeof(sa_family_t) alone: bind autobinds, the kernel refuses it elsewhere."""
        return not self.path and not self.abstract


@record
class OtherAddress:
    """Families the policy does not judge (AF_UNSPEC disconnect, AF_NETLINK): kept raw."""

    family: int
    raw: bytes


SockAddress = InetAddress | UnixAddress | OtherAddress


class BadAddress(ValueError):
    """Too short or malformed for its family: the kernel would answer EINVAL."""


_PARSED_LIMIT = 1024
_parsed: dict[bytes, InetAddress] = {}  # raw sockaddr_in/in6 -> its (immutable) value


def parse(raw: bytes) -> SockAddress:
    address = _parsed.get(raw)
    if address is not None:
        return address  # the same destination as before: same value, and one object
    address = _parse(raw)
    if isinstance(address, InetAddress):
        if len(_parsed) >= _PARSED_LIMIT:
            _parsed.clear()
        _parsed[raw] = address
    return address


def _parse(raw: bytes) -> SockAddress:
    if len(raw) < _FAMILY.size:
        raise BadAddress("sockaddr too short")
    (family,) = _FAMILY.unpack_from(raw)
    if family == AF_INET:
        if len(raw) < 2 + _INET.size:
            raise BadAddress("sockaddr_in too short")
        port, packed = _INET.unpack_from(raw, 2)
        return InetAddress(AF_INET, IPv4Address(packed), port)
    if family == AF_INET6:
        if len(raw) < 2 + _INET6.size:  # the kernel accepts SIN6_LEN_RFC2133: no scope id
            raise BadAddress("sockaddr_in6 too short")
        port, flowinfo, packed = _INET6.unpack_from(raw, 2)
        tail = raw[2 + _INET6.size:2 + _INET6.size + _SCOPE.size]
        scope_id = _SCOPE.unpack(tail)[0] if len(tail) == _SCOPE.size else 0
        return InetAddress(AF_INET6, IPv6Address(packed), port, flowinfo, scope_id)
    if family == AF_UNIX:
        path = raw[2:2 + SUN_PATH_MAX]
        if path[:1] == b"\0":
            return UnixAddress(path[1:], abstract=True)
        return UnixAddress(path.split(b"\0", 1)[0], abstract=False)
    return OtherAddress(family, raw)


def encode(address: SockAddress) -> bytes:
    if isinstance(address, InetAddress):
        packed = address.address.packed
        if address.family == AF_INET:
            return _FAMILY.pack(AF_INET) + _INET.pack(address.port, packed) + bytes(8)
        if len(packed) == 4:  # an IPv4 target on an IPv6 socket: v4-mapped
            packed = IPv6Address(b"\0" * 10 + b"\xff\xff" + packed).packed
        return (_FAMILY.pack(AF_INET6) + _INET6.pack(address.port, address.flowinfo, packed)
                + _SCOPE.pack(address.scope_id))
    if isinstance(address, UnixAddress):
        if address.unnamed:  # the family alone: bind autobinds, connect and send are EINVAL
            return _FAMILY.pack(AF_UNIX)
        name = b"\0" + address.path if address.abstract else address.path
        return _FAMILY.pack(AF_UNIX) + name + (b"" if address.abstract else b"\0")
    return address.raw


def inet(family: int, host: str, port: int) -> InetAddress:
    """An address for ``host:port`` usable on a socket of ``family``."""
    return InetAddress(family, ip_address(host), port)


def unix_path(path: str) -> UnixAddress:
    return UnixAddress(path.encode(), abstract=False)


def describe(address: SockAddress) -> str:
    """How notices and the audit log show an address."""
    if isinstance(address, InetAddress):
        host = str(address.address)
        return f"[{host}]:{address.port}" if address.address.version == 6 else f"{host}:{address.port}"
    if isinstance(address, UnixAddress):
        text = printable(address.path)
        return f"unix:@{text}" if address.abstract else f"unix:{text}"
    return f"family {address.family}"



def printable(raw: bytes) -> str:
    """``raw`` as text with control characters escaped: a name may hold any byte, and a
    newline in a notice would forge a line of its own."""
    text = raw.decode(errors="backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
