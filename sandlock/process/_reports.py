"""The report pipe from the sandbox's guardians (keeper, namespace init) to sandlock:
one line per event, "pid N", "stop SIG" or "exit STATUS"."""

from __future__ import annotations

import os


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


def wait_for_command(command_pid: int, report_fd: int) -> int:
    """Reap everything until the command itself ends; relay its stops to sandlock."""
    while True:
        pid, status = os.waitpid(-1, os.WUNTRACED)
        if pid != command_pid:
            continue  # an orphan reparented to us
        if os.WIFSTOPPED(status):
            send(report_fd, b"stop %d" % os.WSTOPSIG(status))
            continue
        return status


def close_all_but(*keep: int) -> None:
    """Drop every inherited fd but stdio and ``keep``: a pipe end kept open here would
    hold off the EOF its reader waits for (e.g. the command's stdin under Sandbox.run)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
