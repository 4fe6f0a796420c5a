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
    from ..policy import Policy


class Watches:
    def __init__(self, policy: Policy, hit: Callable[..., None]) -> None:
        """``hit(limit, value, verdict, reason, **details)``: a limit was hit."""
        self._policy = policy
        self._scratch: tuple[int, ...] = ()
        self._memfds = False  # the sandbox made a memfd
        self._hit = hit
        self._lock = _thread.allocate_lock()
        self._watch_fd = self._pause_fd = -1
        self._keep = False  # the /proc kept after start: a limit may come later
        self._memory: MemoryWatch | None = None
        self._kill: Callable[[], None] | None = None
        self._pending_memory: int | None = None
        self.cpu: CpuThrottle | None = None

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

    def _lower_memory(self, limit: int) -> None:
        if self._memory is not None:
            self._memory.limit = min(self._memory.limit, limit)
        elif self._watch_fd >= 0 and self._kill is not None:
            self._watch_memory(limit, _mib(limit), "policy_fn's restrict_max_memory")
        else:  # the command has not started yet: watch() applies it
            self._pending_memory = min(limit, self._pending_memory or limit)

    def _watch_memory(self, limit: int, shown: str, source: str) -> None:
        from ..limits import MemoryWatch

        def exceeded(used: int) -> None:
            self._kill()
            # Said as it happens: the CLI and Sandbox.run alike.
            self._hit("max_memory", shown, "kill", f"memory limit {shown} exceeded "
                      f"({_mib(used)} in use): killed the sandbox ({source})", used=used)

        self._memory = MemoryWatch(limit, os.dup(self._watch_fd), exceeded,
                                   tuple(map(os.dup, self._scratch)))
        if self._memfds:
            self._memory.watch_memfds()
        self._memory.start()

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
        for watch in (self._memory, self.cpu):
            if watch is not None:
                watch.stop()
        for fd in (self._watch_fd, self._pause_fd, *self._scratch):
            if fd >= 0:
                os.close(fd)
        self._watch_fd = self._pause_fd = -1
        self._scratch = ()


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f}M"
