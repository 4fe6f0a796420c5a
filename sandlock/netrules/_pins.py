"""The pinned DNS table: which addresses each hostname means, for the whole run.

A name is pinned once (at start from the policy's names, or when the child first
resolves a name the policy admits); later answers never change it, which is what
makes DNS rebinding impossible. Shared by the DNS responder (writes, answers) and
the network verdict (reverse lookup: which names does this address stand for).
"""

from __future__ import annotations

import _thread  # threading's Lock without threading (~1 ms)
from ipaddress import IPv4Address, IPv6Address

from ._spec import normalise_name

IPAddress = IPv4Address | IPv6Address


class PinTable:
    """Thread-safe name -> addresses map with its reverse index."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._addresses: dict[str, tuple[IPAddress, ...]] = {}
        self._names: dict[IPAddress, frozenset[str]] = {}
        self._answered: dict[IPAddress, str] = {}  # the name last answered with each address
        self.version = 0  # counts pins: what was judged with an older table may differ

    def pin(self, name: str, addresses: tuple[IPAddress, ...]) -> tuple[IPAddress, ...]:
        """Pin ``name`` unless already pinned; returns the pinned addresses either way."""
        name = normalise_name(name)
        with self._lock:
            pinned = self._addresses.get(name)
            if pinned is not None:
                return pinned
            self._addresses[name] = addresses
            for address in addresses:
                self._names[address] = self._names.get(address, frozenset()) | {name}
            self.version += 1  # after the table changed: a reader of the new version sees it
            return addresses

    def addresses(self, name: str) -> tuple[IPAddress, ...] | None:
        """Pinned addresses of ``name`` (empty: pinned as unresolvable), None if unknown."""
        with self._lock:
            return self._addresses.get(normalise_name(name))

    def answered(self, name: str, addresses: list[IPAddress]) -> None:
        """The command's lookup of ``name`` was answered with ``addresses`` (pinned)."""
        with self._lock:
            for address in addresses:
                self._answered[address] = name

    def last_answered(self, address: IPAddress) -> str | None:
        """The name whose answer last gave the command ``address``, if any."""
        return self._answered.get(address)

    def names_for(self, address: IPAddress) -> frozenset[str]:
        with self._lock:
            return self._names.get(address, frozenset())

    def snapshot(self) -> dict[str, tuple[IPAddress, ...]]:
        with self._lock:
            return dict(self._addresses)
