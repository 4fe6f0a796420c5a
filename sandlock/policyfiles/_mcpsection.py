"""The ``[mcp]`` section of a policy file: how `sandlock mcp` runs each tool's calls
(docs/mcp.md). Other commands read it and leave it (it holds no Policy field):

    [mcp]
    run_command = "build"   # a profile: run_command's calls run under it
    run_python = "analysis"
    fixed = ["cwd"]         # call arguments the model may not give

Checked as the rest of the file is: each bad key is one line naming the file, the
line and the key, exit 2. Whether a named profile exists is checked when the server
starts (profiles live outside the file)."""

from __future__ import annotations

import re

from .._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

SECTION = "mcp"
TOOLS = ("run_command", "run_python")
CALL_OPTIONS = ("cwd", "timeout")  # what a call may give, and the policy may fix
FIXED = "fixed"
_PROFILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # as _profiles' names


@record
class McpSection:
    profiles: tuple[tuple[str, str], ...] = ()  # (tool, profile name)
    fixed: tuple[str, ...] = ()  # call options the model may not give


def read(table: object, error: Callable[[tuple, str], Exception], toml_type: Callable[[object], str],
         did_you_mean: Callable[[str, tuple[str, ...]], str]) -> McpSection:
    """The section, or ``error(key path, message)`` raised for its first bad key."""
    if not isinstance(table, dict):
        raise error((SECTION,), f"{SECTION}: expected a table ([{SECTION}]), got {toml_type(table)}")
    profiles, fixed = [], ()
    for name, value in table.items():
        at = (SECTION, name)
        if name in TOOLS:
            if not isinstance(value, str) or not _PROFILE_NAME.fullmatch(value):
                raise error(at, f"{SECTION}.{name}: expected a profile name (letters, digits, "
                            f"'_', '.' and '-'), got {_shown(value, toml_type)}")
            profiles.append((name, value))
        elif name == FIXED:
            fixed = _fixed(value, at, error, toml_type, did_you_mean)
        else:
            raise error(at, f"unknown key '{name}' in [{SECTION}]"
                        + did_you_mean(name, (*TOOLS, FIXED)))
    return McpSection(tuple(profiles), fixed)


def _fixed(value: object, at: tuple, error: Callable[[tuple, str], Exception],
           toml_type: Callable[[object], str],
           did_you_mean: Callable[[str, tuple[str, ...]], str]) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise error(at, f"{SECTION}.{FIXED}: expected a list of call options, got {toml_type(value)}")
    for index, item in enumerate(value):
        if item not in CALL_OPTIONS:
            what = repr(item) if isinstance(item, str) else toml_type(item)
            hint = did_you_mean(item, CALL_OPTIONS) if isinstance(item, str) else \
                f" (expected one of: {', '.join(CALL_OPTIONS)})"
            raise error(at + (index,), f"{SECTION}.{FIXED}: {what} is not a call option{hint}")
    return tuple(dict.fromkeys(value))


def _shown(value: object, toml_type: Callable[[object], str]) -> str:
    return repr(value) if isinstance(value, str) else toml_type(value)
