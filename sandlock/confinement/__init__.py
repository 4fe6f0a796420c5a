"""Policy -> the kernel objects a command is confined with: the Landlock ruleset
(filesystem grants and denies, IPC scopes) and the seccomp program, prepared in
sandlock's process and applied by the forked child right before exec; and the plan of
the sandbox's namespaces (its /proc, private scratch directories, autorun files (their
finding and end check are ``autorun``'s),
the copy-on-write workspace's overlay). Their
static variant, for a process that confines itself without a supervisor.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._confinement import (
        DEFAULT_TASK_CAP,
        RESERVED_PIDS,
        Confinement,
        keeper_scope,
        neutral_layer,
    )
    from ._filter import MEMFD_CALL, OPEN_CALLS
    from ._fspolicy import (
        PSEUDO_DEVICES,
        image_store,
        within,
        sandlock_ca_cache_dir,
        sandlock_ca_dir,
        sandlock_runtime_dir,
        workspace_store,
    )
    from ._isolation import SCRATCH, Isolation, Overlay
    from ._owncode import SANDLOCK_PACKAGE
    from ._virtual import sandbox_cpus
    from ._static import EnclosedConfinement, SelfConfinement, TcpRules, apply_static
    from ._hints import failure_notes
    from ._confinement import ABSTRACT_UNIX_SOCKET_SCOPE, SIGNAL_SCOPE, protection_disabled
    from ._protections import NET_TCP, PROTECTIONS
    from ._protections import NOT_DISABLED as PROTECTIONS_NOT_DISABLED
    from ._protections import degradable as protection_degradable
    from ._workspace import default_workspace, widening

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "PSEUDO_DEVICES": "_fspolicy",
    "Confinement": "_confinement",
    "DEFAULT_TASK_CAP": "_confinement",
    "MEMFD_CALL": "_filter",
    "OPEN_CALLS": "_filter",
    "RESERVED_PIDS": "_confinement",
    "Isolation": "_isolation",
    "SANDLOCK_PACKAGE": "_owncode",
    "sandbox_cpus": "_virtual",
    "Overlay": "_isolation",
    "SCRATCH": "_isolation",
    "keeper_scope": "_confinement",
    "neutral_layer": "_confinement",
    "EnclosedConfinement": "_static",
    "SelfConfinement": "_static",
    "TcpRules": "_static",
    "apply_static": "_static",
    "sandlock_ca_cache_dir": "_fspolicy",
    "sandlock_ca_dir": "_fspolicy",
    "sandlock_runtime_dir": "_fspolicy",
    "failure_notes": "_hints",
    "ABSTRACT_UNIX_SOCKET_SCOPE": "_confinement",
    "NET_TCP": "_protections",
    "PROTECTIONS": "_protections",
    "PROTECTIONS_NOT_DISABLED": "_protections:NOT_DISABLED",
    "SIGNAL_SCOPE": "_confinement",
    "protection_degradable": "_protections:degradable",
    "protection_disabled": "_confinement",
    "default_workspace": "_workspace",
    "widening": "_workspace",
    "workspace_store": "_fspolicy",
    "image_store": "_fspolicy",
    "within": "_fspolicy",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
