"""The proxy's table of steered connections: peer address -> Route.

sandlock sends a route before it makes the connection, so by the time the proxy
accepts, the route is queued on the control channel: ``take`` drains what is queued
and looks the peer up. A connection without a route was not steered by sandlock
(another local process, or a replay of an old port): refused.
"""

from __future__ import annotations

import socket

from . import _protocol
from ._protocol import Route


class UnknownConnection(LookupError):
    pass


class RouteTable:
    def __init__(self, control: socket.socket) -> None:
        self._control = control  # non-blocking
        self._pending: dict[tuple[str, int], Route] = {}
        self._active: dict[tuple[str, int], Route] = {}
        self.closed = False

    @property
    def control_fd(self) -> int:
        return self._control.fileno()

    def drain(self) -> None:
        """Read every queued message; ``closed`` once sandlock has hung up."""
        while not self.closed:
            try:
                data = self._control.recv(_protocol.MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.closed = True
                return
            try:
                message = _protocol.decode(data)
                if message["kind"] == _protocol.ROUTE:
                    route = _protocol.route_from(message)
                    self._pending[route.peer] = route  # a reused port: the newest route wins
            except (ValueError, KeyError, TypeError):
                continue  # from sandlock only, but never trusted to be well-formed

    def take(self, peer: tuple[str, int]) -> Route:
        """The route of a connection just accepted from ``peer`` (used once)."""
        key = _key(peer)
        route = self._pending.pop(key, None)
        if route is None:
            self.drain()
            route = self._pending.pop(key, None)
        if route is None:
            raise UnknownConnection(f"no route for a connection from {key[0]}:{key[1]}")
        self._active[key] = route
        return route

    def get(self, peer: tuple[str, int] | None) -> Route | None:
        """The route of an open connection."""
        return self._active.get(_key(peer)) if peer else None

    def forget(self, peer: tuple[str, int] | None) -> None:
        if peer:
            self._active.pop(_key(peer), None)


def _key(peer: tuple) -> tuple[str, int]:
    host = str(peer[0])
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, int(peer[1])
