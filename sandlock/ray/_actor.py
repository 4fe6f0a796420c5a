"""The pool's actor: one long-lived sandbox on one node, whose ``init`` ran once, and
its items run one at a time, each in a call (a fork of the sandbox's resident: a COW
clone of what ``init`` built).

One at a time, so that what the sandbox's audit log says while an item runs is that
item's (a reward function scores an item by what it was refused), and so that the
sandbox's limits (``max_processes``, ``max_memory``) are the item's. A node runs items
in parallel through several actors (``per_node``).

The actor is a plain class here; the pool makes it a Ray actor (``ray.remote``), so
importing this module never imports Ray.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile

from ..api import Sandbox
from ._item import ItemResult, keeping, outcome, run_item  # (before the sandbox starts)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..policy import Policy


class SandboxActor:
    """Holds ``with Sandbox(policy, init, ...)`` open for the actor's life."""

    def __init__(self, policy: Policy | str, init: Callable[[], object] | None,
                 policy_fn: Callable[..., object] | None, quiet: bool) -> None:
        check_node()
        self._options = (policy, init, policy_fn, quiet)
        self._node = socket.gethostname()
        self._nested: dict[Policy, object] = {}
        self._closing = False
        self._start()

    def _start(self) -> None:
        """The sandbox, and its audit log: read here through a descriptor, its name
        unlinked once sandlock has opened it (nothing in the sandbox can reach it)."""
        policy, init, policy_fn, quiet = self._options
        directory = tempfile.mkdtemp(prefix="sandlock-ray-")
        path = os.path.join(directory, "audit.jsonl")
        self._sandbox = Sandbox(policy, keeping(init), audit=path, quiet=quiet,
                                policy_fn=policy_fn)
        try:
            self._sandbox.__enter__()
            self._audit = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        finally:
            _remove(path, directory)
        self._nested.clear()

    def ready(self) -> tuple[str, int]:
        """The node's name and this actor's pid, once its sandbox has started."""
        return self._node, os.getpid()

    def run(self, index: int | None, payload: bytes, timeout: float | None,
            memory: int | None, output: int | None, narrowed: Policy | None) -> ItemResult:
        """One item, in a clone of the sandbox (of a nested one for ``narrowed``)."""
        self._records()  # what came before this item is not its
        target = self._sandbox if narrowed is None else self._nest(narrowed)
        call = target.call(run_item, args=(payload, memory), timeout=timeout)
        records = self._records()
        result = outcome(index, call, records, memory, output, self._node)
        if self._over() and not self._closing:
            self._after_death(records)
        return result

    def _nest(self, narrowed: Policy) -> object:
        nested = self._nested.get(narrowed)
        if nested is None:
            nested = self._nested[narrowed] = self._sandbox.sandbox(narrowed)
        return nested

    def _over(self) -> bool:
        # A running sandbox whose resident has gone (a limit killed the sandbox, or
        # someone killed it) refuses every call from then on.
        live = getattr(self._sandbox, "_live", None)
        return live is None or getattr(live, "_state", "over") == "over"

    def _after_death(self, records: list[dict]) -> None:
        """The sandbox ended under an item. If a limit of the sandbox's ended it (the
        item's doing: it is reported), start a new one here; else the actor dies, so
        that Ray restarts it and retries its items (its ``max_task_retries``)."""
        if any(r.get("event") == "limit" and r.get("verdict") == "kill" for r in records):
            self.close()
            self._closing = False
            self._start()
            return
        os._exit(1)

    def _records(self) -> list[dict]:
        """The audit records written since the last look."""
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

    def close(self) -> None:
        """End the sandbox: every process of it is killed and reaped. Called in a
        concurrency group of its own (the pool's shutdown), so it ends an item still
        running, whose result then says it was killed."""
        self._closing = True
        try:
            self._sandbox.__exit__(None, None, None)
        finally:
            os.close(self._audit)


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
