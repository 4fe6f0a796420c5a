"""One item of a pool: what runs in its sandbox's clone, and what comes back.

The actor sends the clone ``run_item(payload, memory)``: ``payload`` is ``(work,
item)`` pickled by Ray's cloudpickle in the actor (a module-level function travels by
reference, a lambda or closure by value), loaded here, in the confined clone, where
only trusted bytes (the driver's) are unpickled. What the clone returns goes back as a
``Sandbox.call`` value does: plain values only (``_safepickle``), never a pickle the
untrusted code could have chosen.
"""

from __future__ import annotations

import mmap
import pickle
import resource  # (both imported in the actor, before its sandbox starts: clones read no file for them)

from .._errors import EXIT_SETUP
from .._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..api import CallError, CallResult

# Why an item ended (ItemResult.reason)
RETURNED = "returned"  # work(item) returned a value
RAISED = "raised"      # it raised an exception (ItemResult.error says which)
EXITED = "exited"      # it called sys.exit / os._exit before returning
DENIED = "denied"      # it failed, and sandlock denied it something on the way
LIMIT = "limit"        # a limit ended it (ItemResult.limit names it)
TIMEOUT = "timeout"    # its time ran out: killed with everything it started
KILLED = "killed"      # a signal ended it, no limit said why
LOST = "lost"          # its actor died and the retries ran out (ItemResult.error says why)


@record
class ItemResult:
    """How one item ended. ``value`` is what ``work(item)`` returned (when
    ``success``), ``error`` a ``CallError`` (``type``, ``message``, ``traceback``) when
    not; ``reason`` one of the constants above; ``limit`` the policy field of the limit
    that ended it or cut its output (``"timeout"``, ``"max_memory"``, ``"max_processes"``,
    ``"max_output"``...); ``denied`` the audit records of what sandlock refused it
    (dicts as in the audit log: ``syscall``, ``destination``, ``reason``...);
    ``node`` the host name of the node it ran on; ``seconds`` how long it took there,
    from the start of its clone to its result (0 for one that never started)."""

    index: int | None
    success: bool
    value: object
    error: CallError | None
    reason: str
    limit: str | None
    denied: tuple
    exit_code: int
    stdout: bytes
    stderr: bytes
    node: str = ""
    seconds: float = 0.0


_STATE: list[object] = []  # what the pool's init returned, in this sandbox (one value)


def keeping(init: Callable[[], object] | None) -> Callable[[], None]:
    """The sandbox's init: the pool's, its return value kept for ``state()``."""
    def run() -> None:
        _STATE[:] = [init() if init is not None else None]

    return run


def state() -> object:
    """What the pool's ``init()`` returned, in the sandbox that runs this item (its
    clones share it copy-on-write). Works wherever ``work`` was defined: a function
    sent by value (a lambda, a function of ``__main__``) does not share init's module
    globals, this does."""
    if not _STATE:
        raise RuntimeError("sandlock.ray.state(): not in a SandboxPool's sandbox")
    return _STATE[0]


def run_item(payload: bytes, memory: int | None) -> object:
    """In the clone: cap its address space ``memory`` bytes above what it has now
    (past it an allocation fails: MemoryError), then ``work(item)``."""
    if memory is not None:
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        budget = _address_space() + memory
        if hard != resource.RLIM_INFINITY:
            budget = min(budget, hard)
        resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
    work, item = pickle.loads(payload)  # noqa: S301 - the driver's bytes, not the sandbox's
    return work(item)


def _address_space() -> int:
    """The clone's virtual size now: a fork of a Ray worker maps gigabytes it never
    touches (thread stacks, the object store), so the cap is a budget above it. Found
    without /proc (the policy may not grant it): the lowest soft RLIMIT_AS under which
    one more page can still be mapped, by bisection (~40 tries, well under 1 ms)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    low, high = 0, 1 << 47  # (x86-64 and arm64 user address spaces are below 2**47)
    if hard != resource.RLIM_INFINITY:
        high = min(high, hard)
    try:
        while high - low > mmap.PAGESIZE:
            middle = (low + high) // 2
            resource.setrlimit(resource.RLIMIT_AS, (middle, hard))
            try:
                mmap.mmap(-1, mmap.PAGESIZE).close()
                high = middle
            except OSError:
                low = middle
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return high - mmap.PAGESIZE


def outcome(index: int | None, call: CallResult, records: list[dict], memory: int | None,
            output: int | None, node: str, seconds: float) -> ItemResult:
    """The ItemResult of a call that took ``seconds``, from its CallResult and the audit
    records written while it ran (its actor runs one item at a time: they are all its)."""
    denied = tuple(r for r in records if r.get("verdict") == "deny" and r.get("event") != "limit")
    stdout, stderr = _bounded(call.stdout or b"", output), _bounded(call.stderr or b"", output)
    cut = len(stdout) < len(call.stdout or b"") or len(stderr) < len(call.stderr or b"")
    limit = _limit_hit(call, records, memory)
    if limit is None and (cut or any(r.get("limit") == "max_output" for r in records)):
        limit = "max_output"
    reason = _reason(call, limit, denied)
    return ItemResult(index, call.success, call.value, call.error, reason, limit, denied,
                      call.exit_code, stdout, stderr, node, seconds)


def _bounded(data: bytes, limit: int | None) -> bytes:
    return data if limit is None else data[:limit]


def _limit_hit(call: CallResult, records: list[dict], memory: int | None) -> str | None:
    if call.timed_out:
        return "timeout"
    for record_ in records:
        if record_.get("event") == "limit" and record_.get("verdict") in ("kill", "deny"):
            return str(record_.get("limit"))
    error = call.error.type if call.error is not None else ""
    if memory is not None and error == "MemoryError":
        return "max_memory"
    return None


def _reason(call: CallResult, limit: str | None, denied: tuple) -> str:
    if call.success:
        return RETURNED
    if call.timed_out:
        return TIMEOUT
    if limit is not None and limit != "max_output":
        return LIMIT
    if denied or (call.error is not None and call.error.type == "PermissionError"):
        return DENIED
    if call.exit_code > 128:
        return KILLED
    if call.error is not None and call.error.type == "SystemExit":
        return EXITED
    return RAISED


def refused(index: int | None, exc: BaseException, node: str) -> ItemResult:
    """An item sandlock could not start (too large to send, a narrowed policy a nested
    sandbox cannot hold): the item's error, nothing ran."""
    from ..api import CallError

    return ItemResult(index, False, None, CallError(type(exc).__name__, str(exc)), RAISED, None,
                      (), EXIT_SETUP, b"", b"", node)


def shut_down(index: int | None) -> ItemResult:
    """An item the pool's shutdown killed, or kept from starting."""
    return lost(index, "the pool was shut down before it ended").replace(reason=KILLED)


def lost(index: int | None, why: str) -> ItemResult:
    """An item whose actor died under it more often than it may be retried."""
    from ..api import CallError

    return ItemResult(index, False, None, CallError("ActorDied", why), LOST, None, (), 137,
                      b"", b"")
