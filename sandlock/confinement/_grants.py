"""Which paths a policy grants and denies, before they are compiled into Landlock rules
(``_fspolicy``): the default workspace or the explicit grants, the denies every
policy has (credential stores of every home the command may be told about, sandlock's
own directories, the host's secrets), a dry run's narrowing."""

from __future__ import annotations

import os

from . import _fspolicy
from ._workspace import (
    DEVICES_WRITE,
    TERMINAL_DEVICES,
    check_workspace,
    default_workspace,
    private_scratch,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..policy import Policy


def granted_paths(
    policy: Policy, cwd: str, env: Mapping[str, str], homes: list[tuple[str, Mapping[str, str]]],
) -> tuple[list[str], list[str], list[str], tuple[str, ...]]:
    """(read, write, deny, scratch directories made private to the run)."""
    # Credential stores and the CA are denied in every policy, for the home the
    # command is told about *and* the user's real one: a scratch HOME given to an
    # agent must not unprotect ~/.ssh. The CA directory is computed from both the
    # command's environment and sandlock's own, whose XDG_DATA_HOME locates the key
    # sandlock uses: --env XDG_DATA_HOME=... or --clean-env must not move the deny.
    protected = [path for home, _ in homes for environ in (env, os.environ)
                 for path in _fspolicy.protected_paths(home, environ)]
    # A CA key the user brings (--http-key) and the files secrets come from
    # (--credential NAME=file:PATH) are as secret as sandlock's own.
    deny = [*policy.fs_denied, *policy.notif_policy, *protected,
            *filter(None, (policy.http_key, policy.fs_storage)),
            *policy.credential_files, *_fspolicy.host_secrets()]
    # The copy-on-write workspace is written, whatever else is (its writes are captured).
    workdir = [policy.workdir] if policy.workdir else []
    if policy.uses_default_workspace:
        for home, _ in homes[1:]:  # the user's real home too, whatever HOME says
            check_workspace(cwd, home)
        read, write, _ = default_workspace(homes[0][0], cwd, env)
        if policy.mode == "read-only":  # what it could write becomes readable only
            read += [path for path in write if path not in DEVICES_WRITE]
            write = list(DEVICES_WRITE)
        if policy.max_output is not None:  # the terminal only through sandlock's count
            write = [path for path in write if path not in TERMINAL_DEVICES]
        return read, [*write, *workdir], deny, private_scratch()
    write = [*policy.fs_writable, *workdir, *_fspolicy.PSEUDO_DEVICES]
    # /sys/kernel and /sys/firmware describe the host's kernel and firmware: denied
    # wherever an explicit grant covers them (the default workspace grants neither).
    deny += _fspolicy.KERNEL_DENIED
    return list(policy.fs_readable), write, deny, ()


def dry_run_grants(policy: Policy, read: list[str], write: list[str],
                    private: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """A dry run changes nothing: it writes its workspace (captured, then discarded),
    the run's private scratch directories and the devices; what else the policy lets
    it write (caches, -w paths) it may only read."""
    kept = {policy.workdir, *private, *DEVICES_WRITE, *_fspolicy.PSEUDO_DEVICES}
    return [*read, *(path for path in write if path not in kept)], \
        [path for path in write if path in kept]


def user_homes(env: Mapping[str, str]) -> list[tuple[str, Mapping[str, str]]]:
    """(home, environment) pairs whose stores to protect: the command's, sandlock's own,
    and the account's home from the password database."""
    import pwd

    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account = None
    candidates = [(env.get("HOME"), env), (os.environ.get("HOME"), os.environ), (account, os.environ)]
    homes: dict[str, Mapping[str, str]] = {}
    for home, environ in candidates:
        if home and os.path.isabs(home):
            homes.setdefault(home, environ)
    return list(homes.items()) or [("/nonexistent", env)]
