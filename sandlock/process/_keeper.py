"""The keeper: sandlock's forked guardian between sandlock and the command.

The keeper is the command's parent and a child subreaper, so every process the
command starts stays beneath it even when intermediate parents exit. When the
command exits, or sandlock dies (its end of the report pipe closes), or sandlock
asks (SIGUSR1, used by timeouts), the keeper kills the whole sandbox tree, reaps it,
and reports the command's wait status to sandlock over a pipe.

Killing is exact: with IPC scoping on, the keeper sits in a Landlock domain scoped
for signals, so ``kill(-1, SIGKILL)`` reaches its descendants and nothing else, in
one atomic pass that no racing fork can escape. Without scoping (--allow-ipc, old
kernels) it walks /proc for its descendants until none is left.
"""

from __future__ import annotations

import os
import select
import signal
import threading

from ..confine import Confinement, keeper_scope
from ..kernel import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, prctl
from . import _child

KILL_SIGNAL = signal.SIGUSR1  # "kill everything": from sandlock (timeout) or our watcher
# "exit" reports carry the command's wait status, or one of these.
STATUS_KILLED = -1  # the tree was killed on request before the command ended
STATUS_FAILED = -2  # the keeper itself failed
_IGNORED = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP,
            signal.SIGTTIN, signal.SIGTTOU)


class _KillAll(Exception):
    pass


def _on_kill_signal(signum: int, frame: object) -> None:
    raise _KillAll


def run(spec: _child.ChildSpec, report_fd: int, error_fd: int) -> None:
    """Body of the keeper process; never returns."""
    status = STATUS_FAILED
    try:
        _become_keeper(report_fd, spec.confinement)
        keeper_pid = os.getpid()
        command_pid = os.fork()
        if command_pid == 0:
            _child.exec_command(spec, keeper_pid, error_fd)
        _close_all_but(report_fd)
        _send(report_fd, b"pid %d" % command_pid)
        status = _wait_for_command(command_pid, report_fd)
    except _KillAll:
        status = STATUS_KILLED
    except BaseException:  # noqa: BLE001 - the keeper must always reach the cleanup
        status = STATUS_FAILED
    finally:
        signal.signal(KILL_SIGNAL, signal.SIG_IGN)
        _kill_tree(spec.confinement.scopes_signals)
        _send(report_fd, b"exit %d" % status)
        os._exit(0)


def _become_keeper(report_fd: int, confinement: Confinement) -> None:
    prctl(PR_SET_DUMPABLE, 0)  # holds a copy of sandlock's memory: not readable via /proc
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(KILL_SIGNAL, _on_kill_signal)
    scope = keeper_scope(confinement)
    if scope is not None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        scope.restrict_self()
        scope.close()
    # After restrict_self: the watcher thread inherits the domain, and signals itself.
    threading.Thread(target=_watch_sandlock, args=(report_fd,), daemon=True).start()


def _watch_sandlock(report_fd: int) -> None:
    """Kill the tree when sandlock is gone: the report pipe's read end, held by
    sandlock alone, closes (POLLERR on our end), however sandlock died.

    Not PR_SET_PDEATHSIG: it fires when the *thread* that forked us exits, which an
    API caller's short-lived thread (a thread pool) does while sandlock lives on.
    """
    poller = select.poll()
    poller.register(report_fd, select.POLLERR)
    while not poller.poll():
        pass
    os.kill(os.getpid(), KILL_SIGNAL)


def _close_all_but(report_fd: int) -> None:
    """Drop every inherited fd (but stdio): a pipe end kept open here would hold off
    the EOF its reader waits for (e.g. the command's stdin under Sandbox.run)."""
    os.closerange(3, report_fd)
    os.closerange(report_fd + 1, os.sysconf("SC_OPEN_MAX"))


def _wait_for_command(command_pid: int, report_fd: int) -> int:
    """Reap everything until the command itself ends; relay its stops to sandlock."""
    while True:
        pid, status = os.waitpid(-1, os.WUNTRACED)
        if pid != command_pid:
            continue  # an orphan reparented to us
        if os.WIFSTOPPED(status):
            _send(report_fd, b"stop %d" % os.WSTOPSIG(status))
            continue
        return status


def _kill_tree(scoped: bool) -> None:
    """SIGKILL and reap every descendant; returns when the keeper has no child left."""
    while True:
        if scoped:
            _kill_quietly(-1)
        else:
            for pid in _descendants(os.getpid()):
                _kill_quietly(pid)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split(None, 2)[1])
        children.setdefault(ppid, []).append(int(entry))
    found, pending = [], [root]
    while pending:
        kids = children.get(pending.pop(), [])
        found.extend(kids)
        pending.extend(kids)
    return found


def _send(fd: int, message: bytes) -> None:
    try:
        os.write(fd, message + b"\n")
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
