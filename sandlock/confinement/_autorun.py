"""Autorun files: what the user's own, unconfined tools run or obey later.

A writable workspace must not let the command plant code that runs outside the
sandbox: a git hook, a ``core.fsmonitor`` or alias in a repository's config, a line
in ~/.bashrc, an autostart entry, an editor task. Those that a write grant covers
are bound read-only in the sandbox's mount namespace (docs/usage.md, "Autorun
files"); ``--allow-autorun-writes`` lifts it. Every path is data, here.

Repositories are found in each writable directory and its direct subdirectories
(``~/projects`` as a workspace), and a writable ``.git`` itself. Their directories
are pinned (bound onto themselves): a mount point cannot be renamed or removed, so
the command cannot move a repository aside and put one of its own in its place.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

# Of a git directory: what git runs (hooks) or obeys (config: core.hooksPath,
# core.fsmonitor, core.sshCommand, aliases, filters, credential helpers).
GIT_AUTORUN = ("hooks", "config", "config.worktree")
# Of a directory an editor opens: tasks that run on opening, settings naming programs.
EDITOR_AUTORUN = (".vscode/tasks.json", ".vscode/settings.json", ".envrc")
# Of $HOME: shell start-up files and the session's autostart entries.
HOME_AUTORUN = (
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".config/fish/config.fish",
    ".config/autostart", ".config/systemd/user", ".xprofile", ".xsessionrc",
    ".config/environment.d", ".pam_environment", ".gitconfig", ".config/git",
)
_MAX_SUBDIRECTORIES = 4096  # a workspace scanned for repositories: bounded start-up cost
_MAX_SUBMODULE_DEPTH = 4


class Protection:
    """Directories to pin and paths to bind read-only, in mounting order. (A plain
    class: a dataclass costs ~0.3 ms of start-up to create.)"""

    def __init__(self, pinned: tuple[str, ...] = (), read_only: tuple[str, ...] = ()) -> None:
        self.pinned = pinned
        self.read_only = read_only


def protect(writable: Iterable[str], homes: Iterable[str],
            unscanned: Iterable[str] = ()) -> Protection:
    """What to protect for the ``writable`` grants; ``unscanned``: writable directories
    not searched for repositories (scratch directories, caches: nobody's project, and
    /tmp alone may hold thousands of entries)."""
    writable = [os.path.realpath(path) for path in writable if os.path.isdir(path)]
    skipped = {os.path.realpath(path) for path in unscanned}
    pinned: list[str] = []
    read_only: list[str] = []
    for directory in writable:
        if directory in skipped or directory.startswith("/dev/") or directory == "/dev":
            continue
        for repository, git in _repositories(directory):
            if repository != directory:
                pinned.append(repository)
            if os.path.isdir(git):
                pinned.append(git)
                read_only += _git_autorun(git)
            else:  # a worktree's or submodule's "gitdir:" file
                read_only.append(git)
            read_only += _existing(repository, EDITOR_AUTORUN)
        read_only += _existing(directory, EDITOR_AUTORUN)
    for home in homes:
        read_only += _existing(home, HOME_AUTORUN)
    read_only = [path for path in read_only if _covered(path, writable)]
    pinned = [path for path in pinned if _covered(path, writable)]
    return Protection(tuple(dict.fromkeys(pinned)), tuple(dict.fromkeys(read_only)))


def _repositories(directory: str) -> Iterator[tuple[str, str]]:
    """(work tree, its .git) for ``directory`` and its direct subdirectories; a
    writable .git directory itself counts too."""
    if os.path.basename(directory) == ".git":
        yield os.path.dirname(directory), directory
        return
    candidates = [directory]
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count >= _MAX_SUBDIRECTORIES:
                    break
                if entry.is_dir(follow_symlinks=False) and entry.name != ".git":
                    candidates.append(entry.path)
    except OSError:
        pass
    for candidate in candidates:
        git = os.path.join(candidate, ".git")
        if os.path.lexists(git) and not os.path.islink(git):
            yield candidate, git


def _git_autorun(git: str, depth: int = 0) -> list[str]:
    """The autorun paths of a git directory and of its submodules' git directories.

    A missing hooks directory is created (git init makes one too): otherwise the
    command could create it and fill it."""
    hooks = os.path.join(git, "hooks")
    if not os.path.lexists(hooks):
        try:
            os.mkdir(hooks, 0o755)
            owner = os.stat(git)
            if os.geteuid() == 0:  # root in someone's repository: theirs, not root's
                os.chown(hooks, owner.st_uid, owner.st_gid)
        except OSError:
            pass
    found = _existing(git, GIT_AUTORUN)
    worktrees = os.path.join(git, "worktrees")
    for name in _subdirectories(worktrees):
        found += _existing(os.path.join(worktrees, name), ("config.worktree",))
    if depth < _MAX_SUBMODULE_DEPTH:
        modules = os.path.join(git, "modules")
        for name in _subdirectories(modules):
            found += _git_autorun(os.path.join(modules, name), depth + 1)
    return found


def _subdirectories(directory: str) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(directory)
                if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _existing(base: str, relative: Iterable[str]) -> list[str]:
    """The real paths of those that exist (a dotfile linked into a writable
    repository is protected where the writes would land)."""
    paths = (os.path.join(base, name) for name in relative)
    return [os.path.realpath(path) for path in paths if os.path.exists(path)]


def _covered(path: str, writable: list[str]) -> bool:
    return any(path == grant or path.startswith(grant.rstrip("/") + "/") for grant in writable)
