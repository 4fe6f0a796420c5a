"""Resolving and pinning hostnames: what a name may mean for the whole run.

The policy's hostnames are resolved once, at start, and pinned in the ``PinTable``;
the DNS responder (``_dnsresponder``) later answers the child from that table. This
module holds the rules shared by both: which answers may be pinned (``pinnable``),
how upstream servers are asked (``Upstream``) and the start-up pass (``pin_at_start``).

dnspython costs tens of milliseconds to import, so it is imported only where a
resolver is actually built: ``import sandlock.dns._dns`` stays cheap, and a run whose
names all come from ``--resolve`` never imports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_address

from .._record import record
from ..netrules import IPAddress, PinTable, normalise_name, parse_dns_server, parse_resolve, unmapped
from ._hostsfile import UNUSED, HostsFile

TYPE_CHECKING = False  # typing itself costs ~2 ms to import; checkers honour this spelling
if TYPE_CHECKING:
    from collections.abc import Callable

    import dns.resolver

    from ..policy import Policy

PINNING_THREADS = 8  # start-up lookups in flight at once


@record
class DnsSettings:
    """How names are resolved (values already parsed: see ``from_policy``).

    ``servers``: upstream (address, port) pairs; empty means the system resolvers of
    /etc/resolv.conf. ``static``: the ``--resolve`` pins, (name, addresses), used as
    written (never filtered). ``timeout`` bounds one query to one server, ``lifetime``
    the whole resolution of one name, A and AAAA together (dnspython's retry back-off
    may overrun it by up to 2 s).
    """

    servers: tuple[tuple[str, int], ...] = ()
    static: tuple[tuple[str, tuple[IPAddress, ...]], ...] = ()
    allow_private: bool = False
    timeout: float = 2.0
    lifetime: float = 5.0

    @classmethod
    def from_policy(cls, policy: Policy) -> DnsSettings:
        """The settings a Policy's (validated) DNS fields ask for.

        Several --resolve for one host add up, in the order given.
        """
        servers = tuple(dict.fromkeys(
            (str(server.address), server.port) for server in map(parse_dns_server, policy.dns_servers)))
        static: dict[str, tuple[IPAddress, ...]] = {}
        for entry in map(parse_resolve, policy.resolve):
            static[entry.host] = tuple(dict.fromkeys(static.get(entry.host, ()) + entry.addresses))
        return cls(servers, tuple(static.items()), policy.dns_allow_private)

    @property
    def static_pins(self) -> dict[str, tuple[IPAddress, ...]]:
        return dict(self.static)


# --- which answers may be pinned ------------------------------------------------

# Never pinned from an answer: reaching them is what a rebinding attack wants
# (instance metadata, link-local services), or they mean "this host" / "everyone".
_NEVER = {
    "link-local or metadata": (
        IPv4Network("169.254.0.0/16"), IPv6Network("fe80::/10"), IPv6Network("fd00:ec2::254/128"),
    ),
    "unspecified": (IPv4Network("0.0.0.0/8"), IPv6Network("::/128")),  # 0.x reaches localhost
    "multicast or broadcast": (
        IPv4Network("224.0.0.0/4"), IPv4Network("240.0.0.0/4"), IPv6Network("ff00::/8"),
    ),
}
# Pinned only with --dns-allow-private: the host itself and the local networks.
_PRIVATE = (
    IPv4Network("127.0.0.0/8"), IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"), IPv4Network("100.64.0.0/10"),
    IPv6Network("::1/128"), IPv6Network("fc00::/7"), IPv6Network("fec0::/10"),
)
# IPv6 forms that reach an IPv4 address: judged as that address.


def unpinnable_reason(address: IPAddress | str, allow_private: bool) -> str | None:
    """Why an answer may not be pinned ("private", "link-local or metadata"...), or None."""
    ip = _as_judged(ip_address(address))
    for reason, networks in _NEVER.items():
        if any(ip in network for network in networks if network.version == ip.version):
            return reason
    if not allow_private and any(ip in n for n in _PRIVATE if n.version == ip.version):
        return "private"
    return None


def pinnable(address: IPAddress | str, allow_private: bool) -> bool:
    """May an upstream answer for a hostname pin this address?"""
    return unpinnable_reason(address, allow_private) is None


def _as_judged(ip: IPAddress) -> IPAddress:
    """The address as the verdict sees it (one canonical form for both)."""
    ip = unmapped(ip)
    if isinstance(ip, IPv6Address) and ip.scope_id:  # fe80::1%eth0 compares unequal to members
        return IPv6Address(str(ip).partition("%")[0])
    return ip


# --- asking upstream -------------------------------------------------------------


@record
class Lookup:
    """A and AAAA answers for one name; ``error`` says why there are none."""

    addresses: tuple[IPAddress, ...]
    error: str | None = None


class Upstream:
    """Resolves names through the configured (or system) DNS servers with dnspython.

    Thread-safe; never raises from ``resolve``. Names are absolute: the search list
    of resolv.conf is not applied (the policy names full hostnames).
    """

    def __init__(self, settings: DnsSettings, resolv_conf: str = "/etc/resolv.conf",
                 resolv_text: str | None = None) -> None:
        """``resolv_text``: the content of ``resolv_conf`` as read earlier (before the
        command could change it: ``_hostsfile.SystemFiles``); None: read it now."""
        self._settings = settings
        self._resolver, self._problem = _make_resolver(settings, resolv_conf, resolv_text)

    @property
    def servers(self) -> tuple[tuple[str, int], ...]:
        if self._resolver is None:
            return ()
        return tuple((getattr(ns, "address", str(ns)), getattr(ns, "port", 53))
                     for ns in self._resolver.nameservers)

    def resolve(self, name: str) -> Lookup:
        if self._resolver is None:
            return Lookup((), self._problem)
        try:
            return self._resolve(name)
        except Exception as error:  # a resolver bug must not take the responder down
            return Lookup((), f"resolver error: {error}")

    def _resolve(self, name: str) -> Lookup:
        import dns.exception
        import dns.name
        import dns.resolver

        try:
            qname = dns.name.from_text(normalise_name(name) + ".")
        except dns.exception.DNSException:
            return Lookup((), "invalid name")
        deadline = time.monotonic() + self._settings.lifetime
        addresses: list[IPAddress] = []
        errors: list[str] = []
        for rdtype in ("A", "AAAA"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                errors.append("timed out")
                break
            try:
                answer = self._resolver.resolve(qname, rdtype, lifetime=remaining, search=False)
                addresses.extend(ip_address(rdata.address) for rdata in answer)
            except dns.resolver.NoAnswer:
                errors.append("no address records")
            except dns.resolver.NXDOMAIN:
                return Lookup((), "NXDOMAIN")  # the AAAA question would say the same
            except dns.exception.DNSException as error:
                errors.append(_describe(error))
            except OSError as error:
                errors.append(error.strerror or str(error))
        if addresses:
            return Lookup(tuple(dict.fromkeys(addresses)))
        return Lookup((), next((e for e in errors if e != "no address records"), errors[0]))


def _make_resolver(
    settings: DnsSettings, resolv_conf: str, resolv_text: str | None = None
) -> tuple[dns.resolver.Resolver | None, str | None]:
    import io

    import dns.nameserver
    import dns.resolver

    try:
        resolver = dns.resolver.Resolver(configure=False)
        if not settings.servers:
            resolver.read_resolv_conf(resolv_conf if resolv_text is None else io.StringIO(resolv_text))
    except dns.resolver.NoResolverConfiguration:
        return None, f"no DNS server configured in {resolv_conf}"
    except OSError as error:
        return None, f"cannot read {resolv_conf}: {error.strerror}"
    if settings.servers:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(a, p) for a, p in settings.servers]
    resolver.timeout = settings.timeout
    resolver.lifetime = settings.lifetime
    resolver.cache = None  # each name is asked once; a later answer must not come from a cache
    return resolver, None


def _describe(error: Exception) -> str:
    import dns.exception
    import dns.resolver

    if isinstance(error, dns.exception.Timeout):  # includes the resolver's LifetimeTimeout
        return "timed out"
    if isinstance(error, dns.resolver.NoNameservers):
        return "no server gave an answer (SERVFAIL or REFUSED)"
    return str(error) or type(error).__name__


def own_resolver(policy: Policy) -> Callable[[str], tuple[str, ...]]:
    """``own_addresses`` with the settings ``policy`` gives."""
    settings = DnsSettings.from_policy(policy)
    return lambda name: own_addresses(name, settings)


def own_addresses(name: str, settings: DnsSettings) -> tuple[str, ...]:
    """The addresses of ``name`` for a connection of sandlock's own, made before the
    sandbox (an image's registry): ``--resolve`` if it names it, else the
    ``--dns-server``s, else the system's resolver (hosts file included); ``localhost``
    is always this machine's loopback, as for the command. Not filtered like the
    command's pins: it is not the command that connects. LookupError if none."""
    static = settings.static_pins.get(normalise_name(name))
    if static:
        return tuple(map(str, static))
    if normalise_name(name) == "localhost":
        return ("127.0.0.1", "::1")
    if settings.servers:
        lookup = Upstream(settings).resolve(name)
        if not lookup.addresses:
            raise LookupError(f"cannot resolve {name}: {lookup.error or 'no address records'}")
        return tuple(map(str, lookup.addresses))
    import socket

    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError as error:
        raise LookupError(f"cannot resolve {name}: {error.strerror or error}") from None
    return tuple(dict.fromkeys(str(info[4][0]) for info in found))


# --- the start-up pass -----------------------------------------------------------


def pin_at_start(
    names: Iterable[str],
    settings: DnsSettings,
    table: PinTable,
    upstream: Upstream | None = None,
    hosts: HostsFile | None = None,
) -> list[str]:
    """Pin ``--resolve`` names, then the names the hosts file answers before DNS
    (``localhost``: always), then resolve and pin the other ``names``; returns warnings.

    ``names`` are concrete hostnames (no patterns). A name that cannot be resolved,
    or whose answers are all unpinnable, is pinned empty: unreachable for the run
    (unless the hosts file, read after DNS, names it). ``upstream`` defaults to one
    built from ``settings``, only if a name needs it.
    """
    for name, addresses in settings.static:
        table.pin(name, addresses)
    pending = [n for n in dict.fromkeys(map(normalise_name, names))
               if n and table.addresses(n) is None]
    pending = [n for n in pending if not _pinned_from_hosts(n, hosts, table)]
    if not pending:
        return []
    upstream = upstream or Upstream(settings)
    lookups = _resolve_all(pending, upstream)
    warnings = []
    for name in pending:
        addresses, problem = _filter(lookups[name], settings.allow_private)
        if not addresses and hosts is not None and (written := hosts.after_dns(name)):
            addresses, problem = written, None
        table.pin(name, addresses)
        if problem:
            warnings.append(f"sandlock: warning: cannot resolve {name}: {problem}; "
                            "it stays unreachable")
    return warnings


def _pinned_from_hosts(name: str, hosts: HostsFile | None, table: PinTable) -> bool:
    """Pin ``name`` as the hosts file gives it (read before DNS), if it does."""
    written = (hosts or HostsFile("", UNUSED)).before_dns(name)
    if written is None:
        return False
    table.pin(name, written)
    return True


def _resolve_all(names: list[str], upstream: Upstream) -> dict[str, Lookup]:
    # Plain threads over a shared iterator: concurrent.futures costs ~10 ms to import.
    lookups: dict[str, Lookup] = {}
    todo = iter(names)
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                name = next(todo, None)
            if name is None:
                return
            lookups[name] = upstream.resolve(name)

    threads = [threading.Thread(target=work, daemon=True, name="sandlock-pin")
               for _ in range(min(PINNING_THREADS, len(names)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return lookups


def _filter(lookup: Lookup, allow_private: bool) -> tuple[tuple[IPAddress, ...], str | None]:
    """The pinnable answers, and what to warn about when none is left."""
    if not lookup.addresses:
        return (), lookup.error or "no address records"
    reasons = [unpinnable_reason(a, allow_private) for a in lookup.addresses]
    kept = tuple(a for a, reason in zip(lookup.addresses, reasons) if reason is None)
    if kept:
        return kept, None
    if "private" in reasons:
        return (), "all answers are private addresses (use --dns-allow-private)"
    return (), f"all answers are unpinnable ({', '.join(sorted(set(reasons)))} addresses)"
