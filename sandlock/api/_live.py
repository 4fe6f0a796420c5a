"""A long-lived sandbox, from sandlock's side: ``with Sandbox(policy) as sb:``.

One confined resident process (``_resident``) runs in the sandbox for as long as the
block lasts; ``exec``, ``call`` and ``fork`` ask it for new processes, which share
the sandbox's supervisor, network policy and limits. A reader thread follows what
it says (text: pids, exit statuses); clones' values arrive on a results socket that
stamps each message with its sender's pid, so a clone can only speak for itself.
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import threading
import time

from .._errors import EXIT_SETUP, EXIT_TIMEOUT, SetupError
from ._handles import Clone, LiveProcess
from ..process import describe_start_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._call import CallResult
    from ..process import WorkspaceOutcome
    from ..process import SandboxedProcess
    from ._sandbox import Sandbox

_CREDENTIALS = struct.calcsize("3i")
RESULT_BUFFER = 1 << 20  # the results socket's receive buffer: a burst of clones' values
MAX_VALUE = 1 << 18  # a clone's pickled value, at most (a message's size on the socket)


_OPEN, _CLOSED, _HELD = "open", "closed", "held"  # the results socket, after _collect

class LiveSandbox:
    """The running sandbox of a ``with Sandbox(...)`` block: its resident, the requests
    sent to it, and the state of every process it started (kept by the reader)."""

    def __init__(self, sandbox: Sandbox, init: Callable[[], object] | None,
                 work: Callable[[], object] | None) -> None:
        from ._resident import Resident

        self._prepare(sandbox, work)
        self._control, self._results, theirs = _socket_pairs(with_results=work is not None)
        resident = Resident(theirs[0].fileno(), theirs[1].fileno() if self._results else -1,
                            init, work)
        try:
            self._process: SandboxedProcess = sandbox._launch(
                ["<sandbox>"], resident, (None, None, None), tuple(end.fileno() for end in theirs),
                resident=True)
        except BaseException:
            for ours in (self._control, self._results):
                if ours is not None:
                    ours.close()
            raise
        finally:
            for end in theirs:
                end.close()
        self.audit = self._process.audit
        self._begin()

    def _prepare(self, sandbox: Sandbox, work: Callable[[], object] | None) -> None:
        self._sandbox = sandbox
        self._work = work
        self._changed = threading.Condition()
        self._processes: dict[int, LiveProcess] = {}
        self._by_pid: dict[int, Clone] = {}
        self._unclaimed: dict[int, bytes] = {}  # values of clones whose pid is not known yet
        self._pids_awaited = 0  # clones started whose pid is not known yet
        self._next_token = 1
        self._state = "starting"  # -> ready | failed -> over
        self._failure = ""  # what init() raised
        self.audit = None
        self._paused = False
        self._closing: list[Callable[[], None]] = []
        self.first: LiveProcess | None = None  # the first exec'd: what wait() returns
        # --max-memory-mode refuse: RLIMIT_DATA (soft as updated, hard) of commands exec'd
        policy, self._data = sandbox.policy, None
        if policy.max_memory_mode == "refuse":  # (what the resident's forks need, loaded now)
            self._data = (int(policy.max_memory), int(policy.max_memory))
            __import__("resource"), __import__("sandlock.limits._kernel")
        self._execs = threading.Lock()  # an exec's pid is known before update() relimits

    @property
    def changed(self) -> threading.Condition:
        """The lock the reader holds as it updates the processes (and notifies)."""
        return self._changed

    def _begin(self) -> None:
        """Follow the resident, once it is started, until it is ready."""
        threading.Thread(target=self._follow, daemon=True).start()
        self._await_ready()

    # --- requests -------------------------------------------------------------------

    def exec(self, argv: list[str], stdio: tuple[int | None, int | None, int | None],
             pass_fds: tuple[int, ...]) -> LiveProcess:
        given = [(target, fd) for target, fd in enumerate(stdio) if fd is not None]
        given += [(fd, fd) for fd in pass_fds]
        targets = [target for target, _ in given]
        process = LiveProcess(self, self._new_tokens(1)[0], argv[0])
        with self._execs:
            self._request([process], ("exec", process.token, argv, targets, self._data),
                          [fd for _, fd in given])
            with self._changed:
                self.first = self.first or process
            self.wait_until(lambda: process.pid or process.returncode is not None, None)
        return process

    def call(self, function: Callable[..., object], args: tuple, kwargs: dict,
             timeout: float | None) -> CallResult:
        from ._call import call_in

        try:
            payload = pickle.dumps((function, args, kwargs), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - said as the argument's fault
            raise TypeError(f"fn: a running sandbox calls functions in its own process, forked "
                            f"when its block began, so fn and its arguments must be picklable "
                            f"(defined at module level): {exc}") from None

        def start(stdout: int, stderr: int, result: int) -> LiveProcess:
            process = LiveProcess(self, self._new_tokens(1)[0], "<call>")
            self._request([process], ("call", process.token, payload), [result, stdout, stderr])
            return process

        return call_in(self._sandbox, start, timeout, owns_audit=False)

    def fork(self, count: int) -> list[Clone]:
        if self._work is None:
            raise RuntimeError("fork() needs work: Sandbox(policy, init, work)")
        if count == 0:
            return []
        tokens = self._new_tokens(count)
        clones = [Clone(self, token, clone_id) for clone_id, token in enumerate(tokens)]
        with self._changed:  # (re-entrant: _request takes it too; the reader waits)
            self._request(clones, ("clones", tokens[0], count), [])
            self._pids_awaited += count
        return clones

    def pause(self) -> None:
        self._check_open()
        if not self._process.pauser.pause():
            raise RuntimeError("the sandbox's processes could not all be stopped within 2 s")
        self._paused = True

    def update(self, changes: dict[str, object]) -> None:
        from ..limits import checked_updates, relimit_data
        updates = checked_updates(self._sandbox.policy, changes)  # (paused or not)
        if self._state != "ready" or self._process.pauser is None:
            raise RuntimeError("update() needs a running sandbox in its own PID namespace")
        self._process.pauser.update(updates)
        if "max_memory" in updates and self._data is not None:
            with self._execs:  # those running, then later ones
                self._data = (int(updates["max_memory"]), self._data[1])  # type: ignore[call-overload]
                relimit_data(self._process.pid, self._data[0])

    def resume(self) -> None:
        if self._state == "ready" and self._paused:
            self._process.pauser.resume()
        self._paused = False

    def wait(self, timeout: float | None) -> int | None:
        """Until every process started here has ended; the first exec'd one's exit
        code. Past ``timeout``, the whole sandbox is killed (like a run's timeout)."""
        if not self.wait_until(self._all_ended, timeout):
            self.kill()
            self.wait_until(self._all_ended, None)
            return EXIT_TIMEOUT
        return self.first.returncode if self.first is not None else None

    def kill(self) -> None:
        """Every process of the sandbox, and the sandbox itself: it is over."""
        self._process.kill()  # the reader sees the sandbox end, and reaps it
        self.wait_until(lambda: self._state == "over", None)

    def on_close(self, release: Callable[[], None]) -> None:
        self._closing.append(release)

    def close(self, failed: bool = False) -> WorkspaceOutcome | None:
        """End the sandbox as its block ends (``failed``: by an exception, which a
        copy-on-write workspace takes as an error); what became of its workspace."""
        self._paused = False  # (SIGKILL ends stopped processes too)
        self._process.block_status = 1 if failed else 0
        self.kill()
        self._control.close()
        if self._results is not None:
            self._results.close()
        for release in self._closing:
            release()
        return self._process.workspace

    # --- sandlock's side of the conversation -----------------------------------------

    def _new_tokens(self, count: int) -> range:
        with self._changed:
            first = self._next_token
            self._next_token += count
        return range(first, first + count)

    def _request(self, processes: list[LiveProcess], request: tuple, fds: Sequence[int]) -> None:
        """Send ``request``, which starts ``processes``; they are followed only once it
        is sent (else nothing would ever end them)."""
        from ._resident import MAX_REQUEST

        self._check_open()
        data = pickle.dumps(request, pickle.HIGHEST_PROTOCOL)
        if len(data) > MAX_REQUEST:
            raise ValueError(f"the request is too large ({len(data)} bytes pickled, at most "
                             f"{MAX_REQUEST}): pass large data through a file")
        with self._changed:
            socket.send_fds(self._control, [data], list(fds))
            self._processes.update((process.token, process) for process in processes)

    def _follow(self) -> None:
        """The reader: what the resident and the processes it forks say, and the
        clones' values (one thread: a clone's value is always taken before its exit)."""
        try:
            self._read_until_the_end()
        except BaseException:
            self._process.kill()  # fail closed: a sandbox nobody follows does not go on
            raise
        finally:
            self._ended()

    def _read_until_the_end(self) -> None:
        poller = select.poll()
        poller.register(self._control, select.POLLIN)
        if self._results is not None:
            poller.register(self._results, select.POLLIN)
        held = False  # the results socket is left unread until pids come
        control = self._control.fileno()
        while True:
            for fd, _events in poller.poll():
                if fd != control:
                    state = self._collect()
                    if state != _OPEN:
                        poller.unregister(fd)  # no clone can send any more, or held
                        held = state == _HELD
                    continue
                try:
                    message = self._control.recv(4096)
                except OSError:
                    message = b""
                if not message:
                    return
                self._heard(message.split(b" ", 3))
                if held and not self._pids_awaited:
                    poller.register(self._results, select.POLLIN)
                    held = False

    def _ended(self) -> None:
        self._process.wait()  # the sandbox is gone: its end reported, its hooks run
        with self._changed:
            for process in self._processes.values():
                if process.returncode is None:
                    process.returncode = self._process.returncode or 137
            self._state = "over"
            self._changed.notify_all()

    def _heard(self, words: list[bytes]) -> None:
        with self._changed:
            kind = words[0]
            if kind == b"ready":
                self._state = "ready"
            elif kind == b"failed":
                self._failure = b" ".join(words[1:]).decode(errors="replace")
                self._state = "failed"
            else:
                process = self._processes.get(int(words[1]))
                if process is not None:
                    self._update(process, kind, int(words[2]))
            self._changed.notify_all()

    def _update(self, process: LiveProcess, kind: bytes, number: int) -> None:
        if kind == b"pid":
            process.started(number)
            if isinstance(process, Clone):
                self._by_pid[number] = process
                process._outcome = self._unclaimed.pop(number, b"")
                self._clone_settled()
        elif kind == b"exit":
            if isinstance(process, Clone):
                self._collect()  # its value, sent before it exited, is there by now
            code = os.waitstatus_to_exitcode(number)
            process.returncode = 128 - code if code < 0 else code
            self._forget(process)
        elif kind == b"fail":
            process.start_error = describe_start_error(process.name, b"exec %d" % number)
        elif kind == b"unborn":
            process.start_error = f"cannot start {process.name}: fork failed ({os.strerror(number)})"
            process.returncode = EXIT_SETUP
            self._forget(process)
            if isinstance(process, Clone):
                self._clone_settled()

    def _clone_settled(self) -> None:
        """A clone's pid is known, or it was never born: one fewer awaited."""
        self._pids_awaited -= 1
        if self._pids_awaited:
            return
        self._unclaimed.clear()  # every clone is known: the rest spoke for no clone
        self._collect()  # values left waiting in the socket meanwhile
        # Clones that ended while values were held: theirs is read by now.
        self._by_pid = {pid: clone for pid, clone in self._by_pid.items()
                        if clone.returncode is None}

    def _forget(self, process: LiveProcess) -> None:
        """An ended process is followed no more: a block may start millions, and the
        sandbox keeps nothing of those that ended (their handles keep their outcome)."""
        self._processes.pop(process.token, None)
        if isinstance(process, Clone) and not self._pids_awaited:
            self._by_pid.pop(process.pid, None)  # (else its value may be held: see above)

    def _collect(self) -> str:
        """The clones' values waiting on the results socket: the kernel says which
        process sent each (SCM_CREDENTIALS), so a clone speaks only for itself; the
        first value a clone sends is its value. _CLOSED once no process holds the
        socket's other end; _HELD when values ahead of their clones' pids fill the
        room kept for them: the rest waits in the socket (the kernel bounds it) until
        those pids are known, so that a value is never dropped for lack of room."""
        while True:
            with self._changed:
                if self._pids_awaited and len(self._unclaimed) >= self._pids_awaited:
                    return _HELD
            try:
                data, ancillary, _flags, _address = self._results.recvmsg(
                    MAX_VALUE, socket.CMSG_SPACE(_CREDENTIALS), socket.MSG_DONTWAIT)
            except BlockingIOError:
                return _OPEN
            except OSError:
                return _CLOSED
            if not data and not ancillary:
                return _CLOSED
            sender = _sender(ancillary)
            with self._changed:
                clone = self._by_pid.get(sender)
                if clone is None:
                    # A clone's value ahead of its pid, or another process's: kept only
                    # while pids are awaited, and at most one per awaited pid, so no
                    # process of the sandbox can fill sandlock's memory with them.
                    if self._pids_awaited:
                        self._unclaimed.setdefault(sender, data)
                elif not clone._outcome:
                    clone._outcome = data

    def wait_until(self, condition: Callable[[], object], timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not condition():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def _all_ended(self) -> bool:
        return all(process.returncode is not None for process in self._processes.values())

    def _await_ready(self) -> None:
        # No timeout: init() may load a model for minutes; a sandbox that ends says so.
        self.wait_until(lambda: self._state != "starting", None)
        if self._state == "ready":
            return
        self.close()
        if self._process.start_error:
            raise SetupError(self._process.start_error)
        if self._failure:
            raise SetupError(f"init() raised {self._failure}")
        raise SetupError("the sandbox ended before it was ready")

    def _check_open(self) -> None:
        if self._state != "ready":
            raise RuntimeError("the sandbox is over (killed, or its block was left)")
        if self._paused:
            raise RuntimeError("the sandbox is paused: resume() it first")


def _socket_pairs(with_results: bool) -> tuple[socket.socket, socket.socket | None,
                                                 list[socket.socket]]:
    """Our control socket, our results socket (clones' values: the kernel stamps each
    message with its sender's pid), and the resident's ends of both."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if not with_results:
        return control, None, [theirs]
    results, results_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    results.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    results.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RESULT_BUFFER)
    return control, results, [theirs, results_theirs]


def _sender(ancillary: list[tuple[int, int, bytes]]) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return struct.unpack("3i", data[:_CREDENTIALS])[0]
    return 0
