"""The Context a policy_fn receives: how it tightens the running sandbox."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._live import LiveRules


class Context:
    """Live changes for the rest of the run. Each narrows what the static policy
    allows (a grant never goes beyond it); endpoints are written as for --net-allow
    ("api.example.com:443", "10.0.0.0/8:*", "*:53")."""

    def __init__(self, rules: LiveRules, on_max_processes: Callable[[int], None],
                 on_max_memory: Callable[[int], None]) -> None:
        self._rules = rules
        self._on_max_processes = on_max_processes
        self._on_max_memory = on_max_memory

    def restrict_network(self, endpoints: Iterable[str]) -> None:
        """From now on the sandbox reaches only ``endpoints`` (``[]``: nothing, DNS
        included) among what the static policy allows."""
        self._rules.restrict_network(endpoints)

    def grant_network(self, endpoints: Iterable[str]) -> None:
        """Give back ``endpoints`` after a restriction (never beyond the static policy)."""
        self._rules.grant_network(endpoints)

    def restrict_pid_network(self, pid: int, endpoints: Iterable[str]) -> None:
        """Process ``pid``, and the processes it makes from now on, reach only
        ``endpoints`` (on top of the sandbox-wide restriction)."""
        self._rules.restrict_process_network(pid, endpoints)

    def deny_path(self, path: str) -> None:
        """From now on nothing in the sandbox opens ``path`` (a file, or a directory
        and everything beneath it), by any name: EACCES."""
        self._rules.denied.add(path)

    def restrict_max_processes(self, count: int) -> None:
        """At most ``count`` processes at once from now on (forks past it: EAGAIN)."""
        self._rules.restrict_max_processes(count)
        self._on_max_processes(self._rules.max_processes)

    def restrict_max_memory(self, size: int | str) -> None:
        """At most ``size`` (bytes, or "256M") of memory from now on; past it the
        sandbox is killed, as with max_memory."""
        self._on_max_memory(self._rules.restrict_max_memory(size))
