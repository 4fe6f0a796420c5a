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
    from .policy import Policy, Protection
    from .process import (
        CallError,
        CallResult,
        Pipeline,
        PipelineResult,
        Result,
        Sandbox,
        SandboxedProcess,
        Stage,
        TimeoutExpired,
        confine,
    )
    from .runtime import Context, Event

_EXPORTS = {
    "CallError": "process",
    "CallResult": "process",
    "Context": "runtime",
    "Event": "runtime",
    "PolicyError": "_errors",
    "SandlockError": "_errors",
    "SetupError": "_errors",
    "Policy": "policy",
    "Protection": "policy",
    "Pipeline": "process",
    "PipelineResult": "process",
    "Result": "process",
    "Sandbox": "process",
    "SandboxedProcess": "process",
    "Stage": "process",
    "TimeoutExpired": "process",
    # Its own module, not "process": the names of one module are resolved together, and
    # `from sandlock import Sandbox` must not load what confine() alone needs.
    "confine": "process._confine_self:confine",
}

__all__ = [
    "CallError",
    "CallResult",
    "Context",
    "Event",
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
    "TimeoutExpired",
    "confine",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)

