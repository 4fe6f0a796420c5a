"""sandlock: an unprivileged Linux process sandbox centred on network policy.

    from sandlock import Sandbox, Policy
    result = Sandbox(Policy(fs_writable=["/tmp/work"], fs_readable=["/usr", "/etc"])).run(["ls", "/"])

The public names load from the internal subpackages (docs/architecture.md) on first
use: the proxy process imports ``sandlock.proxy`` and ``sandlock.ca`` without paying for the sandbox itself.
"""

from __future__ import annotations

import sys

from ._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the CLI's start-up path
if TYPE_CHECKING:
    from ._errors import PolicyError, SandlockError, SetupError
    from .policy import Policy
    from .process import (
        CallError,
        CallResult,
        Result,
        Sandbox,
        SandboxedProcess,
        TimeoutExpired,
        confine,
    )

_EXPORTS = {
    "CallError": "process",
    "CallResult": "process",
    "PolicyError": "_errors",
    "SandlockError": "_errors",
    "SetupError": "_errors",
    "Policy": "policy",
    "Result": "process",
    "Sandbox": "process",
    "SandboxedProcess": "process",
    "TimeoutExpired": "process",
    # Its own module, not "process": the names of one module are resolved together, and
    # `from sandlock import Sandbox` must not load what confine() alone needs.
    "confine": "process._confine_self:confine",
}

__all__ = [
    "CallError",
    "CallResult",
    "Policy",
    "PolicyError",
    "Result",
    "Sandbox",
    "SandboxedProcess",
    "SandlockError",
    "SetupError",
    "TimeoutExpired",
    "confine",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)


class _Package(type(sys)):
    """``sandlock.confine`` is the public function, and ``confine`` is also the name of
    an internal subpackage (sandlock/confine/): the import system sets the parent's
    attribute to a subpackage when it first imports it, which would hide the function
    from then on. The function keeps the name; the subpackage is reached by its import
    path (``from .confine import ...``), never as an attribute of this package."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "confine" and isinstance(value, type(sys)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
