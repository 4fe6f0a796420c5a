"""HTTP rules: the grammar ``METHODS HOST[/PATH]`` and the request verdict. Pure: no I/O.

Shared by Policy validation, the network engine (which hosts the rules cover), the
proxy addon (the verdict on each TLS connection and request) and ``sandlock policy
test``: one piece of code decides, wherever the question is asked.

Matching is done on the canonical form of paths, rules' and requests' alike
(``_paths``). Where the path could mean different things to different servers (an
encoded ``/`` or ``\\``), every reading is checked and the request is allowed only if
all of them are: deny when in doubt. Likewise every method a request names (its own and
the method-override headers and ``_method`` parameter that frameworks honour) must be
allowed.
"""

from __future__ import annotations

from .._grammar import words
from .._record import record
from ._paths import UnclearPath, canonical, readings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._credentials import AuthRule

ANY = "*"
DEFAULT_PATH = "/*"
ALLOW_FLAG = "--http-allow"
DENY_FLAG = "--http-deny"

# Character sets, not regular expressions: `re` (with `enum`) costs ~3 ms to import.
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_METHOD_CHARS = _UPPER | frozenset("0123456789_-")  # RFC 9110 tokens in practice; no odd bytes
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
# Where frameworks take a method that overrides the request's own (Rails, Symfony,
# Laravel, Express's method-override, ...): each is judged like the request's method.
OVERRIDE_HEADERS = ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override")
OVERRIDE_PARAMETER = "_method"


@record
class HttpRule:
    """One parsed rule. ``methods`` None: any method. ``host``: a lower-case name,
    ``*.suffix``, an IP literal (compressed form) or ``*``."""

    text: str
    methods: frozenset[str] | None
    host: str
    path: str
    _glob: tuple[str, ...]  # the path split at its stars
    _folded: tuple[str, ...]  # the same, lower-case

    def matches(self, method: str, host: str, path: str, any_case: bool = False) -> bool:
        """``method`` upper-case, ``host`` normalised, ``path`` canonical; ``any_case``:
        ``path`` is lower-cased, and compared with the rule's path lower-cased."""
        if self.methods is not None and method not in self.methods:
            return False
        return host_matches(self.host, host) and glob_matches(self._folded if any_case else self._glob, path)

    @property
    def any_request_to_host(self) -> bool:
        """Allows every method and path on its hosts (an HTTPS pass-through candidate)."""
        return self.methods is None and self.path == DEFAULT_PATH

    @property
    def wildcard_host(self) -> bool:
        return self.host == ANY or self.host.startswith("*.")


def parse_rule(text: str) -> HttpRule:
    """``METHODS HOST[/PATH]`` -> HttpRule; ValueError says what is wrong."""
    parts = words(text)
    if len(parts) != 2:
        raise ValueError("expected 'METHODS HOST[/PATH]', e.g. 'GET api.github.com/repos/*'")
    methods_text, target = parts
    slash = target.find("/")
    host_text, path = (target, DEFAULT_PATH) if slash < 0 else (target[:slash], target[slash:])
    path = _rule_path(path)
    return HttpRule(
        text=" ".join(parts),
        methods=_methods(methods_text),
        host=_host_pattern(host_text),
        path=path,
        _glob=tuple(path.split("*")),
        _folded=tuple(path.lower().split("*")),
    )


def glob_matches(parts: tuple[str, ...], text: str) -> bool:
    """Does all of ``text`` match the glob whose literal parts (split at each '*') are
    ``parts``? A star matches any characters, '/' and none included. Each middle part
    is taken at its leftmost place: that leaves the most room to the parts after it."""
    if len(parts) == 1:
        return text == parts[0]
    first, *middle, last = parts
    end = len(text) - len(last)
    if end < len(first) or not text.startswith(first) or not text.endswith(last):
        return False
    position = len(first)
    for part in middle:
        found = text.find(part, position, end)
        if found < 0:
            return False
        position = found + len(part)
    return True


def _methods(text: str) -> frozenset[str] | None:
    if text == ANY:
        return None
    # ASCII before upper(): "ſ".upper() is "S", and "poſt" is no way to write POST.
    methods = [m.upper() if m.isascii() else m for m in text.split(",")]
    for method in methods:
        if method == ANY:
            raise ValueError("'*' cannot be mixed with named methods")
        if not (method[:1] in _UPPER and set(method) <= _METHOD_CHARS):
            raise ValueError(f"{method or 'empty'!r} is not an HTTP method")
    return frozenset(methods)


def _host_pattern(text: str) -> str:
    if not text:
        raise ValueError("missing host (use '*' for any host)")
    if text == ANY:
        return ANY
    if not text.isascii():  # (lower() would make the Kelvin sign a 'k')
        raise ValueError(f"{text!r}: not a valid hostname (write internationalised names "
                         "as xn--...)")
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError(f"{text!r}: unterminated IPv6 address")
        return _ip_literal(text[1:-1], text)
    if ":" in text:
        if text.count(":") > 1:
            return _ip_literal(text, text)
        raise ValueError(f"{text!r}: no port here: HTTP ports come from --http-port")
    if text.startswith("*."):
        return "*." + _hostname(text[2:], text)
    if "*" in text:
        raise ValueError(f"{text!r}: '*' is only allowed as a whole first label ('*.example.com')")
    if not text.replace(".", "").isdigit():  # else IPv4, if anything (no TLD is numeric)
        return _hostname(text, text)
    try:
        return _ip_literal(text, text)
    except ValueError:
        return _hostname(text, text)


def _ip_literal(address: str, text: str) -> str:
    from ipaddress import ip_address  # (with functools and collections, ~3 ms): IPs only
    try:
        return str(ip_address(address))
    except ValueError:
        raise ValueError(f"{text!r}: not an IP address") from None


def _hostname(name: str, text: str) -> str:
    name = normalise_host(name)
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_label(label) for label in labels):
        raise ValueError(f"{text!r}: not a valid hostname")
    return name


def _label(label: str) -> bool:
    return (0 < len(label) <= 63 and set(label) <= _LABEL_CHARS
            and not label.startswith("-") and not label.endswith("-"))


def _rule_path(path: str) -> str:
    if "?" in path or "#" in path:
        raise ValueError(f"{path!r}: the query string is not matched; remove '?' and '#'")
    try:
        return canonical(path)  # a raw '*' stays as it is: the glob's star
    except UnclearPath as exc:
        raise ValueError(f"{path!r}: {exc}") from None


# --- request side --------------------------------------------------------------------


def normalise_host(host: str) -> str:
    """Hosts compare case-insensitively and without the trailing dot."""
    return host.rstrip(".").lower()


def host_matches(pattern: str, host: str) -> bool:
    """``host`` normalised (``normalise_host``); IP literals in compressed form."""
    if pattern == ANY:
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])  # a subdomain, never the apex itself
    return host == pattern


# --- the verdict ---------------------------------------------------------------------


@record
class HttpDecision:
    allowed: bool
    reason: str  # the deciding rule ("--http-allow GET api.github.com/repos/*") or why not


PASS, INSPECT, REFUSE = "pass", "inspect", "refuse"


@record
class TlsDecision:
    """What becomes of a TLS connection at its ClientHello: relayed untouched (``PASS``),
    terminated so that each request is checked (``INSPECT``), or ``REFUSE``d."""

    action: str
    reason: str


@record
class HttpRules:
    """The run's HTTP rules. Deny rules win; with any allow rule, a request must match
    one; with deny rules only, everything else is allowed. ``auth``: which allowed
    requests get a credential (``_credentials``); they allow nothing themselves."""

    allow: tuple[HttpRule, ...] = ()
    deny: tuple[HttpRule, ...] = ()
    auth: tuple[AuthRule, ...] = ()

    @classmethod
    def parse(cls, allow: tuple[str, ...], deny: tuple[str, ...], auth: tuple[str, ...] = ()) -> HttpRules:
        from ._credentials import parse_auth_rule  # it builds on this module

        return cls(tuple(map(parse_rule, allow)), tuple(map(parse_rule, deny)),
                   tuple(map(parse_auth_rule, auth)))

    def __bool__(self) -> bool:
        return bool(self.allow or self.deny)

    def decide(self, method: str, host: str, target: str,
               overrides: tuple[tuple[str, str], ...] = ()) -> HttpDecision:
        """``target``: the request's path with its query, as sent; ``overrides``: the
        (name, value) of each method-override header it has (``OVERRIDE_HEADERS``).
        Allowed only if every method the request names is, on every reading of its path."""
        host = normalise_host(host)
        try:
            paths = readings(target)
        except UnclearPath as exc:
            return HttpDecision(False, str(exc))
        allowed_by: HttpRule | None = None
        for source, named in named_methods(method, target, overrides):
            for path in paths:
                decision, rule = self._decide_path(named, host, path)
                if not decision.allowed:
                    return HttpDecision(False, f"{decision.reason} (method override {source})"
                                        if source else decision.reason)
                allowed_by = allowed_by or rule
        return HttpDecision(True, _reason(ALLOW_FLAG, allowed_by) if allowed_by else
                            f"no {DENY_FLAG} rule matches")

    def _decide_path(self, method: str, host: str, path: str) -> tuple[HttpDecision, HttpRule | None]:
        # Deny rules match regardless of case, both sides lower-cased: a case-insensitive
        # server (IIS, some object stores) serves /ADMIN as /admin. Allow rules are exact.
        lower = path.lower()
        for rule in self.deny:
            if rule.matches(method, host, lower, any_case=True):
                return HttpDecision(False, _reason(DENY_FLAG, rule)), rule
        if not self.allow:
            return HttpDecision(True, f"no {DENY_FLAG} rule matches"), None
        for rule in self.allow:
            if rule.matches(method, host, path):
                return HttpDecision(True, _reason(ALLOW_FLAG, rule)), rule
        return HttpDecision(False, f"no {ALLOW_FLAG} rule matches"), None

    def auth_for(self, method: str, host: str, target: str,
                 overrides: tuple[tuple[str, str], ...] = ()) -> AuthRule | None:
        """The ``--http-auth`` rule whose credential an allowed request gets, if any."""
        if not self.auth:
            return None
        from ._credentials import first_auth
        return first_auth(self.auth, method, host, target, overrides)

    # --- what the network engine and the proxy ask about hosts ---------------------

    def concrete_hosts(self) -> frozenset[str]:
        """Names the allow rules list outright: pinned at start (IP literals excluded)."""
        return frozenset(rule.host for rule in self.allow
                         if not rule.wildcard_host and not _is_ip(rule.host))

    def allowed_ips(self) -> frozenset[str]:
        """IP literals the allow rules name (reachable on the HTTP ports)."""
        return frozenset(rule.host for rule in self.allow if _is_ip(rule.host))

    def admits_name(self, name: str) -> bool:
        """May the child resolve ``name`` (and reach it on the HTTP ports)?"""
        host = normalise_host(name)
        return any(host_matches(rule.host, host) for rule in self.allow)

    def needs_inspection(self, inspect: str) -> bool:
        """Could any HTTPS connection of this run be decrypted (so a CA is needed)?"""
        if inspect != "auto":
            return inspect == "on"
        if self.deny or self.auth:
            return True
        return not all(rule.any_request_to_host for rule in self.allow)

    def refuses_host(self, host: str) -> bool:
        """True when no request to ``host`` can be allowed (allow rules exist, none names
        it): refused without looking inside."""
        host = normalise_host(host)
        return bool(self.allow) and not any(host_matches(r.host, host) for r in self.allow)

    def tls_decision(self, sni: str | None, inspect: str, can_inspect: bool) -> TlsDecision:
        """What the proxy does with a TLS connection whose server name is ``sni`` (the
        caller has checked it is a name pinned to the destination). ``can_inspect``: the
        run has a CA (``needs_inspection``)."""
        if not sni:
            return TlsDecision(REFUSE, "TLS without SNI (server name indication)")
        if self.refuses_host(sni):
            return TlsDecision(REFUSE, f"no {ALLOW_FLAG} rule for {normalise_host(sni)}")
        if inspect != "on" and self.passes_through(sni):
            return TlsDecision(PASS, "pass-through: every request to this host is allowed")
        if not can_inspect:
            return TlsDecision(REFUSE, f"rules for {sni} constrain the method or path, which "
                               "needs HTTPS inspection (--https-inspect is off)")
        return TlsDecision(INSPECT, "inspected: each request is checked")

    def passes_through(self, host: str) -> bool:
        """True when every request to ``host`` would be allowed, whatever its method and
        path: HTTPS to it needs no inspection."""
        host = normalise_host(host)
        if any(host_matches(rule.host, host) for rule in (*self.deny, *(a.match for a in self.auth))):
            return False  # requests to be checked, or to get a credential
        if not self.allow:
            return True
        return any(rule.any_request_to_host and host_matches(rule.host, host)
                   for rule in self.allow)


def named_methods(method: str, target: str, overrides: tuple[tuple[str, str], ...] = ()
                  ) -> list[tuple[str, str]]:
    """Every method a request names, upper-case, each once, as (where, METHOD): its own
    first (where ``""``), then each value of its override headers (a comma list is each
    of its items: ``X-HTTP-Method: DELETE``) and of its ``_method`` query parameters
    (``?_method=DELETE``)."""
    found = {method.upper(): ""}
    given = [(f"{name}: ", value) for name, value in overrides]
    given += [(f"?{OVERRIDE_PARAMETER}=", value) for value in _method_parameters(target)]
    for where, value in given:
        for item in value.split(","):
            named = item.strip().upper()
            if named:
                found.setdefault(named, where + named)
    return [(where, named) for named, where in found.items()]


def _method_parameters(target: str) -> list[str]:
    """The ``_method`` parameters of the query, read as lenient parsers read names:
    decoded, any case, PHP's ``.`` and space for ``_``, an array's ``[]`` dropped."""
    query = target.partition("?")[2]
    if "method" not in query.lower() and "%" not in query:
        return []  # the common case: no parsing
    from urllib.parse import unquote_plus  # (loaded in the proxy by mitmproxy already)

    found = []
    for pair in query.replace(";", "&").split("&"):
        name, _, value = pair.partition("=")
        name = unquote_plus(name).strip().lower().replace(".", "_").replace(" ", "_")
        if name.split("[", 1)[0] == OVERRIDE_PARAMETER:
            found.append(unquote_plus(value))
    return found


def _reason(flag: str, rule: HttpRule) -> str:
    return f"{flag} {rule.text}"


def _is_ip(host: str) -> bool:
    return ":" in host or host.replace(".", "").isdigit()
