"""What a launch is given, checked (argv, descriptors to pass) or derived from
sandlock's own process (the command's environment, the signals it ignores)."""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import os

from .._errors import PolicyError
from ._child import INTERPRETER_IGNORED, RESET_SIGNALS

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..policy import Policy

# --clean-env keeps only these variables from sandlock's environment.
CLEAN_ENV_KEEP = ("PATH", "HOME", "TERM", "LANG", "USER", "SHELL")


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
    if policy.credentials:
        _hide_secrets(policy, env)
    return env


def _hide_secrets(policy: Policy, env: dict[str, str]) -> None:
    """The variables secrets come from never reach the command (--clean-env or not,
    --env NAME or not); the placeholders it was promised stand in for them."""
    from ..policy import placeholder_for

    for variable in policy.credential_variables:
        env.pop(variable, None)
    for variable, credential in policy.credential_env.items():
        env[variable] = placeholder_for(credential)


def check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise PolicyError("argv", "expected a non-empty list of strings")
    return list(argv)


def check_timeout(timeout: object) -> float | None:
    """A run's, call's or wait's own timeout, checked before anything starts as the
    policy's is: seconds, more than 0, at most MAX_TIMEOUT (PolicyError "timeout")."""
    if timeout is None:
        return None
    from ..policy import check_timeout as check  # (loaded already: Policy's own check)

    return check("timeout", timeout)


def check_pass_fds(pass_fds: Sequence[int]) -> tuple[int, ...]:
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
        except (OSError, OverflowError):  # (past a C int: no descriptor has that number)
            raise PolicyError("pass_fds", f"{fd}: not an open file descriptor") from None
        checked.append(fd)
    return tuple(dict.fromkeys(checked))


def inherited_ignored_signals() -> frozenset[int]:
    return frozenset(
        sig for sig in RESET_SIGNALS
        if sig not in INTERPRETER_IGNORED and signal.getsignal(sig) == signal.SIG_IGN
    )
