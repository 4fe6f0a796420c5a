"""The sandbox policy: one immutable, validated value shared by the CLI and the API.

Every field carries the command-line option it comes from (``field.metadata["flag"]``)
so that an error raised here names what the user typed, and its key in a policy file
(``metadata["key"]``, ``section.name``; see ``_schema`` and docs/policy.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .._errors import PolicyError

DEFAULT_HTTP_PORTS = (80, 443)
HTTPS_INSPECT_MODES = ("auto", "on", "off")


def _flag(name: str, key: str, *, path: bool = False, **kwargs: object) -> object:
    """A field set by option ``name`` and, in a policy file, by ``key``. ``path``: a file
    path, which a policy file may give relative to its own directory."""
    return field(metadata={"flag": name, "key": key, "path": path}, **kwargs)


@dataclass(frozen=True)
class Policy:
    """What a sandboxed command may do.

    Filesystem: with no ``fs_read``/``fs_write`` the default workspace applies (read
    everything but credential stores, write the current directory, /tmp and the usual
    devices); with any of them, nothing else is reachable. ``fs_deny`` always wins.
    """

    fs_read: tuple[str, ...] = _flag("--fs-read", "filesystem.read", path=True, default=())
    fs_write: tuple[str, ...] = _flag("--fs-write", "filesystem.write", path=True, default=())
    fs_deny: tuple[str, ...] = _flag("--fs-deny", "filesystem.deny", path=True, default=())
    allow_ipc: bool = _flag("--allow-ipc", "confinement.allow_ipc", default=False)
    allow_syscalls: tuple[str, ...] = _flag("--allow-syscall", "confinement.allow_syscalls",
                                            default=())
    env: tuple[tuple[str, str], ...] = _flag("--env", "process.env", default=())
    clean_env: bool = _flag("--clean-env", "process.clean_env", default=False)
    cwd: str | None = _flag("--cwd", "process.cwd", path=True, default=None)
    timeout: float | None = _flag("--timeout", "process.timeout", default=None)
    best_effort: bool = _flag("--best-effort", "confinement.best_effort", default=False)
    # Network: by default nothing. Specs are kept as written (validated here, compiled
    # by the network engine) so that a policy prints back the way it was given.
    net_allow: tuple[str, ...] = _flag("--net-allow", "network.allow", default=())
    net_deny: tuple[str, ...] = _flag("--net-deny", "network.deny", default=())
    net_allow_bind: tuple[str, ...] = _flag("--net-allow-bind", "network.allow_bind", default=())
    unix_allow: tuple[str, ...] = _flag("--unix-allow", "network.unix_allow", path=True, default=())
    dns_servers: tuple[str, ...] = _flag("--dns-server", "network.dns_servers", default=())
    resolve: tuple[str, ...] = _flag("--resolve", "network.resolve", default=())
    dns_allow_private: bool = _flag("--dns-allow-private", "network.dns_allow_private",
                                    default=False)
    # HTTP: rules as written (validated here, compiled by the proxy), the ports they
    # govern, and how HTTPS is handled (see docs/http.md).
    http_allow: tuple[str, ...] = _flag("--http-allow", "http.allow", default=())
    http_deny: tuple[str, ...] = _flag("--http-deny", "http.deny", default=())
    http_ports: tuple[int, ...] = _flag("--http-port", "http.ports", default=DEFAULT_HTTP_PORTS)
    https_inspect: str = _flag("--https-inspect", "http.inspect", default="auto")
    upstream_ca: tuple[str, ...] = _flag("--upstream-ca", "http.upstream_ca", path=True, default=())
    http_ca: str | None = _flag("--http-ca", "ca.cert", path=True, default=None)
    http_key: str | None = _flag("--http-key", "ca.key", path=True, default=None)
    ca_env: bool = _flag("--no-ca-env", "ca.env", default=True)
    http_ca_out: str | None = _flag("--http-ca-out", "ca.out", path=True, default=None)

    def __post_init__(self) -> None:
        # Frozen: normalised values are stored through object.__setattr__, once, here.
        for name, normalise in _NORMALISERS.items():
            object.__setattr__(self, name, normalise(name, getattr(self, name)))
        if self.net_allow and self.net_deny:
            raise PolicyError("net_deny", "cannot be combined with --net-allow (choose an "
                              "allowlist or a denylist)")
        if (self.http_ca is None) != (self.http_key is None):
            missing = "http_key" if self.http_key is None else "http_ca"
            raise PolicyError(missing, "--http-ca and --http-key go together (give both)")
        if self.http_ca is not None:
            _check_user_ca(self.http_ca, self.http_key)

    @property
    def uses_default_workspace(self) -> bool:
        return not self.fs_read and not self.fs_write

    @property
    def has_http_rules(self) -> bool:
        return bool(self.http_allow or self.http_deny)


def _strings(name: str, values: object) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise PolicyError(name, f"expected a list of strings, got {values!r}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str) or not item:
            raise PolicyError(name, f"expected a non-empty string, got {item!r}")
    return items


def _absolute_paths(name: str, values: object) -> tuple[str, ...]:
    # realpath: Landlock and the deny expansion compare real locations, not spellings.
    unique = dict.fromkeys(os.path.realpath(p) for p in _strings(name, values))
    return tuple(unique)


def _existing_paths(name: str, values: object) -> tuple[str, ...]:
    for given in _strings(name, values):
        if not os.path.exists(given):
            raise PolicyError(name, f"{given}: no such file or directory")
    return _absolute_paths(name, values)


def _directory(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PolicyError(name, f"expected a directory path, got {value!r}")
    path = os.path.realpath(value)
    if not os.path.isdir(path):
        raise PolicyError(name, f"{value}: not a directory")
    return path


def _timeout(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise PolicyError(name, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(name, f"expected true or false, got {value!r}")
    return value


def _env_pairs(name: str, value: object) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise PolicyError(name, f"expected a mapping or K=V strings, got {value!r}")
    pairs: dict[str, str] = {}
    for item in items:
        if isinstance(item, str):
            key, sep, val = item.partition("=")
            if not sep:
                raise PolicyError(name, f"{item!r}: expected K=V")
        else:
            key, val = item
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise PolicyError(name, f"invalid variable name {key!r}")
        if not isinstance(val, str) or "\0" in val:
            raise PolicyError(name, f"invalid value for {key}")
        pairs[key] = val
    return tuple(pairs.items())


def _waivers(name: str, value: object) -> tuple[str, ...]:
    from ..kernel import WAIVABLE  # the seccomp module owns the list of rules

    syscalls = _strings(name, value)
    for syscall in syscalls:
        if syscall not in WAIVABLE:
            raise PolicyError(
                name,
                f"{syscall!r} is not a syscall sandlock restricts "
                f"(one of: {', '.join(sorted(WAIVABLE))})",
            )
    return tuple(dict.fromkeys(syscalls))


def _specs(parse_name: str) -> object:
    """A normaliser checking each spec with ``net.<parse_name>`` (kept as written)."""

    def normalise(name: str, value: object) -> tuple[str, ...]:
        specs = tuple(dict.fromkeys(s.strip() for s in _strings(name, value)))
        if not specs:
            return specs
        from .. import net  # its grammar: only imported by runs with network options

        _each_parses(name, specs, getattr(net, parse_name))
        return specs

    return normalise


def _each_parses(name: str, items: tuple[str, ...], parse: Callable[[str], object]) -> None:
    """Kept as written, but each must parse: PolicyError naming the item otherwise."""
    for item in items:
        try:
            parse(item)
        except ValueError as exc:
            raise PolicyError(name, f"{item!r}: {exc}") from None


def _check_user_ca(cert: str, key: str) -> None:
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


def _http_rules(name: str, value: object) -> tuple[str, ...]:
    rules = tuple(dict.fromkeys(" ".join(r.split()) for r in _strings(name, value)))
    if not rules:
        return rules
    from ..proxy import (
        parse_rule,  # pure rules only: mitmproxy stays out of this process
    )

    _each_parses(name, rules, parse_rule)
    return rules


def _ports(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise PolicyError(name, f"expected a list of ports, got {value!r}")
    ports: dict[int, None] = {}
    for item in value:
        try:
            port = int(item, 10) if isinstance(item, str) else item
        except ValueError:
            port = None
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise PolicyError(name, f"{item!r}: expected a port number from 1 to 65535")
        ports[port] = None
    if not ports:
        raise PolicyError(name, "expected at least one port")
    return tuple(ports)


def _choice(choices: tuple[str, ...]) -> object:
    def normalise(name: str, value: object) -> str:
        if value not in choices:
            raise PolicyError(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return normalise


def _existing_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PolicyError(name, f"expected a file path, got {value!r}")
    if not os.path.isfile(value):
        raise PolicyError(name, f"{value}: no such file")
    return os.path.realpath(value)


def _existing_files(name: str, values: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_existing_file(name, v) for v in _strings(name, values)))


def _output_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PolicyError(name, f"expected a file path, got {value!r}")
    path = os.path.abspath(value)
    if not os.path.isdir(os.path.dirname(path)):
        raise PolicyError(name, f"{value}: its directory does not exist")
    return path


def _socket_paths(name: str, value: object) -> tuple[str, ...]:
    paths = _strings(name, value)
    for path in paths:
        if not os.path.isabs(path):
            raise PolicyError(name, f"{path}: expected an absolute path")
    return _absolute_paths(name, paths)


_NORMALISERS = {
    "fs_read": _existing_paths,
    "fs_write": _existing_paths,
    "fs_deny": _absolute_paths,
    "allow_ipc": _boolean,
    "allow_syscalls": _waivers,
    "env": _env_pairs,
    "clean_env": _boolean,
    "cwd": _directory,
    "timeout": _timeout,
    "best_effort": _boolean,
    "net_allow": _specs("parse_allow"),
    "net_deny": _specs("parse_deny"),
    "net_allow_bind": _specs("parse_ports"),
    "unix_allow": _socket_paths,
    "dns_servers": _specs("parse_dns_server"),
    "resolve": _specs("parse_resolve"),
    "dns_allow_private": _boolean,
    "http_allow": _http_rules,
    "http_deny": _http_rules,
    "http_ports": _ports,
    "https_inspect": _choice(HTTPS_INSPECT_MODES),
    "upstream_ca": _existing_files,
    "http_ca": _existing_file,
    "http_key": _existing_file,
    "ca_env": _boolean,
    "http_ca_out": _output_file,
}


# Errors about what is not a Policy field but a Sandbox setting or argument.
_OTHER_FLAGS = {"audit": "--audit", "argv": "COMMAND", "pass_fds": "--pass-fd"}


def flag_of(field_name: str) -> str:
    """The command-line option that sets ``field_name`` (for error messages)."""
    field = Policy.__dataclass_fields__.get(field_name)
    if field is not None:
        return field.metadata["flag"]
    return _OTHER_FLAGS.get(field_name, field_name)


def check_field(field_name: str, value: object) -> None:
    """Validate one field's value on its own (PolicyError if invalid): what Policy checks
    of that field, without the checks that relate fields to each other. Lets a policy
    file point at the line of a bad value before the sources are merged."""
    _NORMALISERS[field_name](field_name, value)
