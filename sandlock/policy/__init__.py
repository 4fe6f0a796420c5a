"""Policy, the model every run is built from: its fields and the checks of their
values, credentials' sources and rules, upstream Sandlock's value types, protections,
hardening and determinism. Where policies come from (files, profiles, options merged
with files, learn mode) is ``policyfiles``, a layer above.

Internal to sandlock (not public API); ``sandlock.Policy`` is the public name.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._credentials import check_sendable, placeholder_for, read_secrets
    from ._policy import FIELDS as POLICY_FIELDS, Policy, check_field, flag_of
    from ._protection import Protection
    from ._upstream import BranchAction, FsIsolation, NotifAction, NotifPolicy, PathRule
    from ._values import FS_ISOLATIONS, HTTPS_INSPECT_MODES, MEMORY_MODES, MODES, WORKSPACE_ACTIONS
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
    "FS_ISOLATIONS": "_values",
    "HTTPS_INSPECT_MODES": "_values",
    "MEMORY_MODES": "_values",
    "MODES": "_values",
    "WORKSPACE_ACTIONS": "_values",
    "Policy": "_policy",
    "Protection": "_protection",
    "POLICY_FIELDS": "_policy:FIELDS",
    "check_field": "_policy",
    "flag_of": "_policy",
    "check_sendable": "_credentials",
    "check_timeout": "_values:timeout",
    "placeholder_for": "_credentials",
    "read_secrets": "_credentials",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
