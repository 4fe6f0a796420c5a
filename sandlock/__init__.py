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
    from .policyfiles import Checkpoint
    from .api._inputs import inputs
    from .api import (CallError, CallResult, Change, ExitReason, ExitStatus, Gather, NamedStage, Pipeline,
                      PipelineResult, Process, Result, Sandbox, Stage, StdioMode, confine)
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
    "Checkpoint": "policyfiles",
    "Context": "runtime",
    "Event": "runtime",
    "Gather": "api",
    "NamedStage": "api",
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
    "Process": "api",
    "Result": "api",
    "Sandbox": "api",
    "Protection": "policy",
    "SandboxedProcess": "process",
    "Stage": "api",
    "StdioMode": "api",
    "TimeoutExpired": "process",
    # Its own module, not "api": the names of one module are resolved together, and
    # `from sandlock import Sandbox` must not load what confine() alone needs.
    "confine": "api._confine_self:confine",
    # Its own module too: it runs in a gather's confined consumer, which needs no more.
    "inputs": "api._inputs:inputs",
}

__all__ = [
    "ByteSize",
    "BranchAction",
    "CallError",
    "CallResult",
    "Change",
    "Checkpoint",
    "Context",
    "Event",
    "ExitReason",
    "ExitStatus",
    "FsIsolation",
    "Gather",
    "NamedStage",
    "NotifAction",
    "NotifPolicy",
    "PathRule",
    "Pipeline",
    "PipelineResult",
    "Policy",
    "PolicyError",
    "Process",
    "Protection",
    "Result",
    "Sandbox",
    "SandboxedProcess",
    "SandlockError",
    "SetupError",
    "Stage",
    "StdioMode",
    "SyscallEvent",
    "TimeoutExpired",
    "confine",
    "inputs",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)

