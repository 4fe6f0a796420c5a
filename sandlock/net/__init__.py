"""The network engine: the rule grammar and the compiled network policy, DNS pinned at
start and answered from the pinned table, and the supervisor that takes each
notified syscall through materialize (the only code reading the child) -> verdict
(pure) -> execute (the only code acting for the child, on a duplicate of its socket);
the audit log; the run's HTTP proxy, as sandlock sees it.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._dns import DnsSettings
    from ._engine import Network, compile_policy
    from ._hostsfile import SystemFiles
    from ._http import HttpRun
    from ._judge import ABSTRACT_SCOPE, NESTING_NAME
    from ._netpolicy import Endpoint, NetPolicy, Verdict, rules_admit
    from ._pins import PinTable
    from ._ports import parse_ports
    from ._binder import serve as serve_binds
    from ._review import NetworkCall
    from ._spec import (
        DEFAULT_PROTOCOLS,
        ICMP,
        TCP,
        IPAddress,
        NetRule,
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
    )

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "DEFAULT_PROTOCOLS": "_spec",
    "DnsSettings": "_dns",
    "Endpoint": "_netpolicy",
    "HttpRun": "_http",
    "ICMP": "_spec",
    "IPAddress": "_spec",
    "NetPolicy": "_netpolicy",
    "NetRule": "_spec",
    "Network": "_engine",
    "SystemFiles": "_hostsfile",
    "NetworkCall": "_review",
    "rules_admit": "_netpolicy",
    "PinTable": "_pins",
    "TCP": "_spec",
    "Verdict": "_netpolicy",
    "compile_policy": "_engine",
    "parse_allow": "_spec",
    "parse_deny": "_spec",
    "parse_dns_server": "_spec",
    "parse_ports": "_ports",
    "parse_resolve": "_spec",
    "read_allow": "_spec",
    "read_deny": "_spec",
    "read_dns_server": "_spec",
    "serve_binds": "_binder:serve",
    "read_resolve": "_spec",
    "resolved_names": "_spec",
    "ABSTRACT_SCOPE": "_judge",
    "NESTING_NAME": "_judge",
    "pins_at_start": "_spec",
    "portless": "_spec",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
