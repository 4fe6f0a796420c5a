"""Autorun files: what the user's own, unconfined tools run or obey later (git hooks
and config, shell start-up files, autostart entries, editor tasks). Found at start
(``protect``: those under a write grant bound read-only, repositories pinned, those
missing recorded) and checked once the sandbox is gone (``Leftovers``: what the command
made there quarantined, repositories made during the run neutralised); git's config
and index files read as git reads them, never by running git.

Internal to sandlock (not public API). Below confinement: it knows paths, not policies.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from . import _autorun as autorun
    from ._autorun import Protection, read_bounded
    from ._gitconfig import parse as parse_git_config
    from ._leftovers import Leftovers, check_kept_layer

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "Leftovers": "_leftovers",
    "Protection": "_autorun",
    "autorun": "_autorun:",
    "check_kept_layer": "_leftovers",
    "parse_git_config": "_gitconfig:parse",
    "read_bounded": "_autorun",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
