"""The sandbox's host: a small interpreter the actor starts (``python -m
sandlock.ray._host FD``), which holds one long-lived sandbox whose ``init`` ran once
and runs the actor's items in it one at a time, each in a call (a fork of the
sandbox's resident: a COW clone of what ``init`` built).

Not the actor itself: every item forks the resident and tears the fork down, at a cost
that grows with the resident's memory, and a Ray worker (the actor's process) holds
over three times this process's (performance.md). The host never imports Ray: what the
driver pickled with Ray's cloudpickle loads through ``ray.cloudpickle`` alone, its
package stubbed (``_cloudpickle_alone``).

One at a time, so that what the sandbox's audit log says while an item runs is that
item's (a reward function scores an item by what it was refused), and so that the
sandbox's limits (``max_processes``, ``max_memory``) are the item's.

The actor and the host speak over a stream socket, in frames (a length, a pickle:
both sides are sandlock's, and nothing confined holds the socket): a chunk of items in
one frame, their results back in one (each frame wakes a thread on either side).
The host ends when the actor does (EOF: the kernel closes the actor's end whatever
killed it), and the sandbox with it.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import sys
import threading
import time

from ..api import Sandbox
from .._errors import SandlockError
from .._hostfile import private_directory
# (before the sandbox starts: its processes hold what the items need)
from ._item import ItemResult, keeping, outcome, refused, run_item, shut_down

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..policy import Policy

_CLOSE_SECONDS = 5  # for the items' thread to answer at a shutdown (the actor waits 10)


class SandboxHost:
    """Holds ``with Sandbox(policy, init, ...)`` open for the host's life."""

    def __init__(self, policy: Policy | str, init: Callable[[], object] | None,
                 policy_fn: Callable[..., object] | None, quiet: bool) -> None:
        check_node()
        self._options = (policy, init, policy_fn, quiet)
        self._node = socket.gethostname()
        self._nested: dict[Policy, object] = {}
        self._closing = False  # the sandbox is being closed: its death is not an item's
        self._ending = False  # the pool's shutdown: no item starts any more
        self._start()

    def _start(self) -> None:
        """The sandbox, and its audit log: read here through a descriptor, its name
        unlinked once sandlock has opened it (nothing in the sandbox can reach it)."""
        policy, init, policy_fn, quiet = self._options
        directory = private_directory("sandlock-ray-")
        path = os.path.join(directory, "audit.jsonl")
        self._sandbox = Sandbox(policy, keeping(init), audit=path, quiet=quiet,
                                policy_fn=policy_fn)
        try:
            self._sandbox.__enter__()
            self._audit = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        finally:
            _remove(path, directory)
        self._nested.clear()

    def run(self, index: int | None, payload: bytes, timeout: float | None,
            memory: int | None, output: int | None, narrowed: Policy | None) -> ItemResult:
        """One item, in a clone of the sandbox (of a nested one for ``narrowed``). What
        refuses to start it (an item too large to send, a narrowed policy a nested
        sandbox cannot take) is its result: the sandbox and the next items go on."""
        if self._ending:
            return shut_down(index)
        if self._over() and not self._closing:
            self._after_death([])  # it died between two items: of no limit of an item's
        self._records()  # what came before this item is not its
        try:
            target = self._sandbox if narrowed is None else self._nest(narrowed)
            start = time.monotonic()
            call = target.call(run_item, args=(payload, memory), timeout=timeout)
        except (ValueError, TypeError, SandlockError) as exc:
            return refused(index, exc, self._node)
        except RuntimeError:  # the sandbox is over: the shutdown's doing, or it died just now
            if self._ending:
                return shut_down(index)
            os._exit(1)  # (as _after_death: Ray restarts the actor, which retries the item)
        seconds = time.monotonic() - start  # (the pool sizes map's chunks by it)
        records = self._records()
        result = outcome(index, call, records, memory, output, self._node, seconds)
        if self._over() and not self._closing:
            self._after_death(records)
        return result

    def _nest(self, narrowed: Policy) -> object:
        """The nested sandbox of ``narrowed``, made at its first item, and again at
        the next after it ended (its items cannot signal it, but a limit or someone
        outside may end it)."""
        nested = self._nested.get(narrowed)
        if nested is None or _ended(nested):
            nested = self._nested[narrowed] = self._sandbox.sandbox(narrowed)
        return nested

    def _over(self) -> bool:
        return _ended(self._sandbox)

    def _after_death(self, records: list[dict]) -> None:
        """The sandbox ended under an item. If a limit of the sandbox's ended it (the
        item's doing: it is reported), start a new one here; else the host ends, and
        the actor with it, so that Ray restarts it and retries its items (its
        ``max_task_retries``)."""
        if self._ending:
            return  # (the shutdown killed it)
        if any(r.get("event") == "limit" and r.get("verdict") == "kill" for r in records):
            self.close()
            self._closing = False
            self._start()
            return
        os._exit(1)

    def _records(self) -> list[dict]:
        """The audit records written since the last look."""
        import json  # (not before the sandbox starts: its processes would hold it too)

        chunks = []
        while chunk := os.read(self._audit, 1 << 16):
            chunks.append(chunk)
        records = []
        for line in b"".join(chunks).splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # (sandlock writes each line whole; a torn one is skipped)
        return records

    def end(self) -> None:
        """The pool's shutdown, while an item may run: every process of the sandbox is
        killed (that item's result says so), and no item starts after it. Its audit
        log stays readable until close()."""
        self._ending = self._closing = True
        try:
            self._sandbox.kill()
        except RuntimeError:
            pass  # not running: over already

    def close(self) -> None:
        """End the sandbox: every process of it is killed and reaped."""
        self._closing = True
        try:
            self._sandbox.__exit__(None, None, None)
        finally:
            os.close(self._audit)


def _ended(sandbox: object) -> bool:
    """A running sandbox (or nested one) whose resident has gone (a limit killed it,
    or someone did) refuses every call from then on."""
    live = getattr(sandbox, "_live", None)
    return live is None or getattr(live, "_state", "over") == "over"


def serve(fd: int) -> int:
    """The host's life: start the sandbox as the actor's first frame says, then run
    the chunks of items that come (a thread of their own) while reading what comes
    next; EOF (the actor is gone) ends everything at once, the sandbox with this
    process. A shutdown kills the item running and answers every chunk sent (the
    items not started: shut down) before the sandbox closes."""
    channel = socket.socket(fileno=fd)
    start = receive(channel)
    if start is None:
        return 1
    _kind, path, payload = start
    sys.path[:0] = [entry for entry in path if entry not in sys.path]
    try:
        _cloudpickle_alone()
        policy, init, policy_fn, quiet = pickle.loads(payload)  # noqa: S301 - the driver's
        host = SandboxHost(policy, init, policy_fn, quiet)
    except BaseException as exc:  # noqa: BLE001 - said to the actor, which fails the pool's start
        send(channel, ("failed", _described(exc)))
        return 1
    send(channel, ("ready", host._node))
    chunks = _ChunkQueue()
    runner = threading.Thread(target=_run_chunks, args=(host, chunks, channel), daemon=True)
    runner.start()
    while (message := receive(channel)) is not None:
        if message[0] == "run":
            chunks.put(message[1])
        elif message[0] == "close":
            host.end()
            chunks.put(None)
            runner.join(_CLOSE_SECONDS)
            host.close()
            return 0
    os._exit(1)  # the actor is gone: so is the sandbox, with this process


class _ChunkQueue:
    """The chunks the actor sent, for the thread that runs them (no queue module: it
    imports more than this needs); None ends that thread."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._chunks: list[list[tuple] | None] = []

    def put(self, chunk: list[tuple] | None) -> None:
        with self._ready:
            self._chunks.append(chunk)
            self._ready.notify()

    def take(self) -> list[tuple] | None:
        with self._ready:
            self._ready.wait_for(lambda: self._chunks)
            return self._chunks.pop(0)


def _run_chunks(host: SandboxHost, chunks: _ChunkQueue, channel: socket.socket) -> None:
    """Each chunk's items one after the other (each ``SandboxHost.run``'s
    arguments), then their results in one frame."""
    while (entries := chunks.take()) is not None:
        results = [host.run(*entry) for entry in entries]
        try:
            send(channel, ("results", results))
        except OSError:
            return  # the actor is gone (serve() sees it: this process ends)


def _described(exc: BaseException) -> str:
    from .._errors import SandlockError

    return str(exc) if isinstance(exc, SandlockError) else f"{type(exc).__name__}: {exc}"


def _cloudpickle_alone() -> None:
    """``ray.cloudpickle`` importable without Ray: the driver's pickles of functions
    sent by value name its helpers, and importing the ``ray`` package would put all of
    Ray in the resident (its memory is what each item's fork costs). The vendored
    module needs only the standard library; the package is a stub here, so code the
    items load cannot use Ray's API (in a sandbox it could not reach the cluster
    anyway)."""
    if "ray" in sys.modules:
        return
    from importlib.util import find_spec
    from types import ModuleType

    spec = find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        return  # no Ray here: nothing Ray pickled can come
    stub = ModuleType("ray")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["ray"] = stub
    import ray.cloudpickle  # noqa: F401 - loaded now, before the sandbox starts


def send(channel: socket.socket, message: tuple) -> None:
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    channel.sendall(struct.pack("<Q", len(data)) + data)


def receive(channel: socket.socket) -> tuple | None:
    """The next frame, None at EOF. Both ends are sandlock's (the actor and its host),
    so the pickle is trusted: what came from the sandbox in it was loaded as plain
    values already (``_safepickle``)."""
    header = _exactly(channel, 8)
    if header is None:
        return None
    data = _exactly(channel, struct.unpack("<Q", header)[0])
    return None if data is None else pickle.loads(data)  # noqa: S301 - see above


def _exactly(channel: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        try:
            chunk = channel.recv(min(left, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def check_node() -> None:
    """What ``sandlock check`` requires, on this node: a missing feature fails the
    actor's start with its name (never a silently weaker sandbox on some nodes)."""
    from .._errors import SetupError
    from ..kernel import probe

    missing = [f"{feature.name} ({feature.detail})" for feature in probe()
               if feature.required and not feature.available]
    if missing:
        raise SetupError(f"sandlock check on {socket.gethostname()}: sandlock cannot confine "
                         f"commands here: missing {', '.join(missing)}")


def _remove(path: str, directory: str) -> None:
    for remove, name in ((os.unlink, path), (os.rmdir, directory)):
        try:
            remove(name)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
