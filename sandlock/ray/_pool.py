"""``SandboxPool``: confined evaluation across a Ray cluster.

Ray places the actors (``_actor``: each a long-lived sandbox whose ``init`` ran
once) and restarts one that dies; the pool hands them items, a few at a time each,
and gives back what happened to every item (``_item.ItemResult``). sandlock adds no
scheduler: placement is Ray's (resources, a placement group, one node per actor for
``per_node``).
"""

from __future__ import annotations

from collections.abc import Sized
from itertools import islice

from .._errors import SetupError
from ._item import lost

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from ..policy import Policy
    from ._item import ItemResult

WINDOW = 2  # Ray calls on one actor at a time by map(): one running, one queued at its host
# A chunk of map()'s items per Ray call: enough items to take ~CHUNK_SECONDS, by the
# items seen so far, at most CHUNK_MAX. A Ray call costs ~2 ms of CPU whatever it
# carries (0.5% of a chunk of 0.4 s; at 10 ms items, chunks of 0.2 s left the pool
# +21% behind Ray tasks, of 0.4 s +16-18%: performance.md); an actor that dies retries
# up to a chunk's worth of work, and results come back a chunk at a time.
CHUNK_SECONDS = 0.4
CHUNK_MAX = 64


class SandboxPool:
    """``size`` actors (or ``per_node`` on each alive node), each with a sandbox of
    ``policy`` whose ``init()`` ran once. Per-item defaults: ``timeout`` (seconds),
    ``max_memory`` (bytes of address space above the clone's start), ``max_output``
    (bytes of stdout and of stderr kept). ``retries``: how often Ray retries an item
    whose actor died under it (``max_task_retries``). ``num_cpus``, ``resources``,
    ``placement_group`` place the actors as Ray's options do; ``ray_options``, any
    other actor option of Ray's (``runtime_env``, ``label_selector``...)."""

    def __init__(self, policy: Policy | str, init: Callable[[], object] | None = None, *,
                 size: int | None = None, per_node: int | None = None,
                 policy_fn: Callable[..., object] | None = None,
                 timeout: float | None = None, max_memory: int | None = None,
                 max_output: int | None = None, retries: int = 1, num_cpus: float = 1,
                 resources: dict[str, float] | None = None, placement_group: object = None,
                 ray_options: dict | None = None, quiet: bool = True) -> None:
        import ray

        if (size is None) == (per_node is None):
            raise ValueError("SandboxPool: give size or per_node (one of them)")
        self._defaults = (timeout, max_memory, max_output)
        # A window of items in the default group (the host queues them and runs one
        # at a time: _actor); close() in a group of its own, so that a shutdown ends
        # an item still running rather than waiting for it.
        options = {"num_cpus": num_cpus, "max_restarts": -1, "max_task_retries": retries,
                   "resources": resources or {}, "max_concurrency": WINDOW, **(ray_options or {})}
        remote = ray.remote(concurrency_groups={"control": 1})(_actor_class())
        self._actors = [remote.options(**options, **where).remote(policy, init, policy_fn, quiet)
                        for where in _placements(size, per_node, placement_group)]
        self._started()

    def _started(self) -> None:
        """Every actor's sandbox is up, or the pool fails with the first reason."""
        import ray

        try:
            self.nodes = ray.get([actor.ready.remote() for actor in self._actors])
        except ray.exceptions.RayError as exc:
            self.shutdown()
            raise SetupError(f"SandboxPool: an actor could not start its sandbox: "
                             f"{_cause(exc)}") from None
        self._next = 0

    @property
    def actors(self) -> list:
        """The Ray actor handles (one sandbox each)."""
        return list(self._actors)

    def submit(self, work: Callable[[object], object], item: object, *,
               policy: Policy | None = None, **limits: object) -> object:
        """An ObjectRef of the ``ItemResult`` of ``work(item)``, on the next actor in
        turn; ``policy`` narrows the network (and files) for this item alone;
        ``limits``: ``timeout``, ``max_memory``, ``max_output`` for this item."""
        actor = self._actors[self._next % len(self._actors)]
        self._next += 1
        return actor.run.remote(*self._entry(None, _payload(work, item), policy,
                                             self._limits(limits)))

    def on_each(self, work: Callable[[object], object], item: object) -> list[ItemResult]:
        """``work(item)`` once on every actor (in the order of ``actors``): what each
        node's sandbox sees, a warm-up."""
        entry = self._entry(None, _payload(work, item), None, self._limits({}))
        refs = [actor.run.remote(*entry) for actor in self._actors]
        return [_get(ref, [None])[0] for ref in refs]

    def map(self, work: Callable[[object], object], items: Iterable[object], *,
            ordered: bool = True, policy: Policy | Callable[[object], Policy | None] | None = None,
            chunksize: int | None = None, **limits: object) -> Iterator[ItemResult]:
        """``work(item)`` for every item, a plain iterator of ``ItemResult`` (in the
        items' order, else as they complete); ``policy``: a narrowed policy for every
        item, or a function of the item giving one (None: the pool's); ``chunksize``:
        items per Ray call (None: sized by how long the items take, up to CHUNK_MAX)."""
        if chunksize is not None and (type(chunksize) is not int or chunksize < 1):
            raise ValueError(f"SandboxPool.map: chunksize must be a positive integer, "
                             f"not {chunksize!r}")
        total = len(items) if isinstance(items, Sized) else None
        chunks = Chunks(chunksize, total, WINDOW * len(self._actors))
        results = self._results(work, iter(enumerate(items)), policy, self._limits(limits), chunks)
        return _in_order(results) if ordered else results

    def _results(self, work: Callable[[object], object], items: Iterator[tuple[int, object]],
                 policy: object, limits: tuple, chunks: Chunks) -> Iterator[ItemResult]:
        import ray

        pending: dict[object, tuple[object, list[int]]] = {}  # ref -> (actor, indices)

        def feed(actor: object) -> None:
            entries = [self._entry(index, _payload(work, item),
                                   policy(item) if callable(policy) else policy, limits)
                       for index, item in islice(items, chunks.size())]
            if entries:
                chunks.handed(len(entries))
                pending[actor.run_many.remote(entries)] = (actor, [e[0] for e in entries])

        for _ in range(WINDOW):
            for actor in self._actors:
                feed(actor)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            actor, indices = pending.pop(done[0])
            results = _get(done[0], indices)
            chunks.saw(results)
            feed(actor)
            yield from results

    def _limits(self, limits: dict) -> tuple:
        """Per-item limits, as the actor takes them: (timeout, memory, output)."""
        unknown = set(limits) - {"timeout", "max_memory", "max_output"}
        if unknown:
            raise TypeError(f"unknown per-item limit(s): {', '.join(sorted(unknown))} "
                            f"(timeout, max_memory, max_output)")
        timeout, memory, output = (limits.get(name, default) for name, default in
                                   zip(("timeout", "max_memory", "max_output"), self._defaults))
        return timeout, _bytes(memory), _bytes(output)

    @staticmethod
    def _entry(index: int | None, payload: bytes, policy: Policy | None,
               limits: tuple) -> tuple:
        """One item as the actor's ``run`` takes it (and ``run_many``, a list of them)."""
        timeout, memory, output = limits
        return index, payload, timeout, memory, output, policy

    def shutdown(self) -> None:
        """Close every actor's sandbox (killing what runs in it), then the actors."""
        import ray

        closing = [actor.close.options(concurrency_group="control").remote()
                   for actor in self._actors]
        try:
            ray.get(closing, timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            pass  # an actor that died took its sandbox with it; ray.kill below does that
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _actor_class() -> type:
    from ._actor import SandboxActor

    return SandboxActor


def _placements(size: int | None, per_node: int | None, group: object) -> list[dict]:
    """Ray scheduling options, one per actor."""
    if per_node is not None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        return [{"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
                for node in nodes for _ in range(per_node)]
    if group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles = len(group.bundle_specs)
        return [{"scheduling_strategy": PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=index % bundles)} for index in range(size)]
    return [{} for _ in range(size)]


def _payload(work: Callable[[object], object], item: object) -> bytes:
    from ray import cloudpickle

    return cloudpickle.dumps((work, item))


def _bytes(size: object) -> int | None:
    if size is None or isinstance(size, int):
        return size
    from ..limits import Size

    return int(Size.parse(str(size)))


def _get(ref: object, indices: list[int | None]) -> list[ItemResult]:
    """The results of a call (of ``run``: one; of ``run_many``: its chunk's). Items
    whose actor died more often than they may be retried are reported as lost, not
    raised (the other items go on)."""
    import ray

    try:
        value = ray.get(ref)
    except ray.exceptions.RayError as exc:
        return [lost(index, _cause(exc)) for index in indices]
    return value if isinstance(value, list) else [value]


class Chunks:
    """How many items the next Ray call of a map carries: ``fixed``, or enough to take
    CHUNK_SECONDS by the items seen so far (a running mean of their ``seconds``), one
    until an item has been seen. Of ``total`` items (when the map knows how many) over
    ``calls`` calls in flight, the last chunks shrink to an equal share of what is left
    for each call, so that the actors end together rather than one working through a
    full chunk while the others idle (a half share made twice the calls at a map's end,
    each ~2 ms of CPU, for no better ending)."""

    def __init__(self, fixed: int | None = None, total: int | None = None,
                 calls: int = 1) -> None:
        self._fixed = fixed
        self._mean: float | None = None
        self._left = total
        self._calls = calls

    def size(self) -> int:
        if self._fixed is not None:
            return self._fixed
        if self._mean is None:
            return 1
        size = max(1, min(CHUNK_MAX, round(CHUNK_SECONDS / max(self._mean, 1e-6))))
        if self._left is not None:
            size = min(size, max(1, -(-self._left // self._calls)))
        return size

    def handed(self, count: int) -> None:
        if self._left is not None:
            self._left -= count

    def saw(self, results: list[ItemResult]) -> None:
        for result in results:
            if result.seconds > 0:  # (0: it never started, which says nothing of the others)
                self._mean = (result.seconds if self._mean is None
                              else 0.8 * self._mean + 0.2 * result.seconds)


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    return f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(exc)


def _in_order(results: Iterator[ItemResult]) -> Iterator[ItemResult]:
    waiting: dict[int, ItemResult] = {}
    next_index = 0
    for result in results:
        waiting[result.index] = result
        while next_index in waiting:
            yield waiting.pop(next_index)
            next_index += 1
