"""The values of Policy's fields: one check (and normalisation) per kind of value, and
CHECKS, each field's. A check takes the field's name (for its PolicyError) and the
value given, and returns the value Policy stores. The checks of fields a plain run
leaves at their default live in modules only policies setting one load (``checked_by``:
_netvalues, _limitvalues, _credentials, _hardening, _determinism, _seedchecks).
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

    Check = Callable[[str, object], object]


def strings(name: str, values: object) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise PolicyError(name, f"expected a list of strings, got {shown(values)}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str) or not item or "\0" in item:
            raise PolicyError(name, f"expected a non-empty string without NUL, got {shown(item)}")
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
        raise PolicyError(name, f"expected a directory path, got {shown(value)}")
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
        raise PolicyError(name, f"expected a number of seconds, got {shown(value)}")
    if not 0 < value <= MAX_TIMEOUT:
        raise PolicyError(name, f"must be more than 0 seconds and at most {MAX_TIMEOUT} "
                          f"(about 31 years), got {shown(value)}")
    return float(value)


def boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(name, f"expected true or false, got {shown(value)}")
    return value


def boolean_or_automatic(name: str, value: object) -> bool | None:
    """True, False, or None: sandlock decides (net_private_loopback)."""
    return None if value is None else boolean(name, value)


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
        raise PolicyError(name, f"expected a mapping or K=V strings, got {shown(value)}")
    pairs: dict[str, str | None] = {}
    for item in items:
        if isinstance(item, str):
            key, sep, val = item.partition("=")
            val = val if sep else None  # NAME: from sandlock's environment
        elif isinstance(item, tuple) and len(item) == 2:
            key, val = item
        else:
            raise PolicyError(name, f"{shown(item)}: expected K=V")
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise PolicyError(name, f"invalid variable name {shown(key)}")
        if val is not None and (not isinstance(val, str) or "\0" in val):
            raise PolicyError(name, f"invalid value for {key}")
        pairs[key] = val
    return Environment(pairs.items())


def ports(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise PolicyError(name, f"expected a list of ports, got {shown(value)}")
    ports: dict[int, None] = {}
    for item in value:
        port = _port(item)
        if port is None:
            raise PolicyError(name, f"{shown(item)}: expected a port number from 1 to 65535")
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
            raise PolicyError(name, f"expected one of {', '.join(choices)}, got {shown(value)}")
        return value

    return normalise


def existing_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected a file path, got {shown(value)}")
    if not os.path.isfile(value):
        raise PolicyError(name, f"{value}: no such file")
    return os.path.realpath(value)


def existing_files(name: str, values: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(existing_file(name, v) for v in strings(name, values)))


def output_file(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected a file path, got {shown(value)}")
    path = os.path.abspath(value)
    if not os.path.isdir(os.path.dirname(path)):
        raise PolicyError(name, f"{value}: its directory does not exist")
    from .._hostfile import Output  # (only policies that write a file load it)

    try:  # refused now, not once the run is set up; written by replacing, never through a link
        Output(path).close()
    except OSError as exc:
        raise PolicyError(name, f"cannot write {value}: {exc.strerror}") from None
    return path


def isolated(name: str, value: object) -> bool:
    """isolate_ipc / isolate_signals: always true in sandlock; allow_ipc relaxes both."""
    if boolean(name, value) is not True:
        raise PolicyError(name, "IPC and signals are always isolated; allow_ipc relaxes "
                          "both (--allow-ipc)")
    return True


def process_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PROCESSES:
        raise PolicyError(name, f"expected a number of processes from 0 (no cap) to "
                          f"{MAX_PROCESSES}, got {shown(value)}")
    return value


def shown(value: object) -> str:
    """``value`` as an error shows it (``_grammar``: imported for errors only)."""
    from .. import _grammar

    return _grammar.shown(value)


def image_reference(name: str, value: object) -> str | None:
    """--image: a local OCI layout or `docker save` tarball, or a registry reference
    (checked by ``sandlock.image``, loaded only by policies that name one; a registry's
    is kept in its canonical spelling, ``docker.io/library/alpine:latest``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise PolicyError(name, f"expected an image reference, got {shown(value)}")
    from ..image import ImageError, locate

    try:
        return locate(value).reference
    except ImageError as exc:
        raise PolicyError(name, str(exc)) from None


# The values a choice field takes. LocalGPT's modes: the default workspace; the same
# reads and no writes; no confinement.
MODES = ("workspace-write", "read-only", "full-access")
# What becomes of a copy-on-write workspace's changes when the run ends.
WORKSPACE_ACTIONS = ("commit", "abort", "keep")
# Upstream Sandlock's names (docs/api.md): at the memory limit, the sandbox is killed
# (kill) or each process's allocation past it fails with ENOMEM (refuse); how a
# workdir is isolated (NONE: as the workdir decides, i.e. overlayfs).
MEMORY_MODES = ("kill", "refuse")
FS_ISOLATIONS = ("none", "overlayfs", "branchfs")
HTTPS_INSPECT_MODES = ("auto", "on", "off")
MAX_UPSTREAM_TIMEOUT = 86400.0  # a day (the default is _policy.DEFAULT_UPSTREAM_TIMEOUT)
_UPSTREAM = __name__.rpartition(".")[0] + "._upstream"


def member_of(choices: tuple[str, ...]) -> Check:
    """A choice given as its string or as upstream's enum member (``_upstream``)."""
    plain = choice(choices)

    def normalise(name: str, value: object) -> object:
        if type(value).__module__ == _UPSTREAM:
            value = value.value  # type: ignore[attr-defined]
        return plain(name, value)

    return normalise


def _upstream_timeout(name: str, value: object) -> float:
    """Seconds, more than 0 and at most a day: one message for every value out of it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a number of seconds, got {value!r}")
    if not 0 < value <= MAX_UPSTREAM_TIMEOUT:  # NaN and the infinities fail this comparison too
        raise PolicyError(name, f"must be more than 0 seconds and at most {MAX_UPSTREAM_TIMEOUT:g}, "
                          f"got {value!r}")
    return float(value)


def _none(value: object) -> bool:
    return value is None


def _empty(value: object) -> bool:  # a tuple field's default (a list is still checked)
    return value == ()


def _none_or_empty(value: object) -> bool:
    return value is None or value == ()


def _falsy(value: object) -> bool:
    return not value


def _as_given(name: str, value: object) -> object:
    return value


def _nothing(name: str, value: object) -> tuple[()]:
    return ()


def checked_by(module: str, function: str, unset: Callable[[object], bool] = _none,
               default: Check = _as_given) -> Check:
    """A field checked by ``function`` of ``module``, which only policies setting the
    field load: a value ``unset`` says is the field's default goes to ``default``
    instead (kept as it is unless told), and nothing is imported."""

    def normalise(name: str, value: object) -> object:
        if unset(value):
            return default(name, value)
        # The import statement's machinery (importlib would be ~1 ms more of imports).
        checker = __import__(f"{__package__}.{module}", fromlist=(function,))
        return getattr(checker, function)(name, value)

    return normalise


# Each field's check: run in this order by Policy, one at a time by check_field (a
# policy file's line).
CHECKS: dict[str, Check] = {
    "fs_readable": existing_paths,
    "fs_writable": existing_paths,
    "fs_denied": absolute_paths,
    "mode": choice(MODES),
    "allow_ipc": boolean,
    "isolate_ipc": isolated,
    "isolate_signals": isolated,
    "allow_syscalls": checked_by("_hardening", "waivers", _empty),
    "allow_sysv_ipc": boolean,
    "allow_autorun_writes": boolean,
    "env": environment,
    "clean_env": boolean,
    "cwd": directory,
    "timeout": timeout,
    "announce": boolean,
    "best_effort": boolean,
    "allow_degraded": checked_by("_hardening", "protections", _none_or_empty),
    "disable": checked_by("_hardening", "protections", _none_or_empty),
    "deny_syscalls": checked_by("_hardening", "deny_list", _none_or_empty),
    "extra_deny_syscalls": checked_by("_hardening", "syscall_names", _none_or_empty),
    "user": checked_by("_hardening", "user_ids", _none_or_empty),
    "privileged": boolean,
    "no_coredump": boolean,
    "no_randomize_memory": boolean,
    "no_huge_pages": boolean,
    "net_allow": checked_by("_netvalues", "allow_rules", _empty),
    "net_allow_hosts": checked_by("_netvalues", "hosts", _empty),
    "net_connect": checked_by("_netvalues", "port_specs", _empty),
    "net_deny": checked_by("_netvalues", "deny_rules", _empty),
    "net_bind": checked_by("_netvalues", "port_specs", _empty),
    "net_deny_bind": checked_by("_netvalues", "denied_ports", _empty),
    "port_remap": boolean,
    "unix_allow": checked_by("_netvalues", "socket_paths", _empty),
    "dns_servers": checked_by("_netvalues", "dns_servers", _empty),
    "resolve": checked_by("_netvalues", "resolve_entries", _empty),
    "dns_allow_private": boolean,
    "net_private_loopback": boolean_or_automatic,
    "http_allow": checked_by("_netvalues", "http_rules", _empty),
    "http_deny": checked_by("_netvalues", "http_rules", _empty),
    "http_ports": ports,
    "https_inspect": choice(HTTPS_INSPECT_MODES),
    "upstream_ca": existing_files,
    "http_upstream_timeout": _upstream_timeout,
    "http_ca": existing_file,
    "http_key": existing_file,
    "ca_env": boolean,
    "http_ca_out": output_file,
    "credentials": checked_by("_credentials", "sources", _falsy, environment),
    "http_auth": checked_by("_credentials", "auth_rules", _falsy, _nothing),
    "http_auth_plain": boolean,
    "credential_env": checked_by("_credentials", "placeholders", _falsy, environment),
    "max_memory": checked_by("_limitvalues", "memory_size"),
    "max_processes": process_count,
    "max_cpu": checked_by("_limitvalues", "cpu_share"),
    "cpu_cores": checked_by("_limitvalues", "cpu_list", _none_or_empty, _nothing),
    "max_open_files": checked_by("_limitvalues", "open_files"),
    "max_file_size": checked_by("_limitvalues", "size"),
    "max_output": checked_by("_limitvalues", "size"),
    "workdir": directory,
    "on_exit": member_of(WORKSPACE_ACTIONS),
    "on_error": member_of(WORKSPACE_ACTIONS),
    "max_disk": checked_by("_limitvalues", "size"),
    "fs_storage": directory,
    "max_memory_mode": choice(MEMORY_MODES),
    "fs_isolation": member_of(FS_ISOLATIONS),
    "notif_policy": checked_by("_seedchecks", "notif_paths", _none_or_empty, _nothing),
    "num_cpus": checked_by("_determinism", "num_cpus"),
    "time_start": checked_by("_determinism", "time_start"),
    "random_seed": checked_by("_determinism", "random_seed"),
    "deterministic_dirs": boolean,
    "chroot": directory,
    "image": image_reference,
}
