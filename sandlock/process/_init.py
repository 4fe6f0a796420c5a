"""The first process of the sandbox's PID namespace (its pid 1).

keeper ──fork──> init (pid 1) ──fork──> command (pid 2)

Forked by the keeper once it is in the sandbox's user and PID namespaces, init makes
the mount namespace and every mount, its own /proc included (only a process inside
the PID namespace can mount that), forks the command and reaps for the namespace
until the command ends. A thread of it binds the command's sockets to paths, for
sandlock's supervisor (``_binder``). When it exits, the kernel kills whatever is left in the
namespace, atomically: the keeper's "kill the tree" is killing this one process.

It is outside the command's Landlock domain, so the command can neither signal nor
trace it; it is not dumpable, so its memory (a copy of sandlock's) is unreadable; and
it wipes its command line, which /proc shows to anyone.
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import _thread
import ctypes
import os
import select

from .._record import replace
from ..confinement import RESERVED_PIDS, SANDLOCK_PACKAGE, Isolation
from ..kernel import PR_SET_PDEATHSIG, prctl
from . import _child, _reports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def run(spec: _child.ChildSpec, isolation: Isolation, report_fd: int, status_fd: int,
        error_fd: int) -> None:
    """Body of the init process; never returns. The command's wait status goes to
    ``status_fd`` (the keeper reports it); a setup failure to ``error_fd``."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper gone: the namespace with us
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the keeper's signal, not ours
        _wipe_command_line()
        feed = _loaded_before_the_mounts(spec, isolation)
        ruleset = spec.confinement.ruleset
        # The default task cap, for root (RLIMIT_NPROC holds the others): pid_max.
        cap = spec.confinement.task_cap
        try:
            host_proc = isolation.mount(ruleset.allow_path if ruleset else _no_rules,
                                        cap + RESERVED_PIDS if cap else 0)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot make the sandbox's mounts ({exc.strerror}); --allow-"
                                     "degraded NAMESPACES (or --best-effort) runs without them") from None
        if isolation.root is not None:  # (chroot: the command starts inside it)
            spec = replace(spec, cwd=isolation.root.cwd)
        command_pid = os.fork()
        if command_pid == 0:
            host_pid = int(os.readlink("self", dir_fd=host_proc))  # our pid outside
            _child.exec_command(spec, 1, error_fd, report_fd=report_fd, host_pid=host_pid,
                                host_proc=host_proc, layer=isolation.layer_fd)
        binder = (spec.binder_fd, ruleset.fileno()) if spec.binder_fd >= 0 and ruleset else ()
        fifo = (isolation.random_fifo,) if isolation.random_fifo >= 0 else ()
        _reports.close_all_but(report_fd, status_fd, *binder, *fifo)
        if binder:
            _thread.start_new_thread(_binder, binder)
        if fifo and feed is not None:
            _thread.start_new_thread(feed, (*fifo, isolation.device_seed))
        status = _reports.wait_for_command(command_pid, report_fd)
        os.write(status_fd, b"%d" % status)
    except BaseException as exc:  # noqa: BLE001 - must never unwind into sandlock's code
        _child.report_setup_error(error_fd, exc)
    os._exit(0)


def _loaded_before_the_mounts(spec: _child.ChildSpec, isolation: Isolation) -> Callable | None:
    """What init runs after the mounts, loaded before them: they may hide sandlock's
    own files (a venv under /tmp, which the sandbox's /tmp covers), and an import that
    finds none then fails. The random devices' feed of a seeded run (returned), and,
    where sandlock's files are hidden, the binder (else loaded at its first request)."""
    if spec.binder_fd >= 0 and isolation.hides(SANDLOCK_PACKAGE):
        import _socket  # noqa: F401 - (the binder's first request imports it)

        from ..netcall import serve_binds  # noqa: F401 - (its module, loaded)
    if isolation.device_seed is None:
        return None
    from ..determinism import feed_random_devices

    return feed_random_devices


def _binder(channel: int, ruleset: int) -> None:
    """A thread of init, in the sandbox's namespaces and outside the command's domain,
    which binds the command's sockets to paths for sandlock (``netcall._binder``): idle, and
    nothing loaded, until the first request."""
    try:
        select.select([channel], [], [])
        from ..netcall import serve_binds
    except BaseException:  # noqa: BLE001 - nothing may be printed in the sandbox
        os.close(channel)  # sandlock's request then fails (EACCES), never waits
        return
    try:
        serve_binds(channel, ruleset)  # (closes the channel when it returns)
    except BaseException:  # noqa: BLE001
        pass


def _wipe_command_line() -> None:
    """Zero the argv strings (sandlock's own command line, --env values included) that
    /proc/1/cmdline would show inside the sandbox."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)


def _no_rules(path: str, access: int) -> None:
    pass
