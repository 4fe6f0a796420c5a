"""The policy file schema, derived from Policy's fields: which key sets which field.

Each Policy field names its option and its file key (``section.name``) in its metadata,
and its type annotation says which TOML type a file gives it. Nothing here lists the
fields a second time: a new Policy field is a new key (a field whose annotation has no
TOML kind below fails at import, loudly). Read by the file loader, the TOML writer,
the merge of sources and the docs test.
"""

from __future__ import annotations

from collections.abc import Callable

from .._record import record
from ..policy import POLICY_FIELDS as FIELDS

# Sections in the order a written policy shows them (docs/policy.md follows it).
SECTIONS = ("filesystem", "network", "http", "ca", "credentials", "process", "limits",
            "workspace", "confinement", "determinism")
# Sections that are one field's table as a whole ([credentials] NAME = "env:VAR").
TABLE_SECTIONS = ("credentials",)
DESCRIPTION = "description"  # the one top-level key: a line for `sandlock profile list`


@record
class Kind:
    """The TOML shape of a field's value. Lists from several sources concatenate;
    single values override."""

    description: str  # for errors and docs: "list of strings"
    is_list: bool
    accepts: Callable[[object], bool]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_of(accepts: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, list) and all(map(accepts, value))


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_env(value: object) -> bool:
    if isinstance(value, dict):
        return all(map(_is_str, value.values()))
    return _list_of(_is_str)(value)


STRINGS = Kind("list of strings", True, _list_of(_is_str))
PORTS = Kind("list of ports (integers, or strings such as \"8000-8100\")", True,
             _list_of(lambda value: _is_int(value) or _is_str(value)))
INTEGERS = Kind("list of integers", True, _list_of(_is_int))
ENV = Kind('table of strings or a list of "K=V" strings', True, _is_env)
BOOLEAN = Kind("boolean", False, lambda value: isinstance(value, bool))
STRING = Kind("string", False, _is_str)
NUMBER = Kind("number", False, lambda value: _is_int(value) or isinstance(value, float))
INTEGER = Kind("integer", False, _is_int)
# sandlock.Protection members, written by name: "SIGNAL_SCOPE" (numbers are read too)
PROTECTIONS = Kind("list of protection names", True,
                   _list_of(lambda value: _is_str(value) or _is_int(value)))
INSTANT = Kind('date (a string such as "2000-01-01T00:00:00Z") or Unix seconds', False,
               lambda value: _is_int(value) or isinstance(value, (float, str)))
SIZE = Kind('size (a string such as "512M", or a number of bytes)', False,
            lambda value: _is_int(value) or _is_str(value))

# Policy's annotations (strings: the module uses postponed evaluation) -> TOML kinds.
_KINDS = {
    "tuple[str, ...]": STRINGS,
    "tuple[str, ...] | None": STRINGS,
    "tuple[Protection, ...]": PROTECTIONS,
    "tuple[int, ...]": INTEGERS,
    "Environment": ENV,
    "PortList": PORTS,
    "bool": BOOLEAN,
    "bool | None": BOOLEAN,  # (None: not said, sandlock decides; never written)
    "str": STRING,
    "str | None": STRING,
    "float | None": NUMBER,
    "float": NUMBER,
    "int": INTEGER,
    "int | None": INTEGER,
    "Size | None": SIZE,
    "Instant | None": INSTANT,
}


@record
class Key:
    """One key of a policy file and the Policy field it sets."""

    field: str
    section: str
    name: str
    flag: str
    kind: Kind
    path: bool  # a file path: relative to the policy file's directory
    default: object

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"


def _key_of(field: object) -> Key:
    section, _, name = field.metadata["key"].partition(".")
    if section not in SECTIONS or not (name or section in TABLE_SECTIONS):
        raise AssertionError(f"Policy.{field.name}: key {field.metadata['key']!r} has no section")
    return Key(field.name, section, name, field.metadata["flag"], _KINDS[field.type],
               field.metadata["path"], field.initial())


def _keys() -> tuple[Key, ...]:
    keys = [_key_of(field) for field in FIELDS.values()]
    return tuple(sorted(keys, key=lambda key: SECTIONS.index(key.section)))  # stable


KEYS = _keys()
BY_FIELD = {key.field: key for key in KEYS}
BY_SECTION = {section: {key.name: key for key in KEYS if key.section == section}
              for section in SECTIONS}
