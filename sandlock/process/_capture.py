"""Pipes between sandlock and a command: feed stdin, collect stdout and stderr without
deadlock (Sandbox.run), or pass them on to sandlock's own (the CLI's --max-output);
with a limit, at most that much of each is kept and the rest read and dropped."""

from __future__ import annotations

import os
import select
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._auditlog import AuditLog

STREAMS = ("stdout", "stderr")
_POLL_MS = 100  # how often the pump looks whether it was told to give up (finish's grace)
_HERE_MS = 50  # pump_here: how often it looks whether the command ended (its grace starts)
_PIPE_CHUNK = 65536


class Capture:
    """Owns the pipes between sandlock and a command. ``limit``: bytes kept of each
    output (None: all); ``forward``: write what is kept to sandlock's own stdout and
    stderr as it comes, instead of collecting it; ``extra``: a further read end (a
    call's result pipe), owned from now on, collected whole into ``extra_data``.

    One thread pumps them all (feeds stdin, drains the outputs), so a capture costs
    one thread start, not one per pipe."""

    def __init__(self, input: bytes | None, capture_output: bool, *, limit: int | None = None,
                 forward: bool = False, extra: int | None = None) -> None:
        self._input = input
        self._stdin = os.pipe() if input is not None else None
        self._outputs = [os.pipe(), os.pipe()] if capture_output else []
        self._extra = extra
        self._thread: threading.Thread | None = None
        self._collected: list[list[bytes]] = [[] for _ in range(3)]  # stdout, stderr, extra
        self._room = [-1 if limit is None else limit] * 2
        self._limit = limit
        self._forward = forward
        self._abandon_at: float | None = None
        self._pumping: tuple[dict[int, int], select.poll, _Feed | None] | None = None
        self.dropped = [0, 0]  # bytes of stdout and stderr read past the limit

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_child_ends()
        if self._thread is not None:
            self._thread.join()
        elif self._pumping is not None:  # pumped here (pump_here): what it left open
            self._close_readers()
        else:  # never started: nothing will read or feed them
            if self._stdin:
                _close(self._stdin[1])
            for read_end, _ in self._outputs:
                _close(read_end)
            _close(self._extra)

    def child_stdio(self) -> dict[str, int | None]:
        return {
            "stdin": self._stdin[0] if self._stdin else None,
            "stdout": self._outputs[0][1] if self._outputs else None,
            "stderr": self._outputs[1][1] if self._outputs else None,
        }

    def start(self) -> None:
        """Run after the command started: sandlock's copies of the child ends go."""
        self._close_child_ends()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def finish(self, grace: float | None = None) -> tuple[bytes | None, bytes | None]:
        """What was collected, once every pipe is at its end; with ``grace``, at most
        that many more seconds (processes that outlive the command may hold its
        output open: what they write later is not collected)."""
        if self._thread is not None:
            if grace is not None:
                self._abandon_at = time.monotonic() + grace
            self._thread.join()
        if not self._outputs or self._forward:
            return None, None
        out, err = (b"".join(chunks) for chunks in self._collected[:2])
        return out, err

    @property
    def extra_data(self) -> bytes:
        return b"".join(self._collected[2])

    def pump_here(self, running: Callable[[], bool], deadline: float | None,
                  grace: float) -> bool:
        """The pump in the calling thread, for a caller that waits for the command
        anyway (a call): no thread to start and join. Until every pipe is at its end
        (True); or ``grace`` seconds after ``running()`` turned False, as with
        ``finish(grace)`` (True: processes that outlive the command may hold its
        output); or until ``deadline`` (monotonic) if that comes first (False: the
        caller kills, then pumps again for what is left)."""
        self._close_child_ends()
        while True:
            if self._abandon_at is None and not running():
                self._abandon_at = time.monotonic() + grace
            until = time.monotonic() + _HERE_MS / 1000
            if self._pump_until(until if deadline is None else min(until, deadline)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _pump(self) -> None:
        """The pump thread's body."""
        try:
            self._pump_until(None)
        finally:
            self._close_readers()

    def _pump_until(self, until: float | None) -> bool:
        """Feed and drain until every pipe is at its end or the rest is abandoned (True,
        all closed), or until the monotonic time ``until`` (False)."""
        if self._pumping is None:
            self._pumping = self._pipes()
        readers, poller, feed = self._pumping
        while (readers or (feed and feed.pending)) and not self._abandoned():
            wait_ms = _POLL_MS
            if until is not None:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                wait_ms = min(wait_ms, int(left * 1000) + 1)
            for fd, _events in poller.poll(wait_ms):
                if feed is not None and fd == feed.fd:
                    feed.write()
                elif (chunk := os.read(fd, 65536)):
                    self._take(readers[fd], chunk)
                else:
                    poller.unregister(fd)
                    _close(fd)
                    del readers[fd]
        self._close_readers()
        return True

    def _close_readers(self) -> None:
        if self._pumping is None:
            return
        readers, _poller, feed = self._pumping
        for fd in readers:
            _close(fd)
        readers.clear()
        if feed is not None:
            feed.close()

    def _pipes(self) -> tuple[dict[int, int], select.poll, _Feed | None]:
        readers = {read_end: index for index, (read_end, _) in enumerate(self._outputs)}
        if self._extra is not None:
            readers[self._extra] = 2
        poller = select.poll()
        for fd in readers:
            poller.register(fd, select.POLLIN)
        feed = _Feed(self._stdin[1], self._input, poller) if self._stdin else None
        return readers, poller, feed

    def _abandoned(self) -> bool:
        if self._abandon_at is None:
            return False
        return time.monotonic() >= self._abandon_at

    def _take(self, index: int, chunk: bytes) -> None:
        if index < 2 and self._room[index] >= 0:
            room = self._room[index]
            kept, self._room[index] = chunk[:room], max(room - len(chunk), 0)
            self.dropped[index] += len(chunk) - len(kept)
            chunk = kept
        if not chunk:
            return
        if index == 2 or not self._forward:
            self._collected[index].append(chunk)
            return
        try:
            view = memoryview(chunk)
            while view:
                view = view[os.write(1 + index, view):]
        except OSError:
            pass  # sandlock's own stdout is gone (a closed pipe): drop, keep draining

    def drop_notices(self, audit: AuditLog | None = None, close: bool = True) -> list[str]:
        """What the limit cut, one line per output (for stderr and the exit summary),
        also recorded in ``audit`` (the process's own), which is then closed
        (``close``): these are a run's last records. A call in a running sandbox
        passes False: the log is the sandbox's, written to until its block ends."""
        notices = []
        for name, dropped in zip(STREAMS, self.dropped):
            if not dropped:
                continue
            limit = self._limit_text()
            reason = f"output limit {limit} reached: dropped {dropped} bytes of {name} (--max-output)"
            if audit is not None:
                audit.limit("max_output", limit, "truncate", reason, stream=name, dropped=dropped)
            notices.append(f"sandlock: {reason}")
        if audit is not None and close:
            audit.close()
        return notices

    def _limit_text(self) -> str:
        from ..limits import Size

        return str(Size(self._limit or 0))

    def _close_child_ends(self) -> None:
        if self._stdin:
            self._stdin = (_close(self._stdin[0]), self._stdin[1])
        self._outputs = [(r, _close(w)) for r, w in self._outputs]


class _Feed:
    """The command's stdin, written as it becomes writable (never blocking the pump)."""

    def __init__(self, fd: int, data: bytes | None, poller: select.poll) -> None:
        self.fd = fd
        self.pending = memoryview(data or b"")
        self._poller = poller
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLOUT)
        if not self.pending:
            self.close()

    def write(self) -> None:
        try:
            self.pending = self.pending[os.write(self.fd, self.pending[:_PIPE_CHUNK]):]
        except BlockingIOError:
            return
        except OSError:  # (BrokenPipeError) the command stopped reading: like subprocess
            self.pending = memoryview(b"")
        if not self.pending:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            self._poller.unregister(self.fd)
            _close(self.fd)
            self.fd = -1
            self.pending = memoryview(b"")


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    return None
