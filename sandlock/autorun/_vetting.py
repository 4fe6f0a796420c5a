"""The end check's rules (``_leftovers`` runs them over a run's views).

* An autorun path missing at start that exists now is quarantined; where a
  repository may appear (a gitlink's ``.git``), the repository is vetted instead.
* A repository that was not there at start (in a scanned directory or a direct
  subdirectory, at a gitlink of an index the run changed, a submodule's or a linked
  worktree's git directory) is vetted: its hooks but ``*.sample``, ``commondir`` and
  ``config.worktree`` quarantined; its config kept if every key is one that runs
  nothing and moves no file git reads (``_gitconfig.ALLOWED``), else quarantined and
  written again with those keys alone; its index's gitlinks vetted in turn.
* A ``.git`` file made during the run is kept only when it names a linked worktree's
  or a submodule's directory of a repository that is known or vetted, inside the
  same view, through no symbolic link; otherwise it is quarantined. A linked worktree
  of a repository whose hooks run what the work tree says (``core.hooksPath`` in it,
  a hook manager's shim) is quarantined whole: its work tree would be the command's.

Of a repository that existed at start but was not protected (deeper than the scanned
places), only what the run wrote (a ctime since the start, or the layer's files) is
looked at: the rest is the user's.
"""

from __future__ import annotations

import os

# (git's formats are loaded when something is there to read: a run that made nothing
# pays for this module alone)
TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable

    from ._autorun import StartRecord
    from ._leftovers import Entry, View

_MAX_DEPTH = 4
_MAX_VETTED = 1024  # git directories vetted in one check: a bound on its cost
_MAX_INDEX = 256 << 20  # (~2.5 million files)
_MAX_CONFIG = 1 << 20
_HASH_SIZES = (20, 32)  # SHA-1, SHA-256


class Check:
    """One pass over a run's views; ``found``: (path, its new path, why)."""

    def __init__(self, record: StartRecord, locate: Callable[[str], tuple[View, str] | None]) -> None:
        self.record, self.locate = record, locate
        self.found: list[tuple[str, str, str]] = []
        self.done: set[str] = set()  # host paths handled
        self.vetted: set[str] = set()  # git directories vetted
        self.unchecked: list[str] = []  # past _MAX_VETTED
        self.unchanged: dict[str, bool] = {}  # directories as they were at start
        # common directory -> the size of its hashes (SHA-256's or SHA-1's), as its config says
        self.hash_sizes = {common: size for _, _, common, _, size in record.repositories}

    def run(self) -> None:
        for path, repository, anchor in self.record.absent:
            self._absent(path, repository, anchor)
        for directory in self.record.scanned:
            self._places(directory)
        for worktree, gitdir, common, index, _ in self.record.repositories:
            self._known(worktree, gitdir, common, index)

    # --- where to look ----------------------------------------------------------------

    def _absent(self, path: str, repository: bool, anchor: str | None) -> None:
        located = self.locate(path)
        if located is None or anchor is not None and self._unchanged(anchor):
            return
        view, rel = located
        entry = view.lookup(rel)
        if entry is None:
            return
        if entry.rel != rel:  # a directory on the way is a link now
            if view.written(entry):
                self._quarantine(view, entry, f"a symbolic link made during the run, on the way to {path}")
        elif repository:
            self._place(view, entry, os.path.dirname(path), 1)
        else:
            self._quarantine(view, entry, "an autorun file made during the run")

    def _unchanged(self, anchor: str) -> bool:
        """Whether the directory ``anchor`` is as it was at start (its inode and ctime):
        then nothing was made in it. (In a layer, what is there was written: no use.)"""
        if anchor not in self.unchanged:
            located = self.locate(anchor)
            self.unchanged[anchor] = located is not None and not located[0].layer and \
                located[0].identity(located[1]) == self.record.anchors.get(anchor)
        return self.unchanged[anchor]

    def _places(self, directory: str) -> None:
        """A scanned directory and its direct subdirectories."""
        located = self.locate(directory)
        if located is None or os.path.basename(directory) == ".git":
            return
        view, rel = located
        for candidate in view.repositories(rel):
            git = os.path.join(candidate, ".git")
            if view.host(git) in self.record.known:
                continue
            entry = view.lookup(git)
            if entry is not None and entry.rel == git:
                self._place(view, entry, view.host(candidate), 0)

    def _known(self, worktree: str, gitdir: str, common: str, index: tuple | None) -> None:
        """A repository protected at start: its index's new gitlinks, its new linked
        worktrees and submodules."""
        located = self.locate(gitdir)
        if located is not None:
            view, rel = located
            entry = view.lookup(os.path.join(rel, "index"))
            if entry is not None and (view.layer or _identity(entry) != index):
                self._gitlinks(view, entry, worktree, 0, common)
        located = self.locate(common)
        if located is None:
            return
        view, rel = located
        for name in view.names(os.path.join(rel, "worktrees"), True):
            admin = os.path.join(rel, "worktrees", name)
            if view.host(admin) not in self.record.known:
                self._admin(view, admin, common)
        for module in self._modules(view, os.path.join(rel, "modules")):
            if view.host(module) not in self.record.known:
                self._git_dir(view, module, None, 1)

    # --- what is found there ----------------------------------------------------------

    def _place(self, view: View, entry: Entry, worktree: str, depth: int) -> None:
        """A ``.git`` that was not there at start: a link, a directory or a file."""
        path = view.host(entry.rel)
        if path in self.done or path in self.record.known or depth > _MAX_DEPTH:
            return
        self.done.add(path)
        if entry.is_link:
            if view.written(entry):
                self._quarantine(view, entry, "a .git symbolic link made during the run")
        elif entry.is_dir:
            self._git_dir(view, entry.rel, worktree, depth)
        else:
            self._gitfile(view, entry, worktree, depth)

    def _git_dir(self, view: View, rel: str, worktree: str | None, depth: int) -> None:
        """A git directory that was not protected at start, vetted."""
        path = view.host(rel)
        if path in self.vetted or depth > _MAX_DEPTH:
            return
        if len(self.vetted) >= _MAX_VETTED:
            self.unchecked.append(path)
            return
        self.vetted.add(path)
        hooks = os.path.join(rel, "hooks")
        entry = view.lookup(hooks)
        if entry is not None and entry.is_link and view.written(entry):
            self._quarantine(view, entry, "a hooks link of a repository made during the run")
        for name in view.names(hooks):
            entry = view.lookup(os.path.join(hooks, name))
            if not name.endswith(".sample") and entry is not None and view.written(entry):
                self._quarantine(view, entry, "a hook of a repository made during the run")
        for name in ("commondir", "config.worktree"):
            entry = view.lookup(os.path.join(rel, name))
            if entry is not None and view.written(entry):
                self._quarantine(view, entry, f"{name} of a repository made during the run")
        self.hash_sizes[path] = self._config(view, os.path.join(rel, "config"))
        for name in view.names(os.path.join(rel, "worktrees"), True):
            self._admin(view, os.path.join(rel, "worktrees", name), path)
        for module in self._modules(view, os.path.join(rel, "modules")):
            self._git_dir(view, module, None, depth + 1)
        if worktree is None:
            return
        entry = view.lookup(os.path.join(rel, "index"))
        if entry is not None and view.written(entry):
            self._gitlinks(view, entry, worktree, depth, path)
        for name in self.record.worktree_files:  # hooks your own config runs in any work tree
            self._absent_like(os.path.join(worktree, name), "what the hooks of your git config "
                              "run, in a repository made during the run")

    def _absent_like(self, path: str, why: str) -> None:
        located = self.locate(path)
        if located is not None:
            view, rel = located
            entry = view.lookup(rel)
            if entry is not None and view.written(entry):
                self._quarantine(view, entry, why)

    def _config(self, view: View, rel: str) -> int:
        """A git directory's config, vetted if the run wrote it; the size of the hashes
        it says its repository uses (what git reads its index with)."""
        from ._gitconfig import judge, render

        entry = view.lookup(rel)
        verdict = judge(view.read(entry, _MAX_CONFIG) if entry is not None else None)
        if entry is None or not view.written(entry) or verdict.allowed:
            return verdict.hash_size
        parent = entry.parent
        if self._quarantine(view, entry, f"the config of a repository made during the run sets "
                            f"{verdict.refused}; written again with its {len(verdict.kept)} keys "
                            "that run nothing"):
            view.create(parent, entry.name, render(verdict.kept))
        return verdict.hash_size

    def _admin(self, view: View, rel: str, common: str) -> None:
        """A linked worktree's directory (``worktrees/NAME``) made during the run."""
        path = view.host(rel)
        if path in self.done or path in self.record.known:
            return
        self.done.add(path)
        entry = view.lookup(rel)
        if entry is None or not view.written(entry):
            return
        if common in self.record.worktree_hooks:
            self._quarantine(view, entry, "a worktree made during the run, of a repository whose "
                             "hooks run what its work tree says")
            return
        commondir = view.lookup(os.path.join(rel, "commondir"))
        target = view.read(commondir, 4096) if commondir is not None else None
        if target is None or os.path.normpath(os.path.join(
                path, os.fsdecode(target.strip()))) != os.path.normpath(common):
            # (without its commondir, git would take it for a repository of its own)
            self._quarantine(view, entry, "a worktree made during the run whose commondir does "
                             f"not name {common}")
            return
        for name in ("config.worktree", "config"):
            found = view.lookup(os.path.join(rel, name))
            if found is not None and view.written(found):
                self._quarantine(view, found, f"a linked worktree's {name} made during the run")
        gitfile = view.lookup(os.path.join(rel, "gitdir"))
        data = view.read(gitfile, 4096) if gitfile is not None else None
        index = view.lookup(os.path.join(rel, "index"))
        if data and index is not None and view.written(index):
            worktree = os.path.dirname(os.fsdecode(data.strip()))
            if os.path.isabs(worktree) and self.locate(worktree) is not None:
                self._gitlinks(view, index, worktree, 1, common)

    def _gitfile(self, view: View, entry: Entry, worktree: str, depth: int) -> None:
        """A ``.git`` file (``gitdir: PATH``) that was not there at start."""
        if not view.written(entry):
            return
        data = view.read(entry, 4096) or b""
        named = os.fsdecode(data[8:].strip()) if data.startswith(b"gitdir: ") else ""
        target = os.path.normpath(os.path.join(os.path.dirname(view.host(entry.rel)), named))
        if named and self._accepts(view, target, worktree, depth):
            return
        self._quarantine(view, entry, f"a .git file made during the run, naming {named or 'nothing'}")

    def _accepts(self, view: View, target: str, worktree: str, depth: int) -> bool:
        """Whether a .git file may name ``target``: a linked worktree's or a submodule's
        git directory of a repository known at start or vetted, in the same view (a
        new work tree for hooks that run what the work tree says: never)."""
        parent = os.path.dirname(target)
        worktree_of = os.path.basename(parent) == "worktrees"
        if worktree_of:
            common = os.path.dirname(parent)
        else:
            common, marker, _ = target.rpartition("/modules/")
            if not marker:
                return False
        if {common, target} & self.record.worktree_hooks:
            return False
        if target in self.record.known:  # (a new work tree of it: its gitlinks there)
            self._host_gitlinks(view, target, worktree, depth + 1, common if worktree_of else target)
            return True
        located = self.locate(target)
        if located is None:
            return False  # (named outside every write grant: nothing made it this run)
        # (in this write grant or another one: `git worktree add ../wt` with both granted)
        there, rel = located
        if not self._repository(there, common, depth):
            return False
        found = there.lookup(rel)
        if found is None or found.rel != rel or not found.is_dir:
            return False  # (a link on the way, or nothing there)
        if worktree_of:
            self._admin(there, rel, common)
        else:
            self._git_dir(there, rel, None, depth + 1)
        # Its index's gitlinks, in the work tree git will take: this file's directory
        # (whatever the directory's own ``gitdir`` file claims, or another .git file).
        index = there.lookup(os.path.join(rel, "index"))
        if index is not None and index.rel == os.path.join(rel, "index") and there.written(index):
            self._gitlinks(there, index, worktree, depth + 1, common if worktree_of else target)
        return True

    def _repository(self, view: View, gitdir: str, depth: int) -> bool:
        """``gitdir`` is known, or a git directory in ``view`` (vetted now)."""
        if gitdir in self.record.known or gitdir in self.vetted:
            return True
        located = self.locate(gitdir)
        if located is None or located[0] is not view:
            return False
        found = view.lookup(located[1])
        if found is None or found.rel != located[1] or not found.is_dir:
            return False
        worktree = os.path.dirname(gitdir) if os.path.basename(gitdir) == ".git" else None
        self._git_dir(view, located[1], worktree, depth + 1)
        return True

    def _gitlinks(self, view: View, index: Entry, worktree: str, depth: int, common: str) -> None:
        """The nested repositories an index records, those not known at start vetted
        (read with the hash size of its repository's config: git's)."""
        parent = os.path.dirname(index.rel)

        def read(name: str) -> bytes | None:
            entry = index if name == "index" else view.lookup(os.path.join(parent, name))
            return view.read(entry, _MAX_INDEX) if entry is not None else None

        from ._gitindex import read_gitlinks

        links = read_gitlinks(read, self._sizes(common), _MAX_INDEX)
        if links is None:
            self._quarantine(view, index, "an index sandlock cannot read, changed during the run")
        else:
            self._nested(links, worktree, depth)

    def _host_gitlinks(self, view: View, gitdir: str, worktree: str, depth: int,
                       common: str) -> None:
        """The gitlinks of a known git directory's index, for a new work tree of it: its
        index as the run left it (in a layer, the directory's own if the run did not
        change it)."""
        located = self.locate(gitdir)
        index = view.lookup(os.path.join(located[1], "index")) if located else None
        if index is not None and index.rel == os.path.join(located[1], "index"):
            self._gitlinks(view, index, worktree, depth, common)
            return
        if view.layer:
            from ._autorun import read_bounded
            from ._gitindex import read_gitlinks

            links = read_gitlinks(lambda name: read_bounded(os.path.join(gitdir, name), _MAX_INDEX),
                                  self._sizes(common), _MAX_INDEX)
            self._nested(links or [], worktree, depth)

    def _sizes(self, common: str) -> tuple[int, ...]:
        size = self.hash_sizes.get(common)
        return (size,) if size else _HASH_SIZES

    def _nested(self, links: list[bytes], worktree: str, depth: int) -> None:
        """What is at each gitlink of ``worktree`` that was not known at start."""
        from ._gitrepo import safe_relative

        for link in links:
            path = os.fsdecode(link)
            if not safe_relative(path):
                continue
            git = os.path.join(worktree, path, ".git")
            located = self.locate(git)
            if git in self.record.known or located is None:
                continue
            nested_view, rel = located
            entry = nested_view.lookup(rel)
            if entry is None:
                continue
            if entry.rel != rel:
                if nested_view.written(entry):
                    self._quarantine(nested_view, entry, f"a symbolic link made during the run, on "
                                     f"the way to the nested repository {path}")
                continue
            self._place(nested_view, entry, os.path.dirname(git), depth + 1)

    def _modules(self, view: View, rel: str, depth: int = 0) -> list[str]:
        """The git directories in a ``modules`` directory (names may hold slashes)."""
        found: list[str] = []
        for name in view.names(rel, True):
            path = os.path.join(rel, name)
            if view.lookup(os.path.join(path, "HEAD")) is not None:
                found.append(path)
            elif depth < _MAX_DEPTH:
                found += self._modules(view, path, depth + 1)
        return found

    def _quarantine(self, view: View, entry: Entry, why: str) -> bool:
        path = view.host(entry.rel)
        try:
            renamed = view.quarantine(entry)
        except OSError as exc:
            self.found.append((path, path, f"{why} (could not be renamed: {exc.strerror})"))
            return False
        self.found.append((path, renamed, why))
        return True


def _identity(entry: Entry) -> tuple[int, int, int, int]:
    st = entry.st
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
