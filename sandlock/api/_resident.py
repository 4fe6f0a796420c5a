"""The resident process of a long-lived sandbox (``with Sandbox(policy) as sb:``).

It takes the command's place in the sandbox (confined like one, its listener handed
to sandlock) but never execs: it serves sandlock's requests on a control socket and
forks every process the sandbox runs, which therefore share its Landlock domain, its
seccomp filter (so sandlock's one supervisor), its namespaces and its limits.

    sandlock ══ control (SOCK_SEQPACKET) ══ resident ──fork──> sb.exec(argv)
                                                     ──fork──> sb.call(fn)
                                                     ──fork──> sb.fork(n): clones of work()

Requests come pickled from sandlock (which the resident trusts), with descriptors
attached; what goes back is text sandlock parses and never unpickles:
``pid TOKEN HOSTPID`` (said by the new process itself), ``exit TOKEN STATUS``,
``fail TOKEN ERRNO`` (exec failed), ``unborn TOKEN ERRNO`` (fork failed), and
``ready`` or ``failed MESSAGE`` once ``init()`` has run.
A clone's value goes to the results socket, where the kernel stamps each message with
its sender's pid.
"""

from __future__ import annotations

import _signal
import errno
import fcntl
import gc
import os
import pickle
import select
import socket
import sys

from .._errors import EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_SETUP
from ..confinement import apply_static, neutral_layer
from ..kernel import close_on_exec_from, exited_children, landlock
from ._call import Runner, collecting, flush_streams, fresh_stdin, standard_streams
from ..process import exec_argv
from ..process import answer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..limits import KernelLimits

    Nested = tuple[bytes, KernelLimits | None]  # a nested sandbox's filter and rlimits

MAX_REQUEST = 1 << 18  # a request's bytes (a call's pickled function and arguments)
MAX_FDS = 64


class Resident:
    """The function the sandbox's command slot runs (``ChildSpec.function``)."""

    def __init__(self, control: int, results: int, init: Callable[[], object] | None,
                 work: Callable[[], object] | None, probe: int = -1) -> None:
        self._control_fd = control
        self._results = results  # -1 without work
        self._probe = probe  # a nested sandbox's that vouches for its processes: process.answer
        self._init = init
        self._work = work
        self._children: dict[int, int] = {}  # pid (in the sandbox) -> token
        self._own: list[int] = []  # descriptors no process it forks may keep
        self._calls: set[int] = set()  # tokens of calls (their process groups die with them)
        self._collecting = gc.isenabled()  # (made in the embedding program: its collector's)

    def __call__(self, host_proc: int) -> int:
        control = socket.socket(fileno=self._control_fd)
        self._host_proc = host_proc
        self._null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._fence = _fence()
        self._enter_fence = self._fence.restricter() if self._fence is not None else None
        standard_streams()  # once, here: the processes it forks keep them (see Runner)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        _signal.set_wakeup_fd(wake_w)  # a SIGCHLD wakes the poll below
        _signal.signal(_signal.SIGCHLD, _noted)
        fence = self._fence.fileno() if self._fence is not None else -1
        self._own = [fd for fd in (self._control_fd, host_proc, self._results, wake_r, wake_w,
                                   fence, self._probe) if fd >= 0]
        if not self._run_init():
            return 1
        probe = socket.socket(fileno=self._probe) if self._probe >= 0 else None
        poller = select.poll()
        for fd in (self._control_fd, wake_r, self._probe):
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        while True:
            for fd, _events in poller.poll():
                if fd == wake_r:
                    _drain(wake_r)
                    self._reap()
                elif probe is not None and fd == self._probe:
                    if not answer(probe):
                        poller.unregister(fd)  # sandlock asks no more
                elif not self._serve(control):
                    return 0  # sandlock hung up: the sandbox ends with us

    def _run_init(self) -> bool:
        collecting(self._collecting)
        if self._init is not None:
            try:
                self._init()
            except BaseException as exc:  # noqa: BLE001 - said to sandlock, which raises it
                self._say(b"failed " + f"{type(exc).__name__}: {exc}".encode(errors="replace"))
                return False
            finally:
                flush_streams()  # else every process forked would print again what init buffered
                sys.stdin = fresh_stdin()  # and what it read ahead is not theirs to read
        if self._collecting:
            # What init built, out of every later collection as the program's is (its
            # garbage first, which would else be kept for good): a process forked from
            # here that collects would else copy each page that holds one of its objects.
            gc.collect()
            gc.freeze()
        self._say(b"ready")
        return True

    def _serve(self, control: socket.socket) -> bool:
        try:
            data, fds, _flags, _address = socket.recv_fds(control, MAX_REQUEST, MAX_FDS)
        except InterruptedError:
            return True
        if not data:
            return False
        request = pickle.loads(data)  # from sandlock only: the socket is ours
        try:
            getattr(self, "_" + request[0])(*request[1:], fds=fds)
        finally:
            for fd in fds:
                os.close(fd)  # the forked process has its own copies
        return True

    def _exec(self, token: int, argv: list[str], targets: list[int],
              data: tuple[int, int] | None, *, fds: list[int]) -> None:
        """Fork, place the descriptors sandlock sent at the numbers asked for, exec
        (under RLIMIT_DATA ``data``, if given: --max-memory-mode refuse)."""
        if self._fork(token, data):
            return
        _place(dict(zip(targets, fds)))
        close_on_exec_from(3)  # the resident's own are close-on-exec already
        for target in targets:
            if target > 2:
                os.set_inheritable(target, True)
        code = exec_argv(argv, dict(os.environ))
        self._say(b"fail %d %d" % (token, code))
        os._exit(EXIT_NOTFOUND if code in (errno.ENOENT, errno.ENOTDIR) else EXIT_NOEXEC)

    def _call(self, token: int, payload: bytes, *, fds: list[int]) -> None:
        """Fork and run the function pickled in ``payload`` with its arguments: fds
        are its result pipe, stdout and stderr."""
        if self._fork(token):
            self._calls.add(token)
            return
        result, stdout, stderr = fds
        _place({0: self._null, 1: stdout, 2: stderr})
        self._forget(keep=(result,))
        _run_and_exit(Runner.loading(payload, result, streams=False))

    def _nest(self, token: int, nested: Nested, scoped: bool, *, fds: list[int]) -> None:
        """Fork the resident of a nested sandbox (``sb.sandbox``): confined further by
        its static policy (the ruleset: the last of ``fds``), in a layer scoped for
        signals if ``scoped`` (it vouches for its processes: see net._nests), then serving sandlock
        on the control socket (and probe socket) sent first. Every process it starts
        is its descendant, so in its Landlock domain, and under its filter."""
        if self._fork(token):
            return
        _confine_further(nested, fds)
        control, probe = (fds + [-1])[:2]
        code = EXIT_SETUP
        try:
            if scoped:
                layer = neutral_layer(landlock.SCOPE_SIGNAL)
                layer.restrict_self()
                layer.close()
            self._forget(keep=(self._host_proc, control, probe))
            code = Resident(control, -1, None, None, probe)(self._host_proc)
        finally:
            os._exit(code)

    def _clones(self, first_token: int, count: int, *, fds: list[int]) -> None:
        """``count`` clones of this process, each running ``work`` with CLONE_ID 0..count-1."""
        for clone_id in range(count):
            if self._fork(first_token + clone_id):
                continue
            os.environ["CLONE_ID"] = str(clone_id)
            self._forget(keep=(self._results,))
            _run_and_exit(Runner(self._work, (), {}, self._results, streams=False))

    def _fork(self, token: int, data: tuple[int, int] | None = None) -> bool:
        """True in the resident (the child is remembered), False in the new process,
        which has a process group of its own and has said its pid outside (under
        RLIMIT_DATA ``data`` by then, if given: sb.update() relimits it from then on)."""
        try:
            pid = os.fork()
        except OSError as exc:  # e.g. EAGAIN: the sandbox's process limit
            self._say(b"unborn %d %d" % (token, exc.errno or errno.EAGAIN))
            return True
        if pid:
            self._children[pid] = token
            return True
        try:
            if self._enter_fence is not None:
                self._enter_fence()  # first: out of the resident's reach at once
            _signal.set_wakeup_fd(-1)
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
            host_pid = (int(os.readlink("self", dir_fd=self._host_proc)) if self._host_proc >= 0
                        else os.getpid())
            # Its group before its pid is said: a kill sent to the group as soon as
            # sandlock knows the pid must find it (else killpg fails, the kill is lost).
            os.setpgid(0, 0)
            if data is not None:
                from ..limits import limit_data  # (loaded before the sandbox: _live)

                limit_data(*data)
            self._say(b"pid %d %d" % (token, host_pid))
        except BaseException:  # noqa: BLE001 - never back into the resident's loop
            os._exit(EXIT_NOEXEC)
        return False

    def _forget(self, keep: tuple[int, ...]) -> None:
        """The resident's descriptors become /dev/null in a process that runs Python
        code (which may run untrusted code): none can speak to sandlock for it."""
        for fd in self._own:
            if fd not in keep:
                os.dup2(self._null, fd, inheritable=False)

    def _reap(self) -> None:
        for pid, status in exited_children():
            token = self._children.pop(pid, None)
            if token is None:
                continue
            if token in self._calls:  # a call's processes end with it (its output too)
                self._calls.discard(token)
                _kill_group(pid)
            self._say(b"exit %d %d" % (token, status))

    def _say(self, message: bytes) -> None:
        os.write(self._control_fd, message)


def _fence() -> landlock.Ruleset | None:
    """The layer each process the resident forks puts itself in (None where the sandbox
    has no Landlock, under --best-effort). The resident is a fork of the embedding
    program, and its memory and environment still hold that program's (secrets
    included): in a domain of its own, no process of the sandbox can read them, nor
    take the resident's descriptors (its socket to sandlock among them), nor reach
    another's, call and clone alike (Landlock's ptrace rule; see neutral_layer).
    Where Landlock scopes signals (ABI 6, Linux 6.12), nor can they signal it or a
    sibling (``kill(-1)`` included): a call cannot end the sandbox that runs the others
    (a pool's item its actor's). A nested sandbox that may make sockets needs that (its
    resident must live: it tells sandlock which processes are its own, their network
    rules, the Landlock rules their socket files are bound under), and starts only where
    Landlock has it (NestedLive)."""
    abi = landlock.abi_version()
    if not abi:
        return None
    return neutral_layer(landlock.SCOPE_SIGNAL if abi >= 6 else 0)


def _confine_further(nested: Nested, fds: list[int]) -> None:
    """In a nested sandbox's resident: its static confinement on top of the sandbox's,
    before anything else. The ruleset is the last descriptor sandlock sent (taken off
    ``fds``)."""
    program, limits = nested
    ruleset = fds.pop()
    try:
        if limits is not None:
            limits.apply_rlimits()
        apply_static(ruleset, program)
        os.close(ruleset)
    except BaseException:  # noqa: BLE001 - never run unconfined
        os._exit(EXIT_SETUP)


def _run_and_exit(runner: Runner) -> None:
    """Never returns (a forked process must never unwind into the resident's loop)."""
    code = EXIT_NOEXEC
    try:
        code = runner()
    finally:
        os._exit(code)


def _place(targets: dict[int, int]) -> None:
    """Each descriptor at its target number (sources first moved above every target,
    so that placing one never closes another still to be placed)."""
    above = max(targets, default=2) + 1
    moved = {target: fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, above)
             for target, source in targets.items()}
    for target, source in moved.items():
        os.dup2(source, target)
        os.close(source)


def _kill_group(leader: int) -> None:
    try:
        os.killpg(leader, _signal.SIGKILL)
    except OSError:
        pass  # none left


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _noted(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wakeup descriptor is what matters."""
