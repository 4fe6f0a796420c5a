"""A run's watches over the sandbox's /proc: its memory against a limit (--max-memory,
or one policy_fn sets later), its CPU share (--max-cpu), and pause/resume of every
process of a long-lived sandbox."""

from __future__ import annotations

import _thread
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..limits import CpuThrottle, MemoryWatch
    from ..net import Network
    from ..policy import Policy
    from ._networkslot import SandboxDiag
    from ._processcap import ProcessCaps


class Watches:
    def __init__(self, policy: Policy, hit: Callable[..., None]) -> None:
        """``hit(limit, value, verdict, reason, **details)``: a limit was hit."""
        self._policy = policy
        self._scratch: tuple[int, ...] = ()
        self._memfds = False  # the sandbox made a memfd
        self._held: Callable[[], int] | None = None  # see attach
        self._memfds_refused = False  # said once
        self._hit = hit
        self._lock = _thread.allocate_lock()
        self._watch_fd = self._pause_fd = -1
        self._keep = False  # the /proc kept after start: a limit may come later
        self._memory: MemoryWatch | None = None
        self._kill: Callable[[], None] | None = None
        self._pending_memory: int | None = None  # a limit to apply once the watch runs
        self._restricted: int | None = None  # policy_fn's lowest memory limit, if any
        self._memory_starting: _thread.LockType | None = None  # held while it starts
        self._stopping = _thread.allocate_lock()
        self._stopping.acquire()  # released by stop(): the memory watch need not start
        self.cpu: CpuThrottle | None = None
        self.caps: ProcessCaps | None = None  # the run's process cap, for update()
        self.socket_diag: SandboxDiag | None = None  # a private network's (MemoryWatch)

    def adopt(self, proc_fd: int, *, watched: bool, pausable: bool, later: bool) -> None:
        """Copies of the sandbox's /proc: ``watched`` for the limits, ``pausable`` for
        pause(); ``later``: a memory limit may be set once the command runs."""
        if watched or later:
            self._watch_fd = os.dup(proc_fd)
        if pausable:
            self._pause_fd = os.dup(proc_fd)
        self._keep = later

    def watch(self, kill: Callable[[], None], scratch: tuple[int, ...] = ()) -> None:
        """Once the command runs: the limits (past the memory limit, ``kill``);
        ``scratch``: descriptors on the sandbox's private tmpfs directories, whose
        files are memory (owned from now on)."""
        if self._watch_fd < 0:
            for fd in scratch:
                os.close(fd)
            return
        policy = self._policy
        with self._lock:
            self._kill = kill
            self._scratch = scratch
            if policy.max_memory is not None:
                self._watch_memory(int(policy.max_memory), str(policy.max_memory), "--max-memory")
            if self._pending_memory is not None:
                self._lower_memory(self._pending_memory)
        if policy.max_cpu is not None:
            from ..limits import CpuThrottle

            self.cpu = CpuThrottle(policy.max_cpu, os.dup(self._watch_fd))
            self.cpu.start()
        if not self._keep:
            os.close(self._watch_fd)
            self._watch_fd = -1

    def attach(self, network: Network) -> None:
        """The run's network engine: the bytes it holds for the sandbox (copies of
        waiting sends) count as the sandbox's memory, and under a memory limit it
        refuses to pass memfds (in flight in a socket, no descriptor table shows them)."""
        with self._lock:
            self._held = network.held_bytes
            if self._memory is not None:
                self._memory.held = network.held_bytes
        network.ask_about_memfds(self._memfd_passed)

    def _memfd_passed(self) -> bool:
        """A send passes a memfd: refused under a memory limit (said once, audited)."""
        with self._lock:
            limit = self._memory.limit if self._memory is not None else (
                self._pending_memory if self._policy.max_memory is None
                else int(self._policy.max_memory))
            if limit is None:
                return False
            first, self._memfds_refused = not self._memfds_refused, True
        self._hit("max_memory", _mib(limit), "refuse", "a memfd passed over a socket was "
                  "refused (EPERM): in flight it would be memory the limit cannot see "
                  "(--max-memory)", notice=first)
        return True

    def memfds_in_use(self) -> None:
        """The sandbox made a memfd: the memory watch looks for them at every sample."""
        with self._lock:
            self._memfds = True
            if self._memory is not None:
                self._memory.watch_memfds()

    def lower_memory(self, limit: int) -> None:
        """A lower memory limit from now on (policy_fn's restrict_max_memory)."""
        with self._lock:
            self._lower_memory(limit)

    def update(self, limits: dict[str, object]) -> None:
        """sb.update(): ``limits`` checked against the starting ones (``limits._updates``),
        each held by the mechanism that holds it from the start."""
        for name, value in limits.items():
            if name == "max_memory":
                self.set_memory(int(value))  # type: ignore[call-overload]
            elif name == "max_cpu" and self.cpu is not None:
                self.cpu.set_share(value)  # type: ignore[arg-type]
            elif name == "max_processes" and self.caps is not None:
                self.caps.set_cap(value)  # type: ignore[arg-type]

    def set_memory(self, limit: int) -> None:
        """sb.update(max_memory=...): the limit from now on (at most the starting one,
        checked by the caller), never above what policy_fn restricted it to."""
        with self._lock:
            limit = min(limit, self._restricted or limit)
            if self._memory is not None:
                self._memory.limit = limit
            else:  # (the watch starts within MEMORY_INTERVAL of the command)
                self._pending_memory = limit

    def _lower_memory(self, limit: int) -> None:
        self._restricted = min(limit, self._restricted or limit)
        if self._memory is not None:
            self._memory.limit = min(self._memory.limit, limit)
        elif self._memory_starting is None and self._watch_fd >= 0 and self._kill is not None:
            self._watch_memory(limit, _mib(limit), "policy_fn's restrict_max_memory")
        else:  # the command or the watch has not started yet: applied when it has
            self._pending_memory = min(limit, self._pending_memory or limit)

    def _watch_memory(self, limit: int, shown: str, source: str) -> None:
        """With ``_lock`` held: the memory watch, on its thread, which loads its modules
        when its first sample is due (MEMORY_INTERVAL): a command that ends before then
        (and its start-up) pays ~0.1 ms for the limit instead of ~0.6 ms (measured)."""
        self._memory_starting = starting = _thread.allocate_lock()
        starting.acquire()  # released once self._memory is set, or the start failed
        fds = os.dup(self._watch_fd), tuple(map(os.dup, self._scratch))
        _thread.start_new_thread(self._run_memory, (limit, shown, source, *fds))

    def _run_memory(self, limit: int, shown: str, source: str, proc_fd: int,
                    scratch: tuple[int, ...]) -> None:
        def exceeded(used: int) -> None:
            self._kill()
            now = memory.limit  # (sb.update() or policy_fn may have changed it since)
            said, why = (shown, source) if now == limit else (_mib(now), "as lowered while it ran")
            # Said as it happens: the CLI and Sandbox.run alike.
            self._hit("max_memory", said, "kill", f"memory limit {said} exceeded "
                      f"({_mib(used)} in use): killed the sandbox ({why})", used=used)

        from ..limits import MEMORY_INTERVAL

        if self._stopping.acquire(timeout=MEMORY_INTERVAL):  # the run ended first
            self._stopping.release()
            memory = None
        else:
            try:
                from ..limits import MemoryWatch

                sockets = None
                if self.socket_diag is not None:  # a private network: its sockets asked there
                    sockets = self.socket_diag.get()
                    if sockets is None:
                        raise OSError("no sock_diag socket from the private network")
                memory = MemoryWatch(limit, proc_fd, exceeded, scratch, sockets)
            except BaseException as exc:  # fail closed: no watch, no sandbox
                self._kill()
                self._hit("max_memory", shown, "kill", f"the memory watch could not start "
                          f"({exc}): killed the sandbox ({source})")
                memory = None
        if memory is None:
            for fd in (proc_fd, *scratch):
                os.close(fd)
            self._memory_starting.release()
            return
        with self._lock:
            self._memory = memory
            if self._pending_memory is not None:
                memory.limit = min(memory.limit, self._pending_memory)
            if self._memfds:
                memory.watch_memfds()
            if self._held is not None:
                memory.held = self._held
        self._memory_starting.release()
        memory.run()  # until stop(), which waited for the start

    def pause(self) -> bool:
        """Stop every process of the sandbox (none left running, those forked meanwhile
        included); False if they could not all be stopped in time."""
        if self._pause_fd < 0:
            raise RuntimeError("pause needs the sandbox's own PID namespace")
        from ..limits import freeze

        if self.cpu is not None:
            self.cpu.pause()
        return freeze(self._pause_fd)

    def resume(self) -> None:
        from ..limits import thaw

        thaw(self._pause_fd)
        if self.cpu is not None:
            self.cpu.resume()

    def stop(self) -> None:
        if self._stopping.locked():
            self._stopping.release()
        starting = self._memory_starting
        if starting is not None and starting.acquire(timeout=_START_TIMEOUT):
            starting.release()
        for watch in (self._memory, self.cpu):
            if watch is not None:
                watch.stop()
        for fd in (self._watch_fd, self._pause_fd, *self._scratch):
            if fd >= 0:
                os.close(fd)
        self._watch_fd = self._pause_fd = -1
        self._scratch = ()


_START_TIMEOUT = 5.0  # the memory watch needs ~1 ms to start; this bounds a stuck one


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f}M"
