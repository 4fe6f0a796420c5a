"""The public API: ``Sandbox(policy).run(argv)`` and ``Sandbox(policy).start(argv)``."""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import os
import sys
from io import TextIOWrapper as TextIO

from .._errors import EXIT_TIMEOUT, PolicyError, SetupError
from .._record import DataclassView, record
from ..confine import Confinement
from ..policy import Policy
from ._child import RESET_SIGNALS, ChildSpec
from ._process import SandboxedProcess, TimeoutExpired, spawn
from ._supervision import Supervision
from ._terminal import Foreground

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..limits import KernelLimits
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
            limits=_kernel_limits(self.policy),
        )
        supervision = Supervision(self.policy, confinement, audit, self.quiet, http)
        try:
            process = spawn(spec.replace(hand_proc=supervision.wants_proc), terminal,
                            supervision.take_listener)
        except BaseException:
            supervision.close()
            raise
        finally:
            confinement.close()  # the child holds its own copy until it restricts itself
        process.on_exit(supervision.close)
        supervision.watch(process.kill)
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
        limit = self.policy.max_output
        # Not captured but limited: passed on to sandlock's own stdout and stderr.
        with Capture(input, capture_output or limit is not None, limit=limit,
                     forward=not capture_output) as capture:
            process = self.start(argv, pass_fds=pass_fds, **capture.child_stdio())
            capture.start()
            timed_out = _wait(process, timeout)
            stdout, stderr = capture.finish()
        if not self.quiet:
            for notice in capture.drop_notices():
                print(notice, file=sys.stderr)
        code = EXIT_TIMEOUT if timed_out else process.returncode
        return Result(code, stdout, stderr, timed_out, process.start_error)


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


def _kernel_limits(policy: Policy) -> KernelLimits | None:
    if not (policy.max_open_files or policy.max_file_size or policy.cpu_cores):
        return None  # the limits package is not even imported
    from ..limits import kernel_limits

    return kernel_limits(policy)


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
