"""A sandbox nested in a running one: ``sb.sandbox(policy)``.

Its processes are the running sandbox's (forked by its resident, under its Landlock
domain, seccomp filter, supervisor and limits), each confined further by the static
part of ``policy`` before it runs: Landlock domains stack and seccomp filters stack,
so what a nested process may do is what both allow, and nothing can widen either.
Its network is none, or its parent's (see ``nested_confinement``).
"""

from __future__ import annotations

from .._errors import EXIT_TIMEOUT
from ..policy import Policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._call import CallResult
    from ._handles import LiveProcess
    from ._live import LiveSandbox
    from ._sandbox import Result


class NestedSandbox:
    """``run``, ``call`` and ``exec`` as a Sandbox's, inside the running ``live``."""

    def __init__(self, live: LiveSandbox, policy: Policy | str) -> None:
        from ._confine_self import nested_confinement

        if isinstance(policy, str):
            from ..policy import load_profile

            policy = load_profile(policy)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy: expected a Policy or a profile name, got {type(policy).__name__}")
        self.policy = policy
        self._live = live
        self._nesting = nested_confinement(policy)  # compiled once; its ruleset sent each time
        live.on_close(self._nesting[0].close)

    def exec(self, argv: Sequence[str], *, stdin: int | None = None, stdout: int | None = None,
             stderr: int | None = None, pass_fds: Sequence[int] = ()) -> LiveProcess:
        from ._inputs import check_argv, check_pass_fds

        return self._live.exec(check_argv(argv), (stdin, stdout, stderr), check_pass_fds(pass_fds),
                               self._nesting)

    def run(self, argv: Sequence[str], timeout: float | None = None, *, input: bytes | None = None,
            capture_output: bool = True) -> Result:
        """As ``Sandbox.run``; what the command leaves in its process group ends with it."""
        from ._capture import Capture
        from ._sandbox import Result, wait_or_kill

        timeout = self.policy.timeout if timeout is None else timeout
        with Capture(input, capture_output) as capture:
            stdio = capture.child_stdio()
            process = self.exec(argv, stdin=stdio["stdin"], stdout=stdio["stdout"],
                                stderr=stdio["stderr"])
            capture.start()
            timed_out = wait_or_kill(process, timeout)
            process.end_group()
            stdout, stderr = capture.finish(1.0)
        code = EXIT_TIMEOUT if timed_out else process.returncode
        return Result(code, stdout, stderr, timed_out, process.start_error)

    def call(self, fn: Callable[..., object], args: tuple = (),
             kwargs: Mapping[str, object] | None = None, timeout: float | None = None) -> CallResult:
        """As a running sandbox's ``call`` (``fn`` picklable by reference)."""
        from ._call import check_call

        check_call(fn, args, kwargs, timeout)
        timeout = self.policy.timeout if timeout is None else timeout
        return self._live.call(fn, tuple(args), dict(kwargs or {}), timeout, self._nesting)
