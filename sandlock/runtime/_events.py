"""What a policy_fn sees and answers: the Event of one call, and the meaning of the
value it returns."""

from __future__ import annotations

import errno

from .._record import record

NETWORK, PROCESS = "network", "process"


@record
class Event:
    """One call of the running command, before sandlock answers it.

    ``syscall``: connect, sendto, sendmsg, sendmmsg, bind, execve, execveat, fork,
    vfork, clone, or exit; ``category``: network or process; ``pid`` and
    ``parent_pid``: process ids as this program sees them (for a new process, ``pid``
    is the new one and ``parent_pid`` its creator). Network calls: ``ip``, ``port``
    and ``host`` (the name the address was pinned for, if any); ``port`` is 0 for
    other calls (as upstream's ``SyscallEvent`` has it). exec: ``argv``, what will
    run, exactly, and ``path``, the file asked for (made absolute). ``denied``: the
    static policy already refuses the call (the callback cannot change that).
    """

    syscall: str
    category: str
    pid: int
    parent_pid: int = 0
    host: str | None = None
    ip: str | None = None
    port: int = 0  # (0 where no port is concerned, as upstream has it)
    argv: tuple[str, ...] | None = None
    path: str | None = None
    denied: bool = False

    def argv_contains(self, text: str) -> bool:
        """Whether any argument of an exec contains ``text``."""
        return any(text in argument for argument in self.argv or ())


@record
class Answer:
    """A callback's verdict: ``error`` 0 allows; ``audit``: recorded in the audit log."""

    error: int = 0
    audit: bool = False


ALLOW = Answer()
DENY = Answer(errno.EPERM)


def answer_of(value: object) -> Answer:
    """0, False or None allow; True or -1 deny with EPERM; a positive int denies with
    that errno; "audit" allows and records. Anything else: ValueError."""
    if value is None or value is False:
        return ALLOW
    if value is True:
        return DENY
    if isinstance(value, int):
        if value == 0:
            return ALLOW
        if value == -1:
            return DENY
        if 0 < value < 4096:
            return Answer(value)
    if value == "audit":
        return Answer(audit=True)
    raise ValueError(f"policy_fn returned {value!r}: expected 0/False/None (allow), "
                     "True/-1 (deny), an errno, or \"audit\"")
