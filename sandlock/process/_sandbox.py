"""The public API: ``Sandbox(policy).run(argv)`` and ``Sandbox(policy).start(argv)``."""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import _thread  # threading costs ~1 ms of start-up; its Lock and a daemon thread are these
import os
import select
import sys
from io import TextIOWrapper as TextIO

from .._errors import EXIT_TIMEOUT, PolicyError, SetupError
from .._record import DataclassView, record
from ..confine import Confinement
from ..policy import Policy
from ._child import RESET_SIGNALS, ChildSpec
from ._process import SandboxedProcess, TimeoutExpired, spawn
from ._terminal import Foreground

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..net import HttpRun

# --clean-env keeps only these variables from sandlock's environment.
CLEAN_ENV_KEEP = ("PATH", "HOME", "TERM", "LANG", "USER", "SHELL")
# The interpreter itself ignores these at start-up; their original disposition is unknown.
_INTERPRETER_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


@record
class Result:
    """How a sandboxed command ended."""

    exit_code: int  # shell convention: 128+N for signal N, 124 on timeout
    stdout: bytes | None
    stderr: bytes | None
    timed_out: bool = False
    start_error: str | None = None  # why the command could not be started, if it could not
    __dataclass_fields__ = DataclassView()  # dataclasses.fields/replace/asdict, on demand

    @property
    def signal(self) -> int | None:
        """The signal that ended the command, if one did (not counting a timeout kill)."""
        return self.exit_code - 128 if self.exit_code > 128 and not self.timed_out else None


class Sandbox:
    """Runs commands under one Policy."""

    def __init__(self, policy: Policy | str | None = None, *, audit: str | None = None,
                 quiet: bool = False, dangerously_allow_full_access: bool = False) -> None:
        """``policy``: a Policy, or the name of a profile to load (``Sandbox("build")``).
        ``audit``: a file receiving one JSON line per network decision.
        ``quiet``: no notices on stderr (denials, DNS warnings).
        ``dangerously_allow_full_access``: the consent a policy in mode full-access needs
        (it never comes from the policy itself, which someone else may have written)."""
        if isinstance(policy, str):
            from ..policy import load_profile

            policy = load_profile(policy)
        self.policy = policy if policy is not None else Policy()
        self.audit = audit
        self.quiet = quiet
        self.full_access_allowed = dangerously_allow_full_access
        self.warnings: list[str] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        foreground: bool = False,
        pass_fds: Sequence[int] = (),
    ) -> SandboxedProcess:
        """Start ``argv`` confined; stdio are file descriptors (None: inherit).

        The command inherits no other descriptor of this process but ``pass_fds``
        (under the same numbers). With ``foreground`` and a terminal, the command
        becomes the terminal's foreground job for as long as it runs (what the CLI does).
        """
        argv = _check_argv(argv)
        pass_fds = _check_pass_fds(pass_fds)
        if self.policy.full_access and not self.full_access_allowed:
            raise PolicyError("mode", "full-access runs the command unconfined: it needs "
                              "--dangerously-allow-full-access as well")
        env = child_environment(self.policy, os.environ)
        cwd = self.policy.cwd or os.getcwd()
        audit = _open_audit(self.audit)
        if self.policy.full_access:
            _record_full_access(audit, argv)
        http = _start_http(self.policy, env, audited=audit is not None)
        try:
            # Every run is supervised: even `--net-allow '*'` keeps pathname unix sockets
            # to --unix-allow, and listening to --net-allow-bind.
            confinement = Confinement.prepare(self.policy, cwd, env,
                                              http.readable_paths if http else ())
        except BaseException:
            if http is not None:
                http.close()
            raise
        self.warnings = confinement.warnings
        terminal = Foreground.detect() if foreground else None
        spec = ChildSpec(
            argv=argv,
            env=env,
            cwd=cwd,
            confinement=confinement,
            stdio=(stdin, stdout, stderr),
            tty_fd=terminal.fd if terminal else None,
            ignored_signals=_inherited_ignored_signals(),
            pass_fds=pass_fds,
        )
        launcher = _NetworkLauncher(self.policy, confinement, audit, self.quiet, http)
        try:
            process = spawn(spec, terminal, launcher.take_listener)
        except BaseException:
            launcher.close()
            raise
        finally:
            confinement.close()  # the child holds its own copy until it restricts itself
        process.on_exit(launcher.close)
        return process

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = None,
        *,
        input: bytes | None = None,
        capture_output: bool = True,
        pass_fds: Sequence[int] = (),
    ) -> Result:
        """Run ``argv`` to completion (like subprocess.run) and return its Result.

        ``timeout`` defaults to the policy's; when it expires the whole sandbox tree
        is killed and ``exit_code`` is 124.
        """
        from ._capture import Capture  # threads: only paid for by callers who capture

        timeout = self.policy.timeout if timeout is None else timeout
        with Capture(input, capture_output) as capture:
            process = self.start(argv, pass_fds=pass_fds, **capture.child_stdio())
            capture.start()
            timed_out = _wait(process, timeout)
            stdout, stderr = capture.finish()
        code = EXIT_TIMEOUT if timed_out else process.returncode
        return Result(code, stdout, stderr, timed_out, process.start_error)


class _NetworkLauncher:
    """Takes the command's seccomp listener at once, so that it can exec, and brings
    the network engine (~13 ms of imports) up on a thread: a command never waits for it
    but at a supervised call (connect, bind, sendto...), which the kernel holds until
    the supervisor reads it. With network rules, the engine is built at once (it pins
    the policy's names at start); without, at the first supervised call: a command
    that never makes one never pays for it, nor does its exit (on two CPUs the build
    competed with the command).
    """

    def __init__(self, policy: Policy, confinement: Confinement, audit: TextIO | None,
                 quiet: bool, http: HttpRun | None) -> None:
        self._policy = policy
        self._http = http  # owned from now on
        self._quiet = quiet
        self._audit = audit
        # The confined worker restricts itself with the command's ruleset, later.
        self._ruleset_fd = os.dup(confinement.ruleset.fileno()) if confinement.ruleset else None
        self._lock = _thread.allocate_lock()
        self._network: object | None = None
        self._closed = False
        self._wake: tuple[int, int] | None = None  # close() -> the thread waiting to build

    def take_listener(self, pid: int, fd: int) -> Callable[[], None]:
        from ..kernel import take_fd

        listener = take_fd(pid, fd)
        if self._http is not None:
            try:
                self._http.wait_for_trust()  # the command may read its CA bundle at once
            except BaseException:
                os.close(listener)
                raise
        # Started once the command has been told to go on: the thread's imports hold
        # the GIL, and the message that lets the command exec must not wait for them.
        if _pins_names(self._policy):
            return lambda: _thread.start_new_thread(self._start, (listener,))
        self._wake = os.pipe2(os.O_CLOEXEC)
        return lambda: _thread.start_new_thread(self._start_when_needed, (listener,))

    def _start_when_needed(self, listener: int) -> None:
        """Wait for the first supervised call (the listener readable), or for the run
        to end (close(), or the command gone: the listener hangs up)."""
        wake = self._wake[0]
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(wake, select.POLLIN)
        ready = dict(poller.poll())
        os.close(wake)
        if ready.get(listener, 0) & select.POLLIN:
            self._start(listener)
            return
        os.close(listener)  # no engine: what it would have owned is closed here
        if self._ruleset_fd is not None:
            os.close(self._ruleset_fd)
        if self._audit is not None:
            self._audit.close()

    def _start(self, listener: int) -> None:
        try:
            with _responsive_switching:
                from ..net import Network

                network = Network(self._policy, self._ruleset_fd, self._audit,
                                  quiet=self._quiet, http=self._http)
        except BaseException as exc:
            os.close(listener)  # fail closed: the command's network calls now fail (ENOSYS)
            if self._http is not None:
                self._http.close()
            with self._lock:
                if self._closed:
                    return  # the run ended meanwhile (its proxy with it): nothing to say
            print(f"sandlock: error: the network supervisor could not start: {exc}",
                  file=sys.stderr, flush=True)
            return
        with self._lock:  # close() sees either no engine or one that is serving
            if not self._closed:
                network.serve(listener)
                self._network = network
                return
        os.close(listener)  # the command is already gone
        network.close()

    def close(self) -> str | None:
        """End the network engine; its denial summary, if it ran and denied anything."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
            network = self._network
        if self._wake is not None:
            _signal_and_close(self._wake[1])
        if network is None:
            # Not built (yet): a builder still at work finds the run closed and drops
            # what it made. The proxy is ended here and now (idempotent), so that it
            # never outlives sandlock, without waiting for the builder.
            if self._http is not None:
                self._http.close()
            return None
        return network.close()


def _pins_names(policy: Policy) -> bool:
    """Whether the policy names destinations the engine resolves and pins at start."""
    return bool(policy.net_allow_specs or policy.net_deny or policy.resolve
                or policy.dns_servers or policy.has_http_rules)


def _signal_and_close(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except OSError:
        pass  # the reader is gone: the engine was built, or the wait is over
    os.close(fd)


class _ResponsiveSwitching:
    """Lowers the interpreter's thread switch interval while network engines are being
    built. The builder imports for ~15 ms holding the GIL; a thread that wakes meanwhile
    (the one reporting that a short command has exited) would wait up to the default
    5 ms for it. Restored when the last builder is done."""

    INTERVAL = 0.0001

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._builders = 0
        self._saved = 0.0

    def __enter__(self) -> None:
        with self._lock:
            if self._builders == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, self.INTERVAL))
            self._builders += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._builders -= 1
            if self._builders == 0:
                sys.setswitchinterval(self._saved)


_responsive_switching = _ResponsiveSwitching()  # one for the process: the interval is global


def _start_http(policy: Policy, env: dict[str, str], *, audited: bool) -> HttpRun | None:
    """The proxy for a run with HTTP rules (its trust variables go into ``env``)."""
    if not policy.has_http_rules:
        return None  # the proxy package is never imported by other runs
    from ..net import HttpRun

    try:
        http = HttpRun(policy, env, audited=audited)
    except OSError as exc:
        raise SetupError(f"the HTTP proxy could not start: {exc}") from None
    env.update(http.env_updates)
    return http


def _wait(process: SandboxedProcess, timeout: float | None) -> bool:
    """Wait for the command; on timeout kill the tree. True if it timed out."""
    try:
        process.wait(timeout)
        return False
    except TimeoutExpired:
        process.kill()
        process.wait()
        return True


def _open_audit(path: str | None) -> TextIO | None:
    """The audit log, opened before anything starts so that a bad path is a clear error."""
    if path is None:
        return None
    try:
        return open(path, "a", buffering=1, encoding="utf-8")
    except OSError as exc:
        raise PolicyError("audit", f"cannot open {path}: {exc.strerror}") from None


def child_environment(policy: Policy, base: dict[str, str] | os._Environ) -> dict[str, str]:
    if policy.clean_env:
        env = {key: base[key] for key in CLEAN_ENV_KEEP if key in base}
    else:
        env = dict(base)
    for name, value in policy.env.items():
        if value is None:  # --env NAME: sandlock's own value, never written anywhere
            if name not in os.environ:
                raise PolicyError("env", f"{name}: not set in sandlock's environment "
                                  "(--env NAME passes it from there)")
            value = os.environ[name]
        env[name] = value
    return env


def _check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise PolicyError("argv", "expected a non-empty list of strings")
    return list(argv)


def _record_full_access(audit: TextIO | None, argv: list[str]) -> None:
    """Announced on stderr whatever -q says, and recorded in the audit log."""
    program = os.path.basename(argv[0])  # not the arguments: they may carry tokens
    print(f"sandlock: warning: full-access mode: {program} runs unconfined (filesystem, "
          "network and IPC open; only the syscall filter stays)", file=sys.stderr, flush=True)
    if audit is not None:
        import json
        import time

        audit.write(json.dumps({"time": round(time.time(), 6), "event": "full-access",
                                "program": program}) + "\n")
        audit.flush()


def _check_pass_fds(pass_fds: Sequence[int]) -> tuple[int, ...]:
    if isinstance(pass_fds, (str, bytes)):
        raise PolicyError("pass_fds", "expected a list of file descriptor numbers")
    checked = []
    for fd in pass_fds:
        if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
            raise PolicyError("pass_fds", f"{fd!r} is not a file descriptor number")
        if fd <= 2:
            raise PolicyError("pass_fds", f"{fd}: descriptors 0-2 are the command's stdio, always passed")
        try:
            os.fstat(fd)
        except OSError:
            raise PolicyError("pass_fds", f"{fd}: not an open file descriptor") from None
        checked.append(fd)
    return tuple(dict.fromkeys(checked))


def _inherited_ignored_signals() -> frozenset[int]:
    return frozenset(
        sig for sig in RESET_SIGNALS
        if sig not in _INTERPRETER_IGNORED and signal.getsignal(sig) == signal.SIG_IGN
    )
