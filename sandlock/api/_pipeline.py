"""Pipelines of sandboxed commands: ``a.cmd(argv) | b.cmd(argv) | ...``.

Each stage is started by its own ``Sandbox.start``, so it is confined by that
sandbox's policy alone (its Landlock domain, network rules, supervisor and limits);
the stages are joined by kernel pipes, as a shell joins them, and the data between
them never passes through sandlock. sandlock reads only what a shell's caller would:
the last stage's stdout and every stage's stderr (``Capture``, with each sandbox's
``max_output``), and it feeds ``input`` to the first stage.
"""

from __future__ import annotations

import math
import os
import select
import sys
import time
from contextlib import ExitStack

from .._errors import EXIT_TIMEOUT
from .._record import DataclassView, record
from ..process import Capture, check_argv, check_timeout
from ._sandbox import Sandbox

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..process import SandboxedProcess
    from ._result import Result

_POLL_MOST = (1 << 31) - 1  # poll()'s timeout: milliseconds in a C int


@record
class Stage:
    """One command of a pipeline: ``argv`` run under ``sandbox``'s policy.

    Made by ``sandbox.cmd(argv)``; ``stage | stage`` makes a ``Pipeline``."""

    sandbox: Sandbox
    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.sandbox, Sandbox):
            raise TypeError(f"sandbox: expected a Sandbox, got {type(self.sandbox).__name__}")
        # Checked here, where the stage is written, not when the pipeline runs.
        object.__setattr__(self, "argv", tuple(check_argv(self.argv)))

    def __or__(self, other: object) -> Pipeline:
        stages = _stages_of(other)
        return NotImplemented if stages is None else Pipeline((self, *stages))

    @property
    def args(self) -> tuple[str, ...]:
        """(upstream's name for ``argv``)"""
        return self.argv

    def run(self, timeout: float | None = None, *, input: bytes | None = None) -> Result:
        """This stage alone: ``sandbox.run(argv)``."""
        return self.sandbox.run(self.argv, timeout, input=input)

    def as_(self, name: str) -> NamedStage:
        """This stage as a named source of a gather: ``a.as_("x") + b.as_("y") | c``."""
        return NamedStage(self, name)

    def __add__(self, other: object) -> Gather:
        raise TypeError("a gather's sources are named: stage.as_(name) + stage.as_(name)")


@record
class NamedStage:
    """A stage whose stdout is one named source of a gather (``stage.as_(name)``)."""

    stage: Stage
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.stage, Stage):
            raise TypeError(f"stage: expected a Stage, got {type(self.stage).__name__}")
        if not isinstance(self.name, str) or not self.name.isidentifier() or not self.name.isascii():
            # (it names a variable of the consumer's environment: SANDLOCK_INPUT_<name>)
            raise ValueError(f"name: expected a name of letters, digits and _, got {self.name!r}")

    def __add__(self, other: object) -> Gather:
        return Gather((self,)) + other


@record
class Gather:
    """Named sources whose outputs all reach the stage after it (``| stage``): the
    last source on its stdin, the others on descriptors 3, 4, ... in order; the
    consumer's environment names them (``sandlock.inputs``; docs/api.md)."""

    sources: tuple[NamedStage, ...]

    def __post_init__(self) -> None:
        sources = tuple(self.sources) if isinstance(self.sources, (list, tuple)) else ()
        if not sources or not all(isinstance(source, NamedStage) for source in sources):
            raise TypeError("sources: expected stages named with stage.as_(name)")
        names = [source.name for source in sources]
        if len(set(names)) < len(names):
            raise ValueError(f"sources: each name once, got {names}")
        object.__setattr__(self, "sources", sources)

    def __add__(self, other: object) -> Gather:
        if isinstance(other, NamedStage):
            return Gather((*self.sources, other))
        if isinstance(other, Gather):
            return Gather((*self.sources, *other.sources))
        return NotImplemented

    def __or__(self, other: object) -> Pipeline:
        stages = _stages_of(other)
        return NotImplemented if stages is None else Pipeline((self, *stages))


@record
class Pipeline:
    """Stages whose stdout feeds the next one's stdin: ``a.cmd(x) | b.cmd(y)``; the
    first may be a ``Gather`` of named sources."""

    stages: tuple[Stage | Gather, ...]

    def __post_init__(self) -> None:
        stages = tuple(self.stages) if isinstance(self.stages, (list, tuple)) else ()
        gathered = bool(stages) and isinstance(stages[0], Gather)
        if not stages or not all(isinstance(stage, Stage) for stage in stages[gathered:]):
            raise TypeError("stages: expected a non-empty sequence of Stage (sandbox.cmd(argv)), "
                            "the first of which may be a Gather")
        if gathered and len(stages) < 2:
            raise TypeError("stages: a Gather needs the stage that reads it (gather | stage)")
        object.__setattr__(self, "stages", stages)

    def __or__(self, other: object) -> Pipeline:
        stages = _stages_of(other)
        return NotImplemented if stages is None else Pipeline((*self.stages, *stages))

    def run(self, timeout: float | None = None, *, input: bytes | None = None,
            stdout: object = None) -> PipelineResult:
        """Run every stage to completion and return a ``PipelineResult``.

        ``timeout`` applies to each stage (default: its own policy's); a stage still
        running when it expires is killed with everything it started (exit 124).
        ``input`` is fed to the first stage's stdin (None: it inherits sandlock's).
        ``stdout``: a descriptor or file the last stage writes to instead of being
        captured (``result.stdout`` is then empty).
        """
        timeout = _check_timeout(timeout)
        input = _check_input(input)
        output = _check_output(stdout)
        stages, sources = _flat(self.stages)
        with ExitStack() as cleanup:
            captures = [cleanup.enter_context(_capture(stage, input if index == 0 else None))
                        for index, stage in enumerate(stages)]
            processes = _start_all(stages, captures, output, sources)
            try:
                killed = _wait_all(processes, _time_limits(stages, timeout))
            except BaseException:  # (Ctrl-C) the captures' threads would wait for EOF forever
                _kill_all(processes)
                raise
            outputs = [capture.finish() for capture in captures]
        _report_drops(stages, captures, processes)
        return PipelineResult(
            exit_codes=tuple(EXIT_TIMEOUT if was_killed else process.returncode
                             for process, was_killed in zip(processes, killed)),
            stdout=outputs[-1][0],
            stderr=tuple(err for _, err in outputs),
            timed_out=any(killed),
            start_errors=tuple(process.start_error for process in processes),
        )


@record
class PipelineResult:
    """How a pipeline ended: one entry per stage in ``exit_codes``, ``stderr`` and
    ``start_errors`` (a gather's sources first, in order); ``stdout`` is the last stage's."""

    exit_codes: tuple[int, ...]  # shell convention: 128+N for signal N, 124 on timeout
    stdout: bytes
    stderr: tuple[bytes, ...]
    timed_out: bool = False  # some stage was killed for time
    start_errors: tuple[str | None, ...] = ()  # why a stage could not start, if it could not
    __dataclass_fields__ = DataclassView()  # dataclasses.fields/replace/asdict, on demand

    @property
    def exit_code(self) -> int:
        """The last stage's exit status (what a shell's ``$?`` says)."""
        return self.exit_codes[-1]

    @property
    def success(self) -> bool:
        """Every stage exited 0 (as with ``set -o pipefail``)."""
        return all(code == 0 for code in self.exit_codes)

    @property
    def error(self) -> str | None:
        """What went wrong other than an exit status, as upstream says it: a stage
        killed for time, or the first stage that could not start and why."""
        if self.timed_out:
            return "Pipeline timed out"
        return next((f"stage {index + 1}: {error}" for index, error in enumerate(self.start_errors)
                     if error), None)


def _stages_of(operand: object) -> tuple[Stage, ...] | None:
    """The stages ``operand`` adds to a pipeline; None: not something ``|`` joins."""
    if isinstance(operand, Stage):
        return (operand,)
    if isinstance(operand, Pipeline):
        return operand.stages
    return None


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout: expected a number of seconds, got {type(timeout).__name__}")
    return check_timeout(timeout)


def _check_input(data: object) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"input: expected bytes, got {type(data).__name__}")


def _capture(stage: Stage, input: bytes | None) -> Capture:
    """The stage's pipes to sandlock. Its stdout pipe serves the last stage only: the
    others write into the next stage's stdin instead, and their capture reads EOF."""
    return Capture(input, True, limit=stage.sandbox.policy.max_output)


def _check_output(stdout: object) -> int | None:
    """The descriptor ``stdout`` names: an int, or a file object's."""
    fd = stdout.fileno() if hasattr(stdout, "fileno") else stdout
    if fd is None or (isinstance(fd, int) and not isinstance(fd, bool) and fd >= 0):
        return fd
    raise TypeError(f"stdout: expected a file or a descriptor, got {type(stdout).__name__}")


def _flat(stages: Sequence[Stage | Gather]) -> tuple[list[Stage], tuple[str, ...]]:
    """Every stage, a gather's sources first; the sources' names."""
    if not isinstance(stages[0], Gather):
        return list(stages), ()  # type: ignore[arg-type]
    sources = stages[0].sources
    return [source.stage for source in sources] + list(stages[1:]), tuple(s.name for s in sources)


def _start_all(stages: Sequence[Stage], captures: Sequence[Capture], output: int | None = None,
               sources: tuple[str, ...] = ()) -> list[SandboxedProcess]:
    """Start the stages in order, each reading the pipe the one before writes (the
    stage after a gather's sources reads them all). If one cannot start, those already
    running are killed and the error raised."""
    processes: list[SandboxedProcess] = []
    gathered: list[int] = []  # the sources' read ends, for the stage after them
    upstream = -1  # the read end the next stage gets as its stdin
    downstream = (-1, -1)
    try:
        for index, (stage, capture) in enumerate(zip(stages, captures)):
            stdio = capture.child_stdio()
            if index >= max(len(sources), 1):  # (a gather's sources read no other stage)
                stdio["stdin"] = upstream
            if index < len(stages) - 1:
                downstream = os.pipe()
                stdio["stdout"] = downstream[1]
            elif output is not None:
                stdio["stdout"] = output  # (the capture's stdout pipe then reads EOF)
            if index == len(sources) and sources:  # the consumer of the gather
                processes.append(_start_consumer(stage, stdio, sources, gathered))
            else:
                processes.append(stage.sandbox.start(list(stage.argv), **stdio))
            capture.start()
            # Only the stages hold these now: sandlock's copies would keep a reader
            # from ever seeing EOF (and a writer from ever getting SIGPIPE).
            _close(downstream[1], *([upstream] if index >= len(sources) else []))
            if index < len(sources) - 1:
                gathered.append(downstream[0])  # (the last source's: the consumer's stdin)
            else:
                upstream = downstream[0]
            downstream = (-1, -1)
            if index == len(sources) and sources:
                _close(*gathered)
                gathered.clear()
    except BaseException:
        _kill_all(processes)
        raise
    finally:
        _close(upstream, *downstream, *gathered)
    return processes


def _start_consumer(stage: Stage, stdio: dict[str, int], sources: tuple[str, ...],
                    gathered: list[int]) -> SandboxedProcess:
    """The stage after a gather: the last source on its stdin (already in ``stdio``),
    the others on 3, 4, ...; ``SANDLOCK_INPUTS`` (``name=fd ...``) and a
    ``SANDLOCK_INPUT_<name>`` for each say which (its own policy, with them added)."""
    import copy

    numbers = [*range(3, 3 + len(gathered)), 0]
    names = dict(zip(sources, numbers))
    env = {**stage.sandbox.policy.env, "SANDLOCK_INPUTS": " ".join(f"{n}={fd}" for n, fd in names.items()),
           **{f"SANDLOCK_INPUT_{name}": str(fd) for name, fd in names.items()}}
    sandbox = copy.copy(stage.sandbox)
    sandbox.policy = sandbox.policy.replace(env=env)
    stdio_fds = (stdio.get("stdin"), stdio.get("stdout"), stdio.get("stderr"))
    return sandbox._launch(list(stage.argv), None, stdio_fds, (),
                           fd_map=tuple(zip(numbers, gathered)))


def _time_limits(stages: Sequence[Stage], timeout: float | None) -> list[float | None]:
    """Each stage's time: ``timeout`` for all, else its own policy's (as Sandbox.run)."""
    return [stage.sandbox.policy.timeout if timeout is None else timeout for stage in stages]


def _wait_all(processes: Sequence[SandboxedProcess], limits: Sequence[float | None]) -> list[bool]:
    """Wait until every stage has ended, killing each one still running when its time
    is up (its keeper kills its whole tree; the audit log says so). Which ones were."""
    start = time.monotonic()
    deadlines = [None if limit is None else start + limit for limit in limits]
    killed = [False] * len(processes)
    while live := [i for i, process in enumerate(processes) if process.returncode is None]:
        now = time.monotonic()
        expired = [i for i in live if deadlines[i] is not None and deadlines[i] <= now]
        for i in expired:
            killed[i] = True
            processes[i].end_for_timeout(limits[i])
        if not expired:
            pending = [deadlines[i] for i in live if deadlines[i] is not None]
            _wait_any([processes[i] for i in live], min(pending) - now if pending else None)
    return killed


def _wait_any(processes: Sequence[SandboxedProcess], timeout: float | None) -> None:
    """Until a keeper of ``processes`` reports (an exit, mostly) or ``timeout`` passes."""
    poller = select.poll()
    by_fd = {}
    for process in processes:
        by_fd[process.fileno()] = process
        poller.register(process.fileno(), select.POLLIN)
    # poll() takes a C int of milliseconds (24.8 days); a longer wait is polled again.
    milliseconds = None if timeout is None else min(max(0, math.ceil(timeout * 1000)), _POLL_MOST)
    for fd, _ in poller.poll(milliseconds):
        by_fd[fd].take_news()


def _kill_all(processes: Sequence[SandboxedProcess]) -> None:
    """Kill every sandbox at once, then reap each (a keeper reports once its tree is gone)."""
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def _report_drops(stages: Sequence[Stage], captures: Sequence[Capture],
                  processes: Sequence[SandboxedProcess]) -> None:
    """What each stage's max_output cut: in its audit log, and said unless it is quiet."""
    for stage, capture, process in zip(stages, captures, processes):
        notices = capture.drop_notices(process.audit)
        if not stage.sandbox.quiet:
            for notice in notices:
                print(notice, file=sys.stderr)


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
