"""Credential rules: ``METHODS HOST[/PATH] SCHEME NAME`` (``--http-auth``). Pure: no I/O.

A request that the allow/deny rules let through, and that matches an auth rule, gets
one header set by the proxy from the credential NAME (a secret the command never
holds): ``bearer`` -> ``Authorization: Bearer <secret>``; ``basic`` (the secret is
``user:password``) -> ``Authorization: Basic <base64>``; ``header:Name`` -> ``Name:
<secret>``. An auth rule allows nothing by itself.

Secrets never appear in what this module says: errors name the credential, not its value.
"""

from __future__ import annotations

from .._grammar import words
from .._record import record
from ._paths import UnclearPath, readings
from ._rules import HttpRule, host_matches, named_methods, normalise_host, parse_rule

BEARER, BASIC, HEADER = "bearer", "basic", "header"
AUTHORIZATION = "Authorization"
AUTH_FLAG = "--http-auth"
USAGE = "expected 'METHODS HOST[/PATH] SCHEME NAME', e.g. 'POST api.openai.com/* bearer openai'"

# RFC 9110 token characters (header names); character sets, not `re` (see _rules).
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_TOKEN_CHARS = _ALNUM | frozenset("!#$%&'*+-.^_`|~")
_NAME_CHARS = _ALNUM | frozenset("_-.")
# Headers that frame the message or the connection, or name the host: a credential set
# there would change what the request is, not who sends it.
_FORBIDDEN = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive",
    "proxy-connection", "te", "trailer", "upgrade",
})


@record
class AuthRule:
    """One parsed ``--http-auth`` rule. ``header``: the header set (as written)."""

    text: str
    match: HttpRule
    scheme: str  # BEARER | BASIC | HEADER
    header: str
    credential: str  # the credential's NAME

    def covers(self, method: str, host: str) -> bool:
        """Could a request with this method to this host match (whatever its path)?"""
        methods = self.match.methods
        return (methods is None or method in methods) and host_matches(self.match.host, host)

    def matches(self, method: str, host: str, paths: tuple[str, ...]) -> bool:
        """``method`` upper-case, ``host`` normalised, ``paths``: every reading."""
        return all(self.match.matches(method, host, path) for path in paths)


def parse_auth_rule(text: str) -> AuthRule:
    """``METHODS HOST[/PATH] SCHEME NAME`` -> AuthRule; ValueError says what is wrong."""
    parts = words(text)
    if len(parts) != 4:
        raise ValueError(USAGE)
    methods, target, scheme_text, name = parts
    match = parse_rule(f"{methods} {target}")
    scheme, header = _scheme(scheme_text)
    if not set(name) <= _NAME_CHARS:
        raise ValueError(f"{name!r}: a credential name is letters, digits, '_', '-' and '.'")
    shown = f"{HEADER}:{header}" if scheme == HEADER else scheme
    return AuthRule(text=f"{match.text} {shown} {name}", match=match, scheme=scheme,
                    header=header, credential=name)


def _scheme(text: str) -> tuple[str, str]:
    lower = text.lower()
    if lower in (BEARER, BASIC):
        return lower, AUTHORIZATION
    if not lower.startswith(HEADER + ":"):
        raise ValueError(f"{text!r}: unknown scheme (use 'bearer', 'basic' or 'header:NAME')")
    header = text[len(HEADER) + 1:]
    if header.startswith(":"):
        raise ValueError(f"{header!r}: pseudo-headers cannot carry a credential")
    if not header or not set(header) <= _TOKEN_CHARS:
        raise ValueError(f"{header!r}: not a valid header name")
    if header.lower() in _FORBIDDEN:
        raise ValueError(f"{header!r}: this header cannot carry a credential")
    return HEADER, header


def header_value(rule: AuthRule, secret: str) -> str:
    """The header's value for ``secret``. ValueError (naming the credential, never
    showing the secret) when the secret cannot be sent as this scheme says."""
    if not secret:
        raise ValueError(f"credential {rule.credential!r} is empty")
    if rule.scheme == BASIC:
        if ":" not in secret:
            raise ValueError(f"credential {rule.credential!r}: 'basic' needs 'user:password'")
        from base64 import b64encode

        return "Basic " + b64encode(secret.encode()).decode()
    # Sent as is: no byte may end the header (CR, LF: header injection) or be ambiguous.
    if not secret.isascii() or not all(" " <= c < "\x7f" for c in secret) or secret != secret.strip():
        raise ValueError(f"credential {rule.credential!r}: only printable ASCII, without "
                         "spaces at either end, can be sent in a header")
    return "Bearer " + secret if rule.scheme == BEARER else secret


def first_auth(rules: tuple[AuthRule, ...], method: str, host: str, target: str,
               overrides: tuple[tuple[str, str], ...] = ()) -> AuthRule | None:
    """The first rule matching the request on every path it could mean (None for a
    refused one) and every method it names (``_rules.named_methods``): a credential goes
    only where each reading of the path, and each method a server may act on, is covered."""
    host = normalise_host(host)
    methods = [named for _, named in named_methods(method, target, overrides)]
    candidates = [rule for rule in rules if all(rule.covers(named, host) for named in methods)]
    if not candidates:  # the common case, and cheap: the path is not read again
        return None
    try:
        paths = readings(target)
    except UnclearPath:
        return None
    return next((rule for rule in candidates if rule.matches(methods[0], host, paths)), None)


def plain_refusal(rule: AuthRule) -> str:
    """Why a request matching ``rule`` over plain HTTP is denied."""
    return f"{AUTH_FLAG} {rule.text}: a credential is sent over TLS only (plain HTTP refused)"
