"""Each protection a run applies, by number: which kernel feature it needs, whether the
policy lets it be skipped where the kernel lacks it (``allow_degraded``,
``best_effort``) or turns it off (``disable``), and what is said then.

Loaded by a run only when a protection needs a decision (a kernel below Landlock ABI 6,
a policy's ``disable``): the numbers every run decides on are _confinement's. The
public ``sandlock.Protection`` (an IntEnum of these numbers, policy/_protection.py) is
built only when a policy names one: making the enum costs ~0.2 ms.
"""

from __future__ import annotations

from .._errors import SetupError
from ..kernel import landlock
from ._confinement import ABSTRACT_UNIX_SOCKET_SCOPE, NAMESPACES, SIGNAL_SCOPE
from ._confinement import protection_disabled as disabled

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy

# Upstream Sandlock's numbering (its C ABI's sandlock_protection_t), then sandlock's own
# layers from 16, clear of the numbers upstream may add.
FS_REFER, FS_TRUNCATE, NET_TCP, FS_IOCTL_DEV = range(4)  # SIGNAL_SCOPE 4, ABSTRACT... 5
LANDLOCK_FS = 16  # NAMESPACES 17

# number -> (name, the Landlock ABI it needs (0: not a Landlock feature), what holds no
# longer when it is disabled)
PROTECTIONS: dict[int, tuple[str, int, str]] = {
    FS_REFER: ("FS_REFER", 2, "Landlock no longer handles renames and links across "
               "directories: it refuses them all (EXDEV), as on ABI 1"),
    FS_TRUNCATE: ("FS_TRUNCATE", 3, "truncate(2) no longer needs a write grant"),
    NET_TCP: ("NET_TCP", 4, "no Landlock TCP port rules"),
    FS_IOCTL_DEV: ("FS_IOCTL_DEV", 5, "ioctl on a device no longer needs a write grant"),
    SIGNAL_SCOPE: ("SIGNAL_SCOPE", 6, "the command may signal processes outside the sandbox"),
    ABSTRACT_UNIX_SOCKET_SCOPE: ("ABSTRACT_UNIX_SOCKET_SCOPE", 6, "the command may connect "
                                 "to abstract unix sockets outside the sandbox"),
    LANDLOCK_FS: ("LANDLOCK_FS", 1, "no filesystem confinement"),
    NAMESPACES: ("NAMESPACES", 0, "no user, PID and mount namespaces: /proc shows the host, "
                 "/tmp is shared, autorun files are writable, no process cap or memory limit"),
}
SCOPES = (SIGNAL_SCOPE, ABSTRACT_UNIX_SOCKET_SCOPE)
FS_RIGHTS = (FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV)  # each a right of the filesystem ruleset
# What a run cannot do without: disabling one is refused (PolicyError), with the way out.
NOT_DISABLED = {
    LANDLOCK_FS: "a run without filesystem confinement is --mode full-access",
    NET_TCP: "a run's network is judged by sandlock's supervisor, not by Landlock's TCP "
             "rules: open it with --net-allow",
}


def name_of(protection: int) -> str:
    return PROTECTIONS[protection][0]


def degradable(policy: Policy, protection: int) -> bool:
    """True when ``protection`` may be skipped where the kernel lacks it."""
    return policy.best_effort or protection in policy.allow_degraded


def disabled_rights(policy: Policy) -> int:
    """The filesystem rights the policy's ``disable`` leaves out of the ruleset."""
    rights = {FS_REFER: landlock.FS_REFER, FS_TRUNCATE: landlock.FS_TRUNCATE,
              FS_IOCTL_DEV: landlock.FS_IOCTL_DEV}
    return sum(rights[p] for p in policy.disable if p in rights)


def require(policy: Policy, protection: int, why: str, warnings: list[str]) -> None:
    """``protection`` is missing from this kernel (``why``): an error, unless the policy
    lets it degrade (then a notice in ``warnings``)."""
    name = name_of(protection)
    if not degradable(policy, protection):
        raise SetupError(f"{why}: protection {name} cannot be applied (run `sandlock check`; "
                         f"--allow-degraded {name} runs without it)")
    how = "--best-effort" if policy.best_effort else f"--allow-degraded {name}"
    warnings.append(f"{why}; running without protection {name} ({how})")


def missing_landlock(policy: Policy, abi: int, warnings: list[str]) -> None:
    """Each Landlock protection in force that ``abi`` lacks, through ``require``.
    Without Landlock at all, LANDLOCK_FS stands for every one of them."""
    if abi == 0:
        require(policy, LANDLOCK_FS, "Landlock (filesystem confinement) is not available in "
                "this kernel", warnings)
        return
    for protection in (*SCOPES, *(() if policy.full_access else FS_RIGHTS)):
        name, needed, _ = PROTECTIONS[protection]
        if abi < needed and not disabled(policy, protection):
            require(policy, protection, f"{name} needs Landlock ABI {needed}, the kernel has "
                    f"ABI {abi}", warnings)


def disabled_notices(policy: Policy) -> list[str]:
    """One loud line per protection the policy turned off with ``disable``."""
    return [f"protection {name_of(p)} is DISABLED (--disable): {PROTECTIONS[p][2]}"
            for p in policy.disable]
