"""The values of Policy's fields: one check (and normalisation) per kind of value,
named in ``_policy``'s table of fields. A check takes the field's name (for its
PolicyError) and the value given, and returns the value Policy stores.
"""

from __future__ import annotations

import os

# collections.abc's own classes, from the module that defines them: importing
# collections.abc imports collections (~1 ms of start-up).
from _collections_abc import Iterable, Mapping

from .._errors import PolicyError

# Where select() and Condition.wait() still count (time.monotonic() + this stays exact to
# the microsecond); beyond it, -t 1e10 passed validation and made run fail after starting
# the command. Code polling with a remaining time in milliseconds (a C int: 24.8 days)
# clamps it (api._pipeline).
MAX_TIMEOUT = 1_000_000_000
MAX_PROCESSES = 1 << 22  # the kernel's PID_MAX_LIMIT: no more processes can exist at once

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def strings(name: str, values: object) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise PolicyError(name, f"expected a list of strings, got {_shown(values)}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str) or not item or "\0" in item:
            raise PolicyError(name, f"expected a non-empty string without NUL, got {_shown(item)}")
    return items


def absolute_paths(name: str, values: object) -> tuple[str, ...]:
    # realpath: Landlock and the deny expansion compare real locations, not spellings.
    unique = dict.fromkeys(os.path.realpath(p) for p in strings(name, values))
    return tuple(unique)


def existing_paths(name: str, values: object) -> tuple[str, ...]:
    for given in strings(name, values):
        if not os.path.exists(given):
            raise PolicyError(name, f"{given}: no such file or directory")
    return absolute_paths(name, values)


def directory(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected a directory path, got {_shown(value)}")
    path = os.path.realpath(value)
    if not os.path.isdir(path):
        raise PolicyError(name, f"{value}: {'not a' if os.path.exists(path) else 'no such'} directory")
    return path


def timeout(name: str, value: object) -> float | None:
    """Seconds, more than 0 and at most MAX_TIMEOUT (NaN and infinities refused by the
    same comparison; a huge int compared, never converted)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a number of seconds, got {_shown(value)}")
    if not 0 < value <= MAX_TIMEOUT:
        raise PolicyError(name, f"must be more than 0 seconds and at most {MAX_TIMEOUT} "
                          f"(about 31 years), got {_shown(value)}")
    return float(value)


def boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(name, f"expected true or false, got {_shown(value)}")
    return value


class Environment(Mapping[str, "str | None"]):
    """The variables a Policy sets, in the order given: an immutable mapping (hashable,
    like the rest of a frozen Policy); ``Policy(env={"LANG": "C.UTF-8"})``. A value of
    None passes the variable from sandlock's own environment (``--env NAME``), so that
    a secret never appears in sandlock's argv, a policy file or --print-policy."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = dict(items)

    def __getitem__(self, name: str) -> str | None:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Environment({self._items!r})"


def environment(name: str, value: object) -> Environment:
    """A mapping, or a sequence of ``K=V`` strings, ``NAME`` strings (passed from
    sandlock's environment) or (K, V) pairs (as --env gives them)."""
    items = value.items() if isinstance(value, Mapping) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise PolicyError(name, f"expected a mapping or K=V strings, got {_shown(value)}")
    pairs: dict[str, str | None] = {}
    for item in items:
        if isinstance(item, str):
            key, sep, val = item.partition("=")
            val = val if sep else None  # NAME: from sandlock's environment
        elif isinstance(item, tuple) and len(item) == 2:
            key, val = item
        else:
            raise PolicyError(name, f"{_shown(item)}: expected K=V")
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise PolicyError(name, f"invalid variable name {_shown(key)}")
        if val is not None and (not isinstance(val, str) or "\0" in val):
            raise PolicyError(name, f"invalid value for {key}")
        pairs[key] = val
    return Environment(pairs.items())


def waivers(name: str, value: object) -> tuple[str, ...]:
    from ..kernel import WAIVABLE  # the seccomp module owns the list of rules

    syscalls = strings(name, value)
    for syscall in syscalls:
        if syscall not in WAIVABLE:
            raise PolicyError(
                name,
                f"{syscall!r} is not a syscall sandlock restricts "
                f"(one of: {', '.join(sorted(WAIVABLE))})",
            )
    return tuple(dict.fromkeys(syscalls))


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


def each_parses(name: str, items: tuple[str, ...], parse: Callable[[str], object]) -> None:
    """Kept as written, but each must parse: PolicyError naming the item otherwise."""
    for item in items:
        try:
            parse(item)
        except ValueError as exc:
            raise PolicyError(name, f"{_shown(item)}: {exc}") from None


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


def ports(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise PolicyError(name, f"expected a list of ports, got {_shown(value)}")
    ports: dict[int, None] = {}
    for item in value:
        port = _port(item)
        if port is None:
            raise PolicyError(name, f"{_shown(item)}: expected a port number from 1 to 65535")
        ports[port] = None
    if not ports:
        raise PolicyError(name, "expected at least one port")
    return tuple(ports)


def _port(item: object) -> int | None:
    """A port given as an int or as text (the option's; ASCII digits), else None."""
    if isinstance(item, str):
        from .._grammar import whole  # (text only from --http-port)

        try:
            item = whole(item, 65535)
        except ValueError:
            return None
    if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 65535:
        return None
    return item


def choice(choices: tuple[str, ...]) -> object:
    def normalise(name: str, value: object) -> str:
        if value not in choices:
            raise PolicyError(name, f"expected one of {', '.join(choices)}, got {_shown(value)}")
        return value

    return normalise


def existing_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected a file path, got {_shown(value)}")
    if not os.path.isfile(value):
        raise PolicyError(name, f"{value}: no such file")
    return os.path.realpath(value)


def existing_files(name: str, values: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(existing_file(name, v) for v in strings(name, values)))


def output_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected a file path, got {_shown(value)}")
    path = os.path.abspath(value)
    if not os.path.isdir(os.path.dirname(path)):
        raise PolicyError(name, f"{value}: its directory does not exist")
    from .._hostfile import Output  # (only policies that write a file load it)

    try:  # refused now, not once the run is set up; written by replacing, never through a link
        Output(path).close()
    except OSError as exc:
        raise PolicyError(name, f"cannot write {value}: {exc.strerror}") from None
    return path


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
        raise PolicyError(name, f"expected a list of ports, got {_shown(value)}")
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


def isolated(name: str, value: object) -> bool:
    """isolate_ipc / isolate_signals: always true in sandlock; allow_ipc relaxes both."""
    if boolean(name, value) is not True:
        raise PolicyError(name, "IPC and signals are always isolated; allow_ipc relaxes "
                          "both (--allow-ipc)")
    return True


def size(name: str, value: object) -> object:
    """A size ("512M", or bytes) as a ``limits.Size``; None: no limit."""
    return _sized(name, value, "parse_size")


def memory_size(name: str, value: object) -> object:
    """max_memory: a size, never a bare number below 1 MiB (``-m 10`` is not 10 bytes)."""
    return _sized(name, value, "parse_memory_size")


def _sized(name: str, value: object, parser: str) -> object:
    if value is None:
        return None
    from .. import limits

    try:
        return getattr(limits, parser)(value)
    except ValueError as exc:
        raise PolicyError(name, str(exc)) from None


def process_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PROCESSES:
        raise PolicyError(name, f"expected a number of processes from 0 (no cap) to "
                          f"{MAX_PROCESSES}, got {_shown(value)}")
    return value


def cpu_share(name: str, value: object) -> float | None:
    """Percent of one CPU, for the sandbox as a whole: at most 100 per CPU it may use."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a percentage of one CPU, got {_shown(value)}")
    most = 100 * len(os.sched_getaffinity(0))
    if not 0 < value <= most:  # (NaN, infinities and huge ints too, compared unconverted)
        raise PolicyError(name, f"must be more than 0 and at most {most} (100 per CPU), "
                          f"got {_shown(value)}")
    return float(value)


def cpu_list(name: str, value: object) -> tuple[int, ...]:
    if value in ((), [], None):
        return ()
    from ..limits import parse_cpu_list

    try:
        return parse_cpu_list(value)
    except ValueError as exc:
        raise PolicyError(name, str(exc)) from None


def open_files(name: str, value: object) -> int | None:
    """RLIMIT_NOFILE: at least 1, at most what sandlock itself may raise it to."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PolicyError(name, "expected a number of descriptors (1 or more), "
                          f"got {_shown(value)}")
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and value > hard:
        raise PolicyError(name, f"{_shown(value)} is above this session's hard limit ({hard})")
    return value


def _shown(value: object) -> str:
    from .._grammar import shown  # (errors only)

    return shown(value)


def image_reference(name: str, value: object) -> str | None:
    """--image: a local OCI layout or `docker save` tarball (checked by ``sandlock.image``,
    loaded only by policies that name one)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected an image reference, got {_shown(value)}")
    from ..image import ImageError, locate

    try:
        return locate(value).reference
    except ImageError as exc:
        raise PolicyError(name, str(exc)) from None
