"""A sandbox nested in a running one: ``sb.sandbox(policy)``.

It has a resident of its own, forked by the running sandbox's and confined further by
the static part of ``policy``; every process of the nested sandbox is that resident's
fork, so in its Landlock domain and under its filter as well as the sandbox's (and its
supervisor, its limits). Landlock domains and seccomp filters stack: a nested process
may do only what both policies allow, and nothing can widen either. Network rules of
its own are the parent's supervisor's to apply, to the processes its resident tells
it are its own (net._nests).

    resident ──fork──> nested resident ══ its control socket, its probe ══ sandlock
                                       ──fork──> nested.exec(argv), nested.call(fn)
"""

from __future__ import annotations

import os
import socket

from .._errors import EXIT_TIMEOUT, PolicyError, SetupError
from ..policy import Policy
from ._live import LiveSandbox

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._call import CallResult
    from ._handles import LiveProcess
    from ._result import Result

READER_END_TIMEOUT = 5.0  # seconds, for the reader to see a killed resident's socket close


class NestedSandbox:
    """``run``, ``call`` and ``exec`` as a Sandbox's, inside the running ``live``."""

    def __init__(self, live: LiveSandbox, policy: Policy | str) -> None:
        from ._confine_self import NONE, OWN, nested_confinement

        if isinstance(policy, str):
            from ..policyfiles import load_profile

            policy = load_profile(policy)
        if not isinstance(policy, Policy):
            raise TypeError(f"policy: expected a Policy or a profile name, got {type(policy).__name__}")
        self.policy = policy
        if policy.has_http_rules and not live._sandbox.policy.has_http_rules:
            raise PolicyError("http_allow", "a nested sandbox's HTTP rules are applied by its "
                              "parent's proxy, and the parent has no HTTP rules (so no proxy)")
        confinement, limits, network = nested_confinement(policy, live._process.readable)
        try:
            self._live = NestedLive(live, (confinement.program, limits),
                                    confinement.ruleset.fileno(), policy if network == OWN else None,
                                    vouched=network != NONE)
        finally:
            confinement.close()

    def exec(self, argv: Sequence[str], *, stdin: int | None = None, stdout: int | None = None,
             stderr: int | None = None, pass_fds: Sequence[int] = ()) -> LiveProcess:
        from ..process import check_argv, check_pass_fds

        return self._live.exec(check_argv(argv), (stdin, stdout, stderr), check_pass_fds(pass_fds))

    def run(self, argv: Sequence[str], timeout: float | None = None, *, input: bytes | None = None,
            capture_output: bool = True) -> Result:
        """As ``Sandbox.run``; what the command leaves in its process group ends with it."""
        from ..process import Capture
        from ..process import check_timeout
        from ._result import Result
        from ..process import wait_or_kill

        timeout = self.policy.timeout if timeout is None else check_timeout(timeout)
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
        return self._live.call(fn, tuple(args), dict(kwargs or {}), timeout)


class NestedLive(LiveSandbox):
    """The nested sandbox's side in sandlock: a LiveSandbox whose resident the parent's
    forks; it lives as long as the parent."""

    def __init__(self, parent: LiveSandbox, nested: tuple, ruleset: int,
                 network: Policy | None, vouched: bool = True) -> None:
        """``nested``: the static filter and rlimits; ``ruleset``: the Landlock ruleset's
        descriptor (sent); ``network``: the policy whose network rules narrow the
        parent's for the nested processes, None if it has none of its own; ``vouched``:
        its processes may make sockets, and its resident tells the parent's supervisor
        which are its own (their binds to paths are under its ruleset too: net._nests)
        where Landlock's signal scope lets it (its own rules need that)."""
        self._prepare(parent._sandbox, None)
        self._parent = parent
        self._results = None
        self._process = parent._process
        self.audit = parent.audit
        if network is not None:
            _check_scopes()
        vouched = network is not None or (vouched and _scopes_signals())
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours, ends = [self._control], [theirs]
        try:
            if vouched:
                probe, probe_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                ours.append(probe)
                ends.append(probe_theirs)
            token = parent._new_tokens(1)[0]
            parent._request([], ("nest", token, nested, vouched),
                            [end.fileno() for end in ends] + [ruleset])
            parent.on_close(self._finish)
            self._begin()  # SetupError if its resident could not start
        except BaseException:
            for end in ours:
                end.close()
            raise
        finally:
            for end in ends:
                end.close()
        if vouched:
            from ._confine_self import nested_network_rules

            # Before any process of it exists: none could make a call the rules miss.
            rules = nested_network_rules(network) if network is not None else None
            try:
                parent._process.nest_network(rules, ours[1], f"nested sandbox {token}",
                                             os.dup(ruleset))
            except ValueError as exc:  # (net._nests.NestRefused: too many)
                self._control.close()  # its resident ends
                raise SetupError(str(exc)) from None
            except BaseException:
                self._control.close()
                raise

    def _ended(self) -> None:
        """Its resident is gone (the sandbox is ending, or it was killed): what it
        started ends with it, since nothing would report their ends."""
        with self._changed:
            for process in self._processes.values():
                if process.returncode is None:
                    process.end_group()
                    process.returncode = 137
            self._state = "over"
            self._changed.notify_all()

    def _finish(self) -> None:
        """As the parent closes, once it is over: the resident is gone with it, which
        its reader sees before its socket is closed under it."""
        self.wait_until(lambda: self._state == "over", READER_END_TIMEOUT)
        self._control.close()

    def _check_open(self) -> None:
        self._parent._check_open()
        super()._check_open()

    def close(self, failed: bool = False) -> None:
        """(Only if its resident did not start: the parent's end ends it.)"""
        self._control.close()


def _scopes_signals() -> bool:
    from ..kernel import landlock

    return landlock.abi_version() >= 6  # LANDLOCK_SCOPE_SIGNAL


def _check_scopes() -> None:
    if not _scopes_signals():
        raise SetupError("a nested sandbox's own network rules need Landlock's signal "
                         "scope (Linux 6.12): its processes could not be told apart")
