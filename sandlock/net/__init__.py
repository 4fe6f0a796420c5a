"""The network engine: the rule grammar and the compiled network policy, DNS pinned at
start and answered from the pinned table, and the supervisor that takes each
notified syscall through materialize (the only code reading the child) -> verdict
(pure) -> execute (the only code acting for the child, on a duplicate of its socket);
the audit log; the run's HTTP proxy, as sandlock sees it.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._engine import Network, compile_policy
    from ._http import HttpRun
    from ._judge import ABSTRACT_SCOPE, NESTING_NAME
    from ._verdicts import NetworkCall

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "ABSTRACT_SCOPE": "_judge",
    "HttpRun": "_http",
    "NESTING_NAME": "_judge",
    "Network": "_engine",
    "NetworkCall": "_verdicts",
    "compile_policy": "_engine",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
