"""`sandlock policy test`: what a policy decides about given requests and connections,
decided by the code that decides at run time. Nothing is resolved, nothing is sent.

An endpoint (``tcp://github.com:22``) is judged by ``NetPolicy.connect``, the
supervisor's verdict. An HTTP(S) URL is first the endpoint it connects to (its port,
or 80/443); when that connection goes through sandlock's proxy, HTTPS then meets the
proxy's ClientHello decision (``HttpRules.tls_decision``) and the request the proxy's
verdict (``HttpRules.decide``).

Hostnames: the verdict knows names only through the pinned table. A name is pinned
as the run would pin it: to its ``--resolve`` addresses, or else to a placeholder, a
documentation address (RFC 5737, RFC 3849) that no address rule of the policy covers,
so that name rules decide as at run time and no IP or CIDR rule matches by accident.
A name the run's resolver would not answer (no rule names it) is denied as such.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from ipaddress import IPv4Network, IPv6Network, ip_address
from urllib.parse import urlsplit

from .._grammar import words
from .._record import record
from ..dns import DnsSettings
from ..net import compile_policy
from ..netrules import (
    DEFAULT_PROTOCOLS,
    ICMP,
    TCP,
    Endpoint,
    IPAddress,
    NetPolicy,
    NetRule,
    PinTable,
    Verdict,
    parse_allow,
)
from ..proxy._rules import INSPECT, PASS, REFUSE
from ..policy import Policy

DEFAULT_PORTS = {"http": 80, "https": 443}
_METHOD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# Placeholders for names: documentation ranges, tried in this order (see _placeholder).
_PLACEHOLDER_NETWORKS = (
    IPv4Network("192.0.2.0/24"), IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/24"),
    IPv6Network("2001:db8::/32"),
)
_CANDIDATES_PER_NETWORK = 16


@record
class Probe:
    """One thing to test: a connection and, for a URL, the request sent over it."""

    shown: str
    protocol: str
    host: str  # a normalised hostname, or an IP address as ipaddress writes it
    port: int  # 0 for ICMP
    method: str | None = None  # None: a connection only
    target: str = "/"  # the request's path and query
    tls: bool = False


@record
class Outcome:
    allowed: bool
    reason: str  # the rule that decided, or why nothing allowed it

    def line(self, probe: Probe) -> str:
        return f"{'ALLOW' if self.allowed else 'DENY':<5} {probe.shown} ({self.reason})"


# --- what to test ----------------------------------------------------------------------


def parse_request(text: str) -> Probe:
    """``[METHOD] URL`` (GET when no METHOD); ValueError says what is wrong."""
    parts = words(text)
    if len(parts) not in (1, 2):
        raise ValueError("expected '[METHOD] URL', e.g. 'GET https://api.github.com/repos/x/y'")
    method, url = (["GET"] + parts)[-2:]
    if not _METHOD.fullmatch(method):
        raise ValueError(f"{method!r} is not an HTTP method")
    split = urlsplit(url)
    scheme = split.scheme.lower()
    if scheme not in DEFAULT_PORTS or not split.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    try:
        port = split.port
    except ValueError:  # (its words for 5000 digits are Python's: "int max str digits")
        raise ValueError("the URL's port is not a number from 0 to 65535") from None
    port = DEFAULT_PORTS[scheme] if port is None else port
    host = _host(parse_allow(f"{TCP}://{_bracketed(split.hostname)}:{port}"))
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    return Probe(f"{method.upper()} {url}", TCP, host, port, method.upper(), target,
                 tls=scheme == "https")


def parse_endpoint(text: str) -> Probe:
    """``[tcp://|udp://|icmp://]HOST[:PORT]`` with one host and one port (none for
    ICMP), in --net-allow's grammar; no scheme means TCP."""
    rule = parse_allow(text)
    protocol = TCP if rule.protocols == DEFAULT_PROTOCOLS else next(iter(rule.protocols))
    host = _host(rule)
    if protocol == ICMP:
        return Probe(f"{protocol}://{_bracketed(host)}", protocol, host, 0)
    if len(rule.ports.ranges) != 1 or rule.ports.ranges[0][0] != rule.ports.ranges[0][1]:
        raise ValueError("name one port (tcp://HOST:PORT)")
    port = rule.ports.ranges[0][0]
    return Probe(f"{protocol}://{_bracketed(host)}:{port}", protocol, host, port)


def _host(rule: NetRule) -> str:
    """The one host or address a rule names (what a probe connects to)."""
    if rule.host is not None:
        return rule.host
    if rule.network is None or rule.network.num_addresses != 1:
        raise ValueError("name one host or address")
    return str(rule.network.network_address)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _ip(host: str) -> IPAddress | None:
    try:
        return ip_address(host)
    except ValueError:
        return None


# --- deciding --------------------------------------------------------------------------


class PolicyTester:
    def __init__(self, policy: Policy) -> None:
        self._rules = compile_policy(policy)
        self._inspect = policy.https_inspect
        self._auth_plain = policy.http_auth_plain
        self._can_inspect = self._rules.http.needs_inspection(policy.https_inspect)
        self._static = DnsSettings.from_policy(policy).static_pins
        self._placeholder = _placeholder(self._rules, self._static)
        self._private = policy.private_network  # (the sandbox's namespaces permitting)

    def test(self, probe: Probe) -> Outcome:
        pins = PinTable()  # one per probe: a placeholder stands for one name only
        for name, addresses in self._static.items():
            pins.pin(name, addresses)  # --resolve: pinned before anything, as at run time
        address = _ip(probe.host)
        if address is not None:
            return self._connect(probe, (address,), pins, placeholder=False)
        pinned = pins.addresses(probe.host)
        if pinned:
            return self._connect(probe, pinned, pins, placeholder=False)
        if not self._rules.admits_name(probe.host):
            return Outcome(False, f"{probe.host} does not resolve in the sandbox: no rule names it")
        pins.pin(probe.host, (self._placeholder,))
        return self._connect(probe, (self._placeholder,), pins, placeholder=True)

    def _connect(self, probe: Probe, addresses: tuple[IPAddress, ...], pins: PinTable,
                 placeholder: bool) -> Outcome:
        verdicts = [self._rules.connect(Endpoint(probe.protocol, address, probe.port), pins)
                    for address in addresses]
        verdict = next((v for v in verdicts if not v.allowed), verdicts[0])  # any may be used
        note = _address_note(self._rules, probe, verdict) if placeholder else ""
        if not verdict.allowed and self._private and all(a.is_loopback for a in addresses):
            note += ("; a private network: the sandbox's own loopback, where a host's "
                     "service is out of sight (ECONNREFUSED unless the sandbox listens there)")
        if not verdict.allowed or not verdict.redirect_proxy:
            return Outcome(verdict.allowed, verdict.reason + note + self._not_http(probe))
        if probe.method is not None:
            return self._request(probe)
        if self._rules.http.refuses_host(probe.host):
            return Outcome(False, f"{verdict.reason}, but sandlock's HTTP proxy refuses every "
                           f"request to {probe.host}: no --http-allow rule names it")
        return Outcome(True, f"{verdict.reason}; through sandlock's HTTP proxy: only requests "
                       "the HTTP rules allow")

    def _request(self, probe: Probe) -> Outcome:
        """A request on a connection steered to the proxy: its TLS, then its verdict."""
        http = self._rules.http
        handling = ""
        if probe.tls:  # clients send no server name for an IP address
            sni = None if _ip(probe.host) is not None else probe.host
            tls = http.tls_decision(sni, self._inspect, self._can_inspect)
            if tls.action == REFUSE:
                return Outcome(False, f"HTTPS refused at the handshake: {tls.reason}")
            handling = {PASS: "; HTTPS passed through, not inspected",
                        INSPECT: "; HTTPS inspected"}[tls.action]
        decision = http.decide(probe.method, probe.host, probe.target)
        rule = http.auth_for(probe.method, probe.host, probe.target) if decision.allowed else None
        if rule is None:
            return Outcome(decision.allowed, decision.reason + handling)
        if not probe.tls and not self._auth_plain:  # as the proxy answers it: 403
            return Outcome(False, f"--http-auth {rule.text}: a credential goes over TLS only "
                           "(plain HTTP refused; --http-auth-plain allows it)")
        return Outcome(True, f"{decision.reason}{handling}; carries credential "
                       f"{rule.credential!r} in {rule.header} (--http-auth {rule.text})")

    def _not_http(self, probe: Probe) -> str:
        if (probe.method is not None and self._rules.http
                and probe.port not in self._rules.http_ports):
            return f"; port {probe.port} is not an HTTP port (--http-port): no HTTP rule applies"
        return ""


def _address_note(rules: NetPolicy, probe: Probe, verdict: Verdict) -> str:
    """What a placeholder cannot tell: how address rules judge the real addresses."""
    if rules.deny and verdict.allowed:
        return f"; --net-deny rules judge the addresses {probe.host} resolves to: test those"
    if not verdict.allowed and any(rule.network is not None for rule in rules.allow):
        return (f"; an address rule may allow the addresses {probe.host} resolves to: "
                "test those")
    return ""


def _placeholder(rules: NetPolicy, static: dict[str, tuple[IPAddress, ...]]) -> IPAddress:
    """The first documentation address that no address rule covers and no --resolve
    entry pins. (Should rules cover every candidate, they cover most addresses, and the
    first candidate is used: an address rule decides, as for most real addresses.)"""
    taken = {address for addresses in static.values() for address in addresses}
    taken |= {ip_address(address) for address in rules.http.allowed_ips()}
    networks = [rule.network for rule in (*rules.allow, *rules.deny) if rule.network is not None]
    candidates = list(_candidates())
    for candidate in candidates:
        if candidate not in taken and not any(candidate in network for network in networks):
            return candidate
    return candidates[0]


def _candidates() -> Iterator[IPAddress]:
    for network in _PLACEHOLDER_NETWORKS:
        step = network.num_addresses // _CANDIDATES_PER_NETWORK
        for index in range(_CANDIDATES_PER_NETWORK):
            yield network.network_address + 1 + index * step
