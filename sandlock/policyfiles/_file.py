"""Policy files: a TOML file in, its settings (each value and its line) out.

A file says what `sandlock run` options say, in either of two forms, which may be
mixed: flat keys named like Policy's fields (``fs_readable = [...]``, an ``[env]``
table: the Sandlock documents' profiles), or sections mirroring the options
(``[filesystem] read = [...]``). Both come from Policy's field metadata (``_schema``;
docs/policy.md). Everything about one
file is checked here, before it is merged with other sources, so that each error names
the file and the line: who may write it, its TOML syntax, unknown keys (with a
did-you-mean), each value's type, and each value on its own by Policy's own checks.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import tomllib
from collections.abc import Iterable

from .._errors import PolicyError, PolicySourceError
from .._record import record
from . import _mcpsection as mcp_section
from ..policy import check_field
from ._schema import BY_FIELD, BY_SECTION, DESCRIPTION, ENV, KEYS, SECTIONS, Key
from ._sources import Origin, Setting
from ._tomlbounds import past_bounds
from ._tomllines import Path, locate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._mcpsection import McpSection

MAX_SIZE = 256 << 10  # a policy is a few hundred bytes; reading this much takes about 1 s
_TOML_POSITION = re.compile(r" \(at line (\d+), column (\d+)\)$")


@record
class PolicyFile:
    path: str
    text: str
    description: str | None
    settings: tuple[Setting, ...]
    mcp: McpSection | None = None  # its [mcp] section, for `sandlock mcp` (_mcpsection)


def load(path: str) -> PolicyFile:
    """Read, check and convert one policy file; PolicySourceError (exit 2) says where
    and what is wrong."""
    text = _decode(path, _read_own_file(path))
    data = _parse(path, text)
    where = _Locator(path, text)
    description = _description(data, where)
    base = os.path.dirname(os.path.abspath(path))
    settings: list[Setting] = []
    first: dict[str, Path] = {}
    for key, value, at in _keys_and_values(data, where):
        if key.field in first:  # one field in both forms
            raise where.error(at, f"{_shown(at)}: sets {key.field} again, as "
                              f"{_shown(first[key.field])} does (line {where.line(first[key.field])})")
        first[key.field] = at
        settings.append(_setting(key, value, at, where, base))
    mcp = None
    if mcp_section.SECTION in data:
        mcp = mcp_section.read(data[mcp_section.SECTION], where.error, _toml_type, did_you_mean)
    return PolicyFile(path, text, description, tuple(settings), mcp)


# --- the file itself ---------------------------------------------------------------


def _read_own_file(path: str) -> bytes:
    """The file's bytes, if it is a regular file that only its reader (or root) can
    change: anyone else able to write it could widen the sandbox it describes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise PolicySourceError(f"{path}: {exc.strerror.lower()}") from None
    try:
        problem = _ownership_problem(path, os.fstat(fd))  # what was opened, not the path now
        if problem:
            raise PolicySourceError(f"{path}: {problem}")
        data = _read(fd, MAX_SIZE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SIZE:
        raise PolicySourceError(f"{path}: larger than {MAX_SIZE >> 10} KiB: not a policy file")
    return data


def _read(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _ownership_problem(path: str, info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid not in (os.geteuid(), 0):
        return (f"refused: owned by {_user(info.st_uid)}, not by you or root "
                "(another user could widen your sandbox through it)")
    if info.st_mode & stat.S_IWOTH:
        return (f"refused: writable by every user (mode {stat.S_IMODE(info.st_mode):04o}; "
                f"anyone could widen your sandbox through it): chmod o-w {path}")
    return None


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _decode(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PolicySourceError(f"{path}:{line}: not UTF-8 text") from None


def _parse(path: str, text: str) -> dict:
    bound = past_bounds(text)  # (before tomllib, which recurses and dots in square time)
    if bound is not None:
        line, what = bound
        raise PolicySourceError(f"{path}:{line}: not a policy: {what}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        if position is None:
            raise PolicySourceError(f"{path}: invalid TOML: {message}") from None
        line, column = position.groups()
        raise PolicySourceError(f"{path}:{line}: invalid TOML: {message[:position.start()]} "
                                f"(column {column})") from None
    except ValueError:  # int() refuses past 4300 digits, before tomllib knows where it is
        raise PolicySourceError(f"{path}: invalid TOML: an integer of more than 4300 "
                                "digits") from None


# --- keys ------------------------------------------------------------------------------


class _Locator:
    """Lines of the file's keys, for messages."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self._lines = locate(text)

    def line(self, path: Path) -> int | None:
        """The line of ``path``, else of the nearest enclosing key or table found."""
        for end in range(len(path), 0, -1):
            if path[:end] in self._lines:
                return self._lines[path[:end]]
        return None

    def origin(self, key: Key, path: Path) -> Origin:
        return Origin(key.flag, self.path, self.line(path), _shown(path))

    def error(self, path: Path, message: str) -> PolicySourceError:
        line = self.line(path)
        where = self.path if line is None else f"{self.path}:{line}"
        return PolicySourceError(f"{where}: {message}")


def _description(data: dict, where: _Locator) -> str | None:
    description = data.get(DESCRIPTION)
    if description is not None and not isinstance(description, str):
        raise where.error((DESCRIPTION,), f"{DESCRIPTION}: expected a string, "
                          f"got {_toml_type(description)}")
    return description


def _shown(path: Path) -> str:
    """A key as the file writes it: ``fs_readable`` or ``filesystem.read``."""
    return ".".join(map(str, path))


def _keys_and_values(data: dict, where: _Locator) -> Iterable[tuple[Key, object, Path]]:
    for section, table in data.items():
        if section in (DESCRIPTION, mcp_section.SECTION):  # ([mcp]: not Policy's, read apart)
            continue
        if section in BY_FIELD:  # the flat form
            yield BY_FIELD[section], table, (section,)
            continue
        if section not in BY_SECTION:
            raise where.error((section,), _unknown_section(section, table))
        if not isinstance(table, dict):
            raise where.error((section,), f"{section}: expected a table ([{section}]), "
                              f"got {_toml_type(table)}")
        for name, value in table.items():
            key = BY_SECTION[section].get(name)
            if key is None:
                raise where.error((section, name), _unknown_key(section, name))
            yield key, value, (section, name)


def _unknown_section(name: str, value: object) -> str:
    if isinstance(value, dict):
        return f"unknown section [{name}]{did_you_mean(name, SECTIONS)}"
    homes = [f"[{key.section}]" for key in KEYS if key.name == name]
    if homes:  # a section's key written at the top
        return f"'{name}' belongs in a section: {' or '.join(homes)}"
    return f"unknown top-level key '{name}'{did_you_mean(name, (DESCRIPTION, *SECTIONS, *BY_FIELD))}"


def _unknown_key(section: str, name: str) -> str:
    message = f"unknown key '{name}' in [{section}]"
    homes = [f"[{key.section}]" for key in KEYS if key.name == name]
    if homes:
        return f"{message}: it belongs in {' or '.join(homes)}"
    return message + did_you_mean(name, BY_SECTION[section])


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A message ending: the near miss (": did you mean 'X'?"), else the choices."""
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return f": did you mean '{close[0]}'?"
    return f" (expected one of: {', '.join(choices)})"


# --- values --------------------------------------------------------------------------


def _setting(key: Key, raw: object, path: Path, where: _Locator, base: str) -> Setting:
    if not key.kind.accepts(raw):
        culprit, found = _wrong_type(key, raw, path)
        raise where.error(culprit, f"{_shown(path)}: expected a {key.kind.description}, "
                          f"got {found}")
    value = _converted(key, raw, base)
    try:
        check_field(key.field, value)
    except PolicyError as exc:
        culprit, message = _culprit(key, raw, value, path) or (path, exc.message)
        raise where.error(culprit, f"{_shown(path)}: {message}") from None
    return Setting(key.field, value, where.origin(key, path))


def _wrong_type(key: Key, raw: object, path: Path) -> tuple[Path, str]:
    """Where a value of the wrong type is, and what it is: in an array or table of the
    right shape, its first item of the wrong type."""
    if key.kind.is_list and isinstance(raw, (list, dict)):
        table = isinstance(raw, dict)
        for name, item in raw.items() if table else enumerate(raw):
            if not key.kind.accepts({name: item} if table else [item]):
                return path + (name,), f"{_toml_type(item)} in the {'table' if table else 'array'}"
    return path, _toml_type(raw)


def _converted(key: Key, raw: object, base: str) -> object:
    """TOML value -> what the option would give: lists as tuples, an env table as
    (name, value) pairs, paths taken from the file's directory."""
    if key.kind is ENV and isinstance(raw, dict):
        return tuple(raw.items())
    if key.path:
        raw = [_path(item, base) for item in raw] if key.kind.is_list else _path(raw, base)
    return tuple(raw) if key.kind.is_list else raw


def _path(value: str, base: str) -> str:
    """``~`` is the home directory; a relative path is relative to the file's directory
    (an empty one is left for Policy to refuse)."""
    if not value:
        return value
    return os.path.join(base, os.path.expanduser(value))


def _culprit(key: Key, raw: object, value: object, path: Path) -> tuple[Path, str] | None:
    """The item of a list that Policy refuses on its own, and Policy's message about it."""
    if not key.kind.is_list:
        return None
    names = list(raw) if isinstance(raw, dict) else range(len(value))
    for name, item in zip(names, value):
        try:
            check_field(key.field, (item,))
        except PolicyError as exc:
            return path + (name,), exc.message
    return None


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"
