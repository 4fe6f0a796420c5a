"""sandlock: an unprivileged Linux process sandbox centred on network policy.

    from sandlock import Sandbox, Policy
    result = Sandbox(Policy(fs_writable=["/tmp/work"], fs_readable=["/usr", "/etc"])).run(["ls", "/"])

The public names load from the internal subpackages (docs/architecture.md) on first
use: the proxy process imports ``sandlock.proxy`` and ``sandlock.ca`` without paying for the sandbox itself.
"""

from __future__ import annotations

from ._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the CLI's start-up path
if TYPE_CHECKING:
    from ._errors import PolicyError, SandlockError, SetupError
    from .policy import BranchAction, FsIsolation, NotifAction, NotifPolicy, PathRule, Policy, Protection
    from .api import (CallError, CallResult, Change, ExitReason, ExitStatus, Pipeline, PipelineResult,
                      Result, Sandbox, Stage, confine)
    from .limits import Size as ByteSize
    from .process import SandboxedProcess, TimeoutExpired
    from .runtime import Context, Event
    from .runtime import Event as SyscallEvent

_EXPORTS = {
    "CallError": "api",
    "CallResult": "api",
    "Change": "api",
    "ExitReason": "api",
    "ExitStatus": "api",
    # Upstream Sandlock's names for ours (docs/api.md, "Coming from upstream Sandlock").
    "ByteSize": "limits:Size",
    "SyscallEvent": "runtime:Event",
    "Context": "runtime",
    "Event": "runtime",
    "PolicyError": "_errors",
    "SandlockError": "_errors",
    "SetupError": "_errors",
    "Policy": "policy",
    # upstream Sandlock's value types for Policy fields (their own module: only a
    # program naming one loads enum)
    "BranchAction": "policy._upstream:BranchAction",
    "FsIsolation": "policy._upstream:FsIsolation",
    "NotifAction": "policy._upstream:NotifAction",
    "NotifPolicy": "policy._upstream:NotifPolicy",
    "PathRule": "policy._upstream:PathRule",
    "Pipeline": "api",
    "PipelineResult": "api",
    "Result": "api",
    "Sandbox": "api",
    "Protection": "policy",
    "SandboxedProcess": "process",
    "Stage": "api",
    "TimeoutExpired": "process",
    # Its own module, not "api": the names of one module are resolved together, and
    # `from sandlock import Sandbox` must not load what confine() alone needs.
    "confine": "api._confine_self:confine",
}

__all__ = [
    "ByteSize",
    "BranchAction",
    "CallError",
    "CallResult",
    "Change",
    "Context",
    "Event",
    "ExitReason",
    "ExitStatus",
    "FsIsolation",
    "NotifAction",
    "NotifPolicy",
    "PathRule",
    "Pipeline",
    "PipelineResult",
    "Policy",
    "PolicyError",
    "Protection",
    "Result",
    "Sandbox",
    "SandboxedProcess",
    "SandlockError",
    "SetupError",
    "Stage",
    "SyscallEvent",
    "TimeoutExpired",
    "confine",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)

