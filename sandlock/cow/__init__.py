"""The copy-on-write workspace (``--workdir``): a run's writes to a directory are
captured in an overlayfs upper layer, then committed to the directory, discarded, or
kept for review (docs/workspace.md). Only a run with a workdir imports this.

* ``_changes``: what an upper layer changes in its directory (A/M/D, for --dry-run
  and ``sandlock workspace diff``);
* ``_commit``: applying an upper layer to its directory, file by file, atomically,
  leaving aside what changed there meanwhile (conflicts).

Internal to sandlock (not public API).
"""

from __future__ import annotations

__all__: list[str] = []
