"""sandlock: an unprivileged Linux process sandbox centred on network policy.

    from sandlock import Sandbox, Policy
    result = Sandbox(Policy(fs_write=("/tmp/work",), fs_read=("/usr", "/etc"))).run(["ls", "/"])
"""

from ._errors import PolicyError, SandlockError, SetupError
from ._policy import Policy
from ._process import SandboxedProcess, TimeoutExpired
from ._sandbox import Result, Sandbox

__all__ = [
    "Policy",
    "PolicyError",
    "Result",
    "Sandbox",
    "SandboxedProcess",
    "SandlockError",
    "SetupError",
    "TimeoutExpired",
]
