"""Pipes between sandlock and a command: feed stdin, collect stdout and stderr without
deadlock (Sandbox.run), or pass them on to sandlock's own (the CLI's --max-output);
with a limit, at most that much of each is kept and the rest read and dropped."""

from __future__ import annotations

import os
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._auditlog import AuditLog

STREAMS = ("stdout", "stderr")


class Capture:
    """Owns the pipes between sandlock and a command. ``limit``: bytes kept of each
    output (None: all); ``forward``: write what is kept to sandlock's own stdout and
    stderr as it comes, instead of collecting it."""

    def __init__(self, input: bytes | None, capture_output: bool, *, limit: int | None = None,
                 forward: bool = False) -> None:
        self._input = input
        self._stdin = os.pipe() if input is not None else None
        self._outputs = [os.pipe(), os.pipe()] if capture_output else []
        self._threads: list[threading.Thread] = []
        self._collected: list[list[bytes]] = [[] for _ in self._outputs]
        self._limit = limit
        self._forward = forward
        self.dropped = [0, 0]  # bytes of stdout and stderr read past the limit

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_child_ends()
        if self._stdin and not self._threads:  # never started: nobody will feed it
            _close(self._stdin[1])
        for thread in self._threads:
            thread.join()
        for read_end, _ in self._outputs:
            _close(read_end)

    def child_stdio(self) -> dict[str, int | None]:
        return {
            "stdin": self._stdin[0] if self._stdin else None,
            "stdout": self._outputs[0][1] if self._outputs else None,
            "stderr": self._outputs[1][1] if self._outputs else None,
        }

    def start(self) -> None:
        """Run after the command started: sandlock's copies of the child ends go."""
        self._close_child_ends()
        if self._stdin:
            self._spawn(self._feed, self._stdin[1])
        for index, (read_end, _) in enumerate(self._outputs):
            self._spawn(self._drain, read_end, index)

    def finish(self) -> tuple[bytes | None, bytes | None]:
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        if not self._outputs or self._forward:
            return None, None
        out, err = (b"".join(chunks) for chunks in self._collected)
        return out, err

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def read_alongside(self, fd: int, into: list[bytes]) -> None:
        """Drain ``fd`` as well (a call's result pipe) into ``into``, until finish()."""
        self._spawn(_read_into, fd, into)

    def _feed(self, fd: int) -> None:
        try:
            view = memoryview(self._input or b"")
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            pass  # the command stopped reading: like subprocess, not an error
        finally:
            _close(fd)

    def drop_notices(self, audit: AuditLog | None = None) -> list[str]:
        """What the limit cut, one line per output (for stderr and the exit summary),
        also recorded in ``audit``."""
        notices = []
        for name, dropped in zip(STREAMS, self.dropped):
            if not dropped:
                continue
            limit = self._limit_text()
            reason = f"output limit {limit} reached: dropped {dropped} bytes of {name} (--max-output)"
            if audit is not None:
                audit.limit("max_output", limit, "truncate", reason, stream=name, dropped=dropped)
            notices.append(f"sandlock: {reason}")
        return notices

    def _limit_text(self) -> str:
        from ..limits import Size

        return str(Size(self._limit or 0))

    def _drain(self, fd: int, index: int) -> None:
        room = self._limit if self._limit is not None else -1
        while chunk := os.read(fd, 65536):
            if room >= 0:
                kept, room = chunk[:room], max(room - len(chunk), 0)
                self.dropped[index] += len(chunk) - len(kept)
                chunk = kept
            if chunk:
                self._keep(index, chunk)

    def _keep(self, index: int, chunk: bytes) -> None:
        if not self._forward:
            self._collected[index].append(chunk)
            return
        try:
            view = memoryview(chunk)
            while view:
                view = view[os.write(1 + index, view):]
        except OSError:
            pass  # sandlock's own stdout is gone (a closed pipe): drop, keep draining

    def _close_child_ends(self) -> None:
        if self._stdin:
            self._stdin = (_close(self._stdin[0]), self._stdin[1])
        self._outputs = [(r, _close(w)) for r, w in self._outputs]


def _read_into(fd: int, chunks: list[bytes]) -> None:
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    return None
