"""``--workdir``: the session's copy-on-write layer. One long-lived sandbox holds it
(its overlay lives in that sandbox's mount namespace), each run_command is exec'd in
it, and ``workspace_commit`` / ``workspace_abort`` end it (the next call starts a new
one). The calls take turns: the sandbox has one audit log, and one call at a time is
what makes the records it gains during a call that call's (docs/mcp.md).

Its end: ``on_exit`` commit (the block ended normally: workspace_commit), ``on_error``
keep (workspace_abort removes what was kept; a session that ends without either keeps
the layer for ``sandlock workspace``). Its store is the session's own directory, so
that the running workspace is found without guessing."""

from __future__ import annotations

import os
import shlex
import tempfile
import threading

from .._errors import SandlockError
from ..api import Sandbox
from ..confinement import workspace_store
from ..cow import Workspace, changes, escape, format_changes
from ._command import AuditReader, Handle, Outcome, collect, shell_line
from ._python import PythonWorker

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..api._handles import LiveProcess
    from ._settings import Settings


def session_storage() -> str:
    """A store of the session's own, beside sandlock's workspace store (mode 0700)."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    parent = os.path.join(os.path.dirname(workspace_store(os.environ, home)), "mcp")
    os.makedirs(parent, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(prefix="session-", dir=parent)


class SessionWorkspace:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.storage = session_storage()
        self._policy = settings.policy.replace(on_exit="commit", on_error="keep", fs_storage=self.storage)
        self._turn = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None
        self._records: AuditReader | None = None
        self._python = PythonWorker(self._exec_worker, settings.output_cap)

    # --- calls ---------------------------------------------------------------------------

    def run(self, command: str, cwd: str, timeout: float, handle: Handle) -> Outcome:
        try:
            with self._turn:
                if handle.cancelled:
                    return Outcome(137, b"", b"", cancelled=True)
                sandbox, records = self._running()
                records.read()  # what came between calls (a background process): not this call's
                argv = shell_line(command, cwd, self.settings.root)  # (the sandbox starts in DIR)

                def start(stdio: dict) -> LiveProcess:
                    return sandbox.exec(argv, **stdio)

                outcome = collect(start, _kill_and_wait, timeout, self.settings.output_cap, handle)
                outcome.records = records.read()
                return outcome
        finally:
            handle.finished.set()

    def python(self, code: str, timeout: float, handle: Handle) -> Outcome:
        """run_python in the session's sandbox: its writes go to the layer too."""
        try:
            with self._turn:
                if handle.cancelled:
                    return Outcome(137, b"", b"", cancelled=True)
                _, records = self._running()
                records.read()
                outcome = self._python.run(code, timeout, handle)
                outcome.records = records.read()
                return outcome
        finally:
            handle.finished.set()

    def _exec_worker(self, argv: list[str], stdin: int, replies: int) -> LiveProcess:
        return self._sandbox.exec(argv, stdin=stdin, pass_fds=(replies,))

    def diff(self) -> list[str]:
        """What the session's calls changed so far, one line each (A/M/D, size, path)."""
        with self._turn:
            if self._sandbox is None:
                return []
            running = Workspace.all(self.storage)
            return format_changes(changes(running[0].upper, running[0].directory)) if running else []

    def commit(self) -> tuple[str, ...]:
        """Apply the layer to the workdir: the lines that say what happened."""
        with self._turn:
            if self._sandbox is None:
                return ("nothing to commit",)
            outcome = self._end(failed=False)
            if outcome is None:
                return ("nothing to commit",)
            said = [f"committed {len(outcome.changes)} change(s) to {escape(self.settings.root)}"
                    if outcome.action == "commit" else
                    f"not committed: kept as {outcome.id} in {escape(self.storage)}"]
            said += [f"{kind} {escape(path)}" for kind, path in outcome.changes]
            if outcome.conflicts:
                said.append(f"{len(outcome.conflicts)} change(s) left aside: the directory changed "
                            f"there meanwhile (kept as {outcome.id}: `sandlock workspace --fs-storage "
                            f"{shlex.quote(self.storage)} diff --patch {outcome.id}`)")
            return tuple(said)

    def abort(self) -> tuple[str, ...]:
        """Throw the layer away: the workdir stays as it was."""
        with self._turn:
            if self._sandbox is None:
                return ("nothing to discard",)
            outcome = self._end(failed=True)
            if outcome is None or outcome.id is None:
                return ("nothing to discard",)
            kept = Workspace.open(self.storage, outcome.id)
            kept.lock()
            kept.remove()
            return (f"discarded {len(outcome.changes)} change(s): {escape(self.settings.root)} unchanged",)

    def close(self) -> str | None:
        """The session ends: a layer neither committed nor aborted is kept; what to say."""
        with self._turn:
            outcome = self._end(failed=True) if self._sandbox is not None else None
            if outcome is not None and outcome.id is not None:
                store = shlex.quote(self.storage)
                return (f"sandlock: mcp: the session's {len(outcome.changes)} change(s) to "
                        f"{escape(self.settings.root)} are kept as {outcome.id} (`sandlock workspace "
                        f"--fs-storage {store} diff {outcome.id}`, `commit`, `abort`)")
            try:
                os.rmdir(self.storage)
            except OSError:
                pass
            return None

    # --- the sandbox ---------------------------------------------------------------------

    def _running(self) -> tuple[Sandbox, AuditReader]:
        if self._sandbox is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="sandlock-mcp-")
            audit = os.path.join(self._scratch.name, "audit.jsonl")
            self._records = AuditReader(audit)
            sandbox = Sandbox(self._policy, audit=audit, quiet=self.settings.quiet)
            sandbox.policy_files = self.settings.policy_files
            try:
                sandbox.__enter__()
            except SandlockError:
                self._forget()
                raise
            self._sandbox = sandbox
        return self._sandbox, self._records

    def _end(self, *, failed: bool) -> object:
        self._python.stop()  # (its state goes with the sandbox)
        sandbox, self._sandbox = self._sandbox, None
        sandbox.__exit__(*((SandlockError, SandlockError("ended"), None) if failed else (None, None, None)))
        self._forget()
        return sandbox.workspace

    def _forget(self) -> None:
        if self._records is not None:
            self._records.close()
        if self._scratch is not None:
            self._scratch.cleanup()
        self._records = self._scratch = None


def _kill_and_wait(process: LiveProcess) -> None:
    process.kill()
    process.wait()
