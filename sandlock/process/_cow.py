"""One run's copy-on-write workspace (``--workdir``): made before the command starts,
finished after the sandbox is gone: its changes committed to the directory,
discarded (abort), or kept in the store for `sandlock workspace`; a dry run lists
them and discards them. Only a run with a workdir imports this (and ``sandlock.cow``).
"""

from __future__ import annotations

import os

from .._record import record
from ..confinement import SCRATCH, Overlay, workspace_store
from ..cow import CONFLICTS, KEPT, Workspace, WorkspaceError

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from .._auditlog import AuditLog
    from ..autorun import Leftovers
    from ..cow import CommitReport
    from ..policy import Policy
    from ._process import SandboxedProcess


@record
class WorkspaceOutcome:
    """What became of a run's workspace: ``action`` (commit, abort or keep), the
    ``changes`` it made ((kind, path): A added, M modified, D deleted, relative to the
    directory), those not committed because the directory changed there during the
    run (``conflicts``), the ``id`` of the workspace when it was kept, and the special
    files the commit ``left_out``."""

    action: str
    changes: tuple[tuple[str, str], ...]
    conflicts: tuple[tuple[str, str], ...] = ()
    id: str | None = None
    left_out: tuple[tuple[str, str], ...] = ()  # fifos, sockets, devices: never committed


class CowRun:
    """The workspace of one run, in sandlock's process."""

    def __init__(self, policy: Policy, *, dry_run: bool, audit: AuditLog | None) -> None:
        home = os.environ.get("HOME") or os.path.expanduser("~")
        self.policy = policy
        self.dry_run = dry_run
        self.audit = audit
        root = policy.fs_storage or workspace_store(os.environ, home)
        _check_directory(policy.workdir, root)
        self.max_disk = None if policy.max_disk is None else int(policy.max_disk)
        self.workspace = Workspace.create(root, policy.workdir, self.max_disk)
        self.layer_fd = -1  # (with --max-disk: the tmpfs the command wrote to)
        self.outcome: WorkspaceOutcome | None = None
        self.disk_limit_hit = False  # (for the process's limits_hit: --status-fd)
        self._succeeded = False  # (the run's, once finished)
        self._leftovers: Leftovers | None = None  # (the end check, run in the layer)
        self._layer_lost: Exception | None = None  # (a tmpfs layer that could not be kept)

    @property
    def overlay(self) -> Overlay:
        return Overlay(self.workspace.directory, self.workspace.layer, self.max_disk)

    def close(self) -> None:
        """The command could not start: nothing to keep."""
        self._close_layer()
        self.workspace.remove()

    def follow(self, process: SandboxedProcess, leftovers: Leftovers | None = None) -> None:
        """Finish once ``process`` (the started command) has ended; ``leftovers``: the
        run's end check, which this runs in the layer before its changes are applied
        or kept (and the check of the host leaves the workdir to it)."""
        self.layer_fd = process.workspace_layer
        self._leftovers = leftovers
        if leftovers is not None:
            leftovers.layered = self.workspace.directory

        def finish() -> str | None:
            status = process.returncode if process.block_status is None else process.block_status
            notice = self.finish(status)
            process.workspace = self.outcome
            if self.disk_limit_hit:
                process.limits_hit.append(("max_disk", "deny"))
            return notice

        process.on_exit(finish)

    def finish(self, exit_code: int) -> str | None:
        """Once the command has ended: commit, abort or keep, as the policy says for
        this exit code; returns the notice to show (None: nothing to say).

        The keeper reports the end once every process of the sandbox is gone, while the
        kernel may still be tearing its mount namespace down: nothing can write through
        the overlay any more, and its unmount writes nothing to the layer, so the
        layer is read and changed at once (not ~3.5 ms later, when the keeper is reaped)."""
        full = self._filled()
        action = self._action(exit_code)
        try:
            if _empty(self._upper):  # nothing written: the usual case costs no walk
                self.workspace.remove()
                self.outcome = WorkspaceOutcome(action, ())
                notice = None
            else:
                quarantined = self._check_leftovers(action)
                notice = "\n".join(filter(None, (quarantined, getattr(self, f"_{action}")())))
        except Exception as exc:  # noqa: BLE001 - one line, never a traceback: what is left is kept
            notice = self._keep_after(action, exc)
        finally:
            self._close_layer()
            self.workspace.unlock()
        if self.audit is not None:
            outcome = self.outcome
            self.audit.write({"event": "workspace", "action": outcome.action, "dir": self.workspace.directory,
                              "changes": len(outcome.changes), "conflicts": len(outcome.conflicts),
                              "left_out": len(outcome.left_out), "id": outcome.id,
                              "dry_run": self.dry_run})
        return "\n".join(filter(None, (full, notice))) or None

    def _check_leftovers(self, action: str) -> str | None:
        """What the run left for the user's tools to run, quarantined in the layer
        before it reaches the directory (an aborted layer reaches nothing)."""
        if self._leftovers is None or action == "abort":
            return None
        return self._leftovers.check_layer(self.workspace.directory, self._upper)

    def _action(self, exit_code: int) -> str:
        self._succeeded = exit_code == 0
        if self.dry_run:
            return "abort"
        return self.policy.on_exit if self._succeeded else self.policy.on_error

    @property
    def _upper(self) -> str:
        if self.layer_fd >= 0:
            return f"/proc/self/fd/{self.layer_fd}/upper"
        return self.workspace.upper

    def _commit(self) -> str | None:
        from ..cow import commit, oversize  # (loaded once there is something to apply)

        directory = self.workspace.directory
        if self.max_disk is not None:
            size = oversize(self._upper, directory, self.max_disk)
            if size is not None:
                return self._keep(over=size)
        report = commit(self._upper, directory, self.workspace.since_ns)
        applied, conflicts = _pairs(report.applied), _pairs(report.conflicts)
        ident, remarks = self.workspace.id, _remarks(report)
        if not report.conflicts and report.error is None:
            self.workspace.remove()
            self.outcome = WorkspaceOutcome("commit", applied, left_out=_pairs(report.left_out))
            if not applied and not remarks:
                return None
            return (f"sandlock: workspace: committed {_count(applied)} to {_escaped(directory)}"
                    f"{remarks}")
        self._keep_layer()
        self.workspace.mark(CONFLICTS if conflicts else KEPT)
        self.outcome = WorkspaceOutcome("commit", applied + conflicts, conflicts, ident,
                                        _pairs(report.left_out))
        if report.error is not None:
            return (f"sandlock: workspace: the commit to {_escaped(directory)} stopped at "
                    f"{report.error}, after {_count(applied)}{remarks}; what it had not applied "
                    f"is kept as {ident} (`sandlock workspace diff {ident}`)")
        paths = ", ".join(_shown(path) for _, path in conflicts[:5]) + (", ..." if len(conflicts) > 5 else "")
        return (f"sandlock: workspace: {len(conflicts)} of {len(applied) + len(conflicts)} "
                f"changes not committed, {_escaped(directory)} changed there during the run: "
                f"{paths}{remarks}; the run's versions are kept in workspace {ident} "
                f"(`sandlock workspace diff {ident}`, `commit --force` to apply them)")

    def _abort(self) -> str | None:
        from ..cow import changes, format_changes

        found = changes(self._upper, self.workspace.directory)
        self.outcome = WorkspaceOutcome("abort", _pairs(found))
        self.workspace.remove()
        directory = _escaped(self.workspace.directory)
        if self.dry_run:
            lines = format_changes(found)
            head = f"sandlock: dry run: {_count(found)} to {directory}, discarded"
            return "\n".join((head + (":" if lines else ""), *lines))
        if not found:
            return None
        decided = "--on-exit" if self._succeeded else "--on-error"
        return f"sandlock: workspace: discarded {_count(found)} to {directory} ({decided} abort)"

    def _keep(self, over: int | None = None) -> str | None:
        """Kept as asked, or (``over``: the apparent size of the run's files) because
        they add up to more than --max-disk."""
        from ..cow import changes, human_size

        found = changes(self._upper, self.workspace.directory)
        self._keep_layer()
        self.workspace.mark(KEPT)
        ident = self.workspace.id
        self.outcome = WorkspaceOutcome("keep", _pairs(found), id=ident)
        what = f"kept {_count(found)}"
        if over is not None:
            reason = (f"the run's files add up to {human_size(over)} (a sparse file counts at "
                      f"its full size), more than --max-disk {self.policy.max_disk}")
            self.disk_limit_hit = True
            if self.audit is not None:
                self.audit.limit("max_disk", str(self.policy.max_disk), "deny", f"not committed: {reason}")
            what = f"not committed: {reason}; {what}"
        then = f"`commit {ident}`, " if over is None else ""
        return (f"sandlock: workspace: {what} to {_escaped(self.workspace.directory)} as {ident} "
                f"(`sandlock workspace diff {ident}`, {then}`abort {ident}`)")

    def _keep_after(self, action: str, exc: Exception) -> str:
        """An action that failed half-way: what it had not done is kept (a --max-disk
        layer that cannot be copied to disk is lost with its tmpfs: said so)."""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        where = f" at {_shown(str(exc.filename))}" if getattr(exc, "filename", None) else ""
        ident = self.workspace.id
        self.outcome = WorkspaceOutcome(action, (), id=ident)
        if self._layer_lost is None:
            try:
                self._keep_layer()
            except Exception:  # noqa: BLE001, S110 - said below
                pass
        if self._layer_lost is not None:
            self.outcome = WorkspaceOutcome(action, ())
            try:
                self.workspace.remove()
            except OSError:
                pass
            return (f"sandlock: workspace: {action} failed{where} ({reason}), and what it had "
                    f"not done could not be kept ({self._layer_lost}): it is lost")
        try:
            self.workspace.mark(KEPT)
        except OSError:
            pass  # (then listed as interrupted: still kept)
        return (f"sandlock: workspace: {action} failed{where} ({reason}); what it had not "
                f"done is kept as {ident} (`sandlock workspace diff {ident}`)")

    def _keep_layer(self) -> None:
        """What is kept must outlive this process: a tmpfs layer is copied to disk."""
        if self.layer_fd < 0:
            return
        from ..cow import copy_tree

        try:
            copy_tree(self._upper, self.workspace.upper)
        except Exception as exc:
            self._layer_lost = exc
            raise

    def _filled(self) -> str | None:
        """The notice of a --max-disk that was reached (writes then failed with ENOSPC)."""
        if self.layer_fd < 0:
            return None
        stats = os.fstatvfs(self.layer_fd)
        if stats.f_bavail * stats.f_frsize >= 64 * 1024:
            return None
        reason = (f"disk limit {self.policy.max_disk} reached: the workspace's writes past "
                  "it failed with ENOSPC")
        self.disk_limit_hit = True
        if self.audit is not None:
            self.audit.limit("max_disk", str(self.policy.max_disk), "deny", reason)
        return f"sandlock: {reason}"

    def _close_layer(self) -> None:
        if self.layer_fd >= 0:
            os.close(self.layer_fd)
            self.layer_fd = -1


def _check_directory(directory: str, root: str) -> None:
    """DIR cannot hold the store its own writes go to, nor be a scratch directory (each
    run has its own, empty, mounted over it)."""
    real_root = os.path.realpath(root)
    if real_root == directory or real_root.startswith(directory.rstrip("/") + "/"):
        raise WorkspaceError(f"--workdir {directory}: it contains the workspace store {root} "
                             "(XDG_STATE_HOME or --fs-storage moves the store)")
    if directory.startswith(real_root.rstrip("/") + "/"):  # (the store is denied to the command)
        raise WorkspaceError(f"--workdir {directory}: it is inside the workspace store {root}")
    if directory in SCRATCH:
        raise WorkspaceError(f"--workdir {directory}: a scratch directory is private to each "
                             "run already (choose a directory beneath it, or a project)")


def _escaped(text: str) -> str:
    from ..cow import escape  # (the walk's modules: loaded once a run has changes)

    return escape(text)


def _shown(text: str) -> str:
    """A path of a change in a notice: escaped, and cut if it is very long."""
    from ..cow import escape, shorten

    return shorten(escape(text))


def _count(found: object) -> str:
    count = len(found)  # type: ignore[arg-type]
    return f"{count} change{'s' * (count != 1)}"


def _remarks(report: CommitReport) -> str:
    """What the commit did otherwise than the run: set-id bits dropped, special
    files left out ("" when nothing)."""
    from ..cow import DROPPED

    remarks = []
    dropped = [change.path for change in report.applied if change.note == DROPPED]
    if dropped:
        remarks.append(f"{DROPPED} from {_some(dropped)}")
    if report.left_out:
        remarks.append(f"not committed, as special files: {_some([c.path for c in report.left_out])}")
    return "".join(f"; {remark}" for remark in remarks)


def _some(paths: list[str]) -> str:
    return ", ".join(_shown(path) for path in paths[:3]) + (", ..." if len(paths) > 3 else "")


def _pairs(found: object) -> tuple[tuple[str, str], ...]:
    return tuple((change.kind, change.path) for change in found)  # type: ignore[attr-defined]


def _empty(directory: str) -> bool:
    with os.scandir(directory) as listing:
        return next(listing, None) is None
