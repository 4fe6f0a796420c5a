"""Learn mode: what a command did (its audit log) -> the smallest rules allowing it. Pure.

``sandlock learn`` runs the command with the network open but observed (every TCP and
UDP destination allowed, every HTTP(S) request through the proxy with inspection)
and an audit log; ``learn`` turns that log into rules:

* connections outside the HTTP ports -> ``--net-allow`` rules, by pinned hostname when
  there is one (``tcp://api.example.com:22``), ports merged per host and protocol;
* HTTP(S) requests -> ``--http-allow`` rules per host: paths collapsed where ``collapse``
  or more siblings share a parent below the root (``/repos/a``, ``/repos/b``,
  ``/repos/c`` -> ``/repos/*``), the methods seen under each rule listed;
* ports the command listened on -> ``--net-allow-bind``.

Queries are never kept (rules do not match them), and path segments that look like
secrets (long random tokens) become ``*``: the policy file must not leak credentials.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

from .._record import field, record, replace
from ..policy import Policy

DEFAULT_COLLAPSE = 3
_HEX = re.compile(r"[0-9a-fA-F]{16,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]*)?")
# Prefixes of well-known API tokens: OpenAI/Anthropic, GitHub, GitLab, Slack, AWS, Google.
_TOKEN_PREFIX = re.compile(r"(sk-|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abposr]-|AKIA|ASIA|AIza)")


@record
class Learned:
    net_allow: tuple[str, ...] = ()
    net_bind: tuple[str, ...] = ()
    http_allow: tuple[str, ...] = ()


OBSERVE_ALL_HTTP = "* *"  # any method, any host, any path: every request is seen


def observing(base: Policy) -> Policy:
    """``base`` with the network open but observed: every destination allowed (unless
    --net-deny says otherwise), listening allowed, every HTTP(S) request through the
    proxy with inspection. Filesystem and process settings stay as given."""
    return replace(
        base,
        net_allow=() if base.net_deny else ("*",),
        net_bind=() if base.net_deny_bind else ("*",),  # (a denylist leaves the rest open)
        http_allow=(OBSERVE_ALL_HTTP,),
        https_inspect="on",
    )


def applied(learned: Learned, base: Policy) -> Policy:
    """``base`` plus the learned rules (network rules only in allow mode: --net-deny
    already leaves everything else open)."""
    return replace(
        base,
        net_allow=base.net_allow if base.net_deny else (*base.net_allow, *learned.net_allow),
        net_bind=base.net_bind if base.net_deny_bind else (*base.net_bind, *learned.net_bind),
        http_allow=(*base.http_allow, *learned.http_allow),
    )


def read_audit(lines: Iterable[str]) -> Iterator[dict]:
    """The records of an --audit file's lines (those that are not JSON objects skipped)."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def learn(records: Iterable[dict], collapse: int = DEFAULT_COLLAPSE) -> Learned:
    """Audit records (dicts, as in an --audit file) -> the rules that allow them."""
    endpoints: dict[tuple[str, str], set[int]] = defaultdict(set)
    bind_ports: set[int] = set()
    requests: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for entry in records:
        if entry.get("verdict") != "allow":
            continue  # redirected (DNS, proxy) or denied: not a destination to open
        if entry.get("protocol") == "http":
            _request(entry, requests)
        elif entry.get("syscall") in ("bind", "listen"):
            port = _port(entry.get("destination", ""))
            if port:
                bind_ports.add(port)
        elif entry.get("protocol") in ("tcp", "udp"):
            host, port = _target(entry)
            if host:
                endpoints[(entry["protocol"], host)].add(port)
    return Learned(
        net_allow=tuple(_net_rule(protocol, host, ports)
                        for (protocol, host), ports in sorted(endpoints.items())),
        net_bind=(",".join(map(str, sorted(bind_ports))),) if bind_ports else (),
        http_allow=tuple(rule for host, seen in sorted(requests.items())
                         for rule in _http_rules(host, seen, collapse)),
    )


# --- network -----------------------------------------------------------------------------


def _target(record: dict) -> tuple[str, int]:
    destination = str(record.get("destination", ""))
    hostname = record.get("hostname")
    host, _, port = destination.rpartition(":")
    return (str(hostname) if hostname else host), int(port or 0)


def _port(destination: str) -> int:
    _, _, port = str(destination).rpartition(":")
    return int(port) if port.isdigit() else 0


def _net_rule(protocol: str, host: str, ports: set[int]) -> str:
    return f"{protocol}://{host}:{','.join(map(str, sorted(ports)))}"


# --- HTTP --------------------------------------------------------------------------------


def _request(record: dict, requests: dict[str, list[tuple[str, str]]]) -> None:
    method, host, path = record.get("method"), record.get("hostname"), record.get("path")
    if not method or not host or not isinstance(path, str) or not path.startswith("/"):
        return  # a TLS-level record (pass-through, refusal): no request to learn
    if method in ("TLS", "TCP"):
        return
    requests[str(host)].append((str(method).upper(), path.split("?", 1)[0]))


def _http_rules(host: str, seen: list[tuple[str, str]], collapse: int) -> list[str]:
    """One rule per collapsed path pattern, with the methods used under it."""
    root = _Node()
    for method, path in seen:
        root.add(_segments(path), method)
    patterns: dict[str, set[str]] = defaultdict(set)
    for pattern, methods in root.patterns("", collapse):
        patterns[pattern] |= methods
    return [f"{','.join(sorted(methods))} {host}{pattern}" for pattern, methods in sorted(patterns.items())]


def _segments(path: str) -> list[str]:
    """A path's segments, each kept or ``*``: a secret, or bytes that are not UTF-8
    (a policy file is text)."""
    parts = path.split("/")[1:]
    return ["*" if looks_secret(part) or not _text(part) else part for part in parts]


def _text(segment: str) -> bool:
    try:
        segment.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: undecodable bytes of the request
        return False
    return True


@record(frozen=False)
class _Node:
    methods: set[str] = field(factory=set)  # requests ending here
    children: dict[str, _Node] = field(factory=dict)

    def add(self, segments: list[str], method: str) -> None:
        node = self
        for segment in segments:
            node = node.children.setdefault(segment, _Node())
        node.methods.add(method)

    def all_methods(self) -> set[str]:
        methods = set(self.methods)
        for child in self.children.values():
            methods |= child.all_methods()
        return methods

    def patterns(self, prefix: str, collapse: int) -> Iterable[tuple[str, set[str]]]:
        """(path pattern, methods): exact paths, or ``prefix/*`` where ``collapse`` or
        more children (or a secret, already ``*``) make the level a wildcard."""
        if self.methods:
            yield prefix or "/", set(self.methods)
        # Never at the root: "/*" would open the whole host to whatever comes next.
        wide = collapse > 0 and len(self.children) >= collapse and prefix != ""
        if "*" in self.children or wide:
            methods = set()
            for child in self.children.values():
                methods |= child.all_methods()
            yield f"{prefix}/*", methods
            return
        for name, child in sorted(self.children.items()):
            yield from child.patterns(f"{prefix}/{name}", collapse)


def looks_secret(segment: str) -> bool:
    """A path segment that is probably a credential or a random identifier. Checked on
    the segment and on its pieces between ``: = , ; @`` (``bot123:AAH...``): a known
    token prefix (``sk-``, ``ghp_``, ``xoxb-``, ``AKIA``...), a UUID, a JWT, a long hex
    string, or a run of letters and digits with the entropy of random text. Words,
    numbers, versions and file names are kept. When unsure, secret: the policy only
    gets a ``*`` for it."""
    pieces = [segment, *re.split(r"[:=,;@]", segment)]
    return any(_secret_piece(piece) for piece in pieces if piece)


def _secret_piece(piece: str) -> bool:
    if _TOKEN_PREFIX.match(piece) and len(piece) >= 12:
        return True
    if len(piece) < 16:
        return False
    if _UUID.fullmatch(piece) or _JWT.fullmatch(piece):
        return True
    if _HEX.fullmatch(piece) and not piece.isdigit():
        return True  # (a long number is an identifier, not a secret)
    # Random tokens have long runs without separators ("4fG7hJ9kL2mN5pQ8..."); names made
    # of words and versions ("flask-3.0.3-py3-none-any.whl") do not.
    run = max(re.findall(r"[A-Za-z0-9]+", piece), key=len, default="")
    mixed = any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
    if len(run) >= 20 and mixed and _entropy(run) >= 3.5:
        return True
    # Characters a name rarely has, mixed with digits: a password ("p4ssw0rd!Secret99").
    return bool(re.search(r"[!$*'()+~]", piece)) and any(c.isdigit() for c in piece)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())
