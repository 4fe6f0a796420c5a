"""What git reads of one repository, found at start: its autorun paths (``_autorun``).

Beyond the git directory's hooks and config, git reads files that move where it
reads them (``commondir``, a ``.git`` file's ``gitdir:``, a linked worktree's
directory), config files that a config includes (``include.path``,
``includeIf.*.path``, the user's own config's too), hooks that live in the work tree
(``core.hooksPath``: husky's ``.husky/``), the files a hook manager's shim in the
hooks runs (pre-commit's ``.pre-commit-config.yaml``, lefthook's ``lefthook.yml``),
and nested repositories, where the index or ``.gitmodules`` records a gitlink. Each
one under a write grant is protected (read-only if it exists, recorded if it does
not); the repositories found are remembered for the end check. Nothing here runs git
or follows what a repository says beyond bounded reads of small files.
"""

from __future__ import annotations

import os
import stat

from . import _autorun
from ._autorun import GIT_AUTORUN, WORKTREE_AUTORUN, EDITOR_AUTORUN, Found, read_bounded

_MAX_DEPTH = 4  # nested repositories and submodules' git directories
_MAX_NESTED = 512  # nested repositories scanned at start, in all (each costs a few mounts)
_MAX_GITLINKS = 256  # followed per repository (each costs a few mounts)
_MAX_QUICK_INDEX = 1 << 20  # at start, an index up to ~10k files is searched for gitlinks
_MAX_INCLUDES = 10  # git's own bound on nested includes
_MAX_HOOKS = 64  # hooks read for a hook manager's shim (4 KiB each)
# Hook managers: what in a hook marks their shim, and the work-tree files it then runs.
_LEFTHOOK = tuple(f"{stem}.{ext}" for stem in ("lefthook", ".lefthook", ".config/lefthook",
                                               "lefthook-local", ".lefthook-local",
                                               ".config/lefthook-local")
                  for ext in ("yml", "yaml", "json", "jsonc", "toml")) + (".lefthook", ".lefthook-local")
_MANAGERS = (
    (b"lefthook", _LEFTHOOK),
    (b"husky", (".huskyrc", ".huskyrc.json", ".huskyrc.yaml", ".huskyrc.yml", ".huskyrc.js",
                ".huskyrc.cjs", "husky.config.js", "husky.config.cjs")),
    (b"overcommit", (".overcommit.yml",)),
)
_PRE_COMMIT = b"pre-commit.com"  # in every shim pre-commit installs
_PRE_COMMIT_CONFIG = ".pre-commit-config.yaml"


def user_config(found: Found, configs: list[tuple[str, bytes]]) -> None:
    """The files the user's own configs include, and their ``core.hooksPath``: relative,
    it names hooks in every work tree; else, its hook managers' shims name files there."""
    for path, data in configs:
        found.global_hooks = _config_file(found, path, data, 0) or found.global_hooks
    hooks = found.global_hooks
    if hooks and not os.path.isabs(hooks) and not hooks.startswith("~"):
        found.worktree_files.append(os.path.normpath(hooks))
    elif hooks and (expanded := _expand(hooks, "/")) is not None:
        found.worktree_files += _managed_files(found, found.real(expanded))


def scan(found: Found, top: str, worktree: str, git: str, depth: int = 0) -> None:
    """Protect what git reads of the repository at ``worktree`` (``git``: its .git),
    found in the scanned directory ``top``."""
    real = found.real(git)
    if real in found.known or depth > _MAX_DEPTH or depth and found.nested >= _MAX_NESTED:
        return
    found.nested += bool(depth)
    found.known.add(real)
    if worktree != top:
        found.pin(worktree)
    st = found.stats.get(real)
    if st is not None and stat.S_ISDIR(st.st_mode):
        gitdir = real
        found.pin(gitdir)
    else:  # a worktree's or submodule's "gitdir:" file
        found.file(real)
        gitdir = gitfile_target(real)
        if gitdir is None:
            return
    common = common_dir(gitdir)
    found.known.update((gitdir, common))
    _git_dir(found, common, depth)
    if gitdir != common:
        found.files(gitdir, WORKTREE_AUTORUN)
    hooks_path, hash_size = _repository_config(found, gitdir, common)
    hooks = _hooks_directory(found, worktree, common, hooks_path or found.global_hooks)
    _hook_managers(found, worktree, hooks, common)
    found.files(worktree, EDITOR_AUTORUN)
    links, index = _gitlinks(found, worktree, gitdir, hash_size)
    for path in links:
        nested = os.path.join(worktree, path)
        nested_git = os.path.join(nested, ".git")
        if os.path.lexists(nested_git) and not os.path.islink(nested_git):
            scan(found, top, nested, nested_git, depth + 1)
        elif not os.path.lexists(nested_git):
            found.file(nested_git, repository=True)
    found.repositories.append((found.real(worktree), gitdir, common, index, hash_size))


def gitfile_target(path: str) -> str | None:
    """The real git directory a ``.git`` file names (``gitdir: PATH``), if readable."""
    data = read_bounded(path, 4096)
    if not data or not data.startswith(b"gitdir: "):
        return None
    target = os.fsdecode(data[8:].splitlines()[0].strip()) if data[8:].strip() else ""
    if not target:
        return None
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


def common_dir(gitdir: str) -> str:
    """Where a git directory's config, hooks, worktrees and modules are: itself, or
    where its ``commondir`` file says (a linked worktree's)."""
    data = read_bounded(os.path.join(gitdir, "commondir"), 4096)
    if not data or not data.strip():
        return gitdir
    return os.path.realpath(os.path.join(gitdir, os.fsdecode(data.splitlines()[0].strip())))


def module_directories(modules: str, depth: int = 0) -> list[str]:
    """The git directories in a ``modules`` directory (a submodule's name may hold
    slashes: ``modules/lib/foo``)."""
    found: list[str] = []
    for path in _autorun.subdirectories(modules, 256):
        if os.path.exists(os.path.join(path, "HEAD")):
            found.append(path)
        elif depth < _MAX_DEPTH:
            found += module_directories(path, depth + 1)
    return found


def _git_dir(found: Found, gitdir: str, depth: int) -> None:
    """A git directory's own files, its linked worktrees' and its submodules'. A missing
    hooks directory is created (git init makes one too): read-only and empty, the
    command cannot fill it while a tool of the user's may already look there."""
    if gitdir in found.git_dirs or not found.covered(gitdir):
        return
    found.git_dirs.add(gitdir)
    hooks = os.path.join(gitdir, "hooks")
    if not os.path.lexists(hooks):
        try:
            os.mkdir(hooks, 0o755)
            owner = os.stat(gitdir)
            if os.geteuid() == 0:  # root in someone's repository: theirs, not root's
                os.chown(hooks, owner.st_uid, owner.st_gid)
        except OSError:
            pass
        found.forget(hooks)
    found.files(gitdir, GIT_AUTORUN)
    for admin in _autorun.subdirectories(os.path.join(gitdir, "worktrees"), 256):
        found.known.add(found.real(admin))
        found.files(admin, WORKTREE_AUTORUN)
    if depth < _MAX_DEPTH:
        for module in module_directories(os.path.join(gitdir, "modules")):
            found.known.add(found.real(module))
            _git_dir(found, found.real(module), depth + 1)


def _repository_config(found: Found, gitdir: str, common: str) -> tuple[str | None, int]:
    """(its core.hooksPath, its hashes' size), the files its configs include protected."""
    hooks_path, hash_size = None, 20
    paths = [os.path.join(common, "config")]
    for path in paths:
        data = read_bounded(path)
        if not data:
            continue
        lowered = data.lower()
        if b"worktreeconfig" in lowered and len(paths) == 1:  # (git reads them only then)
            paths += dict.fromkeys((os.path.join(common, "config.worktree"),
                                    os.path.join(gitdir, "config.worktree")))
        if b"include" in lowered or b"hookspath" in lowered:
            hooks_path = _config_file(found, path, data, 0) or hooks_path
        if b"objectformat" in lowered and b"sha256" in lowered:
            hash_size = 32
    return hooks_path, hash_size


def _config_file(found: Found, path: str, data: bytes, depth: int) -> str | None:
    """Protect what the config at ``path`` includes (and what those include); its last
    ``core.hooksPath``, its includes' included."""
    from ._gitconfig import parse

    parsed = parse(data.decode("utf-8", "surrogateescape"))
    hooks_path = (parsed.values("core", "hookspath") or [None])[-1]
    if depth >= _MAX_INCLUDES:
        return hooks_path
    for include in parsed.includes():
        target = _expand(include, os.path.dirname(path))
        if target is None or not found.file(target):
            continue
        included = read_bounded(found.real(target))
        if included:
            hooks_path = _config_file(found, found.real(target), included, depth + 1) or hooks_path
    return hooks_path


def _expand(path: str, base: str) -> str | None:
    """A config's path as git expands it: ``~/`` is the user's home, a relative path is
    relative to the including file's directory (``~user/`` is not followed)."""
    if path.startswith("~/"):
        return os.path.expanduser(path)
    if path.startswith("~") or not path:
        return None
    return os.path.normpath(os.path.join(base, path))


def _hooks_directory(found: Found, worktree: str, common: str, hooks_path: str | None) -> str:
    """The hooks git runs; a ``core.hooksPath`` under a write grant is protected (with
    its parent, when it is husky 9's ``.husky/_``, whose shims run ``.husky/NAME``)."""
    if not hooks_path:
        return os.path.join(common, "hooks")
    expanded = _expand(hooks_path, worktree)
    if expanded is None:
        return os.path.join(common, "hooks")
    if not os.path.isabs(hooks_path) and not hooks_path.startswith("~"):
        found.worktree_hooks.add(common)  # a linked worktree would have hooks of its own
    if os.path.basename(expanded) == "_":
        found.file(os.path.dirname(expanded))
    found.file(expanded)
    return found.real(expanded)


def _hook_managers(found: Found, worktree: str, hooks: str, common: str) -> None:
    """The work-tree files that the shims of a hook manager in ``hooks`` run."""
    names = _managed_files(found, hooks)
    if names:
        found.worktree_hooks.add(common)
        found.files(worktree, names)


def _managed_files(found: Found, hooks: str) -> list[str]:
    """The work-tree files that the shims of a hook manager in ``hooks`` run (read once
    for each hooks directory)."""
    if hooks not in found.managers:
        names: list[str] = []
        for entry in _hook_files(hooks):
            head = read_bounded(entry, 4096) or b""
            if _PRE_COMMIT in head:
                names += _pre_commit_configs(head)
            names += [path for marker, paths in _MANAGERS if marker in head for path in paths]
        found.managers[hooks] = list(dict.fromkeys(names))
    return found.managers[hooks]


def _hook_files(hooks: str) -> list[str]:
    try:
        with os.scandir(hooks) as entries:
            return [entry.path for count, entry in zip(range(_MAX_HOOKS), entries)
                    if not entry.name.endswith(".sample")]
    except OSError:
        return []


def _pre_commit_configs(shim: bytes) -> list[str]:
    """The config a pre-commit shim passes (``--config=FILE``), else the default."""
    found = []
    for part in shim.split(b"--config=")[1:]:
        name = part.split()[0].strip(b"'\")") if part.split() else b""
        if name and not name.startswith((b"/", b"$")) and b".." not in name:
            found.append(os.fsdecode(name))
    return found or [_PRE_COMMIT_CONFIG]


def _gitlinks(found: Found, worktree: str, gitdir: str, hash_size: int,
              ) -> tuple[list[str], tuple[int, int, int, int] | None]:
    """(where nested repositories may be: the paths ``.gitmodules`` names, and the
    gitlinks of an index of at most ``_MAX_QUICK_INDEX`` bytes (and of its shared part);
    the index's identity, for the end check)."""
    paths: list[str] = []
    modules = read_bounded(os.path.join(worktree, ".gitmodules"))
    if modules:
        from ._gitconfig import parse

        text = modules.decode("utf-8", "surrogateescape")
        paths += [path for entry in parse(text).entries if entry.section == "submodule"
                  and entry.name == "path" and (path := entry.value)]
    data, index = _read_index(os.path.join(gitdir, "index"))
    if data:
        from ._gitindex import quick, shared_index_names

        links = quick(data, hash_size)
        for shared in shared_index_names(data, hash_size):
            links += quick(read_bounded(os.path.join(gitdir, shared), _MAX_QUICK_INDEX) or b"",
                           hash_size)
        paths += map(os.fsdecode, links)
    return [path for path in dict.fromkeys(paths) if safe_relative(path)][:_MAX_GITLINKS], index


def _read_index(path: str) -> tuple[bytes | None, tuple[int, int, int, int] | None]:
    """(the index, if at most ``_MAX_QUICK_INDEX`` bytes; its identity)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        small = st.st_size <= _MAX_QUICK_INDEX
        return (os.read(fd, st.st_size) if small else None), \
            (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        return None, None
    finally:
        os.close(fd)


def safe_relative(path: str) -> bool:
    """A path inside the work tree as git would accept it in an index (no ``..``, no
    ``.git`` component, not absolute)."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(
        part not in ("", ".", "..") and part.lower() != ".git" for part in parts)
