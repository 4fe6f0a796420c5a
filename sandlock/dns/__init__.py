"""Resolving and answering names for the command: the policy's names pinned at start
(the hosts file in nsswitch's order, --resolve, upstream servers) and the responder on
loopback that answers the command's DNS from the pinned table (its everyday queries
without dnspython, the others with it).

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._dns import DnsSettings, Upstream, own_addresses, own_resolver, pin_at_start
    from ._dnsresponder import DnsResponder
    from ._hostsfile import HostsFile, SystemFiles

# name -> the private module defining it; each module is imported on first use, so
# importing the package costs nothing (a run with network rules reads SystemFiles
# before the command starts)
_EXPORTS = {
    "DnsResponder": "_dnsresponder",
    "DnsSettings": "_dns",
    "HostsFile": "_hostsfile",
    "SystemFiles": "_hostsfile",
    "Upstream": "_dns",
    "own_addresses": "_dns",
    "own_resolver": "_dns",
    "pin_at_start": "_dns",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
