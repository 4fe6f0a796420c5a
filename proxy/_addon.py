"""The enforcement addon: every request on a steered connection -> rule -> pinned upstream.

A thin mitmproxy addon over pure decisions (``_rules``). Per connection it knows the
route sandlock gave (original destination and the names pinned to it); per request it
checks that every name the request gives (Host, the absolute-form authority, HTTP/2's
:authority, the TLS SNI) is one of those names, then asks the rules. The verdict is
taken at request headers, before any byte goes upstream; allowed bodies stream both
ways. The upstream is always the route's destination: nothing is re-resolved.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import connection, http, tcp, tls, websocket  # noqa: F401 - hook types
from mitmproxy.proxy import server_hooks

from .._record import record
from ._credentials import AUTH_FLAG, AuthRule, first_auth, header_value, plain_refusal
from ._protocol import Route
from ._routes import RouteTable
from ._rules import (
    INSPECT,
    OVERRIDE_HEADERS,
    PASS,
    REFUSE,
    HttpDecision,
    HttpRules,
    TlsDecision,
    normalise_host,
)

DENIED_HEADER = "X-Sandlock-Denied"
DENIED = "sandlock_denied"  # flow metadata: its request body is dropped (see _mitm)
MISDIRECTED = 421
FORBIDDEN = 403
_OVERRIDE_NAMES = {name.lower().encode(): name for name in OVERRIDE_HEADERS}

Report = Callable[..., None]


@record
class Refusal:
    status: int
    reason: str


class Enforcer:
    """``report(**fields)`` tells sandlock about a decision (for notices and --audit).
    ``secrets``: credential name -> secret, for the rules' ``auth`` (``_credentials``)."""

    def __init__(self, rules: HttpRules, inspect: str, can_inspect: bool, routes: RouteTable,
                 report: Report, report_allowed: bool, secrets: dict[str, str] | None = None,
                 auth_plain: bool = False) -> None:
        self._rules = rules
        self._inspect = inspect
        self._can_inspect = can_inspect
        self._routes = routes
        self._report = report
        self._report_allowed = report_allowed
        self._refused: dict[str, str] = {}  # client connection id -> why
        self._untrusted: set[str] = set()  # hosts whose client refused the CA (said once)
        self._auth_plain = auth_plain
        # Each rule's header value, made once; a str is the value, a Refusal why there is
        # none (fail closed: a request that should carry a credential is denied).
        self._values = {rule.text: _value(rule, secrets or {}) for rule in rules.auth}
        self._nested: dict[tuple, HttpRules] = {}  # nested sandboxes' rules, parsed once

    # --- TLS: decided on the ClientHello ------------------------------------------------

    def client_connected(self, client: connection.Client) -> None:
        self._routes.claim(client.peername, client.id)

    def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        client = data.context.client
        route = self._routes.get(client.id)
        sni = data.client_hello.sni
        decision = self._tls_decision(route, sni)
        if decision.action == PASS:
            data.ignore_connection = True  # relayed untouched: every request is allowed
            self._audit(route, "TLS", sni, "", True, decision.reason)
        elif decision.action == REFUSE:
            # Refused before anything reaches the upstream: the connection is relayed as
            # raw bytes, whose upstream connect then fails (lazy connection strategy).
            data.ignore_connection = True
            self._refused[client.id] = decision.reason
            self._audit(route, "TLS", sni or "", "", False, decision.reason)

    def _tls_decision(self, route: Route | None, sni: str | None) -> TlsDecision:
        if route is None:
            return TlsDecision(REFUSE, "connection not steered by sandlock")
        if sni and not _names(route, normalise_host(sni)):
            return TlsDecision(REFUSE, f"SNI {sni} is not a name pinned to {_where(route)}")
        decision = self._rules.tls_decision(sni, self._inspect, self._can_inspect)
        for rules in self._nested_rules(route):  # the strictest: refuse, inspect, pass
            nested = rules.tls_decision(sni, self._inspect, self._can_inspect)
            if nested.action == REFUSE or (nested.action == INSPECT and decision.action == PASS):
                decision = TlsDecision(nested.action, f"nested sandbox: {nested.reason}")
            if decision.action == REFUSE:
                break
        return decision

    def _nested_rules(self, route: Route) -> list[HttpRules]:
        """The HTTP rules of the nested sandboxes the route's thread is in."""
        found = []
        for texts in route.nested:
            rules = self._nested.get(texts)
            if rules is None:
                rules = self._nested[texts] = HttpRules.parse(*texts)
            found.append(rules)
        return found

    def tls_failed_client(self, data: tls.TlsData) -> None:
        """The command's TLS handshake with the proxy failed. When the client said it
        does not trust the certificate (an "unknown ca", "bad certificate" or
        "certificate unknown" alert: mitmproxy's error then says so), sandlock says it,
        once per host: the client did not take the trust sandlock gave it."""
        client = data.context.client
        host = client.sni or ""
        if "does not trust the proxy's certificate" not in (data.conn.error or "") or \
                host in self._untrusted:
            return
        self._untrusted.add(host)
        route = self._routes.get(client.id)
        self._report(event="untrusted-ca", pid=route.pid if route else 0, host=host,
                     destination=f"{route.destination[0]}:{route.destination[1]}" if route else "")

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        why = self._refused.get(data.client.id)
        route = self._routes.get(data.client.id)
        if why is None and route is None:
            why = "connection not steered by sandlock"
        if why is None and tuple(data.server.address or ()) != route.destination:
            why = "upstream is not the pinned destination"  # nothing is re-resolved
        if why is not None:
            data.server.error = f"sandlock: {why}"

    def client_disconnected(self, client: connection.Client) -> None:
        self._refused.pop(client.id, None)
        self._routes.forget(client.id)

    # --- HTTP: decided on the request headers ------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        self._deny(flow, None, "", Refusal(FORBIDDEN, "CONNECT is not allowed through sandlock"))

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        # mitmproxy reads the method upper-case: forward it as the rules judge it ('get'
        # is judged as GET, and a server must not get something else).
        request.method = method = request.method
        route = self._routes.get(flow.client_conn.id)
        host, refusal = self._request_host(flow, route)
        if refusal is not None:
            self._deny(flow, route, host, refusal)
            return
        path = request.path
        overrides = _overrides(request)
        decision = self._rules.decide(method, host, path, overrides)
        for rules in self._nested_rules(route) if decision.allowed else ():
            nested = rules.decide(method, host, path, overrides)
            if not nested.allowed:
                decision = HttpDecision(False, f"nested sandbox: {nested.reason}")
                break
        if not decision.allowed:
            self._deny(flow, route, host, Refusal(FORBIDDEN, decision.reason))
            return
        auth = self._rules.auth  # HttpRules.auth_for, without its import on each request
        rule = first_auth(auth, method, host, path, overrides) if auth else None
        if rule is not None:
            refusal = self._authorise(flow, rule)
            if refusal is not None:
                self._deny(flow, route, host, refusal, credential=rule.credential)
                return
        request.stream = True  # bodies are never buffered whole
        if self._report_allowed:
            self._audit(route, method, host, path, True, decision.reason,
                        credential=rule.credential if rule else "")

    def _authorise(self, flow: http.HTTPFlow, rule: AuthRule) -> Refusal | None:
        """Set ``rule``'s header on this request (whatever the command sent under that
        name is dropped), or say why not. Decided per request: nothing is kept per
        connection, so a keep-alive or HTTP/2 connection gets it only where it matches."""
        if not (flow.client_conn.tls and flow.server_conn.tls) and not self._auth_plain:
            return Refusal(FORBIDDEN, plain_refusal(rule))
        value = self._values[rule.text]
        if isinstance(value, Refusal):
            return value
        flow.request.headers[rule.header] = value  # replaces every value, any case
        return None

    def _request_host(self, flow: http.HTTPFlow, route: Route | None) -> tuple[str, Refusal | None]:
        """The one host this request names, or why it does not name an allowed one."""
        if route is None:
            return "", Refusal(FORBIDDEN, "connection not steered by sandlock")
        request = flow.request
        if not flow.client_conn.tls and request.http_version.startswith("HTTP/2"):
            return "", Refusal(FORBIDDEN, "HTTP/2 without TLS (h2c) is not allowed")
        if "h2c" in request.headers.get("upgrade", "").lower():
            return "", Refusal(FORBIDDEN, "upgrading to h2c is not allowed")
        given = [request.authority] if request.authority else []
        given += request.headers.get_all("host")
        hosts = {_host_of(value) for value in given}
        if len(hosts) != 1 or None in hosts:
            why = "no Host header" if not given else "the request names several hosts or a bad one"
            return "", Refusal(FORBIDDEN if not given else MISDIRECTED, why)
        host = hosts.pop()
        assert host is not None
        if not _names(route, host):
            return host, Refusal(MISDIRECTED, f"{host} is not a name pinned to {_where(route)}")
        sni = flow.client_conn.sni
        if flow.client_conn.tls and (not sni or normalise_host(sni) != host):
            return host, Refusal(MISDIRECTED, f"Host {host} differs from the TLS server name {sni}")
        return host, None

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            flow.response.stream = True  # a 100 MiB download keeps memory flat

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None:
            flow.websocket.messages.clear()  # relayed, never retained

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        # Only bytes that are neither HTTP nor TLS get here (pass-through TLS is ignored
        # before any flow exists): not allowed on an HTTP port.
        route = self._routes.get(flow.client_conn.id)
        self._audit(route, "TCP", "", "", False, "not HTTP or TLS on an HTTP port")
        flow.kill()

    # --- reporting -------------------------------------------------------------------------

    def _deny(self, flow: http.HTTPFlow, route: Route | None, host: str, refusal: Refusal,
              credential: str = "") -> None:
        request = flow.request
        flow.metadata[DENIED] = True
        request.headers.pop("expect", None)  # no "100 Continue": the body is not wanted
        path = request.path.split("?", 1)[0]
        shown = f"{request.method} {host or request.host}{path}"
        text = f"sandlock: denied {shown}: {refusal.reason}\n"
        flow.response = http.Response.make(
            refusal.status, text.encode(),
            {"Content-Type": "text/plain; charset=utf-8", DENIED_HEADER: header_safe(refusal.reason),
             "Connection": "close"},
        )
        self._audit(route, request.method, host or request.host, request.path, False, refusal.reason,
                    credential=credential)

    def _audit(self, route: Route | None, method: str, host: str, path: str, allowed: bool,
               reason: str, credential: str = "") -> None:
        """``credential``: the NAME of the credential the request got (or would have)."""
        if allowed and not self._report_allowed:
            return
        extra = {"credential": credential} if credential else {}
        self._report(
            pid=route.pid if route else 0,
            destination=f"{route.destination[0]}:{route.destination[1]}" if route else "",
            method=method, host=host, path=path.split("?", 1)[0], allowed=allowed, reason=reason,
            **extra,
        )


def _value(rule: AuthRule, secrets: dict[str, str]) -> str | Refusal:
    """The header value of ``rule``, or the refusal of its requests (never the secret)."""
    secret = secrets.get(rule.credential)
    if secret is None:
        return Refusal(FORBIDDEN, f"{AUTH_FLAG} {rule.text}: credential {rule.credential!r} is missing")
    try:
        return header_value(rule, secret)
    except ValueError as exc:
        return Refusal(FORBIDDEN, f"{AUTH_FLAG} {rule.text}: {exc}")


def _overrides(request: http.Request) -> tuple[tuple[str, str], ...]:
    """(name, value) of each method-override header, in one pass over the raw fields
    (a fifth of the time of a lookup per name: this runs on every request)."""
    return tuple((_OVERRIDE_NAMES[name.lower()], value.decode("utf-8", "surrogateescape"))
                 for name, value in request.headers.fields if name.lower() in _OVERRIDE_NAMES)


def _names(route: Route, host: str) -> bool:
    """Is ``host`` a name pinned to the route's destination (or that address itself:
    sandlock sends it in canonical form, as ``_host_of`` gives IP literals)?"""
    return host in route.names or host == route.destination[0]


def _where(route: Route) -> str:
    names = ", ".join(route.names) or "no name"
    return f"{route.destination[0]} ({names})"


def _host_of(authority: str) -> str | None:
    """The host part of a Host header or authority, normalised; None if malformed."""
    authority = authority.strip()
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return None
        return _bare_ip(authority[1:end])
    host, _, port = authority.partition(":")
    if port and not port.isdigit():
        return None
    host = normalise_host(host)
    return host or None


def _bare_ip(text: str) -> str:
    from ipaddress import ip_address

    try:
        return str(ip_address(text))
    except ValueError:
        return normalise_host(text)


def header_safe(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
