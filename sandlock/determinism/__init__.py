"""Reproducible runs (upstream Sandlock's deterministic execution): the supervisor's
answers to the realtime clocks (--time-start), to getrandom (--random-seed) and to
directory listings (--deterministic-dirs); the vDSO made to enter the kernel for
them; the seeded stream behind getrandom and the random devices. Only a run with one
of those options imports it (docs/usage.md, "Deterministic execution").

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._feed import feed_random_devices
    from ._stream import SeededStream
    from ._supervisor import Determinism

_EXPORTS = {
    "Determinism": "_supervisor",
    "SeededStream": "_stream",
    "feed_random_devices": "_feed",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
