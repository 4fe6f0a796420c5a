"""Settings from policy files and options, merged into one Policy.

A setting is one field's value and where it came from. Sources are merged in order
(policy files as given, then the command line's options): lists concatenate, a later
single value overrides. An invalid merged policy is reported at the origin of the
field at fault, so an error in a file names its line even when it only shows once
files are combined (``--net-allow`` in one, ``--net-deny`` in another).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .._errors import PolicyError, PolicySourceError
from .._record import record
from ..policy import Policy, flag_of
from ._schema import BY_FIELD


@record
class Origin:
    """Where a setting came from: a file's key (and its line, when found), or an option."""

    flag: str
    file: str | None = None
    line: int | None = None
    key: str | None = None  # "network.allow"

    def locate(self, message: str) -> str:
        """``message`` prefixed with where to look, as ``sandlock: error:`` shows it."""
        if self.file is None:
            return f"{self.flag}: {message}"
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.key}: {message}"


@record
class Setting:
    field: str
    value: object  # as the source gave it (a list field: a tuple), validated by Policy
    origin: Origin


def from_options(values: Mapping[str, object]) -> tuple[Setting, ...]:
    """The settings of the options given on the command line (``values``: field ->
    value, only for the options present)."""
    return tuple(Setting(name, tuple(value) if BY_FIELD[name].kind.is_list else value,
                         Origin(flag_of(name)))
                 for name, value in values.items())


def merge(sources: Iterable[Iterable[Setting]]) -> Policy:
    """One Policy from settings in order of precedence (lowest first); a field no
    source sets keeps its default. PolicySourceError names the origin of a bad value."""
    values: dict[str, object] = {}
    origins: dict[str, Origin] = {}
    for settings in sources:
        for setting in settings:
            if BY_FIELD[setting.field].kind.is_list:
                values[setting.field] = values.get(setting.field, ()) + tuple(setting.value)
            else:
                values[setting.field] = setting.value
            origins[setting.field] = setting.origin
    try:
        return Policy(**values)
    except PolicyError as exc:
        raise PolicySourceError(_origin_of(exc.field, origins).locate(exc.message)) from None


def _origin_of(field: str, origins: Mapping[str, Origin]) -> Origin:
    """Where to point for an error about ``field``; for a field no source set (one of
    a pair given alone), the last setting of its section, else its option."""
    if field in origins:
        return origins[field]
    key = BY_FIELD.get(field)
    same_section = [origin for name, origin in origins.items()
                    if key is not None and BY_FIELD[name].section == key.section]
    return same_section[-1] if same_section else Origin(flag_of(field))
