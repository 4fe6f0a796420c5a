"""`sandlock mcp`: the policy and options read as `run` reads them, checked by one
confined run before the server answers anything, then the server (sandlock.mcp)."""

from __future__ import annotations

import sys

from .._errors import EXIT_SETUP, SandlockError, fail, visible
from ..kernel import PR_SET_DUMPABLE, prctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

    from ..policy import Policy


def main(args: Namespace, policy: Policy, policy_files: tuple[str, ...]) -> int:
    try:
        import mcp  # noqa: F401  (the optional extra)
    except ImportError:
        fail("mcp: the MCP SDK is not installed: pip install 'sandlock[mcp]'", EXIT_SETUP)
    from .. import mcp as server

    audit = None
    if args.audit is not None:
        from .._auditlog import AuditLog

        try:
            audit = AuditLog(args.audit)
        except SandlockError as exc:
            fail(f"--audit: {exc}")
    from .._errors import PolicyError
    from ._main import _option_error

    try:
        settings = server.Settings.of(policy, audit=audit, quiet=args.quiet, policy_files=policy_files)
    except PolicyError as exc:
        fail(_option_error(exc))
    _check(settings)
    prctl(PR_SET_DUMPABLE, 0)  # the supervisors live here: not readable through /proc
    if not args.quiet:
        print(f"sandlock: mcp: serving on stdio; calls run in {visible(settings.root)}",
              file=sys.stderr)
    return server.serve(settings)


def _check(settings: object) -> None:
    """A bad policy or a workspace that cannot be (the home directory) fails now, in
    one line, not at the model's first call."""
    from ..api import Sandbox

    try:
        result = Sandbox(settings.policy.replace(cwd=settings.root), quiet=True).run(["true"], timeout=30)
    except SandlockError as exc:
        fail(str(exc), exc.exit_code)
    if result.exit_code != 0:
        why = result.stderr.decode("utf-8", "replace").strip().splitlines()
        fail(f"mcp: a confined `true` failed under this policy (exit {result.exit_code})"
             + (f": {why[0]}" if why else ""), EXIT_SETUP)
