"""Pipes for Sandbox.run: feed stdin, collect stdout and stderr without deadlock."""

from __future__ import annotations

import os
import threading


class Capture:
    """Owns the pipes between sandlock and a command run by Sandbox.run."""

    def __init__(self, input: bytes | None, capture_output: bool) -> None:
        self._input = input
        self._stdin = os.pipe() if input is not None else None
        self._outputs = [os.pipe(), os.pipe()] if capture_output else []
        self._threads: list[threading.Thread] = []
        self._collected: list[list[bytes]] = [[] for _ in self._outputs]

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
        for (read_end, _), sink in zip(self._outputs, self._collected):
            self._spawn(self._drain, read_end, sink)

    def finish(self) -> tuple[bytes | None, bytes | None]:
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        if not self._outputs:
            return None, None
        out, err = (b"".join(chunks) for chunks in self._collected)
        return out, err

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _feed(self, fd: int) -> None:
        try:
            view = memoryview(self._input or b"")
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            pass  # the command stopped reading: like subprocess, not an error
        finally:
            _close(fd)

    @staticmethod
    def _drain(fd: int, sink: list[bytes]) -> None:
        while chunk := os.read(fd, 65536):
            sink.append(chunk)

    def _close_child_ends(self) -> None:
        if self._stdin:
            self._stdin = (_close(self._stdin[0]), self._stdin[1])
        self._outputs = [(r, _close(w)) for r, w in self._outputs]


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    return None
