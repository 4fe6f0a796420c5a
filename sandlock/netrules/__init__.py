"""The network policy's language and its pure verdict: the grammar of --net-allow,
--net-deny, --resolve and --dns-server (ports, addresses read by the C library), the
pinned DNS table (written by the resolver, read by the verdict) and ``NetPolicy``,
which judges an ``Endpoint``. No I/O, no kernel object: the policy checks load it
before the command starts, ``sandlock policy test`` and the network engine after.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._netpolicy import Endpoint, NetPolicy, Verdict, canonical_address, rules_admit
    from ._pins import PinTable
    from ._ports import PortSet, parse_ports
    from ._spec import (
        DEFAULT_PROTOCOLS,
        ICMP,
        TCP,
        IPAddress,
        NetRule,
        is_localhost,
        normalise_name,
        parse_allow,
        parse_deny,
        parse_dns_server,
        parse_resolve,
        pins_at_start,
        portless,
        read_allow,
        read_deny,
        read_dns_server,
        read_resolve,
        resolved_names,
        unmapped,
    )

# name -> the private module defining it; each module is imported on first use, so
# importing the package costs nothing (policy/_netvalues.py imports it for network rules)
_EXPORTS = {
    "DEFAULT_PROTOCOLS": "_spec",
    "Endpoint": "_netpolicy",
    "ICMP": "_spec",
    "IPAddress": "_spec",
    "NetPolicy": "_netpolicy",
    "NetRule": "_spec",
    "PinTable": "_pins",
    "PortSet": "_ports",
    "TCP": "_spec",
    "Verdict": "_netpolicy",
    "canonical_address": "_netpolicy",
    "is_localhost": "_spec",
    "normalise_name": "_spec",
    "parse_allow": "_spec",
    "parse_deny": "_spec",
    "parse_dns_server": "_spec",
    "parse_ports": "_ports",
    "parse_resolve": "_spec",
    "pins_at_start": "_spec",
    "portless": "_spec",
    "read_allow": "_spec",
    "read_deny": "_spec",
    "read_dns_server": "_spec",
    "read_resolve": "_spec",
    "resolved_names": "_spec",
    "rules_admit": "_netpolicy",
    "unmapped": "_spec",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
