"""The embedding API: ``Sandbox`` (one run, or a long-lived sandbox with its calls,
clones and nested sandboxes), ``Pipeline`` and its stages, ``confine`` (the calling
process itself: no fork, no supervisor). The launch path under it is sandlock.process.

Internal to sandlock (not public API); the top-level ``sandlock`` package re-exports
the public names.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._call import CallError, CallResult
    from ._confine_self import confine
    from ._pipeline import Gather, NamedStage, Pipeline, PipelineResult, Stage
    from ._popen import Process, StdioMode
    from ._result import Change, ExitReason, ExitStatus, Result
    from ._sandbox import Sandbox

# name -> the private module defining it; each module is imported on first use, so
# importing the package costs nothing
_EXPORTS = {
    "CallError": "_call",
    "CallResult": "_call",
    "Change": "_result",
    "ExitReason": "_result",
    "ExitStatus": "_result",
    "confine": "_confine_self",
    "Gather": "_pipeline",
    "NamedStage": "_pipeline",
    "Pipeline": "_pipeline",
    "PipelineResult": "_pipeline",
    "Process": "_popen",
    "StdioMode": "_popen",
    "Result": "_result",
    "Sandbox": "_sandbox",
    "Stage": "_pipeline",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
