"""Resource limits without cgroups: what a sandbox may consume (memory, processes,
CPU, open files, file size, output), their values, and the mechanisms that hold them.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._cpu import CpuThrottle
    from ._freeze import freeze, thaw
    from ._kernel import KernelLimits, kernel_limits, limit_data, relimit_data
    from ._memory import MemoryWatch
    from ._processes import ProcessGate
    from ._sockets import probe as probe_sockets
    from ._updates import UPDATABLE, checked_updates
    from ._values import Size, format_cpu_list, parse_cpu_list, parse_memory_size, parse_size

# Seconds between the memory watch's samples: here, where sandlock's side reads it
# without loading the watch.
MEMORY_INTERVAL = 0.01

# name -> the private module defining it; each module is imported on first use
_EXPORTS = {
    "CpuThrottle": "_cpu",
    "freeze": "_freeze",
    "thaw": "_freeze",
    "KernelLimits": "_kernel",
    "ProcessGate": "_processes",
    "probe_sockets": "_sockets",
    "MemoryWatch": "_memory",
    "kernel_limits": "_kernel",
    "limit_data": "_kernel",
    "relimit_data": "_kernel",
    "checked_updates": "_updates",
    "UPDATABLE": "_updates",
    "Size": "_values",
    "format_cpu_list": "_values",
    "parse_cpu_list": "_values",
    "parse_memory_size": "_values",
    "parse_size": "_values",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
