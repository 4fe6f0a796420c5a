"""`sandlock workspace list|diff|commit|abort`: the copy-on-write workspaces that runs
kept (docs/workspace.md)."""

from __future__ import annotations

import os
import sys
import time

from .._errors import EXIT_USAGE, SandlockError, fail
from ..confinement import workspace_store
from ..cow import CONFLICTS, Workspace, changes, commit, format_changes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace


def main(args: Namespace) -> int:
    root = workspace_store(os.environ, os.environ.get("HOME") or os.path.expanduser("~"))
    try:
        if args.action == "list":
            return _list(root)
        workspace = Workspace.open(root, args.id)
        if args.action == "diff":
            return _diff(workspace, args.patch)
        workspace.lock()
        if args.action == "commit":
            return _commit(workspace, args.force)
        workspace.remove()
        print(f"sandlock: workspace {workspace.id} aborted: {workspace.directory} unchanged",
              file=sys.stderr)
        return 0
    except SandlockError as exc:
        fail(str(exc), exc.exit_code)
    return EXIT_USAGE  # (fail does not return)


def _list(root: str) -> int:
    found = Workspace.all(root)
    if not found:
        print(f"no workspaces ({root})", file=sys.stderr)
        return 0
    print(f"{'ID':<24} {'STATE':<12} {'CHANGES':>7}  {'CREATED':<16}  DIRECTORY")
    for workspace in found:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(workspace.created))
        count = len(changes(workspace.upper, workspace.directory))
        print(f"{workspace.id:<24} {workspace.state:<12} {count:>7}  {created:<16}  "
              f"{workspace.directory}")
    return 0


def _diff(workspace: Workspace, patch: bool) -> int:
    found = changes(workspace.upper, workspace.directory)
    if not patch:
        for line in format_changes(found):
            print(line)
        return 0
    sys.stdout.flush()
    import subprocess

    for change in found:
        if change.path.endswith("/"):
            continue  # a directory's files have lines of their own
        # An added file comes from /dev/null, a deleted one goes to it (as git and
        # patch(1) write them): named a/PATH, patch would look for a file to change.
        before = os.devnull if change.kind == "A" else os.path.join(workspace.directory, change.path)
        after = os.devnull if change.kind == "D" else os.path.join(workspace.upper, change.path)
        subprocess.run(["diff", "-uN",
                        "--label", before if change.kind == "A" else f"a/{change.path}",
                        "--label", after if change.kind == "D" else f"b/{change.path}",
                        before, after], check=False)
    return 0


def _commit(workspace: Workspace, force: bool) -> int:
    report = commit(workspace.upper, workspace.directory, workspace.since_ns, force=force)
    applied = len(report.applied)
    if report.conflicts:
        workspace.mark(CONFLICTS)
        workspace.unlock()
        print(f"sandlock: committed {applied} change{'s' * (applied != 1)} to "
              f"{workspace.directory}; {len(report.conflicts)} not, the directory changed there "
              f"since the run (kept in {workspace.id}; --force applies them):", file=sys.stderr)
        for line in format_changes(list(report.conflicts)):
            print(line, file=sys.stderr)
        return 1
    workspace.remove()
    print(f"sandlock: committed {applied} change{'s' * (applied != 1)} to "
          f"{workspace.directory}", file=sys.stderr)
    return 0
