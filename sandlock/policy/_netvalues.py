"""The values of the network and HTTP fields (``_values``' kind of checks): rules
kept as written but each parsed by its grammar (``netrules``, the proxy's rules), port
lists, sockets, and the CA a user brings. Only policies setting one load this module
(``_values.checked_by``).
"""

from __future__ import annotations

import os

from _collections_abc import Iterable

from .._errors import PolicyError
from ._values import absolute_paths, shown, strings

TYPE_CHECKING = False  # typing costs ~5 ms to import
if TYPE_CHECKING:
    from collections.abc import Callable


def specs(parse_name: str) -> object:
    """A normaliser checking each spec with ``netrules.<parse_name>`` (kept as written)."""

    def normalise(name: str, value: object) -> tuple[str, ...]:
        given = strings(name, value)
        if not given:
            return given
        from .. import netrules  # its grammar: only imported by runs with network options
        from .._grammar import BLANKS

        # Spaces and tabs only: str.strip() would drop U+2028 too, and "\u2028*" became "*".
        specs = tuple(dict.fromkeys(s.strip(BLANKS) for s in given))

        each_parses(name, specs, getattr(netrules, parse_name))
        return specs

    return normalise


allow_rules = specs("read_allow")
deny_rules = specs("read_deny")
dns_servers = specs("read_dns_server")
resolve_entries = specs("read_resolve")


def each_parses(name: str, items: tuple[str, ...], parse: Callable[[str], object]) -> None:
    """Kept as written, but each must parse: PolicyError naming the item otherwise."""
    for item in items:
        try:
            parse(item)
        except ValueError as exc:
            raise PolicyError(name, f"{shown(item)}: {exc}") from None


def check_user_ca(cert: str, key: str) -> None:
    """A CA the user brings must be usable (readable, a CA, matching, valid) before
    anything starts: its problems are bad input, not a failed run."""
    from ..ca import (  # cryptography: only for runs given --http-ca
        CAError,
        load_user_ca,
    )

    try:
        load_user_ca(cert, key)
    except CAError as exc:
        raise PolicyError("http_ca", str(exc)) from None


def http_rules(name: str, value: object) -> tuple[str, ...]:
    given = strings(name, value)
    if not given:
        return given
    from .._grammar import spaced  # (invisible characters kept, for parse_rule to refuse)
    from ..proxy import (
        parse_rule,  # pure rules only: mitmproxy stays out of this process
    )

    rules = tuple(dict.fromkeys(map(spaced, given)))

    each_parses(name, rules, parse_rule)
    return rules


def socket_paths(name: str, value: object) -> tuple[str, ...]:
    paths = strings(name, value)
    for path in paths:
        if not os.path.isabs(path):
            raise PolicyError(name, f"{path}: expected an absolute path")
    return absolute_paths(name, paths)


def port_specs(name: str, value: object) -> tuple[str, ...]:
    """Port lists (--net-bind, --net-connect): ``8080``, ``"8000-8100"``, ``"*"``;
    integers are kept as their text."""
    if isinstance(value, (str, bytes, int)) or not isinstance(value, Iterable):
        raise PolicyError(name, f"expected a list of ports, got {shown(value)}")
    items = []
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        items.append(item)
    return specs("parse_ports")(name, items)


def denied_ports(name: str, value: object) -> tuple[str, ...]:
    """--net-deny-bind's ports: a port list, where '*' (every port: no bind at all)
    stands alone, as upstream Sandlock checks it."""
    checked = port_specs(name, value)
    if "*" in checked and len(checked) > 1:
        raise PolicyError(name, "'*' cannot be mixed with ports (it denies every port)")
    return checked


def hosts(name: str, value: object) -> tuple[str, ...]:
    """Hosts reached on every port (--net-allow-host): a name or an address, no scheme,
    no ports, not '*'."""
    checked = specs("read_allow")(name, value)
    from .. import netrules

    for host in checked:
        rule = netrules.read_allow(host)
        if "://" in host or rule.any_host or not rule.ports.all:
            raise PolicyError(name, f"{host!r}: expected a host name or address alone "
                              "(ports and schemes go in --net-allow)")
    return checked
