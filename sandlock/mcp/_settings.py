"""What a server session runs its calls with: the policy, the workspace root, the
bounds a call may narrow but never widen."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .._errors import PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._auditlog import AuditLog
    from ..policy import Policy

DEFAULT_TIMEOUT = 120.0  # seconds a call may run when the policy sets no timeout
DEFAULT_OUTPUT_CAP = 64 * 1024  # bytes kept of each of stdout and stderr (--max-output)


@dataclass(frozen=True)
class Settings:
    """``policy``: each call's, without ``timeout`` and ``max_output`` (the server
    applies those itself: ``timeout`` and ``output_cap``); ``root``: the directory
    calls run in and whose default workspace they get (a call's cwd must be inside)."""

    policy: Policy
    root: str
    timeout: float = DEFAULT_TIMEOUT
    output_cap: int = DEFAULT_OUTPUT_CAP
    audit: AuditLog | None = None
    quiet: bool = False
    policy_files: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()  # call options the model may not give ([mcp] fixed)

    @classmethod
    def of(cls, policy: Policy, *, audit: AuditLog | None = None, quiet: bool = False,
           policy_files: tuple[str, ...] = (), fixed: tuple[str, ...] = ()) -> Settings:
        if policy.workdir is not None and policy.max_disk is not None:
            raise PolicyError("max_disk", "not with `sandlock mcp --workdir`: its layer is a tmpfs "
                              "that workspace_diff cannot read while the session runs")
        if policy.workdir is not None and policy.cwd is not None:
            raise PolicyError("cwd", "not with `sandlock mcp --workdir`: calls start in the "
                              "workdir (a call's own cwd may name a directory beneath it)")
        root = os.path.realpath(policy.workdir or policy.cwd or os.getcwd())
        # (with a workdir, calls are exec'd in one sandbox that starts there: no cwd)
        return cls(policy.replace(timeout=None, max_output=None, cwd=None), root,
                   policy.timeout or DEFAULT_TIMEOUT,
                   int(policy.max_output) if policy.max_output is not None else DEFAULT_OUTPUT_CAP,
                   audit, quiet, policy_files, fixed)

    def call_cwd(self, asked: str | None) -> str:
        """The directory a call asked for, which must be the root or beneath it
        (relative: to the root). Raises PolicyError naming ``cwd``."""
        if asked is not None:
            self._may_give("cwd")
        if not asked:
            return self.root
        path = os.path.realpath(os.path.join(self.root, asked))
        if path != self.root and not path.startswith(self.root.rstrip("/") + "/"):
            raise PolicyError("cwd", f"{asked!r} is outside the workspace {self.root}: a call "
                              "may only narrow the server's directory")
        if not os.path.isdir(path):
            raise PolicyError("cwd", f"{asked!r} is not a directory of the workspace")
        return path

    def call_timeout(self, asked: float | None) -> float:
        """The server's timeout, or a shorter one the call asked for."""
        if asked is None:
            return self.timeout
        self._may_give("timeout")
        if not asked > 0:
            raise PolicyError("timeout", f"expected a number of seconds above 0, got {asked!r}")
        return min(float(asked), self.timeout)

    def _may_give(self, option: str) -> None:
        if option in self.fixed:
            raise PolicyError(option, "fixed by the server's policy ([mcp] fixed): a call may "
                              "not give it")
