"""The launch path of a run: the keeper (the subreaper that kills and reaps the whole
sandbox) is forked, which forks the command, whose side applies the confinement and
execs; the supervision loop that answers the kernel's notifications; terminal handoff
and job control; output capture; the copy-on-write workspace of a run.

Internal to sandlock (not public API); ``sandlock.Sandbox`` and friends (sandlock.api)
are the public names.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from ._capture import Capture
    from ._child import ChildSpec, exec_argv
    from ._cow import CowRun, WorkspaceOutcome
    from ._inputs import (check_argv, check_pass_fds, check_timeout, child_environment,
                          inherited_ignored_signals)
    from ._process import SandboxedProcess, TimeoutExpired, describe_start_error, spawn, wait_or_kill
    from ._reports import answer
    from ._supervision import Supervision
    from ._terminal import Foreground

# name -> the private module defining it (``module:`` for the module itself); each module
# is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "Capture": "_capture",
    "ChildSpec": "_child",
    "CowRun": "_cow",
    "Foreground": "_terminal",
    "SandboxedProcess": "_process",
    "Supervision": "_supervision",
    "TimeoutExpired": "_process",
    "WorkspaceOutcome": "_cow",
    "answer": "_reports",
    "check_argv": "_inputs",
    "check_pass_fds": "_inputs",
    "check_timeout": "_inputs",
    "child_environment": "_inputs",
    "describe_start_error": "_process",
    "exec_argv": "_child",
    "inherited_ignored_signals": "_inputs",
    "spawn": "_process",
    "wait_or_kill": "_process",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
