"""One file call, from notification to answer: materialize (``_read``: the caller's
arguments, once; ``_resolve``: the file they name, as sandlock's own descriptor) ->
verdict (``_grants`` + ``_verdict``: what the sandbox's grants give that file) ->
execute (``_execute``: done by sandlock on that very file) -> the caller's answer.
A denial is said on stderr (once per file and call) and recorded in the audit log."""

from __future__ import annotations

import errno
import os
import stat
import sys
from _thread import allocate_lock

from ..kernel import Gone, landlock, native_arch, seccomp
from ._calls import FileCall
from ._execute import perform
from ._grants import Grants
from ._read import Reader, read_call
from ._resolve import open_root, resolve
from ._verdict import Verdict, judge, needs_write

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._auditlog import AuditLog
    from ..kernel import Listener, Notification

NOTICES = 20  # distinct denials said on stderr; the rest are counted, and audited


class FileCalls:
    """The answers to a run's file calls (kernel.seccomp.FILE_CALLS)."""

    def __init__(self, grants: dict[tuple[int, int], int], reanchored: tuple[tuple[str, int], ...],
                 audit: AuditLog | None, quiet: bool) -> None:
        self._grants = Grants(grants, reanchored)
        numbers = native_arch().numbers
        self._names = {numbers[name]: name for name in seccomp.FILE_CALLS}
        self._audit, self._quiet = audit, quiet
        self._lock = allocate_lock()
        self._said: set[tuple[str, str]] = set()
        self.denied = 0

    def handles(self, number: int) -> bool:
        return number in self._names

    def handle(self, listener: Listener, notification: Notification) -> None:
        tid = notification.pid
        held: list[int] = []
        try:
            call = self._read(notification, held)
            root = open_root(tid)
            held.append(root)
            file = resolve(tid, root, call.target)
            held.append(file)
            listener.check_valid(notification.id)  # every read above was of the caller
            verdict = self._judge(call, file, root)
            if not verdict.allowed:
                self._deny(tid, call, file, verdict)
                listener.reply(notification.id, error=verdict.error)
                return
            listener.reply(notification.id, perform(call.operation, file, call.target.dirfd))
        except Gone:
            pass  # the caller is gone: nothing was done for it
        except OSError as exc:
            listener.reply(notification.id, error=exc.errno or errno.EACCES)
        except Exception as exc:  # a bug of ours: fail closed, say so, go on serving
            print(f"sandlock: internal error judging a file call: {exc!r}", file=sys.stderr, flush=True)
            listener.reply(notification.id, error=errno.EACCES)
        finally:
            for fd in held:
                os.close(fd)

    def _read(self, notification: Notification, held: list[int]) -> FileCall:
        reader = Reader(notification.pid, notification.args)
        try:
            return read_call(self._names[notification.nr], reader)
        finally:
            held.extend(reader.taken)

    def _judge(self, call: FileCall, file: int, root: int) -> Verdict:
        wanted = landlock.FS_WRITE_FILE if needs_write(call.operation) else landlock.FS_READ_FILE
        info = os.fstat(file)
        granted = (needs_write(call.operation) and _opened_for_writing(call, info)) or \
            self._grants.access(file, root, wanted) & wanted == wanted
        return judge(call.operation, info.st_mode, granted)

    def _deny(self, tid: int, call: FileCall, file: int, verdict: Verdict) -> None:
        path = _shown(file)
        with self._lock:
            self.denied += 1
            first = (call.syscall, path) not in self._said and len(self._said) < NOTICES
            if first:
                self._said.add((call.syscall, path))
        if self._audit is not None:
            self._audit.write({"pid": tid, "syscall": call.syscall, "path": path,
                               "verdict": "deny", "reason": verdict.reason})
        if first and not self._quiet:
            try:
                print(f"sandlock: denied {call.syscall} of {path} ({verdict.reason})",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass  # stderr closed or full: the verdict stands

    def summary(self) -> str | None:
        if not self.denied:
            return None
        plural = "s" if self.denied != 1 else ""
        return f"sandlock: {self.denied} file operation{plural} denied (metadata changes, watches)"


def _opened_for_writing(call: FileCall, info: os.stat_result) -> bool:
    """A regular file the caller holds open for writing (fchmod, futimens after a
    write): Landlock judged the open, and a file it may write it may change."""
    if call.target.path is not None or call.target.dirfd < 0 or not stat.S_ISREG(info.st_mode):
        return False
    import fcntl

    return fcntl.fcntl(call.target.dirfd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def _shown(file: int) -> str:
    """The file's path for a notice: control characters escaped, so that a name the
    command made cannot forge a line."""
    try:
        path = os.readlink(f"/proc/self/fd/{file}".encode())
    except OSError:
        return "?"
    text = path.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
