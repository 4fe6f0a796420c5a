"""The value types upstream Sandlock's ``Policy`` takes (../shared/seeds/004), under
their names: ``FsIsolation``, ``BranchAction``, ``NotifPolicy`` with its ``PathRule``
and ``NotifAction``. Policy stores what they mean in its own terms (strings, denied
paths: docs/api.md, "Upstream's value types"), so a policy file can say the same;
this module is loaded only by a program that names one of them.
"""

from __future__ import annotations

import enum
import errno

from .._errors import PolicyError


class FsIsolation(str, enum.Enum):
    """How a workdir is isolated. NONE: as the workdir decides (with one, OVERLAYFS);
    BRANCHFS: refused unless the workdir is on a BranchFS mount (docs/usage.md)."""

    NONE = "none"
    OVERLAYFS = "overlayfs"
    BRANCHFS = "branchfs"

    def __str__(self) -> str:
        return self.value


class BranchAction(str, enum.Enum):
    """What becomes of a workdir's changes at the end (``on_exit``, ``on_error``)."""

    COMMIT = "commit"
    ABORT = "abort"
    KEEP = "keep"

    def __str__(self) -> str:
        return self.value


class NotifAction(str, enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    VIRTUALIZE = "virtualize"

    def __str__(self) -> str:
        return self.value


class PathRule:
    """Upstream's rule: ``pattern`` (a path, or a directory ending in "/") and its
    action. Only DENY with EACCES has a sandlock equivalent that is not a race: a
    denied path (Landlock, and a mask in the sandbox's mount namespace)."""

    __slots__ = ("pattern", "action", "errno_code", "virtual_content")

    def __init__(self, pattern: str, action: NotifAction = NotifAction.ALLOW,
                 errno_code: int = errno.EACCES, virtual_content: bytes = b"") -> None:
        self.pattern, self.action = pattern, NotifAction(action)
        self.errno_code, self.virtual_content = errno_code, virtual_content

    def __repr__(self) -> str:
        return f"PathRule({self.pattern!r}, {self.action.name})"


class NotifPolicy:
    """Upstream's path rules for its open() supervisor. ``isolate_pids``: sandlock
    always runs the sandbox in a PID namespace of its own, whatever this says."""

    __slots__ = ("rules", "isolate_pids")

    def __init__(self, rules: object = (), isolate_pids: bool = False) -> None:
        self.rules, self.isolate_pids = tuple(rules), isolate_pids  # type: ignore[arg-type]

    def denied_paths(self, name: str) -> tuple[str, ...]:
        """The paths its rules deny, as --fs-deny takes them; PolicyError for a rule
        sandlock cannot hold as written (rather than a weaker one run silently)."""
        denied = []
        for rule in self.rules:
            if not isinstance(rule, PathRule):
                raise PolicyError(name, f"expected PathRule rules, got {rule!r}")
            if rule.action is NotifAction.ALLOW:
                continue  # the grants decide what is reachable; a rule never widens them
            if rule.action is NotifAction.VIRTUALIZE:
                raise PolicyError(name, f"{rule!r}: VIRTUALIZE is not supported (sandlock "
                                  "never answers an open with content it made up; deny the path)")
            if rule.errno_code != errno.EACCES:
                raise PolicyError(name, f"{rule!r}: a denied path fails with EACCES only "
                                  f"(errno_code {rule.errno_code} cannot be honoured)")
            denied.append(rule.pattern)
        return tuple(denied)


def denied_paths(name: str, value: object) -> object:
    """``Policy.notif_policy``'s check, for a NotifPolicy."""
    if isinstance(value, NotifPolicy):
        return value.denied_paths(name)
    return value
