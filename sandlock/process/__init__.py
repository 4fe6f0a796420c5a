"""The process side of a run: ``Sandbox`` forks the keeper (the subreaper that kills
and reaps the whole sandbox), which forks the command, whose side applies the
confinement and execs; terminal handoff and job control; output capture. And
``confine``, which confines the calling process itself (no fork, no supervisor).

Internal to sandlock (not public API); ``sandlock.Sandbox`` and friends are the
public names.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._call import CallError, CallResult
    from ._capture import Capture
    from ._confine_self import confine
    from ._pipeline import Pipeline, PipelineResult, Stage
    from . import _registry as registry
    from ._process import SandboxedProcess, TimeoutExpired
    from ._sandbox import Result, Sandbox

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "CallError": "_call",
    "CallResult": "_call",
    "Capture": "_capture",
    "confine": "_confine_self",
    "registry": "_registry:",  # named sandboxes (`sandlock ps`, `inspect`, `kill`)
    "Pipeline": "_pipeline",
    "PipelineResult": "_pipeline",
    "Result": "_sandbox",
    "Sandbox": "_sandbox",
    "SandboxedProcess": "_process",
    "Stage": "_pipeline",
    "TimeoutExpired": "_process",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
