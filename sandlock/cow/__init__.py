"""The copy-on-write workspace (``--workdir``): a run's writes to a directory are
captured in an overlayfs upper layer, then committed to the directory, discarded, or
kept for review (docs/workspace.md). Only a run with a workdir imports this.

* ``_store``: the per-user store of workspaces (ids, state, locks);
* ``_changes``: what an upper layer changes in its directory (A/M/D, for --dry-run
  and ``sandlock workspace diff``);
* ``_commit``: applying an upper layer to its directory, file by file, atomically,
  leaving aside what changed there meanwhile (conflicts).

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._changes import Change, changes, format_changes
    from ._commit import CommitReport, commit
    from ._store import CONFLICTS, INTERRUPTED, KEPT, RUNNING, Workspace, WorkspaceError

_EXPORTS = {
    "Change": "_changes",
    "changes": "_changes",
    "format_changes": "_changes",
    "CommitReport": "_commit",
    "commit": "_commit",
    "CONFLICTS": "_store",
    "INTERRUPTED": "_store",
    "KEPT": "_store",
    "RUNNING": "_store",
    "Workspace": "_store",
    "WorkspaceError": "_store",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
