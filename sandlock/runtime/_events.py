"""What a policy_fn sees and answers: the Event of one call, and the meaning of the
value it returns."""

from __future__ import annotations

import errno

from .._record import record

NETWORK, PROCESS, FILE = "network", "process", "file"
# Delivered to every policy_fn; file events only to one that asks (``observing``).
CATEGORIES = (NETWORK, PROCESS, FILE)


@record
class Event:
    """One call of the running command, before sandlock answers it.

    ``syscall``: connect, sendto, sendmsg, sendmmsg, bind, execve, execveat, fork,
    vfork, clone, exit, or (file events) open, openat, openat2, creat; ``category``:
    network, process or file; ``pid`` and
    ``parent_pid``: process ids as this program sees them (for a new process, ``pid``
    is the new one and ``parent_pid`` its creator). Network calls: ``ip``, ``port``
    and ``host`` (the name the address was pinned for, if any); ``port`` is 0 for
    other calls (as upstream's ``SyscallEvent`` has it). exec: ``argv``, what will
    run, exactly, and ``path``, the file asked for (made absolute). file: ``path``
    (absolute, as the process names it) and ``flags`` (O_*), of the first open of
    that path by that process. ``denied``: the static policy already refuses the call
    (the callback cannot change that).
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
    flags: int | None = None

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


class Observing:
    """A policy_fn with the categories of events it asked for beyond the usual ones."""

    def __init__(self, fn: object, events: frozenset[str]) -> None:
        self.fn, self.events = fn, events

    def __call__(self, event: Event, context: object) -> object:
        return self.fn(event, context)  # type: ignore[operator]


def observing(fn: object, events: object) -> object:
    """``fn``, told the ``events`` categories too (``Sandbox(policy_fn=, events=)``);
    PolicyError for a category that is not one, or events without a policy_fn."""
    from .._errors import PolicyError

    if isinstance(events, str) or not all(isinstance(e, str) for e in events):  # type: ignore[attr-defined]
        raise PolicyError("events", f"expected a set of event categories, got {events!r}")
    wanted = frozenset(events)  # type: ignore[arg-type]
    unknown = sorted(wanted - set(CATEGORIES))
    if unknown:
        raise PolicyError("events", f"no event category {unknown[0]!r} (there are: "
                          f"{', '.join(CATEGORIES)})")
    if fn is None:
        raise PolicyError("events", "events are told to a policy_fn: give one")
    return Observing(fn, wanted)
