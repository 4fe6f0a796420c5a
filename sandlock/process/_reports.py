"""The report pipe from the sandbox's guardians (keeper, namespace init) to sandlock:
one line per event, "pid N", "stop SIG" or "exit STATUS"."""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import os
import select


def send(fd: int, message: bytes) -> None:
    try:
        os.write(fd, message + b"\n")  # one short write: atomic between writers
    except OSError:
        pass  # sandlock is gone; nobody to tell


def parse_reports(data: bytes) -> list[tuple[str, int]]:
    """Decode complete report lines ("pid N", "stop SIG", "exit STATUS")."""
    reports = []
    for line in data.split(b"\n"):
        if line:
            kind, _, value = line.partition(b" ")
            reports.append((kind.decode(), int(value)))
    return reports


_JOB_CONTROL_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


class SandlockGone(Exception):
    """sandlock's end of the report pipe closed: however it died, the sandbox goes too."""


def wait_for_command(command_pid: int, report_fd: int, *, watch: bool = False) -> int:
    """Reap everything until the command itself ends; relay its stops to sandlock.
    ``watch``: also raise SandlockGone when sandlock is gone (no thread needed: SIGCHLD
    and the pipe's hang-up wake one poll)."""
    wakeup = _child_wakeup(report_fd) if watch else None
    flags = os.WUNTRACED | (os.WNOHANG if watch else 0)
    while True:
        pid, status = os.waitpid(-1, flags)
        if pid == 0:  # (watching) nothing has changed yet
            _sleep(wakeup, report_fd)
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


def _sleep(poller: select.poll | None, report_fd: int) -> None:
    assert poller is not None
    for fd, _ in poller.poll():
        if fd == report_fd:
            raise SandlockGone
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
