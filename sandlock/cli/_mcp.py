"""`sandlock mcp`: the policy and options read as `run` reads them, the files' [mcp]
sections (a profile per tool, the call options fixed), each tool's policy checked by
one confined run before the server answers anything, then the server (sandlock.mcp)."""

from __future__ import annotations

import sys

from .._errors import EXIT_SETUP, PolicyError, SandlockError, fail, visible
from ..kernel import PR_SET_DUMPABLE, prctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

    from ..mcp import Settings
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
    profiles, fixed = _section(args)
    try:
        settings = server.Settings.of(policy, audit=audit, quiet=args.quiet,
                                      policy_files=policy_files, fixed=fixed)
        tools = {tool: _tool_settings(args, settings, tool, name, server.Settings)
                 for tool, name in profiles.items()}
    except PolicyError as exc:
        from ._main import _option_error

        fail(_option_error(exc))
    for checked in (settings, *tools.values()):
        _check(checked)
    prctl(PR_SET_DUMPABLE, 0)  # the supervisors live here: not readable through /proc
    if not args.quiet:
        print(f"sandlock: mcp: serving on stdio; calls run in {visible(settings.root)}",
              file=sys.stderr)
    return server.serve(settings, tools)


def _section(args: Namespace) -> tuple[dict[str, str], tuple[str, ...]]:
    """The [mcp] sections of the files given, in order: a later file's profile for a
    tool replaces an earlier one's; fixed options add up (fixing more only narrows)."""
    from ._main import _load_source

    profiles: dict[str, str] = {}
    fixed: list[str] = []
    for kind, value in args.sources:
        try:
            section = _load_source(kind, value).mcp
        except SandlockError as exc:
            fail(str(exc), exc.exit_code)
        if section is not None:
            profiles.update(section.profiles)
            fixed += section.fixed
    return profiles, tuple(dict.fromkeys(fixed))


def _tool_settings(args: Namespace, server: Settings, tool: str, profile: str,
                   settings: type[Settings]) -> Settings:
    """``tool``'s calls: the profile's policy, the command line's options on top (as
    for the server's own), in the server's directory, with the server's fixed options."""
    from ..policyfiles import from_options, load_policy_file, merge, profile_path
    from ._main import _options_of

    try:
        path = profile_path(profile)
        policy = merge([load_policy_file(path).settings, from_options(_options_of(args))])
    except SandlockError as exc:
        fail(f"[mcp] {tool} = {profile!r}: {exc}", exc.exit_code)
    if server.policy.workdir is not None:
        fail(f"[mcp] {tool} = {profile!r}: a profile per tool is not for `sandlock mcp "
             "--workdir`, whose calls share the session's one sandbox")
    if policy.workdir is not None:
        fail(f"[mcp] {tool} = {profile!r}: the profile sets a workdir: the server's "
             "--workdir is the one")
    return settings.of(policy.replace(cwd=server.root), audit=server.audit, quiet=server.quiet,
                       policy_files=(path,), fixed=server.fixed)


def _check(settings: Settings) -> None:
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
