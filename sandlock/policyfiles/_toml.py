"""A Policy written as a policy file: the TOML that loads back into exactly it.

``sandlock run --print-policy`` prints it; whatever else writes policies (a learning
mode) writes through it too. Only fields that differ from their defaults are written,
in the order of the schema (``_schema``); the text loads back (``_file``)
into an equal Policy, which is written identically.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..policy import Policy
from ._schema import (BY_SECTION, DESCRIPTION, ENV, INSTANT, PROTECTIONS, SECTIONS, SIZE, TABLE_SECTIONS,
                      Key)

LINE_WIDTH = 88  # longer arrays are written one item per line
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r",
            # Exact in TOML, inert to a shell: a policy file sourced by mistake (or a learned
            # path sandlock was led to write into ~/.bashrc) substitutes no command.
            "$": "\\u0024", "`": "\\u0060"}
DEFAULT_WORKSPACE_NOTE = ("no [filesystem] read or write paths: the default workspace "
                          "applies (docs/usage.md)")
PRIVATE_NETWORK_NOTE = ("default workspace, no network: a private network, only lo in it "
                        "(docs/usage.md, \"A private loopback\")")


def dumps(policy: Policy, *, description: str | None = None,
          comments: Sequence[str] = ()) -> str:
    """``policy`` as TOML, after ``comments`` (lines without their '#') and a
    ``description`` (shown by ``sandlock profile list``)."""
    head = [f"# {_comment(comment)}".rstrip() for comment in comments]
    if description is not None:
        head.append(f"{DESCRIPTION} = {_string(description)}")
    blocks = [head, *(_section(policy, section) for section in SECTIONS)]
    return "\n\n".join("\n".join(block) for block in blocks if block) + "\n"


def _section(policy: Policy, section: str) -> list[str]:
    if section in TABLE_SECTIONS:  # the section is one field's table: NAME = "value"
        (key,) = BY_SECTION[section].values()
        table = getattr(policy, key.field)
        return [f"[{section}]", *(f"{name} = {_string(value)}" for name, value in table.items())] \
            if table else []
    entries = [f"{key.name} = {_value(key, getattr(policy, key.field))}"
               for key in BY_SECTION[section].values()
               if getattr(policy, key.field) != key.default]
    lines = [f"[{section}]", *entries] if entries else []
    if section == "filesystem" and policy.uses_default_workspace:
        lines.insert(0, f"# {DEFAULT_WORKSPACE_NOTE}")
    if section == "network" and policy.net_private_loopback is None and policy.private_network:
        lines.insert(0, f"# {PRIVATE_NETWORK_NOTE}")
    return lines


def _value(key: Key, value: object) -> str:
    if key.kind is ENV:  # written as the option takes it: K=V
        value = tuple(name if text is None else f"{name}={text}" for name, text in value.items())
    if key.kind is PROTECTIONS:  # by name
        value = tuple(protection.name for protection in value)
    if key.kind is SIZE:  # as written: "512M"
        return _string(str(value))
    if key.kind is INSTANT:  # a date, as upstream's profiles write it
        import datetime

        moment = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
        return _string(moment.isoformat().replace("+00:00", "Z"))
    if isinstance(value, tuple):
        return _array([_scalar(item) for item in value], indent=len(key.name) + 3)
    return _scalar(value)


def _array(items: list[str], indent: int) -> str:
    inline = f"[{', '.join(items)}]"
    if indent + len(inline) <= LINE_WIDTH:
        return inline
    return "[\n" + "".join(f"    {item},\n" for item in items) + "]"


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # Policy refuses infinities and NaN; repr is valid TOML
    if isinstance(value, str):
        return _string(value)
    raise TypeError(f"no TOML form for {value!r}")


def _comment(text: str) -> str:
    """One comment line: no line break (that would start a key), nothing a shell would
    substitute (``$(``, backquotes)."""
    text = "".join(" " if char < " " or char == "\x7f" else char for char in text)
    return text.replace("`", "'").replace("$(", "$ (")


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
