"""``sandlock.Protection``: the protections a policy may let degrade or disable, by
upstream Sandlock's names and numbers (its own six, then sandlock's layers from 16).
Loaded only by a policy that names one (the numbers themselves: confinement)."""

from __future__ import annotations

from enum import IntEnum

from .._errors import PolicyError
from ..confinement import PROTECTIONS, PROTECTIONS_NOT_DISABLED as NOT_DISABLED

Protection = IntEnum("Protection", {name: number for number, (name, _, _) in PROTECTIONS.items()},
                     module=__name__)
Protection.__doc__ = ("A protection sandlock applies, for Policy(allow_degraded=[...]) and "
                      "Policy(disable=[...]); ``min_abi``: the Landlock ABI it needs (0: none).")
Protection.min_abi = property(lambda self: PROTECTIONS[self][1])  # type: ignore[attr-defined]


def protections(name: str, value: object) -> tuple[Protection, ...]:
    """A list of protections: members, their numbers or their names (any case, - for _),
    each once, in order. ``disable`` refuses those no run goes without."""
    if isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise PolicyError(name, f"expected a list of protections, got {value!r}")
    found = tuple(dict.fromkeys(_one(name, item) for item in value))
    if name == "disable":
        for protection in found:
            if protection in NOT_DISABLED:
                raise PolicyError(name, f"{protection.name} cannot be disabled: "
                                  f"{NOT_DISABLED[protection]}")
    return found


def _one(name: str, item: object) -> Protection:
    if isinstance(item, str):
        key = item.strip().upper().replace("-", "_")
        if key in Protection.__members__:
            return Protection[key]
        if key.isascii() and key.isdigit() and int(key) in PROTECTIONS:  # (an option's number)
            return Protection(int(key))
    elif isinstance(item, int) and not isinstance(item, bool) and item in PROTECTIONS:
        return Protection(item)
    known = ", ".join(Protection.__members__)
    raise PolicyError(name, f"{item!r} is not a protection (one of: {known})")
