"""The public API: ``Sandbox(policy).run(argv)`` and ``Sandbox(policy).start(argv)``."""

from __future__ import annotations

import _weakref
import os
import sys

from .._errors import EXIT_TIMEOUT
from ..policy import Policy
from ..process import (
    SandboxedProcess,
    check_argv,
    check_pass_fds,
    check_timeout,
    wait_or_kill,
)
from ._launching import launch, start_report
from ._result import Result

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from ..policyfiles import Checkpoint
    from ..process import WorkspaceOutcome
    from ..runtime import Context, Event
    from ._call import CallResult
    from ._handles import Clone, LiveProcess
    from ._live import LiveSandbox
    from ._nested import NestedSandbox
    from ._pipeline import Stage
    from ._popen import Process


class Sandbox:
    """Runs commands and functions under one Policy; ``with Sandbox(...) as sb:`` keeps
    one sandbox running for the block (``exec``, ``call``, ``fork``, ``pause``, ...)."""

    policy_files: tuple[str, ...] = ()  # those it was read from: read-only in each run

    def __init__(self, policy: Policy | str | None = None, init: Callable[[], object] | None = None,
                 work: Callable[[], object] | None = None, *, audit: str | None = None,
                 quiet: bool = False, dangerously_allow_full_access: bool = False,
                 policy_fn: Callable[[Event, Context], object] | None = None,
                 init_fn: Callable[[], object] | None = None,
                 work_fn: Callable[[int], object] | None = None, name: str | None = None,
                 events: Collection[str] = (), **fields: object) -> None:
        """``policy``: a Policy, or the name of a profile to load (``Sandbox("build")``);
        ``fields``: Policy fields, on top of it (``Sandbox(fs_readable=["/usr"])``).
        ``init``, ``work``: for COW clones (``fork``): ``init()`` runs once in the
        sandbox, each clone runs ``work()``; ``init_fn``, ``work_fn``: the same as
        upstream spells them, ``work_fn(clone_id)`` given the clone's number.
        ``audit``: a file receiving one JSON line per network decision and limit hit.
        ``quiet``: no notices on stderr (denials, DNS warnings).
        ``dangerously_allow_full_access``: the consent a policy in mode full-access needs
        (it never comes from the policy itself, which someone else may have written).
        ``policy_fn(event, ctx)``: hears of the command's network calls, execs and
        processes as they happen, may deny them and tighten the sandbox (docs/api.md).
        ``name``: the sandbox's name, its hostname and its entry in `sandlock ps` while it
        runs (unique per user); without one, ``self.name`` is generated, and unregistered;
        ``events={"file"}``: policy_fn hears of its opens too."""
        if isinstance(policy, str):
            from ..policyfiles import load_profile, profile_path

            self.policy_files, policy = (profile_path(policy),), load_profile(policy)
        if policy is not None and not isinstance(policy, Policy):
            raise TypeError(f"policy: expected a Policy or a profile name, got {type(policy).__name__}")
        for what, value in (("init", init), ("work", work), ("policy_fn", policy_fn),
                            ("init_fn", init_fn), ("work_fn", work_fn)):
            if value is not None and not callable(value):
                raise TypeError(f"{what}: expected a callable, got {type(value).__name__}")
        if (init and init_fn) or (work and work_fn):
            raise TypeError("init/work and init_fn/work_fn are two spellings of one thing: give one")
        if work_fn is not None:
            from ._handles import numbered

            work = numbered(work_fn)
        init = init or init_fn
        policy = policy if policy is not None else Policy()
        self.policy = policy.replace(**fields) if fields else policy
        self.init, self.work = init, work
        if events:  # (a policy_fn told of more: only then an import)
            from ..runtime import observing

            policy_fn = observing(policy_fn, events)
        self.policy_fn, self.full_access_allowed = policy_fn, dangerously_allow_full_access
        self.audit, self.quiet = audit, quiet
        self.named = name is not None  # (only a name given is registered: docs/api.md)
        self.name = _names().check_name(name) if self.named else _generated_name()
        self.warnings: list[str] = []
        self._live: LiveSandbox | None = None
        self._process: SandboxedProcess | None = None  # the last one started (pid, ports)
        self._own: Callable[[], Process | None] = type(None)  # (a weak ref) popen's, create's
        # After a block with a workdir: what became of its copy-on-write workspace.
        self.workspace: WorkspaceOutcome | None = None

    @property
    def pid(self) -> int | None:
        """The pid of the command started last (``run``, ``start``, ``popen``, ``create``)
        while it runs; of a block, its resident."""
        process = self._process
        return (process.pid or None) if process and process.returncode is None else None

    def ports(self) -> dict[int, int]:
        """--port-remap: virtual -> real TCP ports the running sandbox holds (docs/api.md)."""
        return self._process.ports() if self.pid else {}  # type: ignore[union-attr]

    # --- a sandbox kept for a block ----------------------------------------------------

    def __enter__(self) -> Sandbox:
        if self._live is not None:
            raise RuntimeError("this sandbox is already running (one block at a time)")
        from ._live import LiveSandbox

        self._live = LiveSandbox(self, self.init, self.work)
        return self

    def __exit__(self, *exc: object) -> None:
        live, self._live = self._live, None
        if live is not None:
            self.workspace = live.close(failed=exc[0] is not None)

    def exec(self, argv: Sequence[str], *, stdin: int | None = None, stdout: int | None = None,
             stderr: int | None = None, pass_fds: Sequence[int] = ()) -> LiveProcess:
        """Start ``argv`` in the running sandbox; stdio are descriptors (None: the
        sandbox's, i.e. this process's when the block began). Returns its handle."""
        return self._running("exec").exec(check_argv(argv), (stdin, stdout, stderr),
                                          check_pass_fds(pass_fds))

    def fork(self, n: int) -> list[Clone]:
        """``n`` copy-on-write clones of the sandbox's process that ran ``init()``, each
        running ``work()`` with CLONE_ID 0..n-1 in its environment. In a block, they
        run on as it goes on; outside one (upstream's way), the sandbox runs for them
        alone: they have ended, their output gathered, when it returns (a ForkResult)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TypeError(f"n: expected a number of clones (an int >= 0), got {n!r}")
        if self._live is None:
            from ._handles import fork_apart

            return fork_apart(self, n)
        return self._running("fork").fork(n)

    def reduce(self, argv: Sequence[str], clones: Sequence[Clone], timeout: float | None = None) -> Result:
        """Run ``argv`` with what ``clones`` wrote to their stdout as its input, clone
        by clone in their order (upstream's map-reduce: ``reducer.reduce(argv, clones)``)."""
        from ._handles import gathered

        return self.run(argv, timeout, input=gathered(clones))

    def pause(self) -> None:
        """Stop every process of the running sandbox (none runs until ``resume``)."""
        self._running("pause").pause()

    def resume(self) -> None:
        self._running("resume").resume()

    def wait(self, timeout: float | None = None) -> int | None:
        """Until everything started in the running sandbox has ended; the exit code of
        the first command ``exec`` started (None if none). Past ``timeout`` (default:
        the policy's), the sandbox is killed and 124 returned."""
        timeout = self.policy.timeout if timeout is None else check_timeout(timeout)
        return self._running("wait").wait(timeout)

    def kill(self) -> None:
        """Kill every process of the running sandbox; it is over (leave its block)."""
        self._running("kill").kill()

    def update(self, **limits: object) -> None:
        """New max_memory, max_processes, max_cpu, at most the starting ones (docs/api.md)."""
        self._running("update").update(limits)

    def sandbox(self, policy: Policy | str) -> NestedSandbox:
        """A sandbox nested in the running one: ``run``, ``call`` and ``exec`` start
        its processes in this sandbox, each confined further by ``policy``'s static
        part, so they may do only what both policies allow (docs/api.md)."""
        from ._nested import NestedSandbox

        return NestedSandbox(self._running("sandbox"), policy)

    def checkpoint(self, save_fn: Callable[[], bytes | None] | None = None) -> Checkpoint:
        """The running sandbox's policy and ``save_fn()``'s bytes, its processes stopped."""
        from ._popen import checkpoint

        return checkpoint(self, save_fn)

    @classmethod
    def restore(cls, checkpoint: Checkpoint, restore_fn: Callable[[bytes], object] | None = None,
                **options: object) -> Sandbox:
        """A Sandbox under ``checkpoint``'s policy, ``restore_fn(app_state)`` called first."""
        if restore_fn is not None and checkpoint.app_state is not None:
            restore_fn(checkpoint.app_state)
        return cls(checkpoint.policy, **options)

    def _running(self, method: str) -> LiveSandbox:
        if self._live is None:
            raise RuntimeError(f"{method}() needs a running sandbox: "
                               f"`with Sandbox(policy) as sb: sb.{method}(...)`")
        return self._live

    def popen(self, argv: Sequence[str], *, stdin: object = None, stdout: object = None,
              stderr: object = None, pass_fds: Sequence[int] = ()) -> Process:
        """Start ``argv`` confined, each stdio a ``StdioMode`` (PIPED: a pipe the
        returned ``Process`` owns; NULL; INHERIT) or a descriptor (docs/api.md, "popen")."""
        return self._own_process("popen", argv, (stdin, stdout, stderr), pass_fds, False)

    def create(self, argv: Sequence[str], *, stdin: object = None, stdout: object = None,
               stderr: object = None, pass_fds: Sequence[int] = ()) -> Process:
        """``popen``, parked: the command is confined and its pid known, and it waits
        for ``start()`` to exec (killed, it never ran)."""
        return self._own_process("create", argv, (stdin, stdout, stderr), pass_fds, True)

    def _own_process(self, method: str, argv: Sequence[str], stdio: tuple[object, ...],
                     pass_fds: Sequence[int], parked: bool) -> Process:
        if self._live is not None:
            raise RuntimeError(f"{method}() starts a sandbox of its own: in a running one, "
                               f"use exec()")
        if (own := self._own()) is not None and own.is_running:
            raise RuntimeError(f"{method}(): this sandbox already runs {own.args[0]!r}: wait()")
        from ._popen import popen

        process = popen(self, argv, stdio, pass_fds, parked=parked)  # type: ignore[arg-type]
        self._own = _weakref.ref(process)
        return process

    @property
    def is_running(self) -> bool:
        """A block's sandbox, or the command ``popen``/``create`` started, runs."""
        own = self._own()
        return self._live is not None or (own is not None and own.is_running)

    def start(self, argv: Sequence[str] | None = None, *, stdin: int | None = None,
              stdout: int | None = None, stderr: int | None = None, foreground: bool = False,
              pass_fds: Sequence[int] = (), dry_run: bool = False) -> SandboxedProcess | Process:
        """Start ``argv`` confined; stdio are file descriptors (None: inherit). Without
        ``argv``: let the command ``create`` parked exec, and return its Process.

        The command inherits no other descriptor of this process but ``pass_fds``
        (under the same numbers). With ``foreground`` and a terminal, the command
        becomes the terminal's foreground job for as long as it runs (what the CLI does).
        ``dry_run``: see ``dry_run()``; the process's ``workspace`` says what it changed.
        """
        if argv is None:
            if (own := self._own()) is None or own._process._parked is None:
                raise RuntimeError("start(): the sandbox has not been created (create(argv) first)")
            own.start()
            return own
        return self._launch(check_argv(argv), None, (stdin, stdout, stderr),
                            check_pass_fds(pass_fds), foreground, dry_run=dry_run)

    def call(self, fn: Callable[..., object], args: tuple = (),
             kwargs: Mapping[str, object] | None = None, timeout: float | None = None) -> CallResult:
        """Run ``fn(*args, **kwargs)`` in a confined copy of this process (its modules and
        data shared copy-on-write) and return a CallResult: ``value`` is what fn returned
        (pickled across), ``error`` what it raised. ``timeout`` defaults to the policy's."""
        from ._call import call, check_call

        if self._live is None:
            return call(self, fn, args, kwargs, timeout)
        check_call(fn, args, kwargs, timeout)
        return self._live.call(fn, tuple(args), dict(kwargs or {}), timeout)

    def _launch(self, argv: list[str], function: Callable[[int], int] | None,
                stdio: tuple[int | None, int | None, int | None], pass_fds: tuple[int, ...],
                foreground: bool = False, resident: bool = False, *,
                dry_run: bool = False, parked: bool = False, pausable: bool = False,
                fd_map: tuple[tuple[int, int], ...] = ()) -> SandboxedProcess:
        """Start ``argv``, or run ``function`` instead of exec (``argv`` names it);
        ``resident``: the function is a long-lived sandbox's resident process;
        ``dry_run``: the workspace's changes are listed and discarded; ``parked``: the
        command waits, confined, for ``release()`` before its exec (``create``);
        ``pausable``: its processes can be stopped and continued (``popen``);
        ``fd_map``: (target, source) descriptors at other numbers (a gather's sources)."""
        return launch(self, argv, function, stdio, pass_fds, foreground, resident, dry_run=dry_run,
                      parked=parked, pausable=pausable, fd_map=fd_map)

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        *,
        input: bytes | None = None,
        capture_output: bool = True,
        pass_fds: Sequence[int] = (),
    ) -> Result:
        """Run ``argv`` to completion (like subprocess.run) and return its Result;
        past ``timeout`` (default: the policy's) the whole tree is killed (exit_code 124)."""
        return self._run(argv, timeout, input, capture_output, pass_fds)

    def dry_run(self, argv: Sequence[str], timeout: float | None = None, *,
                input: bytes | None = None, capture_output: bool = True,
                pass_fds: Sequence[int] = ()) -> Result:
        """``run``, with what ``argv`` writes to its workdir (the policy's, else the
        current directory) captured, then discarded (``result.changes``); its other
        write grants become reads."""
        return self._run(argv, timeout, input, capture_output, pass_fds, dry_run=True)

    def _run(self, argv: Sequence[str], timeout: float | None, input: bytes | None,
             capture_output: bool, pass_fds: Sequence[int], *, dry_run: bool = False) -> Result:
        from ..process import Capture  # threads: only paid for by callers who capture
        timeout = self.policy.timeout if timeout is None else check_timeout(timeout)
        limit = self.policy.max_output
        # Not captured but limited: passed on to sandlock's own stdout and stderr.
        with Capture(input, capture_output or limit is not None, limit=limit,
                     forward=not capture_output) as capture:
            process = self.start(argv, pass_fds=pass_fds, dry_run=dry_run, **capture.child_stdio())
            capture.start()
            timed_out = wait_or_kill(process, timeout)
            stdout, stderr = capture.finish()
        drops = capture.drop_notices(process.audit)
        if not self.quiet:
            for notice in drops:
                print(notice, file=sys.stderr)
        if process.start_error:  # where users look, as the CLI says it (docs/api.md)
            stderr = start_report(self, argv, process, stderr)
        code = EXIT_TIMEOUT if timed_out else process.returncode
        return Result(code, stdout, stderr, timed_out, process.start_error, process.workspace)

    def cmd(self, argv: Sequence[str]) -> Stage:
        """``argv`` as a stage of a pipeline, confined by this sandbox's policy:
        ``(a.cmd(["cat", path]) | b.cmd(["wc", "-l"])).run()`` (docs/api.md, "Pipelines")."""
        from ._pipeline import Stage  # loaded only by programs that make a pipeline

        return Stage(self, argv)


_unnamed = 0  # sandboxes made here without a name: sandbox-PID-N (upstream's generated names)


def _generated_name() -> str:
    """(Not itertools.count: a plain run does not import itertools. Only a label: an
    unnamed sandbox is never registered.)"""
    global _unnamed
    _unnamed += 1
    return f"sandbox-{os.getpid()}-{_unnamed}"


def _names():  # noqa: ANN202 - (the registry: imported by named sandboxes only)
    from .. import registry

    return registry
