"""Where policies come from and go to: TOML policy files and profiles (one schema
derived from Policy's fields, its [mcp] section), options merged with files, the
written form (`--print-policy`), checkpoints saved and loaded, `sandlock policy test`,
and learn mode's derivation of a policy from what a command did. The Policy value
itself is ``policy``, the layer below.

Internal to sandlock (not public API); ``sandlock.Checkpoint`` is the public name.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._checkpoint import Checkpoint
    from ._file import PolicyFile, load as load_policy_file
    from ._learn import applied as apply_learned, learn, observing as observing_policy, read_audit
    from ._profiles import (
        directory as profiles_directory,
        load_profile,
        names as profile_names,
        path_of as profile_path,
    )
    from ._sources import from_options, merge
    from ._tester import PolicyTester, parse_endpoint, parse_request
    from ._toml import dumps

# name -> the private module defining it (``module:attribute`` when renamed here);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "Checkpoint": "_checkpoint",
    "PolicyFile": "_file",
    "PolicyTester": "_tester",
    "apply_learned": "_learn:applied",
    "dumps": "_toml",
    "from_options": "_sources",
    "learn": "_learn",
    "load_policy_file": "_file:load",
    "load_profile": "_profiles",
    "merge": "_sources",
    "observing_policy": "_learn:observing",
    "parse_endpoint": "_tester",
    "parse_request": "_tester",
    "profile_names": "_profiles:names",
    "profile_path": "_profiles:path_of",
    "profiles_directory": "_profiles:directory",
    "read_audit": "_learn",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
