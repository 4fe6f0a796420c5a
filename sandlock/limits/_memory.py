"""The memory limit: what the sandbox's processes really use, together, checked every
INTERVAL by a thread of sandlock's; past the limit the sandbox is killed.

"Really use": resident anonymous and shared-memory pages and swap, not address space
(node, Go and the JVM reserve gigabytes they never touch), and the files in the
sandbox's private /tmp, /var/tmp and /dev/shm and the memfds its processes hold, which
are tmpfs: memory too, and the bytes queued in its sockets' buffers (``_sockets``).
Each process's status gives its counters cheaply; their sum
counts a page shared after a fork once per process, and a mapped scratch file or memfd
twice (as shared memory and as a file), so when it passes the limit the proportional
set sizes (smaps_rollup: a shared page split between its users) decide, with the
larger of shared memory and those files in place of their sum. Other files are not
memory (page cache is reclaimable). Processes are those of the sandbox's own /proc,
wherever they went; sandlock's init (pid 1 there) is not the command's.
"""

from __future__ import annotations

import os

from .._latch import Latch
from . import MEMORY_INTERVAL
from ._freeze import sandbox_pids
from ._sockets import probe_sockets, socket_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..kernel import SharedDiag

INTERVAL = MEMORY_INTERVAL  # seconds between samples
_CHEAP = (b"RssAnon:", b"RssShmem:", b"VmSwap:")  # /proc/PID/status, kB
_PRECISE = (b"Pss_Anon:", b"SwapPss:", b"Pss_Shmem:")  # /proc/PID/smaps_rollup, kB
_SHARED = b"Pss_Shmem:"
# A memfd nobody maps and a socket's buffers are reached only through descriptors: the
# processes' descriptor tables are walked for them (~2 µs a descriptor) and the kernel
# asked about the sockets found (~1 ms: sock_diag dumps) every this many samples
# (100 ms); the memfds at every sample once the sandbox is known to have made one
# (watch_memfds).
_DESCRIPTORS_EVERY = 10
_MEMFD = "/memfd:"  # how /proc/PID/fd/N names one
_SOCKET = "socket:["


class MemoryWatch:
    """Calls ``on_exceeded(bytes used)`` once when the sandbox uses more than ``limit``
    bytes; ``proc_fd``: the sandbox's /proc; ``scratch``: descriptors on its private
    tmpfs directories (all owned from now on)."""

    def __init__(self, limit: int, proc_fd: int, on_exceeded: Callable[[int], None],
                 scratch: tuple[int, ...] = (), sockets: SharedDiag | None = None) -> None:
        """``sockets``: where the kernel is asked about the sandbox's sockets (a private
        network's sock_diag socket; None: sandlock's namespace)."""
        self.limit = limit
        self._proc_fd = proc_fd
        self._on_exceeded = on_exceeded
        self._diag = sockets
        probe_sockets(sockets)  # OSError: their buffers could not be counted (no watch)
        self._scratch = _one_per_file_system(scratch)
        self._samples = 0
        self._walk_every = _DESCRIPTORS_EVERY
        self._memfds = 0  # bytes, as of the last walk
        self._sockets = 0  # bytes in the sockets' buffers, as of the last walk that asked
        self.held: Callable[[], int] | None = None  # bytes sandlock holds for the sandbox
        self._stop = Latch()
        self._over = Latch()  # set when the thread ends
        self.peak = 0

    def watch_memfds(self) -> None:
        """The sandbox made a memfd: walk the descriptors at every sample."""
        self._walk_every = 1

    def stop(self) -> None:
        self._stop.set()
        self._over.wait(5)
        for fd in (self._proc_fd, *self._scratch):
            os.close(fd)

    def run(self) -> None:
        """On the caller's thread: sample at once, then every INTERVAL, until stopped
        or past the limit."""
        try:
            wait = 0.0  # (the caller started it when the first sample was due)
            while not self._stop.wait(wait):
                wait = INTERVAL
                used = self.usage()
                self.peak = max(self.peak, used)
                if used > self.limit:
                    self._on_exceeded(used)
                    return
        finally:
            self._over.set()

    def usage(self) -> int:
        """Bytes in use now: the cheap sum, or the proportional one past the limit."""
        pids = sandbox_pids(self._proc_fd)
        if self._samples % self._walk_every == 0:
            sockets = self._samples % _DESCRIPTORS_EVERY == 0
            self._memfds, inodes = descriptors(pids, self._proc_fd, sockets)
            if sockets:
                self._sockets = socket_bytes(inodes, self._diag)
        self._samples += 1
        files = sum(map(_used, self._scratch)) + self._memfds
        # Neither in a process's counters nor shared: the sockets' buffers, sandlock's copies.
        held = self._sockets + (self.held() if self.held is not None else 0)
        cheap = held + files + sum(sum(_counters(pid, "status", _CHEAP, self._proc_fd).values())
                            for pid in pids)
        if cheap <= self.limit:
            return cheap
        private = shared = 0
        for pid in pids:
            counters = _counters(pid, "smaps_rollup", _PRECISE, self._proc_fd)
            shared += counters.pop(_SHARED, 0)
            private += sum(counters.values())
        return held + private + max(shared, files)


def _one_per_file_system(fds: tuple[int, ...]) -> list[int]:
    found: dict[int, int] = {}
    for fd in fds:
        device = os.fstat(fd).st_dev
        if device in found:
            os.close(fd)
        else:
            found[device] = fd
    return list(found.values())


def descriptors(pids: list[str], proc_fd: int, sockets: bool) -> tuple[int, set[int]]:
    """Bytes the memfds open in ``pids`` hold, each counted once; the inodes of their
    sockets (if ``sockets``)."""
    held: dict[tuple[int, int], int] = {}
    inodes: set[int] = set()
    for pid in pids:
        try:
            table = os.open(f"{pid}/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                            dir_fd=proc_fd)
        except OSError:
            continue  # gone
        try:
            for name in os.listdir(table):
                try:
                    target = os.readlink(name, dir_fd=table)
                    if sockets and target.startswith(_SOCKET):
                        inodes.add(int(target[len(_SOCKET):-1]))
                    if not target.startswith(_MEMFD):
                        continue
                    info = os.stat(name, dir_fd=table)
                except OSError:
                    continue  # closed meanwhile
                held[(info.st_dev, info.st_ino)] = info.st_blocks * 512
        except OSError:
            pass
        finally:
            os.close(table)
    return sum(held.values()), inodes


def _used(fd: int) -> int:
    """Bytes the files of the file system of ``fd`` take."""
    stats = os.fstatvfs(fd)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def _counters(pid: str, name: str, fields: tuple[bytes, ...], proc_fd: int) -> dict[bytes, int]:
    """``fields`` (kB) in /proc/PID/NAME, in bytes, as found (none if it is gone)."""
    try:
        fd = os.open(f"{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return {}
    try:
        text = os.read(fd, 65536)
    except OSError:
        return {}
    finally:
        os.close(fd)
    found: dict[bytes, int] = {}
    for line in text.splitlines():
        if line.startswith(fields):
            field, value = line.split()[:2]
            found[field] = found.get(field, 0) + int(value) * 1024
    return found
