"""Profiles: policy files by name, NAME.toml in the profiles directory
(``$XDG_CONFIG_HOME/sandlock/profiles``, by default ``~/.config/sandlock/profiles``),
or one of sandlock's own (``BUILTIN``: ``agent``), which a file of the same name in
the profiles directory replaces (the user's own choice, as for any profile)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .._errors import PolicySourceError

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ..policy import Policy

SUFFIX = ".toml"
BUILTIN = os.path.join(os.path.dirname(__file__), "profiles")  # shipped with sandlock
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a file name, never a path


def directory(env: Mapping[str, str] = os.environ) -> str:
    config = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # the XDG spec: a relative value is ignored
        config = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(config, "sandlock", "profiles")


def names(where: str | None = None) -> list[str]:
    """The profiles there are (and the built-in ones, without ``where``), sorted."""
    found = set(_listed(where or directory()))
    return sorted(found if where else found | set(_listed(BUILTIN)))


def _listed(where: str) -> list[str]:
    try:
        entries = os.listdir(where)
    except OSError:
        return []
    return [entry[: -len(SUFFIX)] for entry in entries
            if entry.endswith(SUFFIX) and _NAME.fullmatch(entry[: -len(SUFFIX)])]


def path_of(name: str) -> str:
    """The file of profile ``name``; PolicySourceError if there is none."""
    where = directory()
    if not _NAME.fullmatch(name):
        raise PolicySourceError(f"--profile {name}: not a profile name (letters, digits, "
                                "'_', '.' and '-'; for a file, use --policy FILE)")
    path = os.path.join(where, name + SUFFIX)
    if not os.path.exists(path) and os.path.exists(builtin := os.path.join(BUILTIN, name + SUFFIX)):
        return builtin
    if not os.path.exists(path):
        from ._file import did_you_mean

        known = names()  # (the built-in ones too)
        hint = did_you_mean(name, known) if known else " (there are none)"
        raise PolicySourceError(f"--profile {name}: no such profile in {where}{hint}")
    return path


def load_profile(name: str) -> Policy:
    """The Policy of profile ``name`` (``Sandbox("build")``); PolicySourceError (exit 2)
    names the file and line of what is wrong."""
    from ._file import load
    from ._sources import merge

    return merge([load(path_of(name)).settings])
