"""Named sandboxes: the name's check and the user's registry of the running ones
(``--name``, ``Sandbox(name=)``; what ``sandlock ps``, ``inspect`` and ``kill`` read).
Not the launch path: imported by named runs and those commands only.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._registry import (
        Entry,
        Registration,
        check_name,
        each,
        find,
        registry_path,
        running,
        signal_sandbox,
    )

# name -> the private module defining it; each module is imported on first use, so
# importing the package costs nothing
_EXPORTS = {
    "Entry": "_registry",
    "Registration": "_registry",
    "check_name": "_registry",
    "each": "_registry",
    "find": "_registry",
    "registry_path": "_registry",
    "running": "_registry",
    "signal_sandbox": "_registry",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
