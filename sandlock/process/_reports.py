"""The report pipe from the sandbox's guardians (keeper, namespace init) to sandlock:
one line per event, "pid N", "stop SIG", "tasks COUNT" or "exit STATUS".

"tasks": the default task cap is the kernel's (RLIMIT_NPROC, and the PID namespace's
pid_max for root, whom RLIMIT_NPROC exempts): a fork or a thread past it fails with
EAGAIN, and nothing else says so. The keeper, idle while the command runs and in the
sandbox's mount namespace (its /proc is the sandbox's), counts the sandbox's tasks
every TASKS_PERIOD (less often when it has many processes: TASKS_DUTY) and reports
once when they have reached the cap, so that sandlock can say so, and which option
sets another. A count is a sample: a cap reached and left between two of them goes
unseen; a fork bomb stays at the cap, and a build that keeps meeting it is seen.

``answer``: the enclosing supervisor's one question about a thread, is it one of mine?
Answered by a nested sandbox's resident (``sb.sandbox``) and by the keeper of a
``sandlock run`` inside a sandbox (in its reaping loop, here), when their sandbox may
make sockets: for its network rules of its own, and for the Landlock rules its socket
files are bound under (see net._nests for who asks, and why the answer cannot be forged).
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import errno
import os
import select
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

TASKS_PERIOD = 0.1  # seconds between counts, at least: ~20 µs plus ~13 µs a process
TASKS_DUTY = 0.005  # and at most this share of a CPU (500 processes: ~7 ms, every 1.3 s)
TASKS_LONGEST = 2.0  # but never further apart: a cap held this long is always seen
_NUM_THREADS = 17  # /proc/PID/stat's 20th field, counted from the one after the name


def send(fd: int, message: bytes) -> None:
    try:
        os.write(fd, message + b"\n")  # one short write: atomic between writers
    except OSError:
        pass  # sandlock is gone; nobody to tell


def parse_reports(data: bytes) -> list[tuple[str, int]]:
    """Decode complete report lines ("pid N", "stop SIG", "tasks N", "exit STATUS")."""
    reports = []
    for line in data.split(b"\n"):
        if line:
            kind, _, value = line.partition(b" ")
            reports.append((kind.decode(), int(value)))
    return reports


_JOB_CONTROL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


class SandlockGone(Exception):
    """sandlock's end of the report pipe closed: however it died, the sandbox goes too."""


def wait_for_command(command_pid: int, report_fd: int, *, watch: bool = False,
                     tasks: TaskCapWatch | None = None, probe: int = -1) -> int:
    """Reap everything until the command itself ends; relay its stops to sandlock.
    ``watch``: also raise SandlockGone when sandlock is gone (no thread needed: SIGCHLD
    and the pipe's hang-up wake one poll); ``tasks`` (watching): count the sandbox's
    tasks meanwhile, and report when they reach the cap; ``probe`` (watching): answer
    the enclosing supervisor's questions on it meanwhile (``answer``)."""
    wakeup = _child_wakeup(report_fd) if watch else None
    asked = _questions(wakeup, probe) if wakeup is not None and probe >= 0 else None
    flags = os.WUNTRACED | (os.WNOHANG if watch else 0)
    while True:
        pid, status = os.waitpid(-1, flags)
        if pid == 0:  # (watching) nothing has changed yet
            _sleep(wakeup, report_fd, tasks.timeout_ms() if tasks else -1, asked)
            if tasks is not None and (count := tasks.check()):
                send(report_fd, b"tasks %d" % count)
            continue
        if pid != command_pid:
            continue  # an orphan reparented to us
        if os.WIFSTOPPED(status):
            # Job control (Ctrl-Z, a background read or write) is relayed; a SIGSTOP is
            # not (--max-cpu's throttle sends those, and sandlock must not stop with it).
            if os.WSTOPSIG(status) in _JOB_CONTROL_STOPS:
                send(report_fd, b"stop %d" % os.WSTOPSIG(status))
            continue
        return status


def _child_wakeup(report_fd: int) -> select.poll:
    """A poll woken by SIGCHLD (through the wakeup fd) or by sandlock's hang-up."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # caught, so that it writes the wakeup fd
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    poller.register(report_fd, select.POLLERR)  # (a write end: POLLERR = reader gone)
    return poller


def _questions(poller: select.poll, probe: int) -> socket.socket:
    import socket

    poller.register(probe, select.POLLIN)
    return socket.socket(fileno=probe)


def _sleep(poller: select.poll | None, report_fd: int, timeout_ms: int,
           asked: socket.socket | None = None) -> None:
    assert poller is not None
    for fd, _ in poller.poll(timeout_ms):
        if fd == report_fd:
            raise SandlockGone
        if asked is not None and fd == asked.fileno():
            if not answer(asked):
                poller.unregister(fd)  # the enclosing supervisor asks no more
            continue
        while True:
            try:
                if not os.read(fd, 64):
                    break
            except BlockingIOError:
                break


def _ignore(signum: int, frame: object) -> None:
    pass


def close_all_but(*keep: int) -> None:
    """Drop every inherited fd but stdio and ``keep``: a pipe end kept open here would
    hold off the EOF its reader waits for (e.g. the command's stdin under Sandbox.run)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


class TaskCapWatch:
    """Counts the sandbox's tasks against ``cap`` until they reach it."""

    def __init__(self, cap: int) -> None:
        # RLIMIT_NPROC counts the keeper too, which the sandbox's /proc does not list.
        self._threshold = cap - 1
        self._next = time.monotonic() + TASKS_PERIOD
        self.reached = 0  # the count that reached it, once it has

    def timeout_ms(self) -> int:
        """How long the keeper may sleep before the next count; -1: no more counts."""
        if self.reached:
            return -1
        return max(0, int((self._next - time.monotonic()) * 1000) + 1)

    def check(self) -> int:
        """When a count is due: the tasks, if they have reached the cap (0 otherwise,
        and after the first time)."""
        now = time.monotonic()
        if self.reached or now < self._next:
            return 0
        count = count_tasks(self._threshold)
        cost = time.monotonic() - now
        self._next = now + min(max(TASKS_PERIOD, cost / TASKS_DUTY), TASKS_LONGEST)
        if count >= self._threshold:
            self.reached = count
            return count
        return 0


def count_tasks(enough: int, proc: str = "/proc") -> int:
    """Threads of the processes ``proc`` lists, counted until there are ``enough``."""
    total = 0
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as file:
                stat = file.read()
            total += int(stat.rsplit(b")", 1)[1].split()[_NUM_THREADS])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if total >= enough:
            break
    return total


def answer(probe: socket.socket) -> bool:
    """One question (``?N``, with the thread's pidfd), answered ``N ERRNO``: the errno of
    a null signal to the thread, which Landlock's signal scope refuses (EPERM) to a
    thread outside the answerer's domain. False once the asker has hung up."""
    import socket  # (only nested sandboxes are asked: not on a run's start path)

    try:
        question, fds, _flags, _address = socket.recv_fds(probe, 32, 1)
    except (InterruptedError, BlockingIOError):
        return True
    except OSError:
        return False
    if not question:
        return False
    error = errno.EBADF
    for pidfd in fds:
        try:
            signal.pidfd_send_signal(pidfd, 0)
            error = 0
        except OSError as exc:
            error = exc.errno or errno.EPERM
        finally:
            os.close(pidfd)
    try:
        probe.send(question[1:] + b" %d" % error)
    except OSError:
        return False
    return True
