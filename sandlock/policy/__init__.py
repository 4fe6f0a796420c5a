"""Policy, the model every run is built from, and where policies come from: TOML
policy files and profiles (one schema derived from Policy's fields), options merged
with files, the written form (`--print-policy`), `sandlock policy test`, and learn
mode's derivation of a policy from what a command did.

Internal to sandlock (not public API); ``sandlock.Policy`` is the public name.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._checkpoint import Checkpoint
    from ._credentials import check_sendable, placeholder_for, read_secrets
    from ._file import PolicyFile, load as load_policy_file
    from ._learn import applied as apply_learned, learn, observing as observing_policy, read_audit
    from ._policy import (
        FIELDS as POLICY_FIELDS,
        FS_ISOLATIONS,
        MEMORY_MODES,
        HTTPS_INSPECT_MODES,
        MODES,
        WORKSPACE_ACTIONS,
        Policy,
        flag_of,
    )
    from ._profiles import (
        directory as profiles_directory,
        load_profile,
        names as profile_names,
        path_of as profile_path,
    )
    from ._sources import from_options, merge
    from ._upstream import BranchAction, FsIsolation, NotifAction, NotifPolicy, PathRule
    from ._tester import PolicyTester, parse_endpoint, parse_request
    from ._toml import dumps
    from ._values import timeout as check_timeout

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "BranchAction": "_upstream",
    "FsIsolation": "_upstream",
    "NotifAction": "_upstream",
    "NotifPolicy": "_upstream",
    "PathRule": "_upstream",
    "FS_ISOLATIONS": "_policy",
    "HTTPS_INSPECT_MODES": "_policy",
    "MEMORY_MODES": "_policy",
    "MODES": "_policy",
    "WORKSPACE_ACTIONS": "_policy",
    "Policy": "_policy",
    "Checkpoint": "_checkpoint",
    "Protection": "_protection",
    "POLICY_FIELDS": "_policy:FIELDS",
    "PolicyFile": "_file",
    "PolicyTester": "_tester",
    "apply_learned": "_learn:applied",
    "dumps": "_toml",
    "flag_of": "_policy",
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
    "check_sendable": "_credentials",
    "check_timeout": "_values:timeout",
    "placeholder_for": "_credentials",
    "read_secrets": "_credentials",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
