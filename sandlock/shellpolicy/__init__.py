"""Vetting an agent's shell command before it runs (zkit's "shellpolicy"): a first pass
that turns a mistake into a reason the model can act on, not a boundary (the sandbox
is the boundary). Static analysis cannot see what a script or a program does once it
runs.

    from sandlock import shellpolicy

    decision = shellpolicy.decide("cd src && make > build.log")
    decision.allowed, decision.code, decision.reason   # False, "cd", "cd has no effect ..."
    shellpolicy.decide_verify("git commit -am wip")    # refused: changes the repository

Importing this package costs nothing until it is used (the bash grammar loads on
the first decision).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import
if TYPE_CHECKING:
    from ._rules import Decision, decide, decide_verify

_EXPORTS = {"Decision": "_rules", "decide": "_rules", "decide_verify": "_rules"}

__all__ = ["Decision", "decide", "decide_verify"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
