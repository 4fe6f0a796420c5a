"""The proxy's table of steered connections, fed by sandlock over the control channel.

sandlock sends a route before it makes the connection. A thread reads the channel
from the moment the process starts (mitmproxy's import takes a while, and a burst of
connections must not fill the channel meanwhile); the accept path ``take``s the
route of its peer, waiting briefly for a route still in flight. A connection without
a route was not steered by sandlock (another local process): refused.

Once accepted, a route belongs to mitmproxy's client connection (by its id), not to
the peer address: the peer's port can be reused by a new connection before the old
one's disconnect has been handled.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from . import _protocol
from ._protocol import Route

TAKE_WAIT = 0.1  # s: a route is sent before the connect; this only covers the reader thread's lag
# (short: a connection from outside the sandbox with no route holds the event loop that long)
PENDING_TTL = 30.0  # s: a route whose connection never came (a connect that failed)


class UnknownConnection(LookupError):
    pass


class RouteTable:
    def __init__(self, control: socket.socket, on_closed: Callable[[], None] = lambda: os._exit(0)) -> None:
        self._control = control
        self._on_closed = on_closed  # sandlock hung up: nothing left to serve
        self._changed = threading.Condition()
        self._pending: dict[tuple[str, int], tuple[Route, float]] = {}
        self._accepted: dict[tuple[str, int], Route] = {}
        self._clients: dict[str, Route] = {}

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True, name="sandlock-routes").start()

    def _read(self) -> None:
        for message in _protocol.receive(self._control, _protocol.from_sandlock):
            try:
                if message["kind"] == _protocol.ROUTE:
                    self._add(_protocol.route_from(message))
            except (ValueError, KeyError, TypeError):
                continue  # from sandlock only, but never trusted to be well-formed
        self._on_closed()

    def _add(self, route: Route) -> None:
        now = time.monotonic()
        with self._changed:
            if len(self._pending) > 1024:
                self._pending = {peer: entry for peer, entry in self._pending.items()
                                 if now - entry[1] < PENDING_TTL}
            self._pending[route.peer] = (route, now)  # a reused port: the newest route wins
            self._changed.notify_all()

    def take(self, peer: tuple) -> Route:
        """The route of a connection just accepted from ``peer`` (used once)."""
        key = _key(peer)
        deadline = time.monotonic() + TAKE_WAIT
        with self._changed:
            while True:
                entry = self._pending.pop(key, None)
                if entry is not None and time.monotonic() - entry[1] < PENDING_TTL:
                    self._accepted[key] = entry[0]
                    return entry[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise UnknownConnection(f"no route for a connection from {key[0]}:{key[1]}")
                self._changed.wait(remaining)

    def claim(self, peer: tuple | None, client_id: str) -> Route | None:
        """Give the route accepted from ``peer`` to mitmproxy's client ``client_id``."""
        if not peer:
            return None
        with self._changed:
            route = self._accepted.pop(_key(peer), None)
            if route is not None:
                self._clients[client_id] = route
            return route

    def get(self, client_id: str) -> Route | None:
        with self._changed:
            return self._clients.get(client_id)

    def forget(self, client_id: str) -> None:
        with self._changed:
            self._clients.pop(client_id, None)


def _key(peer: tuple) -> tuple[str, int]:
    host = str(peer[0])
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, int(peer[1])
