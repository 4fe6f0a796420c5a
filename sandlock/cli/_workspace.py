"""`sandlock workspace list|diff|commit|abort`: the copy-on-write workspaces that runs
kept (docs/workspace.md). Whatever names a run made (longer than PATH_MAX, a
newline, bytes that are not UTF-8), each command answers: one escaped line per
entry, and an error in one line, never a traceback."""

from __future__ import annotations

import os
import sys
import time

from .._errors import EXIT_USAGE, SandlockError, fail
from ..confinement import workspace_store
from ..cow import (
    CONFLICTS,
    KEPT,
    Workspace,
    changes,
    commit,
    escape,
    format_changes,
    human_size,
    oversize,
    shorten,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace

    from ..cow import Change


def main(args: Namespace) -> int:
    root = args.fs_storage or workspace_store(os.environ, os.environ.get("HOME") or os.path.expanduser("~"))
    try:
        if args.action == "list":
            return _list(root)
        workspace = Workspace.open(root, args.id)
        if args.action == "diff":
            return _diff(workspace, args.patch)
        workspace.lock()
        if args.action == "commit":
            return _commit(workspace, args.force, args.allow_autorun_writes)
        workspace.remove()
        print(f"sandlock: workspace {workspace.id} aborted: {escape(workspace.directory)} unchanged",
              file=sys.stderr)
        return 0
    except SandlockError as exc:
        fail(str(exc), exc.exit_code)
    except OSError as exc:
        where = f" ({shorten(escape(str(exc.filename)))})" if exc.filename else ""
        fail(f"workspace {args.action}: {exc.strerror or exc}{where}", 1)
    return EXIT_USAGE  # (fail does not return)


def _list(root: str) -> int:
    found = Workspace.all(root)
    if not found:
        print(f"no workspaces ({escape(root)})", file=sys.stderr)
        return 0
    print(f"{'ID':<24} {'STATE':<12} {'CHANGES':>7}  {'CREATED':<16}  DIRECTORY")
    for workspace in found:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(workspace.created))
        try:
            count = str(len(changes(workspace.upper, workspace.directory)))
        except OSError:  # (its directory gone, a layer that cannot be read: `diff` says why)
            count = "?"
        print(f"{workspace.id:<24} {workspace.state:<12} {count:>7}  {created:<16}  "
              f"{escape(workspace.directory)}")
    return 0


def _diff(workspace: Workspace, patch: bool) -> int:
    found = changes(workspace.upper, workspace.directory)
    if not patch:
        for line in format_changes(found):
            print(line)
        return 0
    from ..cow import print_patch

    print_patch(workspace.upper, workspace.directory, found)
    return 0


def _commit(workspace: Workspace, force: bool, autorun_writes: bool) -> int:
    directory = escape(workspace.directory)
    if workspace.max_disk is not None:
        size = oversize(workspace.upper, workspace.directory, workspace.max_disk)
        if size is not None:
            print(f"sandlock: workspace {workspace.id} not committed: its files add up to "
                  f"{human_size(size)} (a sparse file counts at its full size), more than the "
                  f"run's --max-disk {human_size(workspace.max_disk)} (`sandlock workspace "
                  f"abort {workspace.id}` drops it)", file=sys.stderr)
            return 1
    if not autorun_writes:  # what it would leave for the user's tools, quarantined first
        from ..autorun import check_kept_layer

        notice = check_kept_layer(workspace.directory, workspace.upper)
        if notice:
            print(notice, file=sys.stderr)
    report = commit(workspace.upper, workspace.directory, workspace.since_ns, force=force)
    applied = len(report.applied)
    done = f"committed {applied} change{'s' * (applied != 1)} to {directory}"
    _remark(report.applied, report.left_out)
    if report.error is not None:
        workspace.mark(CONFLICTS if report.conflicts else KEPT)
        print(f"sandlock: workspace {workspace.id}: the commit stopped at {report.error}, after "
              f"it {done}; what it had not applied is kept (`sandlock workspace diff "
              f"{workspace.id}`)", file=sys.stderr)
        return 1
    if report.conflicts:
        workspace.mark(CONFLICTS)
        workspace.unlock()
        print(f"sandlock: {done}; {len(report.conflicts)} not, the directory changed there "
              f"since the run (kept in {workspace.id}; --force applies them):", file=sys.stderr)
        for line in format_changes(list(report.conflicts)):
            print(line, file=sys.stderr)
        return 1
    workspace.remove()
    print(f"sandlock: {done}", file=sys.stderr)
    return 0


def _remark(applied: tuple[Change, ...], left_out: tuple[Change, ...]) -> None:
    """The changes the commit made otherwise than the run did, one line each."""
    for line in format_changes([change for change in applied if change.note] + list(left_out)):
        print(line, file=sys.stderr)
