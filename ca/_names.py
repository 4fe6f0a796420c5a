"""Rule hosts -> X.509 name constraints, and the RFC 5280 check of a name against them.

Pure: no I/O. A host is what an HTTP rule names: a DNS name, ``*.suffix``, an IP
literal (IPv6 with or without brackets) or ``*`` (any host).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from cryptography import x509

from ._errors import CAError

ANY_HOST = "*"
_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# The whole IPv4 and IPv6 spaces: excluded when no IP host is allowed, because a
# constraint without any iPAddress subtree would leave every IP address permitted.
_ALL_IPS = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


def name_constraints(hosts: Iterable[str]) -> x509.NameConstraints | None:
    """The constraint permitting exactly the names a leaf for ``hosts`` can carry, or
    None when a host is ``*`` (no constraint can express "any host")."""
    names: set[str] = set()
    addresses: set[_IPAddress] = set()
    for host in hosts:
        parsed = parse_host(host)
        if parsed is None:
            return None
        if isinstance(parsed, str):
            names.add(parsed)
        else:
            addresses.add(parsed)
    if not names and not addresses:
        raise CAError("no host to constrain the CA to (give at least one, or '*')")
    permitted: list[x509.GeneralName] = [x509.DNSName(n) for n in sorted(_outermost(names))]
    # OpenSSL also checks a leaf's subject CN as a DNS name when the leaf has no DNS
    # SAN; mitmproxy's leaf for an IPv4 host has CN=the address. Permitting its text
    # as a DNS name keeps such leaves valid (no real DNS name ends in a numeric label).
    permitted += [x509.DNSName(str(a)) for a in sorted(addresses, key=str) if a.version == 4]
    permitted += [x509.IPAddress(ipaddress.ip_network(a)) for a in sorted(addresses, key=str)]
    excluded: list[x509.GeneralName] = [
        x509.IPAddress(net) for net in _ALL_IPS if not any(a.version == net.version for a in addresses)
    ]
    if not any(isinstance(s, x509.DNSName) for s in permitted):  # IPv6 hosts only
        excluded.append(x509.DNSName(""))  # the empty name is every DNS name
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=excluded or None)


def parse_host(host: str) -> str | _IPAddress | None:
    """A DNS constraint (``*.example.com`` -> ``example.com``), an IP address, or None
    for ``*``. CAError when ``host`` is none of the rule forms."""
    text = host.strip().lower()
    if text == ANY_HOST:
        return None
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    name = text.removeprefix("*.").removesuffix(".")
    if not _is_dns_name(name):
        raise CAError(f"{host!r} is not a host name, '*.name', an IP address or '*'")
    return name


def _is_dns_name(name: str) -> bool:
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(
        0 < len(label) <= 63 and label.isascii() and not label.startswith("-")
        and not label.endswith("-") and all(c.isalnum() or c in "-_" for c in label)
        for label in labels
    ) and not labels[-1].isdigit()


def _outermost(names: set[str]) -> set[str]:
    """Drop names another one already covers (a.example.com under example.com)."""
    return {n for n in names if not any(n.endswith("." + other) for other in names)}


def permits(constraints: x509.NameConstraints | None, name: str) -> bool:
    """True when a leaf for ``name`` (a DNS name or an IP literal) satisfies
    ``constraints`` as RFC 5280 section 4.2.1.10 reads them."""
    if constraints is None:
        return True
    try:
        value: str | _IPAddress = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        value = name.lower().removesuffix(".")
    kind = x509.DNSName if isinstance(value, str) else x509.IPAddress
    permitted = [s for s in constraints.permitted_subtrees or () if isinstance(s, kind)]
    if permitted and not any(_within(value, s) for s in permitted):
        return False
    return not any(_within(value, s) for s in constraints.excluded_subtrees or () if isinstance(s, kind))


def _within(value: str | _IPAddress, subtree: x509.GeneralName) -> bool:
    if isinstance(value, str):
        base = subtree.value.lower()
        if base.startswith("."):  # OpenSSL's reading: subdomains only
            return value.endswith(base)
        return base == "" or value == base or value.endswith("." + base)
    network = subtree.value
    return value.version == network.version and value in network
