"""Copy-on-write clones as upstream Sandlock spells them: ``Sandbox(policy,
init_fn=..., work_fn=...).fork(n)`` outside a block (the sandbox runs for the clones
alone, and they have ended when it returns), ``work_fn(clone_id)``, and
``reducer.reduce(argv, clones)``, which gives a command what the clones printed.

A clone's stdout is kept in a memfd of its own and sent back with its value, so no
clone can write into another's output, and the order is the clones' own."""

from __future__ import annotations

import os

from ._call import CallError, EXIT_RAISED, error_outcome, flush_streams
from ._result import ExitStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ._handles import Clone
    from ._sandbox import Sandbox

_MARK = "sandlock.fork"  # what a captured clone's value starts with


def numbered(work_fn: Callable[[int], object]) -> Callable[[], object]:
    """``work_fn(clone_id)`` as a ``work()`` (the clone's number is in CLONE_ID)."""

    def work() -> object:
        return work_fn(int(os.environ["CLONE_ID"]))

    work.__qualname__ = getattr(work_fn, "__qualname__", "work_fn")
    return work


class _Captured:
    """(In each clone:) ``work()`` with its stdout in a memfd, sent back with its
    outcome: (_MARK, ("value", v) or ("error", type, message, traceback), stdout)."""

    def __init__(self, work: Callable[[], object]) -> None:
        self._work = work

    def __call__(self) -> tuple:
        memfd = os.memfd_create("sandlock-clone-stdout", os.MFD_CLOEXEC)
        os.dup2(memfd, 1)
        try:
            outcome = ("value", self._work())
        except Exception as exc:  # noqa: BLE001 - the clone's error, sent with its output
            outcome = error_outcome(exc)
        flush_streams()
        return (_MARK, outcome, os.pread(memfd, os.fstat(memfd).st_size, 0))


class ForkedClone:
    """One clone of a fork made outside a block, ended: ``clone_id``, ``pid``,
    ``success``, ``value`` (what ``work`` returned) or ``error``, ``stdout``."""

    def __init__(self, clone: Clone) -> None:
        self.clone_id, self.pid = clone.clone_id, clone.pid
        self.stdout = b""
        payload = clone.value if clone.success else None
        if isinstance(payload, tuple) and len(payload) == 3 and payload[0] == _MARK \
                and isinstance(payload[2], bytes):
            outcome, self.stdout = payload[1], payload[2]
            self.success = outcome[0] == "value"
            self.value = outcome[1] if self.success else None
            self.error = None if self.success else CallError(*outcome[1:])
            code = clone.returncode if self.success else EXIT_RAISED
        else:  # it never returned: killed, a limit, or a value that could not come back
            self.success, self.value = False, None
            self.error = clone.error if not clone.success else CallError(
                "UnpicklingError", "the clone sent no result sandlock knows")
            code = clone.returncode or EXIT_RAISED
        self.returncode = ExitStatus(code)

    def wait(self, timeout: float | None = None) -> ExitStatus:
        """Its exit status (it has ended already)."""
        return self.returncode


class ForkResult(list):
    """``fork(n)``'s clones, ended, in clone order; ``pids`` as upstream lists them."""

    @property
    def pids(self) -> list[int]:
        return [clone.pid for clone in self]


def fork_apart(sandbox: Sandbox, count: int) -> ForkResult:
    """The sandbox started for ``count`` clones alone (``init`` once), until they have
    all ended or the policy's timeout kills them."""
    if sandbox.work is None:
        raise RuntimeError("fork() needs work: Sandbox(policy, init_fn=..., work_fn=...)")
    from ._live import LiveSandbox

    live = sandbox._live = LiveSandbox(sandbox, sandbox.init, _Captured(sandbox.work))
    failed = True
    try:
        clones = live.fork(count)
        live.wait(sandbox.policy.timeout)
        failed = False
    finally:
        sandbox._live = None
        sandbox.workspace = live.close(failed=failed)
    return ForkResult(ForkedClone(clone) for clone in clones)


def gathered(clones: Iterable[ForkedClone] | Sequence[Clone]) -> bytes:
    """What ``clones`` printed, clone after clone."""
    outputs = [getattr(clone, "stdout", None) for clone in clones]
    if any(output is None for output in outputs):
        raise TypeError("reduce() reads the clones of a fork made outside a block "
                        "(Sandbox(policy, init_fn, work_fn).fork(n)): in a block, clones "
                        "write to the sandbox's own stdout")
    return b"".join(outputs)
