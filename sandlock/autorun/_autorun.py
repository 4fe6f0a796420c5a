"""Autorun files: what the user's own, unconfined tools run or obey later.

A writable workspace must not let the command plant code that runs outside the
sandbox: a git hook, a ``core.fsmonitor`` or alias in a repository's config, a line
in ~/.bashrc, an autostart entry, an editor task. Two halves (docs/usage.md,
"Autorun files"); ``--allow-autorun-writes`` lifts both:

* at start, those that exist under a write grant are bound read-only in the sandbox's
  mount namespace (``protect``), and repositories are pinned (bound onto themselves:
  a mount point cannot be renamed or removed, so none can be put in their place);
* those that do not exist cannot be made read-only (a mount point must exist, and a
  placeholder would change what the tools do: an empty ``commondir`` breaks git), so
  they are recorded (``StartRecord``), and once the sandbox is gone the end check
  (``_leftovers``) quarantines what was made there, and neutralises the repositories
  made during the run.

Repositories are found in each writable directory and its direct subdirectories
(``~/projects`` as a workspace), in a writable ``.git`` itself, and where an index or
``.gitmodules`` records a nested one (``_gitrepo``). Every path is data, here.
"""

from __future__ import annotations

import os
import stat
import time

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from .._auditlog import AuditLog
    from ._leftovers import Leftovers

# Of a git directory: what git runs (hooks) or obeys (config: core.hooksPath,
# core.fsmonitor, aliases, filters...), and what moves where it reads them
# (commondir; info/: attributes and excludes).
GIT_AUTORUN = ("hooks", "config", "config.worktree", "commondir", "info")
# Of a linked worktree's directory (.git/worktrees/NAME).
WORKTREE_AUTORUN = ("commondir", "gitdir", "config.worktree", "config")
# Of a directory an editor or a shell opens: tasks that run on opening, settings naming
# programs, direnv, vim and neovim's local configuration (with 'exrc').
EDITOR_AUTORUN = (".vscode/tasks.json", ".vscode/settings.json", ".envrc", ".nvim.lua",
                  ".nvimrc", ".exrc")
# Of $HOME: what the user's shells, session, tools and editors run or obey at their
# next start, unasked.
HOME_AUTORUN = (
    # shells (Debian's ~/.bashrc sources ~/.bash_aliases; fish every conf.d/*.fish)
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish/config.fish",
    ".config/fish/conf.d", ".config/fish/functions",
    # the session
    ".config/autostart", ".config/systemd/user", ".xprofile", ".xsessionrc", ".xsession",
    ".xinitrc", ".config/environment.d", ".pam_environment",
    # programs found first on the PATH Debian's ~/.profile sets, and Python's user
    # site-packages (.pth files run at every start of that Python)
    "bin", ".local/bin", ".local/lib", ".cargo/bin",
    # git, and what its hooks source
    ".gitconfig", ".config/git", ".config/husky",  # (husky 9 sources its init.sh before every hook)
    # tools' settings that name a program they run: yarn 2's yarnPath, cargo's
    # rustc-wrapper, gradle's init scripts, direnv's library, pip's index (the next
    # install's code). (~/.ssh, ~/.npmrc, ~/.kube, ~/.aws...: credential stores, denied
    # in every policy: _fspolicy.CREDENTIAL_STORES.)
    ".yarnrc.yml", ".cargo/config.toml", ".cargo/config", ".gradle/init.d",
    ".gradle/init.gradle", ".config/pip", ".pip", ".config/direnv", ".direnvrc",
    # editors, terminal multiplexers and REPLs that run their start-up files
    ".vimrc", ".gvimrc", ".vim", ".config/nvim", ".emacs", ".emacs.d", ".config/emacs",
    ".tmux.conf", ".config/tmux", ".screenrc", ".psqlrc", ".irbrc", ".pryrc", ".Rprofile",
)
_MAX_SUBDIRECTORIES = 4096  # a workspace scanned for repositories: bounded start-up cost
_CLOCK_REALTIME_COARSE = 5  # the clock file times are taken from


class Protection:
    """Directories to pin and paths to bind read-only, in mounting order; the policy
    files among them; what the end check starts from. (A plain class: a dataclass costs
    ~0.3 ms of start-up to create.)"""

    def __init__(self, pinned: tuple[str, ...] = (), read_only: tuple[str, ...] = (),
                 policy_files: tuple[str, ...] = (), record: StartRecord | None = None) -> None:
        self.pinned = pinned
        self.read_only = read_only
        self.policy_files = policy_files  # (under a write grant: read-only, and said)
        self.record = record

    def policy_notices(self) -> list[str]:
        return [f"policy file {path} is inside a writable directory: the command cannot change "
                "it during this run, but anything else that can write there can change the next "
                "run's policy" for path in self.policy_files]

    def leftovers(self, audit: AuditLog | None) -> Leftovers | None:
        """The end check of this run (None: nothing to check)."""
        if self.record is None:
            return None
        from ._leftovers import Leftovers

        return Leftovers(self.record, audit)


class StartRecord:
    """What the end check compares with: the write grants written on the host
    (``roots``) and those searched for repositories (``scanned``); the autorun paths
    missing at start, each with whether a repository may appear there and the directory
    above it that existed (``absent``), that directory's inode and ctime (``anchors``:
    unchanged, nothing was made in it);
    the real paths of every repository entry and git directory found (``known``), and
    each repository's (work tree, git directory, common directory, index identity, hash
    size);
    the common directories whose hooks run what their work tree says; what the user's
    own config makes every work tree's hooks (a relative ``core.hooksPath``, the files
    its hook manager's shims run); when the run began (file ctimes)."""

    def __init__(self, roots: tuple[str, ...], scanned: tuple[str, ...],
                 absent: tuple[tuple[str, bool, str | None], ...],
                 anchors: dict[str, tuple[int, int]], known: frozenset[str],
                 repositories: tuple[tuple[str, str, str, tuple | None, int], ...],
                 worktree_hooks: frozenset[str], worktree_files: tuple[str, ...],
                 since_ns: int) -> None:
        self.roots, self.scanned, self.absent, self.known = roots, scanned, absent, known
        self.anchors = anchors
        self.repositories, self.worktree_hooks = repositories, worktree_hooks
        self.worktree_files, self.since_ns = worktree_files, since_ns


class Found:
    """What the start scan finds, as it goes: a path is protected only where a root
    (a write grant written on the host) covers it; real paths are resolved one
    directory at a time and remembered (a scan asks for the same directories often)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = roots
        self.pinned: list[str] = []
        self._pinned: set[str] = set()
        self.read_only: list[str] = []
        self.absent: list[tuple[str, bool]] = []
        self.known: set[str] = set()
        self.repositories: list[tuple[str, str, str, tuple | None, int]] = []
        self.worktree_hooks: set[str] = set()
        self.git_dirs: set[str] = set()  # (those whose own files were listed already)
        self.global_hooks: str | None = None  # core.hooksPath of the user's own config
        self.worktree_files: list[str] = []  # (StartRecord's)
        self.managers: dict[str, list[str]] = {}  # hooks directory -> what its shims run
        self.nested = 0  # repositories found at gitlinks (bounded)
        self._real: dict[str, tuple[str, bool]] = {}  # path -> (real path, exists)
        self.stats: dict[str, os.stat_result] = {}  # real path -> its stat, as found

    def covered(self, path: str) -> bool:
        return self._root(path) is not None

    def _root(self, path: str) -> str | None:
        """The outermost root that covers ``path`` (roots: outermost first)."""
        return next((root for root in self.roots
                     if path == root or path.startswith(root.rstrip("/") + "/")), None)

    def real(self, path: str) -> str:
        """``path`` with the symlinks of its existing part resolved."""
        return self._resolve(path)[0]

    def _resolve(self, path: str) -> tuple[str, bool]:
        """(real path, whether it exists), one lstat a new path (two for a link)."""
        found = self._real.get(path)
        if found is None:
            parent, _, name = path.rpartition("/")
            if not parent or name in ("", ".", ".."):
                real = os.path.realpath(path)
                found = real, self._stat(real, os.stat) is not None
            else:
                base, exists = self._resolve(parent)
                real = f"{base}/{name}"
                st = self._stat(real, os.lstat) if exists else None
                if st is not None and stat.S_ISLNK(st.st_mode):
                    real = os.path.realpath(real)
                    st = self._stat(real, os.stat)
                found = real, st is not None
            self._real[path] = found
        return found

    def _stat(self, real: str, function: Callable[[str], os.stat_result]) -> os.stat_result | None:
        try:
            st = self.stats[real] = function(real)
        except OSError:
            return None
        return st

    def forget(self, path: str) -> None:
        """``path`` was just made: resolve it again when asked."""
        self._real.pop(path, None)

    def files(self, base: str, names: Iterable[str], repository: bool = False) -> None:
        """Each ``base/name``: read-only if it exists, else recorded as absent."""
        base = base.rstrip("/")
        for name in names:
            self.file(f"{base}/{name}", repository)

    def file(self, path: str, repository: bool = False) -> bool:
        """Protect ``path``; whether it exists. (Not where it is a write grant itself:
        `-w ~/.local/lib` is the user's word that the command may write there.)"""
        real, exists = self._resolve(path)
        if self.covered(real) and real not in self.roots:
            if exists:
                self.protect(real)
            else:
                self.absent.append((real, repository))
        return exists

    def protect(self, real: str) -> None:
        """``real`` read-only, and the directories above it up to its write grant pinned:
        a file bound read-only cannot be replaced, but the directory holding it could be
        renamed, and another one put in its place."""
        self.read_only.append(real)
        self.pin(os.path.dirname(real))

    def pin(self, directory: str) -> None:
        """``directory`` and those above it below its write grant, bound onto themselves."""
        root = self._root(directory)
        while root is not None and directory != root and directory not in self._pinned:
            self._pinned.add(directory)
            self.pinned.append(directory)
            directory = os.path.dirname(directory)

    def mounts(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(pinned, outermost first: a bind onto itself hides the mounts beneath it;
        read-only), each once."""
        return (tuple(sorted(self.pinned, key=lambda path: path.count("/"))),
                tuple(dict.fromkeys(self.read_only)))


def protect(writable: Iterable[str], homes: Iterable[str], unscanned: Iterable[str] = (),
            private: Iterable[str] = (), policy_files: Iterable[str] = (),
            autorun: bool = True, own_code: Iterable[str] = (),
            environment: Iterable[str] = (), made_later: Iterable[str] = ()) -> Protection:
    """What to protect for the ``writable`` grants; ``unscanned``: writable directories
    not searched for repositories (scratch directories, caches: nobody's project, and
    /tmp alone may hold thousands of entries); ``private``: those the sandbox has its
    own of (nothing written there reaches the host); ``policy_files``: those the run's
    policy was read from, ``own_code`` sandlock's own package and ``environment`` the
    Python that runs it, as real paths (read-only whatever ``autorun`` says: sandlock
    imports modules of them while the command runs, outside its confinement, and at
    every later run);
    ``made_later``: missing paths to record as autorun files (executable caches)."""
    since = time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    hidden = {os.path.realpath(path) for path in private}
    roots = [real for real in dict.fromkeys(os.path.realpath(path) for path in writable
                                            if os.path.isdir(path)) if real not in hidden]
    found = Found(sorted(roots, key=len))
    files = tuple(dict.fromkeys(real for real in map(os.path.realpath, policy_files)
                                if found.covered(real)))
    # (a grant of the environment itself, or of a directory in it, is the user's word:
    # a command meant to install into it; a grant that holds it grants it by the way)
    python = (real for real in environment if found.covered(real) and real not in roots)
    for path in (*(real for real in own_code if found.covered(real)), *python):
        found.protect(path)
    if not autorun:
        for path in files:
            found.protect(path)
        return Protection(*found.mounts(), files)
    skipped = {os.path.realpath(path) for path in unscanned} | hidden
    scanned = [directory for directory in roots if directory not in skipped
               and not (directory.startswith("/dev/") or directory == "/dev")]
    homes = tuple(homes)
    if scanned:
        configs = _user_configs(homes)  # (read: the scan of git's files is loaded if needed)
        git = None
        if configs:
            from . import _gitrepo as git

            git.user_config(found, configs)
        for directory in scanned:
            for repository, entry in _repositories(directory):
                if git is None:
                    from . import _gitrepo as git
                git.scan(found, directory, repository, entry)
            found.files(directory, EDITOR_AUTORUN)
    for home in homes:
        found.files(home, HOME_AUTORUN)
    for path in made_later:
        found.file(path)
    for path in files:
        found.protect(path)
    record = StartRecord(tuple(roots), tuple(scanned), *_anchored(found.absent, found.stats),
                         frozenset(found.known), tuple(found.repositories),
                         frozenset(found.worktree_hooks), tuple(found.worktree_files), since)
    return Protection(*found.mounts(), files, record)


def _user_configs(homes: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """The user's own git configs that name other files (includes) or hooks: those the
    scan must read (most name neither, and cost one read here)."""
    paths = ["/etc/gitconfig", *(os.path.join(home, name) for home in homes
                                 for name in (".gitconfig", ".config/git/config"))]
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        paths.append(os.path.join(xdg, "git", "config"))
    found = []
    for path in dict.fromkeys(paths):
        data = read_bounded(path)
        if data and (b"include" in data.lower() or b"hookspath" in data.lower()):
            found.append((path, data))
    return found


def read_bounded(path: str, limit: int = 1 << 20) -> bytes | None:
    """A regular file's first ``limit`` bytes (None: none, or not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return os.read(fd, min(limit, st.st_size + 1))  # (a size read: no 1 MiB buffer)
    except OSError:
        return None
    finally:
        os.close(fd)


def _anchored(absent: list[tuple[str, bool]], stats: dict[str, os.stat_result],
              ) -> tuple[tuple[tuple[str, bool, str | None], ...], dict[str, tuple[int, int]]]:
    """Each absent path with the nearest directory above it that exists, and those
    directories' (inode, ctime): a directory whose ctime has not changed has had no
    entry made, removed or renamed in it (a ctime cannot be set back), so the end check
    looks no further there."""
    anchors: dict[str, tuple[int, int]] = {}
    missing: set[str] = set()
    found = []
    for path, repository in dict.fromkeys(absent):
        anchor: str | None = os.path.dirname(path)
        while anchor is not None and anchor not in anchors:
            try:  # (the scan has seen most: their stat then, before the command started)
                st = None if anchor in missing else stats.get(anchor) or os.lstat(anchor)
            except OSError:
                st = None
            if st is not None:
                anchors[anchor] = (st.st_ino, st.st_ctime_ns) if stat.S_ISDIR(st.st_mode) else (0, 0)
            elif anchor == "/":
                anchor = None
            else:
                missing.add(anchor)
                anchor = os.path.dirname(anchor)
        found.append((path, repository, anchor))
    return tuple(found), anchors


def _repositories(directory: str) -> Iterator[tuple[str, str]]:
    """(work tree, its .git) for ``directory`` and its direct subdirectories; a
    writable .git directory itself counts too."""
    if os.path.basename(directory) == ".git":
        yield os.path.dirname(directory), directory
        return
    for candidate in (directory, *subdirectories(directory)):
        git = os.path.join(candidate, ".git")
        try:
            if not stat.S_ISLNK(os.lstat(git).st_mode):
                yield candidate, git
        except OSError:
            pass


def subdirectories(directory: str, limit: int = _MAX_SUBDIRECTORIES) -> list[str]:
    """The directories in ``directory`` (not symlinks, not .git), at most ``limit``."""
    found: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count >= limit:
                    break
                if entry.is_dir(follow_symlinks=False) and entry.name != ".git":
                    found.append(entry.path)
    except OSError:
        pass
    return found
