"""sandlock's side of the proxy: start its process, steer connections to it, hear back.

The listening sockets are made here, before the process exists: their addresses are
known at once, and a connection steered to them before the proxy accepts simply waits
in the backlog (the first request waits for the proxy, nothing fails). The process is
started by the first connection steered to it (a command that makes no HTTP request
never costs one), or at once when the command waits for the CA it makes. It is fed
its configuration over a SOCK_SEQPACKET pair; it ends when that pair closes
(sandlock gone), and sandlock kills it when the run ends. It never sees the command:
it only learns routes. If it dies during the run, it is said and another is started
with the same rules and CA (new listeners: the dead one's are refused meanwhile).
"""

from __future__ import annotations

# _socket and _thread: socket's enums and selectors, and threading, cost ~5 ms before
# the command starts.
import _socket
import _thread
import errno
import sys
import time

from .._latch import Latch
from .._record import replace
from . import _protocol
from ._protocol import ProxyConfig, Route
from ._spawn import spawn_proxy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from socket import socket

    from ._spawn import Proxy

_STOP_TIMEOUT = 10.0  # reading the reports still queued at the end (they are never dropped)
_ROUTE_WAIT = 2.0
_BACKLOG = 1024
_MAX_RESTARTS = 3  # deaths within _RESTART_WINDOW after which the proxy stays down
_RESTART_WINDOW = 60.0


class ProxyUnavailable(OSError):
    """The proxy process is gone or its control channel is full: fail the connection."""


class ProxyProcess:
    """One run's proxy process, restarted if it dies. ``on_event`` receives its
    ``audit`` messages (on a reader thread); ``on_incident(message, restarted)`` hears
    of each death, ``on_restart(addresses)`` of the new listeners."""

    def __init__(self, config: ProxyConfig, on_event: Callable[[dict], None],
                 on_incident: Callable[[str, bool], None] | None = None,
                 forkserver: str | None = None, hidden: tuple[str, ...] = (),
                 eager: bool = False) -> None:
        """``forkserver``: the directory of the user's proxy fork server (``_spawn``);
        ``hidden``: sandlock's variables the proxy must not inherit (``spawn_proxy``);
        ``eager``: start the process at once (it makes the CA the command waits for),
        not at the first connection steered to it."""
        self._config = config
        self._forkserver = forkserver
        self._hidden = hidden
        self._on_event = on_event
        self.on_incident = on_incident or (lambda message, restarted: None)
        self.on_restart: Callable[[dict[int, tuple[str, int]]], None] = lambda addresses: None
        self._trust = Latch()
        self.trust_error: str | None = None
        self._lock = _thread.allocate_lock()
        self._closing = False
        self._deaths: list[float] = []
        self._listen()
        if eager:
            self._serve()

    def _listen(self) -> None:
        """The listeners and the control channel. A connection steered to a listener
        waits in its backlog until a process serves it."""
        listeners = _listening_sockets()
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        with self._lock:
            self.addresses = {version: s.getsockname()[:2] for version, s in listeners.items()}
            self._control, self._process, self._reader = ours, None, None
            self._handover: list[socket] | None = [theirs, *listeners.values()]

    def _serve(self) -> None:
        """The process, started once: at the first connection steered to the proxy (a
        run that makes no HTTP request starts none: ~10 ms of a 2-CPU machine's start-up
        go to forking one), or at once when it is ``eager``."""
        with self._lock:
            if self._process is not None:
                return
            if self._closing or self._handover is None:
                raise ProxyUnavailable(errno.ECONNREFUSED, "the HTTP proxy is not running")
            handover, self._handover = self._handover, None
            try:
                self._process = self._spawn(handover)
                return
            except OSError as exc:
                failure = exc
            finally:
                for sock in handover:
                    sock.close()  # the proxy holds them now: if it dies, connects are refused
        self.on_incident(f"the HTTP proxy could not start ({failure.strerror}): "
                         "HTTP stays refused for the rest of the run", False)
        raise ProxyUnavailable(failure.errno, failure.strerror)

    def _spawn(self, handover: list[socket]) -> Proxy:
        process = spawn_proxy([s.fileno() for s in handover], self._forkserver, self._hidden)
        control = self._control
        try:
            control.sendall(_protocol.config_message(self._config))
        except OSError:
            process.kill()  # it will never have its configuration
            raise
        control.setblocking(False)  # routes come from the supervisor: see route()
        self._reader = Latch()  # set when its reader has read everything
        _thread.start_new_thread(self._read, (control, process, self._reader))
        return process

    # --- used by the network engine ---------------------------------------------------

    def address_for(self, local_ip: str) -> tuple[str, int] | None:
        """The listener a socket bound to ``local_ip`` connects to (same IP version);
        None if there is none (an IPv6-only socket on a host without IPv6 loopback)."""
        return self.addresses.get(6 if ":" in local_ip else 4)

    def route(self, route: Route) -> None:
        """Tell the proxy about a connection before it is made (raises ProxyUnavailable,
        also while a dead proxy is being replaced).

        The proxy reads routes on a thread of its own from its first moments; a full
        channel means it is stuck, so the wait is short (this runs on the supervisor)."""
        message = _protocol.route_message(route)
        self._serve()
        control = self._control
        try:
            try:
                control.send(message)
            except BlockingIOError:
                import select

                if not select.select([], [control], [], _ROUTE_WAIT)[1]:
                    raise ProxyUnavailable(errno.EAGAIN, "proxy unavailable: not reading") from None
                control.send(message)
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
        with self._lock:
            self._closing = True
            process, reader, handover = self._process, self._reader, self._handover or []
        for sock in handover:  # never started
            sock.close()
        if process is not None:
            process.kill()
            # What it sent is read, then EOF: without waiting for its exit, which frees
            # an interpreter's memory first (ms), and which its reaper thread waits for.
            try:
                self._control.shutdown(_socket.SHUT_RD)
            except OSError:
                pass
            reader.wait(_STOP_TIMEOUT)
        self._control.close()
        # Not waited for: subprocess reaps a Popen dropped before its process ended.
        self._process = None

    # --- events from the proxy ----------------------------------------------------------

    def _read(self, control: socket, process: Proxy, read: Latch) -> None:
        try:
            self._events(control)
        finally:
            read.set()
        self._ended(control, process)

    def _events(self, control: socket) -> None:
        for message in _protocol.receive(control, _protocol.from_proxy):
            try:
                self._dispatch(message)
            except (ValueError, KeyError, TypeError) as exc:
                print(f"sandlock: warning: proxy message ignored: {exc}", file=sys.stderr)

    def _ended(self, control: socket, process: Proxy) -> None:
        if not self._trust.is_set():
            self.trust_error = "the proxy exited before the sandbox CA was ready"
            self._trust.set()
        with self._lock:
            if self._closing:
                return
        self._died(control, process)

    def _died(self, control: socket, process: Proxy) -> None:
        """The proxy died during the run: say so, and start another with the same rules
        and CA; until it listens, connections to the proxy are refused (fail closed). A
        proxy that keeps dying is not restarted for ever."""
        how = _how_it_ended(process.wait())
        control.close()
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < _RESTART_WINDOW] + [now]
        if len(self._deaths) > _MAX_RESTARTS:
            self.on_incident(f"the HTTP proxy {how}, {len(self._deaths)} times in "
                             f"{_RESTART_WINDOW:.0f} s: HTTP stays refused for the rest of the run",
                             False)
            return
        self.on_incident(f"the HTTP proxy {how}; restarting it (HTTP is refused meanwhile)",
                         True)
        try:
            self._listen()
        except OSError as exc:
            self.on_incident(f"the HTTP proxy could not be restarted ({exc.strerror}): "
                             "HTTP stays refused for the rest of the run", False)
            return
        try:
            self._serve()
        except ProxyUnavailable:
            return  # closing, or said by _serve
        self.on_restart(self.addresses)

    def _dispatch(self, message: dict) -> None:
        kind = message["kind"]
        if kind == _protocol.TRUST:
            if message.get("ca"):  # what a restarted proxy needs to serve the same CA
                self._config = replace(self._config, ca={"source": "inherited",
                                                         "pem": message["ca"]})
            self.trust_error = message.get("error")
            self._trust.set()
        elif kind == _protocol.AUDIT:
            self._on_event(message)


def _how_it_ended(returncode: int | None) -> str:
    if returncode is None:  # a forked proxy whose fork server went away first
        return "ended"
    if returncode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _listening_sockets() -> dict[int, socket]:
    listeners = {4: _listen(_socket.AF_INET, "127.0.0.1")}
    try:
        listeners[6] = _listen(_socket.AF_INET6, "::1")
    except OSError:
        pass  # no IPv6 loopback: IPv6 sockets use the v4-mapped route
    return listeners


def _listen(family: int, host: str) -> socket:
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        if family == _socket.AF_INET6:
            sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
        sock.bind((host, 0))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock
