"""The run's network confinement: compiled policy, pinned DNS, responder, supervisor, audit.

Built before the fork; the supervisor starts when the command hands over its seccomp
listener, and DNS (pinning at start, then the responder) comes up in the background
so that the command is not delayed: the first supervised call to an IP destination
waits until the pins are ready.
"""

from __future__ import annotations

import sys
import threading

from . import _netspec
from ._audit import Audit
from ._confine import Confinement
from ._execute import ConfinedWorker
from ._judge import RunContext, Services
from ._netpolicy import NetPolicy
from ._pins import PinTable
from ._policy import Policy
from ._sockaddr import inet
from ._supervisor import Supervisor
from ._syscalls import native_arch


def compile_policy(policy: Policy) -> NetPolicy:
    """Policy's network fields (validated strings) -> the NetPolicy the verdict uses."""
    bind = None
    for spec in policy.net_allow_bind:
        ports = _netspec.parse_ports(spec)
        bind = ports if bind is None else bind | ports
    return NetPolicy(
        allow=tuple(map(_netspec.parse_allow, policy.net_allow)),
        deny=tuple(map(_netspec.parse_deny, policy.net_deny)),
        bind_ports=bind,
        unix_paths=policy.unix_allow,
    )


class Network:
    """Everything that enforces one run's network policy; ``close`` when it ends."""

    def __init__(self, policy: Policy, rules: NetPolicy, confinement: Confinement, *,
                 audit_path: str | None, quiet: bool) -> None:
        self._policy = policy
        self._rules = rules
        self._quiet = quiet
        self.pins = PinTable()
        self.audit = Audit(audit_path, quiet)
        self._services = Services()
        self._ready = threading.Event()
        self._responder = None
        context = RunContext(rules, self.pins, self._services, ipc_scoped=not policy.allow_ipc)
        confined = ConfinedWorker(confinement.restrict_filesystem)
        self._supervisor = Supervisor(native_arch(), context, self.audit, confined, self._ready)

    def adopt(self, pid: int, listener_fd: int) -> None:
        """Take the command's seccomp listener, then bring DNS up in the background."""
        self._supervisor.adopt(pid, listener_fd)
        threading.Thread(target=self._start_dns, daemon=True, name="sandlock-dns-start").start()

    def _start_dns(self) -> None:
        try:
            from ._dns import DnsSettings, Upstream, pin_at_start
            from ._dnsresponder import DnsResponder

            settings = _dns_settings(self._policy)
            names = self._rules.hostnames()
            unpinned = names - {name for name, _ in settings.static}
            needs_upstream = bool(unpinned) or self._rules.resolves_unlisted_names
            upstream = Upstream(settings) if needs_upstream else None
            warnings = pin_at_start(names, settings, self.pins, upstream)
            responder = DnsResponder(self.pins, self._rules, upstream, settings)
            responder.start()
            self._responder = responder
            self._services.dns_udp = inet(2, *responder.udp_address)
            self._services.dns_tcp = inet(2, *responder.tcp_address)
            if not self._quiet:
                for warning in warnings:
                    print(warning, file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - DNS stays down: lookups fail, nothing opens
            print(f"sandlock: warning: DNS for the sandbox could not start: {exc}",
                  file=sys.stderr, flush=True)
        finally:
            self._ready.set()

    def close(self) -> str | None:
        """Stop everything; returns the denial summary line, if any denial happened."""
        self._supervisor.stop()
        if self._responder is not None:
            self._responder.stop()
        self.audit.close()
        return self.audit.summary()


def _dns_settings(policy: Policy) -> object:
    from ._dns import DnsSettings

    servers = tuple((str(s.address), s.port) for s in map(_netspec.parse_dns_server, policy.dns_servers))
    static = tuple((e.host, e.addresses) for e in map(_netspec.parse_resolve, policy.resolve))
    return DnsSettings(servers=servers, static=static, allow_private=policy.dns_allow_private)

