"""The runtime policy (``policy_fn``): the embedding program hears of the command's
network calls, execs and processes as they happen, answers each, and tightens the
running sandbox for the rest of the run. Only a run given a policy_fn imports this.

Internal to sandlock (not public API), but for ``Event`` and ``Context``, which
``sandlock`` exports.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._context import Context
    from ._events import Event, observing
    from ._runtime import RuntimePolicy

_EXPORTS = {
    "Context": "_context",
    "Event": "_events",
    "observing": "_events",
    "RuntimePolicy": "_runtime",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
