"""What /proc and kcmp(2) tell about another process's tasks and memory: its threads,
its children, whether two processes share one address space, where a range of its
memory lives, a task's scheduling state and current syscall, a field of its status;
and this process's own children that have ended, reaped without waiting for others."""

from __future__ import annotations

import os

from ._libc import syscall
from ._syscalls import nr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_KCMP_VM = 1


def threads_of(pid: int) -> list[int]:
    """The thread ids of process ``pid`` (empty if it is gone)."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def processes_under(root: int) -> list[int]:
    """``root`` and every process descending from it (threads' children included), as
    /proc lists them now."""
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        for tid in threads_of(pid):
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as file:
                    pending.extend(int(child) for child in file.read().split())
            except OSError:
                pass
    return found


def share_memory(pid: int, other: int) -> bool:
    """Whether processes ``pid`` and ``other`` use one address space (CLONE_VM, vfork)."""
    try:
        return syscall(nr("kcmp"), pid, other, _KCMP_VM, 0, 0) == 0
    except OSError:
        return False  # gone


def status_field(task: int | str, name: bytes) -> bytes:
    """The value of ``name`` (b"Umask", b"Seccomp_filters"...) in /proc/TASK/status
    (``task``: a tid, or "self"), the file read in one go (~1.5 KB). OSError if the task
    is gone, ValueError if the kernel has no such field."""
    fd = os.open(f"/proc/{task}/status", os.O_RDONLY | os.O_CLOEXEC)
    try:
        status = os.read(fd, 8192)
    finally:
        os.close(fd)
    start = status.index(b"\n" + name + b":") + len(name) + 2
    return status[start:status.index(b"\n", start)].strip()


def process_of(tid: int) -> tuple[int, int]:
    """(process id, parent process id) of thread ``tid``; (0, 0) if it is gone."""
    fields: dict[bytes, int] = {}
    try:
        with open(f"/proc/{tid}/status", "rb") as file:
            for line in file:
                name, _, value = line.partition(b":")
                if name in (b"Tgid", b"PPid"):
                    fields[name] = int(value)
                    if len(fields) == 2:
                        break
    except (OSError, ValueError):
        pass
    return fields.get(b"Tgid", 0), fields.get(b"PPid", 0)


def tracer_of(tid: int) -> int:
    """The thread tracing ``tid`` (TracerPid names a thread, not its process); 0 if
    none, or if ``tid`` is gone."""
    try:
        with open(f"/proc/{tid}/status", "rb") as file:
            for line in file:
                if line.startswith(b"TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def state_of(tid: int) -> str:
    """The task's state letter (R running, S/D sleeping, t traced, Z ...); "X" if gone."""
    try:
        with open(f"/proc/{tid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split(None, 1)[0].decode()
    except (OSError, IndexError):
        return "X"


def blocked_call(tid: int) -> tuple[int, int] | None:
    """(syscall number, first argument) the task is blocked in; None if it is not in
    a syscall (running, or in user space)."""
    try:
        with open(f"/proc/{tid}/syscall", "rb") as file:
            fields = file.read().split()
    except OSError:
        return None
    if len(fields) < 2 or not fields[0].lstrip(b"-").isdigit() or int(fields[0]) < 0:
        return None
    return int(fields[0]), int(fields[1], 16)


def private_anonymous(pid: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether every ``(start, end)`` range of process ``pid``'s memory lies in private
    anonymous mappings: memory only the tasks sharing its address space can write (a
    shared mapping, or a file's pages, others can change too)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as file:
            own = [_own_mapping(line) for line in file]
    except OSError:
        return False
    spans = sorted(span for span in own if span is not None)
    return all(_covered(start, end, spans) for start, end in ranges)


def _own_mapping(line: bytes) -> tuple[int, int] | None:
    fields = line.split(None, 5)
    if len(fields) < 5 or fields[1][3:4] != b"p" or fields[4] != b"0":
        return None  # shared, or backed by a file (inode)
    low, _, high = fields[0].partition(b"-")
    return int(low, 16), int(high, 16)


def _covered(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    for low, high in spans:
        if low <= start < high:
            if end <= high:
                return True
            start = high  # continues in the next mapping, if adjacent
    return start >= end


def exited_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child that has ended, reaped; stops when none has
    (or there is no child left)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status
