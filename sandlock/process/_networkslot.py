"""The run's network engine, from the supervision's side: built when it is first needed
(at the command's first network call, or at once when DNS must pin the policy's names
at start; ~10 ms of imports a command that never makes one never pays), answering one
call at a time, and ended with the run. Until it is built it owns what it will be
given (the HTTP proxy, the ruleset its confined worker takes)."""

from __future__ import annotations

import _thread
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from .._auditlog import AuditLog
    from ..kernel import Listener, Notification, SharedDiag
    from ..net import HttpRun, Network, NetworkCall
    from ..policy import Policy


# The keeper sends it microseconds after forking init, before the command exists: a
# longer wait means the keeper is gone (the sandbox with it).
_DIAG_TIMEOUT = 10.0


class NetworkSlot:
    def __init__(self, policy: Policy, ruleset_fd: int | None, audit: AuditLog | None, quiet: bool,
                 http: HttpRun | None, review: Callable[[NetworkCall], int] | None,
                 closed: Callable[[], bool], built: Callable[[Network], None] | None = None,
                 binder_fd: int | None = None) -> None:
        """``ruleset_fd``, ``http`` and ``binder_fd`` (the channel to the binder in the
        sandbox) are owned from now on; ``review``: policy_fn's
        word on a judged call; ``closed``: whether the run has ended (a build that fails
        then has nothing to say); ``built``: told of the engine once it runs."""
        self._policy, self._ruleset_fd, self._audit, self._quiet = policy, ruleset_fd, audit, quiet
        self._http, self._review, self._closed, self._built = http, review, closed, built
        self._binder_fd = binder_fd
        # The resolver's files, read now, before the command exists to change them.
        self._system = None
        if policy.net_allow_specs or policy.net_deny or policy.has_http_rules:
            from ..dns import SystemFiles

            self._system = SystemFiles.read()
        self.keeper = 0  # its pid (the engine counts the sandbox's seccomp filters on it)
        self.diag: SandboxDiag | None = None  # a private network's sock_diag socket
        self._handling = _thread.allocate_lock()  # network calls: one at a time
        self._network: Network | None = None
        self._failed = False

    def build_now(self) -> None:
        with self._handling:
            self._build()

    def handle(self, listener: Listener, notification: Notification) -> None:
        listener.defer_answers()  # sent once the engine's lock is let go
        try:
            with self._handling:  # the network engine answers one call at a time
                network = self._network or self._build()
                if network is None:  # fail closed: the command's network calls fail
                    listener.reply(notification.id, error=errno.ENOSYS)
                    return
                network.handle(listener, notification)
        finally:
            try:
                listener.send_deferred()
            except OSError as exc:  # (only a bug of ours): said, and this receiver goes on
                print(f"sandlock: internal error answering a network call: {exc}",
                      file=sys.stderr, flush=True)

    def _build(self) -> Network | None:
        if self._network is not None or self._failed:
            return self._network
        from ._receiving import responsive_switching

        try:
            with responsive_switching:
                from ..net import Network

                review = self._reviewed if self._review is not None else None
                network = Network(self._policy, self._ruleset_fd, self._audit, quiet=self._quiet,
                                  http=self._http, review=review, keeper=self.keeper,
                                  binder_fd=self._binder_fd, system=self._system,
                                  diag=self.diag.get() if self.diag else None)
        except BaseException as exc:
            self._failed = True
            if self._http is not None:
                self._http.close()
            if self._closed():
                return None  # the run ended meanwhile (its proxy with it): nothing to say
            print(f"sandlock: error: the network supervisor could not start: {exc}",
                  file=sys.stderr, flush=True)
            return None
        self._ruleset_fd = self._binder_fd = None  # the engine's now
        network.start()
        if self._built is not None:
            self._built(network)
        self._network = network
        return network

    def ports(self) -> dict[int, int]:
        """The virtual -> real ports of --port-remap (none before the first network call)."""
        network = self._network
        return {} if network is None else network.ports()

    def nest(self, rules: dict[str, list[str]] | None, probe: socket.socket, name: str,
             ruleset: int) -> None:
        """A nested sandbox's own network rules (None: the sandbox's) and Landlock
        ruleset (net._nests); ``probe`` and ``ruleset``: owned."""
        with self._handling:
            network = self._network or self._build()
        if network is None:
            probe.close()
            os.close(ruleset)
            from .._errors import SetupError

            raise SetupError("the sandbox's network supervisor could not start")
        network.nest(rules, probe, name, ruleset=ruleset)

    def _reviewed(self, call: NetworkCall) -> int:
        """policy_fn's word on a network call. The engine asks with ``_handling`` held
        (a judged call, nothing half done): it is let go meanwhile, so that a slow
        callback holds back only the thread that made this call."""
        self._handling.release()
        try:
            return self._review(call)
        finally:
            self._handling.acquire()

    def release(self, listener: Listener | None) -> None:
        """The last receiver is over: the listener closes once no network worker holds a
        call (the engine stays for close(), which ends it)."""
        if self._network is not None:
            self._network.release(listener)
        elif listener is not None:
            listener.close_when_idle()

    def close(self) -> str | None:
        """End the engine; its summary of what it refused, if any."""
        if self.diag is not None:  # (the memory watch has stopped: Supervision.close)
            self.diag.close()
        if self._network is not None:
            return self._network.close()
        # Not built: what it would have owned is closed here. The proxy is ended here
        # and now (idempotent), so that it never outlives sandlock.
        if self._http is not None:
            self._http.close()
        for fd in (self._ruleset_fd, self._binder_fd):
            if fd is not None:
                os.close(fd)
        return None


class SandboxDiag:
    """A private network's sock_diag socket, which its keeper sends on the binder's
    channel once init is forked: received at the first need (the engine's, before any
    request to the binder; or the memory watch's) and shared, a SharedDiag."""

    def __init__(self, channel: int) -> None:
        self._channel = channel  # (the engine's, open until after the watches stop)
        self._lock = _thread.allocate_lock()
        self._shared: SharedDiag | None = None
        self._received = False

    def get(self) -> SharedDiag | None:
        """None if the keeper sent none (then the sandbox's own unix sockets are
        refused, as the notice says, and the memory watch does not start)."""
        with self._lock:
            if not self._received:
                self._received = True
                from ..kernel import netns

                fd = netns.receive_diag_socket(self._channel, _DIAG_TIMEOUT)
                if fd >= 0:
                    import socket

                    from ..kernel import SharedDiag

                    self._shared = SharedDiag(socket.socket(fileno=fd))
            return self._shared

    def close(self) -> None:
        with self._lock:
            self._received = True
            if self._shared is not None:
                self._shared.socket.close()
