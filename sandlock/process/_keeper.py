"""The keeper: sandlock's forked guardian between sandlock and the command.

The keeper is the command's parent and a child subreaper, so every process the
command starts stays beneath it even when intermediate parents exit. When the
command exits, or sandlock dies (its end of the report pipe closes), or sandlock
asks (SIGUSR1, used by timeouts), the keeper kills the whole sandbox tree, reaps it,
and reports the command's wait status to sandlock over a pipe. It notices sandlock's
death in the same poll that waits for its child (``_reports.wait_for_command``), not
with PR_SET_PDEATHSIG: that fires when the *thread* that forked us exits, which an API
caller's short-lived thread (a thread pool) does while sandlock lives on.

Killing is exact. In the sandbox's namespaces (the usual case, ``confinement._isolation``)
the keeper enters the user and PID namespaces and forks the PID namespace's init
(``_init``), which makes the mounts and forks the command; killing init kills the
namespace. Without them (--best-effort), with IPC
scoping on, the keeper sits in a Landlock domain scoped for signals, so
``kill(-1, SIGKILL)`` reaches its descendants and nothing else, in one atomic pass
that no racing fork can escape; without scoping (--allow-ipc, old kernels) it walks
/proc for its descendants until none is left.
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import os

from ..confinement import Confinement, Isolation, keeper_scope
from ..kernel import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    mounts,
    prctl,
)
from . import _child, _init, _reports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

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
    isolation = spec.confinement.isolation
    init_pid = 0
    scoped = False  # kill(-1) only ever from inside the signal-scoped domain
    try:
        if isolation is not None:  # first: only a single-threaded process may do this
            _entering(error_fd, isolation.enter_user_namespace, isolation.overlay is not None)
        scoped = _become_keeper(report_fd, spec.confinement, scope=isolation is None)
        if isolation is None:
            status = _run_command(spec, report_fd, error_fd)
        else:
            _entering(error_fd, isolation.enter_pid_namespace, isolation.overlay is not None)
            status_r, status_w = os.pipe()
            init_pid = _fork_init(spec, isolation, report_fd, status_w, error_fd)
            if isolation.private_network and spec.binder_fd >= 0:  # (while init mounts)
                _send_diag_socket(spec.binder_fd)
            status = _wait_for_init(init_pid, report_fd, status_r, spec.confinement.task_cap)
            init_pid = 0  # reaped: its pid may be anyone's now
    except _KillAll as request:
        status = STATUS_KILLED
        init_pid = init_pid or (request.args[0] if request.args else 0)
    except _reports.SandlockGone:
        status = STATUS_KILLED
    except BaseException:  # noqa: BLE001 - the keeper must always reach the cleanup
        status = STATUS_FAILED
    finally:
        signal.signal(KILL_SIGNAL, signal.SIG_IGN)
        if init_pid:
            _kill_quietly(init_pid)  # the kernel kills the rest of its namespace
            _reap_all()
        if isolation is None:  # (in namespaces, /proc may no longer be the host's)
            _kill_tree(scoped)
        _reports.send(report_fd, b"exit %d" % status)
        os._exit(0)


def _entering(error_fd: int, enter: Callable[[], None], workspace: bool) -> None:
    try:
        enter()
    except OSError as exc:
        refusal = mounts.userns_refusal()
        why = f"{exc.strerror}; {refusal} refuses unprivileged user namespaces" if refusal \
            else exc.strerror
        # A copy-on-write workspace has no way without them: DIR is never written instead.
        way_out = ("--workdir needs them" if workspace
                   else "--allow-degraded NAMESPACES (or --best-effort) runs without them")
        _child.report_setup_error(error_fd, OSError(
            exc.errno, f"cannot make the sandbox's namespaces ({why}); {way_out}"))
        raise
    except RuntimeError as exc:  # its own message (the time namespace of --time-start)
        _child.report_setup_error(error_fd, exc)
        raise


def _send_diag_socket(channel: int) -> None:
    """sandlock asks about the sandbox's unix sockets through a socket of its private
    network, sent on the binder's channel before sandlock's first request there
    (``process._networkslot.SandboxDiag`` waits for it)."""
    from ..kernel import netns

    try:
        netns.send_diag_socket(channel)
    except OSError:
        pass  # sandlock finds none: the sandbox's own sockets refused, and said


def _fork_init(spec: _child.ChildSpec, isolation: Isolation, report_fd: int, status_fd: int,
               error_fd: int) -> int:
    """Fork the namespace's init; a kill request meanwhile waits until its pid is known
    (raised in between, it would leave the keeper not knowing what to kill)."""
    requested: list[int] = []
    signal.signal(KILL_SIGNAL, lambda signum, frame: requested.append(signum))
    init_pid = os.fork()
    if init_pid == 0:
        _init.run(spec, isolation, report_fd, status_fd, error_fd)
    signal.signal(KILL_SIGNAL, _on_kill_signal)
    if requested:
        raise _KillAll(init_pid)
    return init_pid


def _wait_for_init(init_pid: int, report_fd: int, status_fd: int, task_cap: int) -> int:
    """The command's wait status, as init sends it before exiting; init reaped means
    the namespace is empty. Meanwhile, the default task cap is watched (``_reports``)."""
    _reports.close_all_but(report_fd, status_fd)
    tasks = _reports.TaskCapWatch(task_cap) if task_cap else None
    _reports.wait_for_command(init_pid, report_fd, watch=True, tasks=tasks)
    reported = os.read(status_fd, 64)
    os.close(status_fd)
    return int(reported) if reported else STATUS_FAILED


def _run_command(spec: _child.ChildSpec, report_fd: int, error_fd: int) -> int:
    """Without namespaces: the command is our child."""
    keeper_pid = os.getpid()
    command_pid = os.fork()
    if command_pid == 0:
        _child.exec_command(spec, keeper_pid, error_fd)
    probe = spec.probe_fd
    _reports.close_all_but(report_fd, *([probe] if probe >= 0 else []))
    _reports.send(report_fd, b"pid %d" % command_pid)
    return _reports.wait_for_command(command_pid, report_fd, watch=True, probe=probe)


def _become_keeper(report_fd: int, confinement: Confinement, *, scope: bool) -> bool:
    """True once the keeper is in its signal-scoped Landlock domain."""
    prctl(PR_SET_DUMPABLE, 0)  # holds a copy of sandlock's memory: not readable via /proc
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(KILL_SIGNAL, _on_kill_signal)
    # In namespaces, the keeper stays outside any Landlock domain: its init must mount.
    domain = keeper_scope(confinement) if scope else None
    if domain is not None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        domain.restrict_self()
        domain.close()
    return domain is not None


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


def _reap_all() -> None:
    while True:
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
