"""The default workspace: what a command may touch when the policy names no paths.

Deny by default for the home directory (docs/usage.md, "The default workspace"): the
system trees are readable, the workspace (the current directory) and the scratch
directories writable, and of $HOME only the tools a build runs (read) and the caches
toolchains fill (read and write); nothing else of it, so another project, a token
file or a browser profile is out of reach even when no credential list names it.
The credential stores (``CREDENTIAL_STORES``) are denied on top, in every policy.

Every path is a fact about this machine's conventions, kept here as data. Then which
paths a policy grants and denies (``granted_paths``), before ``_fspolicy`` compiles them
into Landlock rules: the default workspace or the explicit grants, the denies every
policy has (credential stores of every home the command may be told about, sandlock's
own directories, the host's secrets), a dry run's narrowing.
"""

from __future__ import annotations

import os

from .._errors import EXIT_USAGE, SandlockError
from . import _fspolicy
from ._fspolicy import PSEUDO_DEVICES, protected_paths, within

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from ..policy import Policy

# System trees: programs, libraries, configuration, and what runtimes read of the
# kernel (CPU count, cgroup limits, huge page mode). /proc and /dev as before.
SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
    "/snap", "/nix", "/gnu", "/proc", "/dev",
    "/sys/devices/system/cpu", "/sys/fs/cgroup", "/sys/kernel/mm/transparent_hugepage",
)
SCRATCH_WRITE = ("/tmp", "/var/tmp", "/dev/shm")
# The terminal: writable (and IOCTL_DEV) for interactive commands (but under
# --max-output, where nothing may reach it past the count: TERMINAL_DEVICES).
TERMINAL_DEVICES = ("/dev/tty", "/dev/pts")
DEVICES_WRITE = (*PSEUDO_DEVICES, "/dev/ptmx", *TERMINAL_DEVICES)

# Of $HOME, read only: the tools a build runs and the configuration they need.
HOME_TOOLS_READ = (
    ".local/bin", ".local/lib", ".gitconfig", ".config/git",
    ".cargo/bin", ".cargo/config.toml", ".cargo/config", ".rustup",
    "go/bin", ".pyenv", ".nvm", ".volta", ".bun/bin", ".deno/bin", ".sdkman/candidates",
)
# Of $HOME, read and write: the caches package managers and compilers fill.
HOME_CACHES_WRITE = (
    ".cache", ".npm", ".cargo/registry", ".cargo/git", "go/pkg/mod",
    ".m2/repository", ".gradle/caches", ".pnpm-store", ".yarn/berry/cache",
)
# Variables that move a tool or a cache; each adds its place to the lists above.
TOOL_VARIABLES_READ = ("PYENV_ROOT", "NVM_DIR", "RUSTUP_HOME", "VOLTA_HOME")
CACHE_VARIABLES_WRITE = ("XDG_CACHE_HOME", "GOCACHE", "GOMODCACHE", "npm_config_cache",
                         "PIP_CACHE_DIR", "CARGO_TARGET_DIR")
# Widening the default workspace without editing a policy (colon-separated paths).
WIDEN_READ = "SANDLOCK_FS_READ"
WIDEN_WRITE = "SANDLOCK_FS_WRITE"
# zkit's names for the same (its operators' settings work unchanged): read, write.
ZK_READ = "ZK_SANDBOX_RO"
ZK_WRITE = "ZK_SANDBOX_RW"
_WIDENERS = {WIDEN_READ: "read", ZK_READ: "read", WIDEN_WRITE: "write", ZK_WRITE: "write"}


class WorkspaceError(SandlockError):
    """The default workspace cannot be what was asked (the message says why)."""

    exit_code = EXIT_USAGE


def default_workspace(home: str, cwd: str, env: Mapping[str, str],
                      widen: Mapping[str, str] = os.environ,
                      ) -> tuple[list[str], list[str], tuple[str, ...]]:
    """(read, write, deny) of the default workspace for a command started in ``cwd``
    with ``env``; ``widen`` holds SANDLOCK_FS_READ/WRITE (sandlock's own environment)."""
    check_workspace(cwd, home)
    _create_caches(home, env)
    read = [*SYSTEM_READ, *_under(home, HOME_TOOLS_READ), *_tool_homes(env, home, read=True)]
    write = [cwd, *SCRATCH_WRITE, *DEVICES_WRITE, *caches(home, env)]
    repository = _enclosing_repository(cwd)
    if repository is not None and _harmless(repository, home):  # git reads the whole tree
        read.append(repository)
        write.append(os.path.join(repository, ".git"))
    for name, paths in widening(widen).items():
        (read if _WIDENERS[name] == "read" else write).extend(map(os.path.expanduser, paths))
    return read, write, protected_paths(home, env)


def caches(home: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The toolchain caches the default workspace makes writable."""
    return (*_under(home, HOME_CACHES_WRITE), *_tool_homes(env, home, read=False))


def private_scratch(widen: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The scratch directories each run gets its own of (those that exist); one that
    SANDLOCK_FS_READ/WRITE names itself is the real one, as the user asked."""
    named = {os.path.realpath(path) for paths in widening(widen).values() for path in paths}
    return tuple(path for path in SCRATCH_WRITE
                 if os.path.isdir(path) and not os.path.islink(path) and path not in named)


def check_workspace(cwd: str, home: str) -> None:
    """The current directory becomes writable with everything beneath it: never the
    whole machine or the whole home (shell start-up files, every other project)."""
    real = os.path.realpath(cwd)
    real_home = os.path.realpath(home)
    if real == "/" or within(real_home, real):
        raise WorkspaceError(
            f"the default workspace would make {cwd} writable with everything beneath it "
            f"({'the whole machine' if real == '/' else 'your home directory'}): run from a "
            "project directory (or give it with --cwd DIR), or choose with "
            "-w/--fs-write and -r/--fs-read")


def widening(env: Mapping[str, str] = os.environ) -> dict[str, tuple[str, ...]]:
    """What SANDLOCK_FS_READ/WRITE (and zkit's ZK_SANDBOX_RO/RW) add, by variable."""
    found = {name: tuple(p for p in env.get(name, "").split(":") if p) for name in _WIDENERS}
    return {name: paths for name, paths in found.items() if paths}


def _create_caches(home: str, env: Mapping[str, str]) -> None:
    """Create the missing cache directories a tool could not create itself (a rule
    needs an existing path, and the sandbox may not write $HOME): in a tool's
    directory that exists (~/.cargo/registry once cargo is installed); in $HOME only
    ~/.cache, and ~/.npm when npm is on the command's PATH (no litter for others)."""
    for name in HOME_CACHES_WRITE:
        cache = os.path.join(home, name)
        parent = os.path.dirname(cache)
        if os.path.lexists(cache) or not os.path.isdir(parent):
            continue
        if parent == home.rstrip("/") and name != ".cache" and not (
                name == ".npm" and _on_path("npm", env)):
            continue
        try:
            os.mkdir(cache, 0o700)
        except OSError:
            pass  # not ours to create: the tool will say what it cannot do


def _on_path(program: str, env: Mapping[str, str]) -> bool:
    return any(os.access(os.path.join(directory, program), os.X_OK)
               for directory in env.get("PATH", "").split(":") if directory)


def _under(home: str, relative: Iterable[str]) -> Iterator[str]:
    return (os.path.join(home, path) for path in relative)


def _tool_homes(env: Mapping[str, str], home: str, *, read: bool) -> list[str]:
    """Places the environment moved a tool (read) or a cache (write) to; CARGO_HOME and
    GOPATH split into their tool part and their cache part."""
    found = []
    if read:
        found += [env[name] for name in TOOL_VARIABLES_READ if env.get(name)]
        found += [os.path.join(env["CARGO_HOME"], "bin")] if env.get("CARGO_HOME") else []
        found += [os.path.join(p, "bin") for p in env.get("GOPATH", "").split(":") if p]
    else:
        found += [env[name] for name in CACHE_VARIABLES_WRITE if env.get(name)]
        cargo = env.get("CARGO_HOME")
        found += [os.path.join(cargo, part) for part in ("registry", "git")] if cargo else []
        found += [os.path.join(p, "pkg", "mod") for p in env.get("GOPATH", "").split(":") if p]
    return [path for path in found if _harmless(path, home)]


def _harmless(path: str, home: str) -> bool:
    """A variable may move a tool or a cache, not open the home or the machine."""
    if not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    return real != "/" and not within(os.path.realpath(home), real)


def _enclosing_repository(cwd: str) -> str | None:
    """The work tree above ``cwd`` (not ``cwd`` itself: its .git is in the workspace)."""
    directory = os.path.dirname(os.path.realpath(cwd))
    while directory != "/":
        if os.path.isdir(os.path.join(directory, ".git")):
            return directory
        directory = os.path.dirname(directory)
    return None


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
