"""``sandlock run --no-supervisor``: the static layers (Landlock, the seccomp filter,
no_new_privs, no capabilities, rlimits) applied to sandlock's own process, which then
execs the command: nothing stays around it (upstream's spelling of ``sandlock.confine``
on the command line). What needs a process around the command is refused by name."""

from __future__ import annotations

import os
import sys

from .._errors import EXIT_NOEXEC, EXIT_NOTFOUND, PolicyError, SandlockError, fail
from ..policy import Policy, flag_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

_FLAG = "--no-supervisor"
# run's own options that need sandlock to stay around the command.
_RUN_OPTIONS = (("audit", "--audit"), ("dry_run", "--dry-run"),
                ("dangerously_allow_full_access", "--dangerously-allow-full-access"))
_DEFAULTS = Policy()


def exec_confined(policy: Policy, command: list[str], args: Namespace) -> int:
    """Confine this process with ``policy``, then exec ``command``: returns only on a
    refusal (exit 2) or when the command cannot be run (127 or 126, as a shell says)."""
    for name, flag in _RUN_OPTIONS:
        if getattr(args, name, None):
            fail(f"{_FLAG}: {flag} needs sandlock around the command (leave out {_FLAG})")
    try:
        env = _environment(policy)
        cwd = policy.cwd
        _close_inherited(set(args.pass_fds or ()))
        from ..api import confine

        confine(policy.replace(env=_DEFAULTS.env, clean_env=False, cwd=None))
    except PolicyError as exc:
        message = exc.message.replace("(use Sandbox)", f"(leave out {_FLAG})")
        fail(f"{_FLAG}: {flag_of(exc.field)}: {message.replace('confine() ', 'it ')}")
    except SandlockError as exc:
        fail(f"{_FLAG}: {exc}", exc.exit_code)
    try:
        if cwd:
            os.chdir(cwd)
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"sandlock: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return EXIT_NOEXEC if isinstance(exc, PermissionError) else EXIT_NOTFOUND


def _environment(policy: Policy) -> dict[str, str]:
    from ..process import child_environment

    return child_environment(policy, os.environ)


def _close_inherited(keep: set[int]) -> None:
    """Every descriptor above 2 but ``keep`` closed: the command inherits what a
    supervised run would give it."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # (the listing's own descriptor, closed by now)
