"""The command's side of the fork: from the keeper's fork to exec.

Runs in a forked copy of sandlock, so it does as little as possible: process group
and terminal, signal dispositions, death signal, working directory, confinement,
exec. A failure is reported to sandlock through the (close-on-exec) error pipe; a
successful exec closes that pipe, which is how sandlock knows the command started.
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import errno
import os

from .._errors import EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_SETUP
from .._record import record
from ..kernel import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, close_on_exec_from, prctl
from ._reports import send
from ._terminal import set_foreground

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..confinement import Confinement
    from ..limits import KernelLimits

# Signals whose disposition sandlock or the interpreter changed. The command gets them
# back as sandlock received them: an inherited SIG_IGN (nohup) is passed on, anything
# else becomes SIG_DFL. SIGPIPE and SIGXFSZ are always reset: the interpreter ignores
# them itself at start-up, so their original disposition cannot be known.
RESET_SIGNALS = (
    signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE,
    signal.SIGXFSZ, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGCHLD,
)
# What the interpreter ignores at its start-up (so their original disposition is unknown).
INTERPRETER_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


@record
class ChildSpec:
    """Everything the child needs, computed before the fork: ``argv``, ``env``, ``cwd``,
    the ``confinement``; ``stdio``: fds to become 0, 1, 2 (None: inherit); ``tty_fd``: the
    terminal to take as foreground job, if sandlock has it; ``ignored_signals``: those
    sandlock inherited as SIG_IGN; ``handoff``: (to sandlock, from sandlock), for the
    listener fd; ``pass_fds``: descriptors above 2 the command inherits, same numbers."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    confinement: Confinement
    stdio: tuple[int | None, int | None, int | None]
    tty_fd: int | None
    ignored_signals: tuple[int, ...]
    handoff: tuple[int, int] | None = None
    pass_fds: tuple[int, ...] = ()
    limits: KernelLimits | None = None  # CPUs before confinement, rlimits before exec
    hand_proc: bool = False  # hand sandlock the sandbox's /proc with the listener
    hand_scratch: bool = False  # and its private scratch directories (memory watch)
    # Run in the confined process instead of exec (a call, a long-lived sandbox's
    # resident process): given the host's /proc (O_PATH, or -1), returns an exit status.
    function: Callable[[int], int] | None = None
    keep_host_proc: bool = False  # the function keeps the host's /proc (else -1)
    # Inside a sandbox, with network rules of its own: the socket on which the keeper
    # tells the enclosing supervisor which threads are the run's (_reports.answer).
    probe_fd: int = -1
    no_terminal: bool = False  # --max-output: no terminal to write to (leave_the_terminal)
    # In the sandbox's namespaces: init's end of the channel on which sandlock asks its
    # binder for the command's pathname binds (netcall._binder).
    binder_fd: int = -1
    # Sandbox.create: the read end of a pipe the command waits on, confined and with
    # its pid known, until sandlock writes "g" (Sandbox.start); EOF: it never runs.
    gate: int = -1
    # (target, source): descriptors the command gets at other numbers than sandlock's
    # (a gather stage's sources on 3, 4, ...), placed last, just before the exec.
    fd_map: tuple[tuple[int, int], ...] = ()


def exec_command(spec: ChildSpec, parent_pid: int, error_fd: int, *,
                 report_fd: int | None = None, host_pid: int | None = None,
                 host_proc: int = -1, layer: int = -1) -> None:
    """Never returns: exec the confined command or _exit with 125/126/127.

    In the sandbox's PID namespace the command's parent is its init (pid 1), and the
    command itself tells sandlock (``report_fd``) its pid as seen from outside.
    ``layer``: the tmpfs of a --max-disk workspace, which sandlock takes with the
    listener (the only way out of the mount namespace it is attached in)."""
    try:
        if report_fd is not None and host_pid is not None:
            send(report_fd, b"pid %d" % host_pid)
        if spec.no_terminal:
            os.setsid()
        else:
            _enter_process_group(spec.tty_fd)
        _install_stdio(spec.stdio)
        if spec.no_terminal:
            leave_the_terminal()
        if spec.function is None:
            _keep_only(spec.pass_fds)
        else:
            if not spec.keep_host_proc:
                host_proc = -1  # (close-on-exec, opened by init: made /dev/null below)
            held = _open_descriptors((*spec.pass_fds, host_proc))  # while /proc is surely readable
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # the policy may not grant it
        _restore_signals(spec.ignored_signals, python=spec.function is not None)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before we set the death signal
            os._exit(EXIT_SETUP)
        os.chdir(spec.cwd)
        if spec.limits:
            spec.limits.before_confinement()
        # The sandbox's own procfs (init mounted it), where sandlock counts and watches
        # its processes; opened before Landlock, which a policy may make stricter.
        proc = _open_proc() if spec.hand_proc else -1
        scratch = _open_scratch(spec.confinement) if spec.hand_scratch else ()
        listener = spec.confinement.apply()
        if listener >= 0:  # (none where sandlock runs in a sandbox: _enclosed)
            _hand_over(listener, spec.handoff, host_pid or os.getpid(), (proc, layer, *scratch))
        if spec.limits:
            spec.limits.apply_rlimits()
            if spec.function is None:
                spec.limits.limit_data()
        if spec.gate >= 0 and os.read(spec.gate, 1) != b"g":
            os._exit(EXIT_SETUP)  # created, never started: nothing of it runs
        if spec.fd_map:
            error_fd = _place(spec.fd_map, error_fd)
    except BaseException as exc:  # noqa: BLE001 - must never unwind into the parent's code
        report_setup_error(error_fd, exc)
        os._exit(EXIT_SETUP)
    if spec.function is not None:
        _run_function(spec.function, spec.env, held, null, host_proc)
    code = exec_argv(spec.argv, spec.env)
    _report(error_fd, b"exec %d" % code)
    os._exit(EXIT_NOTFOUND if code in (errno.ENOENT, errno.ENOTDIR) else EXIT_NOEXEC)


def exec_argv(argv: list[str], env: dict[str, str]) -> int:
    """execve argv[0], searching PATH like a shell; returns the errno if nothing ran.

    Unlike execvp, a PATH directory that cannot be searched (outside the sandbox's
    read allowlist, or another user's 0700 home) does not turn "not found" into
    "permission denied": only an existing file that cannot be executed does.
    """
    for sig in INTERPRETER_IGNORED:  # (a Python process's SIG_IGN would outlive the exec)
        signal.signal(sig, signal.SIG_DFL)
    name = argv[0]
    if "/" in name:
        candidates = [name]
    else:
        path = env.get("PATH", os.defpath)
        candidates = [os.path.join(d or ".", name) for d in path.split(os.pathsep)]
    result = errno.ENOENT
    for candidate in candidates:
        try:
            os.execve(candidate, argv, env)
        except OSError as exc:
            if result == errno.ENOENT and exc.errno != errno.ENOENT and _exists(candidate):
                result = exc.errno or errno.ENOEXEC
    return result


def _run_function(function: Callable[[int], int], env: dict[str, str], held: list[int],
                  null: int, host_proc: int) -> None:
    """Never returns: run ``function`` (confined, in this copy of the caller) and exit
    with the status it returns. What an exec would have done first: the environment
    becomes the command's, and every descriptor of the caller's the command may not
    keep becomes /dev/null (not closed: a Python object of the caller's still naming
    it must not reach a file the function opens later under the same number). The
    error pipe is one of them: sandlock sees it close, as at exec."""
    try:
        os.environ.clear()
        os.environ.update(env)
        for fd in held:
            if fd != null:  # (null may have the number of the listing's own descriptor)
                os.dup2(null, fd, inheritable=False)
        os.close(null)
        _announce_start()
        code = function(host_proc)
    except BaseException:  # noqa: BLE001 - the function's wrapper reports its own errors
        code = EXIT_SETUP
    os._exit(code)


def _announce_start() -> None:
    """What every program does before its own code runs, done for a function, which
    never execs: set (here, read) its thread pointer. Under --time-start and
    --random-seed the supervisor makes this process's vDSO enter the kernel at that
    call (sandlock.determinism); otherwise it is one syscall the kernel answers."""
    import ctypes

    from ..kernel import nr, syscall

    syscall(nr("arch_prctl"), _ARCH_GET_FS, ctypes.byref(ctypes.c_ulong()))


_ARCH_GET_FS = 0x1003


def _open_descriptors(keep: tuple[int, ...]) -> list[int]:
    """The descriptors above 2 that are open and not in ``keep``."""
    try:
        listed = os.listdir("/proc/self/fd")
    except PermissionError:  # only inside a sandbox whose policy does not grant /proc
        raise PermissionError(errno.EACCES, "a function's process lists its descriptors in "
                              "/proc/self/fd, which the enclosing sandbox does not let it read "
                              "(grant /proc there)") from None
    return [fd for fd in map(int, listed) if fd > 2 and fd not in keep]


def _exists(path: str) -> bool:
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def leave_the_terminal() -> None:
    """Under --max-output, what the command writes reaches the terminal only through
    sandlock's count: in a session of its own (setsid, before) it has no controlling
    terminal (/dev/tty: ENXIO); a terminal as its stdin is opened anew, read-only (a
    write to fd 0: EBADF); the terminal devices are not granted for writing
    (confinement: TERMINAL_DEVICES)."""
    if not os.isatty(0):
        return
    try:
        reading = os.open("/proc/self/fd/0", os.O_RDONLY | os.O_NOCTTY)
    except OSError as exc:  # (a terminal not the user's, e.g. after su): no input then
        os.write(2, f"sandlock: the terminal cannot be opened again read-only ({exc.strerror}): "
                    "the command's stdin is /dev/null (--max-output)\n".encode())
        reading = os.open(os.devnull, os.O_RDONLY)
    os.dup2(reading, 0)
    os.close(reading)


def _enter_process_group(tty_fd: int | None) -> None:
    os.setpgid(0, 0)
    if tty_fd is not None:
        set_foreground(tty_fd, os.getpgrp())


def _hand_over(listener: int, handoff: tuple[int, int] | None, pid: int,
               more: tuple[int, ...]) -> None:
    """Let sandlock duplicate our seccomp listener and ``more``: the sandbox's /proc, a
    workspace's tmpfs (each -1 when there is none), then the private scratch
    directories (the memory watch counts their files); and wait until it has.

    The listener is close-on-exec: exec before sandlock holds a copy and every
    supervised call would fail with ENOSYS. Plain write/read are not intercepted.
    """
    if handoff is None:
        raise RuntimeError("a seccomp listener without a supervisor")
    to_sandlock, from_sandlock = handoff
    # The keeper's non-dumpable flag was inherited; pidfd_getfd needs us dumpable
    # (we are already inside our Landlock domain: nothing in the sandbox can exploit it).
    prctl(PR_SET_DUMPABLE, 1)
    os.write(to_sandlock, b" ".join(b"%d" % fd for fd in (pid, listener, *more)))
    if os.read(from_sandlock, 1) != b"g":
        raise RuntimeError("sandlock did not take the seccomp listener")
    for fd in (listener, *more):
        if fd >= 0:
            os.close(fd)


def _open_scratch(confinement: Confinement) -> tuple[int, ...]:
    """O_PATH descriptors on the sandbox's private tmpfs directories (init mounted them;
    one that cannot be opened is not counted, and the run goes on)."""
    isolation = confinement.isolation
    fds = []
    for path in isolation.private if isolation else ():
        try:
            fds.append(os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError:
            pass
    return tuple(fds)


def _open_proc() -> int:
    return os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _install_stdio(stdio: tuple[int | None, int | None, int | None]) -> None:
    for target, fd in enumerate(stdio):
        if fd is not None and fd != target:
            os.dup2(fd, target)


def _place(fd_map: tuple[tuple[int, int], ...], error_fd: int) -> int:
    """Each source at its target number (inherited: dup2's copy is), the error pipe
    first moved above every target, and every source too, so that placing one never
    closes another still needed. Returns the error pipe's new number."""
    import fcntl  # (a gather's consumer only)

    above = max(target for target, _ in fd_map) + 1
    error_fd = fcntl.fcntl(error_fd, fcntl.F_DUPFD_CLOEXEC, above)
    moved = [(target, fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, above)) for target, source in fd_map]
    for target, source in moved:
        os.dup2(source, target)
        os.close(source)
    return error_fd


def _keep_only(pass_fds: tuple[int, ...]) -> None:
    """Descriptors 0-2 and ``pass_fds`` survive the exec; every other one sandlock's
    process held (a log file, a socket, a pipe of the embedding program) is closed by
    it: a leaked writable descriptor is a way out of the sandbox. The ones this side
    still needs until exec (error pipe, listener handoff) are close-on-exec anyway."""
    close_on_exec_from(3)
    for fd in pass_fds:
        os.set_inheritable(fd, True)


def _restore_signals(ignored: frozenset[int], python: bool) -> None:
    """As a program finds them at its start; ``python``: a function runs on in this
    interpreter, and gets what the interpreter sets at its own start (not the embedding
    program's handlers): a write to a closed pipe raises BrokenPipeError rather than
    killing it, SIGINT raises KeyboardInterrupt (unless ignored when sandlock started)."""
    for sig in RESET_SIGNALS:
        signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    if python:
        for sig in INTERPRETER_IGNORED:
            signal.signal(sig, signal.SIG_IGN)
        if signal.SIGINT not in ignored:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def report_setup_error(error_fd: int, exc: BaseException) -> None:
    _report(error_fd, b"setup " + _describe(exc).encode(errors="replace"))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _report(fd: int, message: bytes) -> None:
    try:
        os.write(fd, message)
    except OSError:
        pass


def parse_error(report: bytes) -> tuple[str, int | str] | None:
    """Decode what the child wrote on the error pipe (None: exec succeeded)."""
    if not report:
        return None
    kind, _, detail = report.partition(b" ")
    if kind == b"exec":
        return "exec", int(detail)
    return "setup", detail.decode(errors="replace")
