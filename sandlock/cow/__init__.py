"""The copy-on-write workspace (``--workdir``): a run's writes to a directory are
captured in an overlayfs upper layer, then committed to the directory, discarded, or
kept for review (docs/workspace.md). Only a run with a workdir imports this.

* ``_store``: the per-user store of workspaces (ids, state, locks);
* ``_tree``: directory trees through descriptors only (any depth, any path length);
* ``_walk``: an upper layer and its directory side by side, each difference to a hook;
* ``_changes``: what an upper layer changes in its directory (A/M/D, for --dry-run
  and ``sandlock workspace diff``), lines fit for a terminal, the apparent size;
* ``_commit``: applying an upper layer to its directory, file by file, atomically,
  leaving aside what changed there meanwhile (conflicts);
* ``_copy``: copies that keep holes and hard links (a commit across file systems, a
  --max-disk layer kept);
* ``_patch``: ``sandlock workspace diff --patch``.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._changes import (
        DROPPED,
        Change,
        changes,
        escape,
        format_changes,
        human_size,
        oversize,
        shorten,
    )
    from ._commit import CommitReport, commit
    from ._copy import copy_tree
    from ._patch import print_patch
    from ._tree import remove_tree
    from ._store import CONFLICTS, INTERRUPTED, KEPT, RUNNING, Workspace, WorkspaceError

_EXPORTS = {
    "Change": "_changes",
    "changes": "_changes",
    "DROPPED": "_changes",
    "escape": "_changes",
    "format_changes": "_changes",
    "human_size": "_changes",
    "oversize": "_changes",
    "shorten": "_changes",
    "CommitReport": "_commit",
    "commit": "_commit",
    "copy_tree": "_copy",
    "print_patch": "_patch",
    "remove_tree": "_tree",
    "CONFLICTS": "_store",
    "INTERRUPTED": "_store",
    "KEPT": "_store",
    "RUNNING": "_store",
    "Workspace": "_store",
    "WorkspaceError": "_store",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
