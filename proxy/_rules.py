"""HTTP rules: the grammar ``METHODS HOST[/PATH]`` and the request verdict. Pure: no I/O.

Shared by Policy validation, the network engine (which hosts the rules cover), the
proxy addon (the verdict on each TLS connection and request) and ``sandlock policy
test``: one piece of code decides, wherever the question is asked.

Matching is done on a normalised request path. Where the path could mean different
things to different servers (an encoded ``/`` or ``\\``), every reading is checked and
the request is allowed only if all of them are: deny when in doubt.
"""

from __future__ import annotations

from .._record import record

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
_HEX = frozenset("0123456789abcdefABCDEF")
_STAR = "\ue000"  # a private-use character standing for '*' while a rule path is normalised
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


@record
class HttpRule:
    """One parsed rule. ``methods`` None: any method. ``host``: a lower-case name,
    ``*.suffix``, an IP literal (compressed form) or ``*``."""

    text: str
    methods: frozenset[str] | None
    host: str
    path: str
    _glob: tuple[str, ...]  # the path split at its stars

    def matches(self, method: str, host: str, path: str) -> bool:
        """``method`` upper-case, ``host`` normalised, ``path`` normalised."""
        if self.methods is not None and method not in self.methods:
            return False
        return host_matches(self.host, host) and glob_matches(self._glob, path)

    @property
    def any_request_to_host(self) -> bool:
        """Allows every method and path on its hosts (an HTTPS pass-through candidate)."""
        return self.methods is None and self.path == DEFAULT_PATH

    @property
    def wildcard_host(self) -> bool:
        return self.host == ANY or self.host.startswith("*.")


def parse_rule(text: str) -> HttpRule:
    """``METHODS HOST[/PATH]`` -> HttpRule; ValueError says what is wrong."""
    parts = text.split()
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
    methods = [m.strip().upper() for m in text.split(",")]
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
    # The glob's stars survive normalisation as a character no path can contain.
    normal = normalise_path(path.replace("*", _STAR))
    if normal is None:
        raise ValueError(f"{path!r}: malformed path (bad %-escape or '..' above the root)")
    return normal.replace(_STAR, "*")


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


def normalise_path(target: str) -> str | None:
    """The path of a request target as rules see it, or None when it is malformed.

    The query is dropped; escapes of unreserved characters are decoded (``%7E`` is
    ``~``, ``%2e`` is ``.``), other escapes kept with upper-case hex; dot-segments
    are resolved and repeated slashes collapsed. A malformed escape, a NUL byte or a
    ``..`` climbing above the root: None (the caller denies). So is a ``#``: never
    valid in a request, and a server keeping it would see a different path.
    """
    if "#" in target:
        return None
    path = target.split("?", 1)[0]
    if not path.startswith("/"):
        return None
    decoded = _decode_unreserved(path)
    if decoded is None:
        return None
    return _resolve_segments(decoded)


def readings(target: str) -> tuple[str, ...] | None:
    """Every path a server could take ``target`` for: the normalised path; with encoded
    or backslash separators taken as ``/``; with ``;params`` cut from each segment (as
    Tomcat and Jetty do: ``/x/..;/y`` is ``/y`` to them). None: malformed."""
    normal = normalise_path(target)
    if normal is None:
        return None
    found = [normal]
    if any(sep in normal for sep in ("%2F", "%5C", "\\")):
        found.append(normal.replace("%2F", "/").replace("%5C", "/").replace("\\", "/"))
    if ";" in normal or "%3B" in normal:
        found += ["/".join(segment.split(";", 1)[0] for segment in path.replace("%3B", ";").split("/"))
                  for path in list(found)]
    paths = [_resolve_segments(path) for path in found]
    if None in paths:
        return None
    return tuple(dict.fromkeys(paths))  # type: ignore[arg-type]


def _decode_unreserved(path: str) -> str | None:
    out: list[str] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char == "\0":
            return None
        if char != "%":
            out.append(char)
            i += 1
            continue
        escape = path[i + 1 : i + 3]
        if len(escape) != 2 or not set(escape) <= _HEX:
            return None
        decoded = chr(int(escape, 16))
        if decoded == "\0":
            return None
        out.append(decoded if decoded in _UNRESERVED else "%" + escape.upper())
        i += 3
    return "".join(out)


def _resolve_segments(path: str) -> str | None:
    segments: list[str] = []
    parts = path.split("/")[1:]
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not segments:
                return None  # above the root: a server would clamp, a scanner probes
            segments.pop()
            continue
        segments.append(part)
    trailing = parts[-1] in ("", ".", "..") and bool(segments)
    return "/" + "/".join(segments) + ("/" if trailing else "")


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

    def decide(self, method: str, host: str, target: str) -> HttpDecision:
        """``target``: the request's path with its query, as sent."""
        method = method.upper()
        host = normalise_host(host)
        paths = readings(target)
        if paths is None:
            return HttpDecision(False, "malformed path (bad %-escape, NUL, '#' or '..' above the root)")
        allowed_by: HttpRule | None = None
        for path in paths:
            decision, rule = self._decide_path(method, host, path)
            if not decision.allowed:
                return decision
            allowed_by = allowed_by or rule
        return HttpDecision(True, _reason(ALLOW_FLAG, allowed_by) if allowed_by else
                            f"no {DENY_FLAG} rule matches")

    def _decide_path(self, method: str, host: str, path: str) -> tuple[HttpDecision, HttpRule | None]:
        # Deny rules also match regardless of case: a case-insensitive server (IIS,
        # some object stores) serves /ADMIN as /admin. Allow rules stay exact.
        lower = path.lower()
        for rule in self.deny:
            if rule.matches(method, host, path) or rule.matches(method, host, lower):
                return HttpDecision(False, _reason(DENY_FLAG, rule)), rule
        if not self.allow:
            return HttpDecision(True, f"no {DENY_FLAG} rule matches"), None
        for rule in self.allow:
            if rule.matches(method, host, path):
                return HttpDecision(True, _reason(ALLOW_FLAG, rule)), rule
        return HttpDecision(False, f"no {ALLOW_FLAG} rule matches"), None

    def auth_for(self, method: str, host: str, target: str) -> AuthRule | None:
        """The ``--http-auth`` rule whose credential an allowed request gets, if any."""
        if not self.auth:
            return None
        from ._credentials import first_auth
        return first_auth(self.auth, method, host, target)

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


def _reason(flag: str, rule: HttpRule) -> str:
    return f"{flag} {rule.text}"


def _is_ip(host: str) -> bool:
    return ":" in host or host.replace(".", "").isdigit()
