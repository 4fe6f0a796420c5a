"""The pool's actor: it starts the sandbox's host (``_host``: a small interpreter that
holds the sandbox and runs the items) and passes it the items Ray brings. The actor is
a plain class here; the pool makes it a Ray actor (``ray.remote``).

Items are pipelined: Ray calls ``run`` (one item) or ``run_many`` (a chunk of a
map's) on up to the pool's window of threads at once, each sends its items to the
host in one frame as soon as they come, and the host queues them and runs them one at
a time, in order. So the host starts the next item the moment one ends, instead of
idling while a result goes back to the driver and the next item comes through Ray
(where the node's CPUs are all busy, another actor's work filled that gap anyway:
performance.md). The host answers a frame with its items' results, in one frame, in
the order the frames went: each call reads its own when its turn comes (``_turn``),
no reader thread.

Nothing confined outlives the actor: the host reads the actor's socket, and its EOF
(the kernel closes the actor's end however it died) ends the host, and the sandbox
with it (sandlock's guarantee for a sandbox's embedding process, even when killed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

from .._errors import SetupError
from ._host import receive, send
from ._item import ItemResult, shut_down

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..policy import Policy

_CLOSE_SECONDS = 10  # for the host to end its sandbox at a shutdown, before it is killed


class SandboxActor:
    def __init__(self, policy: Policy | str, init: Callable[[], object] | None,
                 policy_fn: Callable[..., object] | None, quiet: bool) -> None:
        from ray import cloudpickle

        ours, theirs = socket.socketpair()
        with open(os.devnull, "rb") as nothing:
            self._host = subprocess.Popen(
                [sys.executable, "-m", "sandlock.ray._host", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=nothing)
        theirs.close()
        self._channel = ours
        self._sending = threading.Lock()  # the calls' and close()'s frames, one at a time
        self._turn = threading.Condition()  # whose reply is next: tickets in sending order
        self._sent = self._replied = 0
        self._closing = False
        send(ours, ("start", list(sys.path), cloudpickle.dumps((policy, init, policy_fn, quiet))))
        reply = receive(ours)
        if reply is None or reply[0] != "ready":
            self._host.wait()
            raise SetupError(reply[1] if reply is not None else "the sandbox's host ended at its start")
        self._node = reply[1]

    def ready(self) -> tuple[str, int]:
        """The node's name and this actor's pid, once its sandbox has started."""
        return self._node, os.getpid()

    def run(self, index: int | None, payload: bytes, timeout: float | None,
            memory: int | None, output: int | None, narrowed: Policy | None) -> ItemResult:
        """One item, in a clone of the host's sandbox (of a nested one for ``narrowed``),
        after those sent before it."""
        return self._exchange([(index, payload, timeout, memory, output, narrowed)])[0]

    def run_many(self, entries: list[tuple]) -> list[ItemResult]:
        """Several items (each ``run``'s arguments), one after the other: one Ray call
        for a chunk of a map's items, whose cost (~2 ms of the driver's and the
        actor's CPU) an item of a few milliseconds would otherwise pay alone."""
        return self._exchange(entries)

    def _exchange(self, entries: list[tuple]) -> list[ItemResult]:
        ticket = None
        with self._sending:
            try:
                send(self._channel, ("run", entries))
                ticket, self._sent = self._sent, self._sent + 1
            except OSError:
                pass  # the host has ended
        reply = None if ticket is None else self._reply(ticket)
        if reply is not None and reply[0] == "results":
            return reply[1]
        if self._closing:
            return [shut_down(entry[0]) for entry in entries]
        # The host ended under the items (its sandbox died of no limit): this actor
        # ends too, so that Ray restarts it and retries them.
        os._exit(1)

    def _reply(self, ticket: int) -> tuple | None:
        """The host's reply to the frame sent with ``ticket``, read in its turn."""
        with self._turn:
            self._turn.wait_for(lambda: self._replied == ticket)
        try:
            return receive(self._channel)
        finally:
            with self._turn:
                self._replied += 1
                self._turn.notify_all()

    def close(self) -> None:
        """End the sandbox (an item still running is killed), then the host. Called in
        a concurrency group of its own (the pool's shutdown), beside a run()."""
        self._closing = True
        try:
            with self._sending:
                send(self._channel, ("close",))
        except OSError:
            pass  # the host is gone already
        try:
            self._host.wait(_CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self._host.kill()
            self._host.wait()
