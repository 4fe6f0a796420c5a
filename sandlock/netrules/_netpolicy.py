"""The network verdict: may this connect, send or bind go through? Pure: no I/O.

The supervisor copies the destination of a trapped call, builds an ``Endpoint`` and
asks ``NetPolicy``; the ``Verdict`` says whether to perform the call and why (its
``reason`` is what the audit log and the stderr notice show).

Two modes, chosen by the rules given (they cannot be combined):

* allow mode (``--net-allow``, and the default with no rule at all): a destination
  is reachable only if a rule names its protocol, port and host; a hostname rule
  matches the addresses pinned for that name (``PinTable.names_for``);
* deny mode (``--net-deny``): everything is reachable except what a rule names.

DNS (TCP or UDP port 53, any address) is redirected to sandlock's resolver in both
modes, except in allow mode to an address or CIDR that a rule explicitly lists with
port 53 (e.g. ``udp://10.0.0.2:53``): the user asked for that server by address.
"""

from __future__ import annotations

import os
from ipaddress import IPv4Address, IPv6Address

from .._record import record, replace
from ..proxy import HttpRules
from ._pins import PinTable, normalise_name
from ._ports import MAX_PORT, PortSet
from ._spec import ICMP, TCP, UDP, IPAddress, NetRule, unmapped

PROTOCOLS = frozenset({TCP, UDP, ICMP})
DNS_PORT = 53
_LOOPBACK = {4: IPv4Address("127.0.0.1"), 6: IPv6Address("::1")}

DNS_REDIRECT_REASON = "port 53: DNS goes to sandlock's resolver"
EPHEMERAL_BIND_REASON = "port 0: the kernel picks an ephemeral port"
QUIC_REASON = ("UDP to an HTTP port (QUIC) would bypass the HTTP rules; "
               "allow it with a udp://HOST:PORT rule")
ICMP_BIND_REASON = "icmp: binding only sets the local address and echo identifier"


def canonical_address(address: IPAddress) -> IPAddress:
    """The address a connection actually reaches, as rules and pins spell it.

    IPv4-mapped IPv6 is the IPv4 address it carries; the unspecified address
    (0.0.0.0, ::) reaches the local host, i.e. loopback.
    """
    address = unmapped(address)
    if address.is_unspecified:
        return _LOOPBACK[address.version]
    return address


@record
class Endpoint:
    """A destination (connect, sendto) or local address (bind) of one call.

    For connect, ``NetPolicy`` canonicalises ``address`` again itself, so a caller that
    forgot cannot slip an IPv4-mapped address past an IPv4 rule. ``port`` is ignored
    for ICMP.
    """

    protocol: str  # "tcp" | "udp" | "icmp"
    address: IPAddress
    port: int

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}")
        if not 0 <= self.port <= MAX_PORT:
            raise ValueError(f"port {self.port} is out of range")


@record
class Verdict:
    allowed: bool
    reason: str  # the matching rule ("--net-allow github.com:22,443") or why denied
    hostname: str | None = None  # a pinned name of the address, for the audit log
    redirect_dns: bool = False  # allowed, but to sandlock's resolver instead
    redirect_proxy: bool = False  # allowed, through sandlock's HTTP proxy


@record
class NetPolicy:
    """The network policy: parsed rules in, verdicts out. Immutable.

    ``bind_ports`` None means no --net-allow-bind; ``unix_paths`` are the pathname
    unix sockets the command may connect to (stored normalised). ``abstract_scoped``
    (a nested sandbox's rules only; the sandbox's own scope is the run's): abstract
    unix sockets bound outside it are off limits, as Landlock's IPC scope has it.
    """

    allow: tuple[NetRule, ...] = ()
    deny: tuple[NetRule, ...] = ()
    bind_ports: PortSet | None = None
    bind_denied: PortSet | None = None  # --net-deny-bind: every port bindable but these
    unix_paths: tuple[str, ...] = ()
    http: HttpRules = HttpRules()
    http_ports: frozenset[int] = frozenset()
    abstract_scoped: bool = False

    def __post_init__(self) -> None:
        if self.allow and self.deny:
            raise ValueError(
                "--net-allow and --net-deny cannot be combined: "
                "use --net-allow rules only (allow list) or --net-deny rules only (deny list)"
            )
        for rule in self.deny:
            if rule.host is not None:
                raise ValueError(f"--net-deny {rule.text}: hostnames are not accepted")
        for path in self.unix_paths:
            if not path.startswith("/"):
                raise ValueError(f"unix socket path {path!r} is not absolute")
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))
        paths = dict.fromkeys(_normalise_path(path) for path in self.unix_paths)
        object.__setattr__(self, "unix_paths", tuple(paths))

    # --- verdicts -----------------------------------------------------------------

    def connect(self, endpoint: Endpoint, pins: PinTable) -> Verdict:
        """connect(), and the destination of sendto/sendmsg/sendmmsg."""
        address = canonical_address(endpoint.address)
        names = pins.names_for(address)
        if endpoint.protocol != ICMP and endpoint.port == DNS_PORT:
            return self._dns(endpoint, address, names)
        verdict = self._connect(endpoint, address, names)
        if self.http and endpoint.port in self.http_ports:
            if endpoint.protocol == TCP:
                return self._through_proxy(verdict, address, names)
            if endpoint.protocol == UDP and verdict.allowed and not self._udp_named(endpoint, address, names):
                return Verdict(False, QUIC_REASON, verdict.hostname)
        return verdict

    def _udp_named(self, endpoint: Endpoint, address: IPAddress, names: frozenset[str]) -> bool:
        """An allow rule written for UDP alone (``udp://HOST:PORT``) reaches it."""
        rule = _first_match(self.allow, endpoint, address, names)
        return rule is not None and rule.protocols == frozenset({UDP})

    def _connect(self, endpoint: Endpoint, address: IPAddress, names: frozenset[str]) -> Verdict:
        if self.deny:
            rule = _first_match(self.deny, endpoint, address, frozenset())
            if rule is not None:
                return Verdict(False, f"--net-deny {rule.text}", _any_name(names))
            return Verdict(True, "no --net-deny rule", _any_name(names))
        rule = _first_match(self.allow, endpoint, address, names)
        if rule is None:
            return Verdict(False, "no --net-allow rule", _any_name(names))
        return Verdict(True, f"--net-allow {rule.text}", rule.host or _any_name(names))

    def _through_proxy(self, verdict: Verdict, address: IPAddress, names: frozenset[str]) -> Verdict:
        """TCP to an HTTP port while HTTP rules exist: through the proxy, whichever rule
        opened it. An --http-allow host is reachable there without a --net-allow rule
        (not past a --net-deny one): its pinned names, or its address if a rule names it."""
        if verdict.allowed:
            return replace(verdict, redirect_proxy=True)
        if self.deny:
            return verdict
        name = next((n for n in sorted(names) if self.http.admits_name(n)), None)
        if name is not None:
            return Verdict(True, f"--http-allow rules for {name}", name, redirect_proxy=True)
        if str(address) in self.http.allowed_ips():
            return Verdict(True, f"--http-allow rules for {address}", None, redirect_proxy=True)
        return Verdict(False, "no --net-allow or --http-allow rule", _any_name(names))

    def _dns(self, endpoint: Endpoint, address: IPAddress, names: frozenset[str]) -> Verdict:
        for rule in self.allow:
            # Only an explicit address/CIDR with 53 in an explicit port list goes direct.
            if rule.network is not None and not rule.ports.all:
                if _covers(rule, endpoint) and address in rule.network:
                    return Verdict(True, f"--net-allow {rule.text}", _any_name(names))
        return Verdict(True, DNS_REDIRECT_REASON, _any_name(names), redirect_dns=True)

    def bind(self, endpoint: Endpoint) -> Verdict:
        """bind() of an INET socket; the address is not considered, only the port.

        Port 0 is always allowed: it binds no chosen port, and the kernel hands out an
        ephemeral port anyway on connect, sendto and listen() of an unbound socket.
        """
        if endpoint.protocol == ICMP:
            return Verdict(True, ICMP_BIND_REASON)
        if endpoint.port == 0:
            return Verdict(True, EPHEMERAL_BIND_REASON)
        if self.bind_denied is not None:
            if endpoint.port in self.bind_denied:
                return Verdict(False, f"port {endpoint.port} in --net-deny-bind {self.bind_denied.text}")
            return Verdict(True, f"not in --net-deny-bind {self.bind_denied.text}")
        if self.bind_ports is None:
            return Verdict(False, "no --net-allow-bind")
        if endpoint.port in self.bind_ports:
            return Verdict(True, f"--net-allow-bind {self.bind_ports.text}")
        allowed = self.bind_ports.text
        return Verdict(False, f"port {endpoint.port} not in --net-allow-bind {allowed}")

    def listen(self, endpoint: Endpoint) -> Verdict:
        """listen() on a TCP socket bound to ``endpoint.port``.

        Port 0: the socket is unbound and listen() itself would bind an ephemeral
        port, which no rule can name: only `--net-allow-bind '*'` admits it. A port
        bound earlier (bind(0) included) is judged like bind().
        """
        if endpoint.port == 0:
            if self.bind_denied is not None and not self.bind_denied.all:
                return Verdict(True, f"--net-deny-bind {self.bind_denied.text}")
            if self.bind_ports is not None and self.bind_ports.all:
                return Verdict(True, f"--net-allow-bind {self.bind_ports.text}")
            return Verdict(False, "listening on an ephemeral port needs --net-allow-bind '*'")
        return self.bind(endpoint)

    def unix_connect(self, path: str) -> Verdict:
        """connect() to a pathname unix socket (the supervisor passes an absolute path).

        Compared lexically after normalisation: the caller resolves symlinks if it
        wants them followed. Abstract sockets are Landlock's business, not this.
        """
        if not path.startswith("/"):
            return Verdict(False, f"unix socket path {path!r} is not absolute")
        normal = _normalise_path(path)
        if normal in self.unix_paths:
            return Verdict(True, f"--unix-allow {normal}")
        return Verdict(False, "no --unix-allow rule")

    # --- what the DNS responder and the supervisor need to know ---------------------

    def hostnames(self) -> frozenset[str]:
        """The names to pin at start: --net-allow's and --http-allow's concrete ones."""
        names = frozenset(rule.host for rule in self.allow if rule.host is not None)
        return names | self.http.concrete_hosts()

    @property
    def resolves_unlisted_names(self) -> bool:
        """Whether names the policy does not list may be resolved when the child asks
        (any host, deny mode, or an --http-allow wildcard such as ``*.example.com``)."""
        return self._any_name_reachable or any(r.wildcard_host for r in self.http.allow)

    @property
    def _any_name_reachable(self) -> bool:
        return bool(self.deny) or any(rule.any_host for rule in self.allow)

    def admits_name(self, name: str) -> bool:
        """May the resolver look up ``name`` upstream and pin the answer?

        In allow mode only when some rule already reaches it (any host, or an
        --http-allow host pattern matching it): otherwise every query for an unlisted
        name would be a channel out (``secret.attacker.example``).
        """
        name = normalise_name(name)
        return (self._any_name_reachable or name in self.hostnames()
                or self.http.admits_name(name))

    def admits_address(self, address: IPAddress, name: str | None = None) -> bool:
        """May an upstream answer for ``name`` (a name ``admits_name`` let through) pin
        ``address``?

        Deny mode: unless a rule denies it on every port for TCP and UDP. Allow mode:
        if a rule reaches it without naming a host (any host, or a network containing
        it), or the name matches an --http-allow host pattern (reached through the
        proxy only). Not consulted for the policy's own names (``hostnames``).
        """
        address = canonical_address(address)
        if self.deny:
            return not any(_blocks_address(rule, address) for rule in self.deny)
        if name is not None and self.http.admits_name(name):
            return True
        return any(_targets(rule, address, frozenset()) for rule in self.allow)



# --- matching ----------------------------------------------------------------------


def rules_admit(rules: tuple[NetRule, ...], endpoint: Endpoint, names: frozenset[str]) -> bool:
    """Whether one of ``rules`` (--net-allow grammar) covers ``endpoint``, reached
    under one of the pinned ``names`` or by address."""
    return _first_match(rules, endpoint, canonical_address(endpoint.address), names) is not None


def _first_match(
    rules: tuple[NetRule, ...], endpoint: Endpoint, address: IPAddress, names: frozenset[str]
) -> NetRule | None:
    for rule in rules:
        if _covers(rule, endpoint) and _targets(rule, address, names):
            return rule
    return None


def _covers(rule: NetRule, endpoint: Endpoint) -> bool:
    """The rule's protocols and ports include the endpoint's (ICMP has no ports)."""
    if endpoint.protocol not in rule.protocols:
        return False
    return endpoint.protocol == ICMP or endpoint.port in rule.ports


def _targets(rule: NetRule, address: IPAddress, names: frozenset[str]) -> bool:
    if rule.any_host:
        return True
    if rule.network is not None:
        return address in rule.network
    return rule.host in names


def _blocks_address(rule: NetRule, address: IPAddress) -> bool:
    return rule.ports.all and {TCP, UDP} <= rule.protocols and _targets(rule, address, frozenset())


def _any_name(names: frozenset[str]) -> str | None:
    return min(names) if names else None  # deterministic, for the audit log


def _normalise_path(path: str) -> str:
    # normpath keeps a leading "//" (POSIX leaves it implementation-defined; Linux
    # treats it as "/").
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal
