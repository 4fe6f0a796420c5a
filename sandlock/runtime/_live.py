"""The runtime policy's live state: what the callback has tightened so far. Read by
the supervisor at every call it answers, changed by the callback at any time."""

from __future__ import annotations

import _thread

from ._paths import DeniedPaths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..net import NetworkCall
    from ..netrules import NetRule


class LiveRules:
    """Network endpoints for the whole sandbox and per process (None: the static
    policy's alone), and the process and memory caps as tightened."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self.network: tuple[NetRule, ...] | None = None
        self._by_process: dict[int, tuple[NetRule, ...]] = {}
        self.max_processes: int | None = None
        self.max_memory: int | None = None
        self.denied = DeniedPaths()

    # --- changes (from the callback) --------------------------------------------

    def restrict_network(self, endpoints: Iterable[str]) -> None:
        self.network = _rules(endpoints, "restrict_network")

    def grant_network(self, endpoints: Iterable[str]) -> None:
        granted = _rules(endpoints, "grant_network")
        with self._lock:
            if self.network is not None:  # else the static policy's whole, already
                self.network = (*self.network, *granted)

    def restrict_process_network(self, pid: int, endpoints: Iterable[str]) -> None:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise TypeError(f"restrict_pid_network: pid must be a process id, got {pid!r}")
        rules = _rules(endpoints, "restrict_pid_network")
        with self._lock:
            self._by_process[pid] = rules

    def restrict_max_processes(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"restrict_max_processes: expected a count >= 1, got {count!r}")
        with self._lock:
            self.max_processes = min(count, self.max_processes or count)

    def restrict_max_memory(self, size: int | str) -> int:
        from ..limits import parse_size

        value = parse_size(size) if isinstance(size, str) else size
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"restrict_max_memory: expected a size (bytes or 256M), got {size!r}")
        with self._lock:
            self.max_memory = min(value, self.max_memory or value)
            return self.max_memory

    # --- what the supervisor asks -----------------------------------------------------

    def inherit(self, parent: int, child: int) -> None:
        """A process made by ``parent`` starts with its network restriction."""
        with self._lock:
            rules = self._by_process.get(parent)
            if rules is not None:
                self._by_process[child] = rules

    def forget(self, pid: int) -> None:
        with self._lock:
            self._by_process.pop(pid, None)

    def admits(self, pid: int, call: NetworkCall) -> bool:
        """Whether the live rules let process ``pid`` reach ``call``'s destination.
        A DNS query sandlock's responder answers passes while the rules admit anything
        at all: its answers come from the pinned table, never from elsewhere."""
        if self.network is None and not self._by_process:
            return True  # nothing tightened (the hot path: every connect asks)
        process = self._by_process.get(pid)
        return all(_admit(rules, call) for rules in (self.network, process) if rules is not None)


def _admit(rules: tuple[NetRule, ...], call: NetworkCall) -> bool:
    from ..netrules import Endpoint, rules_admit

    if not rules:
        return False
    if call.lookup:  # to sandlock's responder: answered from the pinned table
        return True
    endpoint = Endpoint(call.protocol, call.address, call.port)
    return rules_admit(rules, endpoint, frozenset((call.host,)) if call.host else frozenset())


def _rules(endpoints: Iterable[str], method: str) -> tuple[NetRule, ...]:
    from ..netrules import parse_allow

    if isinstance(endpoints, str):
        raise TypeError(f"{method}: expected a list of endpoints, got the string {endpoints!r}")
    rules = []
    for text in endpoints:
        if not isinstance(text, str):
            raise TypeError(f"{method}: endpoints are strings like 'host:443', got {text!r}")
        try:
            rules.append(parse_allow(text))
        except ValueError as exc:
            raise ValueError(f"{method}: {text!r}: {exc}") from None
    return tuple(rules)
