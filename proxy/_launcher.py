"""sandlock's side of the proxy: start its process, steer connections to it, hear back.

The listening sockets are made here, before the process exists: their addresses are
known at once, and a connection steered to them before the proxy accepts simply waits
in the backlog (the first request waits for the proxy, nothing fails). The process is
fed its configuration over a SOCK_SEQPACKET pair; it ends when that pair closes
(sandlock gone), and sandlock kills it when the run ends. It never sees the command:
it only learns routes.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from . import _protocol
from ._protocol import ProxyConfig, Route

_STOP_TIMEOUT = 10.0  # reading the reports still queued at the end (they are never dropped)
_ROUTE_WAIT = 2.0
_BACKLOG = 1024


class ProxyUnavailable(OSError):
    """The proxy process is gone or its control channel is full: fail the connection."""


class ProxyProcess:
    """One run's proxy process. ``on_event`` receives its ``audit`` messages (on a
    reader thread)."""

    def __init__(self, config: ProxyConfig, on_event: Callable[[dict], None]) -> None:
        self._on_event = on_event
        self._trust = threading.Event()
        self.trust_error: str | None = None
        self._listeners = _listening_sockets()
        self.addresses = {version: s.getsockname()[:2] for version, s in self._listeners.items()}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control = ours
        try:
            self._process = _spawn(theirs, self._listeners)
        finally:
            theirs.close()
            for listener in self._listeners.values():
                listener.close()  # the proxy holds them now: if it dies, connects are refused
        self._control.sendall(_protocol.config_message(config))
        self._control.setblocking(False)  # routes come from the supervisor: see route()
        self._reader = threading.Thread(target=self._read, daemon=True, name="sandlock-proxy-events")
        self._reader.start()

    # --- used by the network engine ---------------------------------------------------

    def address_for(self, local_ip: str) -> tuple[str, int] | None:
        """The listener a socket bound to ``local_ip`` connects to (same IP version);
        None if there is none (an IPv6-only socket on a host without IPv6 loopback)."""
        return self.addresses.get(6 if ":" in local_ip else 4)

    def route(self, route: Route) -> None:
        """Tell the proxy about a connection before it is made (raises ProxyUnavailable).

        The proxy reads routes on a thread of its own from its first moments; a full
        channel means it is stuck, so the wait is short (this runs on the supervisor)."""
        message = _protocol.route_message(route)
        try:
            try:
                self._control.send(message)
            except BlockingIOError:
                import select

                if not select.select([], [self._control], [], _ROUTE_WAIT)[1]:
                    raise ProxyUnavailable(errno.EAGAIN, "proxy unavailable: not reading") from None
                self._control.send(message)
        except OSError as exc:
            raise ProxyUnavailable(exc.errno, f"proxy unavailable: {exc.strerror}") from None

    def wait_for_trust(self, timeout: float) -> str | None:
        """Wait until the command's trust bundle is written; the error if it was not."""
        if not self._trust.wait(timeout):
            return "the sandbox CA was not ready in time"
        return self.trust_error

    def close(self) -> None:
        """End the proxy now. It keeps nothing worth a graceful stop, and may still be
        importing mitmproxy (a run that made no request must not wait for that).
        Decisions it already reported are still read: they sit in the socket buffer."""
        self._process.kill()
        self._process.wait()
        self._reader.join(_STOP_TIMEOUT)  # reads what was queued, then EOF
        self._control.close()

    # --- events from the proxy ----------------------------------------------------------

    def _read(self) -> None:
        for message in _protocol.receive(self._control):
            try:
                self._dispatch(message)
            except (ValueError, KeyError, TypeError) as exc:
                print(f"sandlock: warning: proxy message ignored: {exc}", file=sys.stderr)
        if not self._trust.is_set():
            self.trust_error = "the proxy exited before the sandbox CA was ready"
            self._trust.set()

    def _dispatch(self, message: dict) -> None:
        kind = message["kind"]
        if kind == _protocol.TRUST:
            self.trust_error = message.get("error")
            self._trust.set()
        elif kind == _protocol.AUDIT:
            self._on_event(message)


def _listening_sockets() -> dict[int, socket.socket]:
    listeners = {4: _listen(socket.AF_INET, "127.0.0.1")}
    try:
        listeners[6] = _listen(socket.AF_INET6, "::1")
    except OSError:
        pass  # no IPv6 loopback: IPv6 sockets use the v4-mapped route
    return listeners


def _listen(family: int, host: str) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, 0))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _spawn(control: socket.socket, listeners: dict[int, socket.socket]) -> subprocess.Popen:
    fds = [control.fileno(), *(s.fileno() for s in listeners.values())]
    # The package this process runs from, wherever that is (installed or a checkout).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    return subprocess.Popen(
        [sys.executable, "-m", "sandlock.proxy._server", *map(str, fds)],
        pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        start_new_session=True,  # the terminal's Ctrl-C is for the command, not the proxy
        env=env,
    )
