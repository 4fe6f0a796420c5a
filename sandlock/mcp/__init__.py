"""``sandlock mcp``: a Model Context Protocol server (stdio) that gives an AI client a
confined shell. Each ``run_command`` is vetted (sandlock.shellpolicy), then run in a
sandbox of its own under the server's policy; its result says what sandlock denied.
docs/mcp.md.

Internal to sandlock (not public API); the ``mcp`` SDK it is built on is the optional
extra ``sandlock[mcp]``, imported only by ``sandlock mcp``.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._server import serve
    from ._settings import Settings

_EXPORTS = {"Settings": "_settings", "serve": "_server"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
