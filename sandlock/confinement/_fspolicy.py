"""Filesystem policy: read/write grants and denies compiled into Landlock path rules.

Landlock can only allow, and a rule on a directory covers everything beneath it.
So a denied path D beneath a granted directory G is compiled by replacing the
rule on G with rules on G's children, except the child leading to D, which is
expanded the same way, down to D's siblings.  Consequences worth knowing:

* An expanded directory keeps only the right to be listed (LIST): any other
  right on it would also cover D.  So ``ls ~`` works and shows that ``.ssh``
  exists, and Landlock alone would let the names inside D be listed: in the
  sandbox's mount namespace D is covered by an empty mask (``masks``).  Nothing
  in D can be read, and nothing can be created or removed directly in the
  expanded directory.  Its other entries keep the grant.
* A deny that encloses or equals a grant removes that grant (deny wins).
* A deny that does not exist is ignored: nothing is there to protect.  Gap: a
  file created at that place later, by someone outside the sandbox, is readable
  under the enclosing grant.  Likewise entries added later to an expanded
  directory are not granted, and a hard link to a denied file from elsewhere
  stays readable (Landlock rules follow paths, not inodes).
* Paths are compared after os.path.realpath.  Symlinks met while expanding get
  no rule at all: Landlock opens a rule's path following links, so a rule on a
  link would grant its target, wherever that is (possibly inside D, or outside
  every grant).  Without a rule, access through a link is decided at its
  target by the remaining rules, exactly as it was before expansion.  The link
  itself needs no right: reading a link is not mediated, and removing or
  renaming it needs rights on its (expanded) parent.
"""

from __future__ import annotations

import os

from .._record import record

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

# Credential stores, relative to $HOME: denied in every policy (inside explicit grants
# too), for the command's home and the user's real one. A second layer: the default
# workspace grants nothing of $HOME beyond its tools and caches anyway.
CREDENTIAL_STORES: tuple[str, ...] = (
    # keys and cloud or cluster credentials
    ".ssh", ".gnupg", ".aws", ".config/gcloud", ".azure", ".kube", ".docker", ".config/doctl",
    ".oci", ".s3cfg", ".boto", ".config/rclone", ".terraform.d/credentials.tfrc.json",
    ".vault-token", ".config/op", ".password-store", ".local/share/keyrings",
    # tokens of tools and registries
    ".netrc", ".git-credentials", ".config/gh", ".config/hub", ".pypirc", ".npmrc",
    ".yarnrc", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
    ".m2/settings-security.xml", ".pgpass", ".my.cnf",
    # browser profiles (cookies, saved passwords)
    ".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium",
    ".config/BraveSoftware", ".config/microsoft-edge", "snap/firefox",
    # shell and REPL histories (commands with tokens in them)
    ".bash_history", ".zsh_history", ".local/share/fish/fish_history", ".python_history",
    ".node_repl_history", ".psql_history", ".mysql_history", ".sqlite_history", ".lesshst",
)

# Devices that hold no data: writable in every policy, explicit allowlists included,
# because nearly every program opens /dev/null (git refuses to run without it).
PSEUDO_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# The host's kernel and firmware as sysfs shows them (symbols, boot parameters, ACPI
# tables, security modules): denied wherever an explicit grant would cover them.
KERNEL_DENIED = ("/sys/kernel", "/sys/firmware")

# The host's own secrets, which a root command owns (and so could read wherever /etc is
# granted, as in the default workspace): password hashes, sudo's rules, and the SSH
# host keys (host_secrets). Denied in every policy.
HOST_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
                "/etc/sudoers.d")
_SSH_HOST_KEYS = "/etc/ssh"


def host_secrets() -> tuple[str, ...]:
    """HOST_SECRETS and the SSH host private keys (``ssh_host_*_key``) present."""
    try:
        with os.scandir(_SSH_HOST_KEYS) as entries:
            keys = [entry.path for entry in entries
                    if entry.name.startswith("ssh_host_") and entry.name.endswith("_key")]
    except OSError:
        keys = []
    return (*HOST_SECRETS, *sorted(keys))


# Access levels of a rule, each including the ones below it.
LIST = 0  # list the directory (names only): what an expanded directory keeps
READ = 1  # read files, list directories, execute
WRITE = 2  # everything


@record(order=True)
class PathRule:
    """One Landlock rule: ``level`` (LIST, READ or WRITE) beneath ``path``; ordered by
    path, then level."""

    path: str
    level: int


def compile_grants(
    read: Iterable[str], write: Iterable[str], deny: Iterable[str],
    masks: list[str] | None = None, private: Iterable[str] = (),
) -> list[PathRule]:
    """The minimal, sorted rule list giving ``read``/``write`` access minus ``deny``.

    Write implies read; overlapping grants combine as Landlock does (a nested
    rule adds rights, never removes them).  Grants that do not exist are dropped.
    ``masks``, if given, receives the denied paths a grant encloses: the expanded
    directories above them keep LIST, so their names (and, inside a denied
    directory, the names of its files) would be listed; the sandbox's mount
    namespace covers each with an empty mask (``_isolation``).

    ``private``: grants the sandbox replaces by a tree of its own (its /tmp): never
    expanded, since in the sandbox they hold only what it makes there (expanded, they
    would keep LIST only, and nothing could be created in them) and the grants bound
    back beneath them, whose own rules expand their denies; those denies are masked.
    """
    private = set(private)
    denies = sorted({path for path in map(os.path.realpath, _present(deny)) if os.path.exists(path)})
    rules: dict[str, int] = {}
    grants = _grants(read, write)
    for grant, level in grants.items():
        subtracted = denies if grant not in private else \
            [denied for denied in denies if denied == grant or not within(denied, grant)]
        for path, expanded in _subtract(grant, subtracted):
            rules[path] = max(rules.get(path, LIST), LIST if expanded else level)
    if masks is not None:
        masks += [denied for denied in denies
                  if any(denied != grant and within(denied, grant) for grant in grants)]
    return sorted(PathRule(path, level) for path, level in rules.items()
                  if not _covered(path, level, rules))


def protected_paths(home: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The credential stores under ``home`` (and where CARGO_HOME moved cargo's), and
    sandlock's own: the persistent CA's directory, the workspace store, the runtime directory
    (cached short-lived CAs, the proxy fork server's token), wherever the command's
    environment or sandlock's own puts them."""
    stores = [os.path.join(home, store) for store in CREDENTIAL_STORES]
    cargo = env.get("CARGO_HOME", "")
    if os.path.isabs(cargo):
        stores += [os.path.join(cargo, name) for name in ("credentials", "credentials.toml")]
    runtime = {sandlock_runtime_dir(env, home), sandlock_runtime_dir(os.environ, home)}
    return (*stores, sandlock_ca_dir(env, home), workspace_store(env, home),
            image_store(env, home), *sorted(runtime))


def sandlock_ca_dir(env: Mapping[str, str], home: str) -> str:
    """Where sandlock keeps its CA key: denied in every policy, explicit or default."""
    data_home = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):  # the XDG spec says to ignore relative values
        data_home = os.path.join(home, ".local", "share")
    return os.path.join(data_home, "sandlock", "ca")


def workspace_store(env: Mapping[str, str], home: str) -> str:
    """Where copy-on-write workspaces keep what runs wrote (``sandlock.cow``):
    $XDG_STATE_HOME/sandlock/workspaces, default ~/.local/state/...; denied in every
    policy, so a sandbox writes a workspace only through its own overlay."""
    return os.path.join(_state_home(env, home), "sandlock", "workspaces")


def image_store(env: Mapping[str, str], home: str) -> str:
    """Where unpacked images are kept (``sandlock.image``): beside the workspaces;
    denied in every policy, so no sandbox changes a root another run will trust."""
    return os.path.join(_state_home(env, home), "sandlock", "images")


def _state_home(env: Mapping[str, str], home: str) -> str:
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):  # the XDG spec says to ignore relative values
        state = os.path.join(home, ".local", "state")
    return state


def sandlock_runtime_dir(env: Mapping[str, str], home: str) -> str:
    """sandlock's private directory for this user's runs (docs/ca.md): in the user's
    runtime directory ($XDG_RUNTIME_DIR, else /run/user/UID when it is theirs), else
    beside the persistent CA. Never under /tmp: denying a path inside a writable tree
    takes the write right off the tree itself (Landlock can only grant). Denied in
    every policy."""
    uid = os.getuid()
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if not os.path.isabs(runtime):
        runtime = f"/run/user/{uid}"
    try:
        owned = os.stat(runtime).st_uid == uid
    except OSError:
        owned = False
    if owned:
        return os.path.join(runtime, "sandlock")
    return os.path.join(os.path.dirname(sandlock_ca_dir(env, home)), "runtime")


def sandlock_ca_cache_dir(env: Mapping[str, str], home: str) -> str:
    """Where short-lived CAs are cached for this user (``ca.cached_ca``)."""
    return os.path.join(sandlock_runtime_dir(env, home), "ca-cache")


def _present(paths: Iterable[str]) -> list[str]:
    """Each path once, if something is there: realpath costs a stat per component, and
    most of the ~150 credential paths of a run do not exist."""
    return [path for path in dict.fromkeys(paths) if os.path.lexists(path)]


def _grants(read: Iterable[str], write: Iterable[str]) -> dict[str, int]:
    """Existing granted real paths -> level (write wins over read)."""
    grants = {path: READ for path in map(os.path.realpath, _present(read))}
    grants.update((path, WRITE) for path in map(os.path.realpath, _present(write)))
    return {path: level for path, level in grants.items() if os.path.exists(path)}


def within(path: str, ancestor: str) -> bool:
    """True when ``path`` is ``ancestor`` or lies beneath it (both normalised)."""
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")


def _subtract(grant: str, denies: list[str]) -> Iterable[tuple[str, bool]]:
    """(path, expanded) pairs covering ``grant`` except ``denies``.

    ``expanded`` marks a directory on the way to a deny, which keeps LIST only.
    """
    if any(within(grant, denied) for denied in denies):
        return ()
    inner = [denied for denied in denies if within(denied, grant)]
    return _expand(grant, inner) if inner else ((grant, False),)


def _expand(directory: str, denies: list[str]) -> Iterator[tuple[str, bool]]:
    """``directory`` (LIST only) and its entries minus ``denies`` (beneath it).

    A child on the way to a deny is expanded in turn, once for all the denies
    beneath it.  Symlinks are skipped: see the module docstring.
    """
    yield directory, True
    for entry in _entries(directory):
        if entry.is_symlink():
            continue
        inner = [denied for denied in denies if within(denied, entry.path)]
        if not inner:
            yield entry.path, False
        elif entry.path not in inner:
            yield from _expand(entry.path, inner)


def _entries(directory: str) -> list[os.DirEntry[str]]:
    """The entries of ``directory``; none if it cannot be listed (fail closed)."""
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


def _covered(path: str, level: int, rules: Mapping[str, int]) -> bool:
    """True when an ancestor rule already grants at least as much as this one."""
    parent = path
    while parent != "/":
        parent = os.path.dirname(parent)
        if rules.get(parent, -1) >= level:
            return True
    return False
