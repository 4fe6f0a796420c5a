"""A seccomp filter's rules as data: the actions it returns, and ``Rule``, ``Clause``,
``Match`` (conditions on a syscall's register arguments), which _seccomp compiles.
"""

from __future__ import annotations

import errno

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable

# Filter return actions (linux/seccomp.h); on several filters the most restrictive wins.
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000  # low 16 bits: the errno
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_RET_ALLOW = 0x7FFF0000


def ret_errno(err: int) -> int:
    return SECCOMP_RET_ERRNO | (err & 0xFFFF)


ALLOW = SECCOMP_RET_ALLOW
EPERM = ret_errno(errno.EPERM)
EACCES = ret_errno(errno.EACCES)
ENOSYS = ret_errno(errno.ENOSYS)
NOTIFY = SECCOMP_RET_USER_NOTIF

WORD_MASK = 0xFFFFFFFF  # a Match's mask by default: the whole word


class Match:
    """Holds when ``(32-bit word of args[arg]) & mask`` is one of ``values``.

    The low word unless ``high``. Arguments the kernel reads as int or unsigned int
    need only the low word: the kernel truncates them the same way.
    """

    __slots__ = ("arg", "values", "mask", "high")

    def __init__(self, arg: int, values: Iterable[int], mask: int = WORD_MASK, high: bool = False) -> None:
        self.arg = arg
        self.values = tuple(sorted(set(values)))
        self.mask = mask
        self.high = high
        if not self.values:
            raise ValueError("a Match needs at least one value")


class Clause:
    """``action`` when every Match holds."""

    __slots__ = ("action", "matches")

    def __init__(self, action: int, *matches: Match) -> None:
        self.action = action
        self.matches = matches


class Rule:
    """The first Clause that holds decides; ``default`` when none does (or there are none)."""

    __slots__ = ("clauses", "default")

    def __init__(self, *clauses: Clause, default: int) -> None:
        self.clauses = clauses
        self.default = default
