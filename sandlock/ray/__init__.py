"""Confined evaluation across a Ray cluster (``pip install 'sandlock[ray]'``):
``SandboxPool`` runs each item in a COW clone of a long-lived sandbox held by a Ray
actor, and says how each ended (``ItemResult``). docs/ray.md.

Importing this package imports neither Ray nor its modules: Ray is imported when a
pool is made, so that nothing else in sandlock ever pays for it.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._item import ItemResult, state
    from ._pool import SandboxPool

_EXPORTS = {
    "ItemResult": "_item",
    "SandboxPool": "_pool",
    "state": "_item",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
