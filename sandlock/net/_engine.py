"""The run's network confinement: compiled policy, pinned DNS, responder, supervisor, audit.

Built on a thread once the command has handed over its seccomp listener and exec'd
(see api._sandbox._NetworkLauncher); the kernel holds the command's network calls until the
supervisor reads them. DNS costs nothing until it is needed: names in the policy are pinned in the
background as soon as the command starts (its first IP destination waits for them);
otherwise the responder starts on the command's first DNS query.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from functools import partial

from ..confinement import ABSTRACT_UNIX_SOCKET_SCOPE, protection_disabled
from ..kernel import native_arch
from ..netcall import (Binder, ConfinedWorker, InetAddress, PathBind, SockAddress, Socket, UnixAddress,
                       become_the_command, execute, inet, perform)
from ..netrules import NetPolicy, PinTable, canonical_address, parse_allow, parse_deny, parse_ports, resolved_names
from ..proxy import HttpRules
from ._audit import Audit
from ._judge import ABSTRACT_SCOPE, OwnListeners, RunContext, unparked
from ._nests import NestRefused
from ._portmap import PortMap
from ._services import Services
from ._supervisor import Supervisor

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping, Sequence

    from .._auditlog import AuditLog
    from ..dns import SystemFiles
    from ..kernel import Listener, Notification, SharedDiag
    from ..netcall import Outcome, Request
    from ..netrules import PortSet
    from ..policy import Policy
    from ._http import HttpRun
    from ._judge import Decision
    from ._nesting import NestingService
    from ._udpsink import UdpSink
    from ._verdicts import NetworkCall

DNS_START_TIMEOUT = 30.0  # pinning is bounded by the resolver's lifetime, far below this


def compile_policy(policy: Policy) -> NetPolicy:
    """Policy's network fields (validated strings) -> the NetPolicy the verdict uses."""
    return NetPolicy(
        allow=tuple(map(parse_allow, policy.net_allow_specs)),
        deny=tuple(map(parse_deny, policy.net_deny)),
        bind_ports=_bind_ports(policy.net_bind),
        bind_denied=_bind_ports(policy.net_deny_bind),
        unix_paths=policy.unix_allow,
        http=HttpRules.parse(policy.http_allow, policy.http_deny, policy.http_auth),
        http_ports=frozenset(policy.http_ports),
    )


def _bind_ports(specs: Sequence[str]) -> PortSet | None:
    bind = None
    for spec in specs:
        ports = parse_ports(spec)
        bind = ports if bind is None else bind | ports
    return bind


def _http_texts(rules: HttpRules) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """HTTP rules as written (allow, deny): what ``HttpRules.parse`` takes back."""
    return tuple(rule.text for rule in rules.allow), tuple(rule.text for rule in rules.deny)


class Network(Services):
    """Everything that enforces one run's network policy; ``close`` when it ends."""

    def __init__(self, policy: Policy, ruleset_fd: int | None, audit_log: AuditLog | None, *,
                 quiet: bool, http: HttpRun | None = None,
                 review: Callable[[NetworkCall], int] | None = None, keeper: int = 0,
                 binder_fd: int | None = None, system: SystemFiles | None = None,
                 diag: SharedDiag | None = None) -> None:
        """``ruleset_fd``: the command's Landlock ruleset (owned from now on), for the
        confined worker, and ``http`` (the run's proxy): owned from now on; ``binder_fd``:
        sandlock's end of the channel to the binder in the sandbox's namespaces (owned;
        None: no namespaces, the confined worker binds socket files); ``diag``: a private
        network's sock_diag socket, to ask about its unix sockets (None: the host's);
        ``keeper``: the pid of the run's keeper (under the sandbox's filters, but its own);
        ``audit_log``: the run's (it closes it); ``review``: the runtime policy's word on
        each call; ``system``: the resolver's files as read before the command started
        (None: no name can be admitted, or read now)."""
        self._policy = policy
        self._system = system
        self._http = http
        self._rules = rules = compile_policy(policy)
        self._quiet = quiet
        self._keeper = keeper
        self.pins = PinTable()
        self.audit = Audit(audit_log, quiet)
        self._listeners = OwnListeners()
        if http is not None:  # never reachable directly, whatever the rules say
            self._proxy_listens(http.proxy.addresses)
            http.watch_restarts(self._proxy_listens)
            http.attach(self.audit.record_http)
        self._lock = threading.Lock()
        self._pins_ready: threading.Event | None = None
        self._dns_said = False  # the pinning's outcome was reported (or the run is over)
        self._waited_for_pins = False  # a call of the command waited for the pinning
        self._dns_setup: tuple[object, object, object] | None = None  # (settings, upstream, hosts)
        self._responder, self._responder_lock, self._closed = None, threading.Lock(), False
        self._ruleset_fd = ruleset_fd  # kept for a confined worker made on first need
        self._confined: ConfinedWorker | None = None
        self._binder_fd = binder_fd  # made a Binder on first need
        self._binder: Binder | None = None
        self._nesting: NestingService | None = None  # runs inside register there (_nesting)
        self._sink: UdpSink | None | bool = None  # where denied UDP connects go (_udpsink)
        context = RunContext(rules, self.pins, self._listeners,
                             ipc_scoped=not protection_disabled(policy, ABSTRACT_UNIX_SOCKET_SCOPE),
                             private_loopback=policy.net_private_loopback)
        context.own_sockets.shared = diag
        self._supervisor = Supervisor(native_arch(), context, self.audit, self, review,
                                      PortMap() if policy.port_remap else None)

    def start(self) -> None:
        """Pin the policy's names (before any call is handled: a call the supervisor
        reads at once must find pinning under way (``wait_for_pins``), or an IP
        destination would be judged without the pins)."""
        if self._rules.hostnames() or self._policy.resolve:
            self._start_pinning()

    def handle(self, listener: Listener, notification: Notification) -> None:
        """Answer one of the command's network calls (the run's loop read it)."""
        self._supervisor.handle(listener, notification)

    def ports(self) -> dict[int, int]:
        """--port-remap's virtual -> real ports the sandbox holds now (else none)."""
        ports = self._supervisor.ports
        return {} if ports is None else ports.ports()

    def held_bytes(self) -> int:
        """The bytes of the command's waiting sends the supervisor holds now (``_payload``)."""
        return self._supervisor.held.held

    def ask_about_memfds(self, memfd_passed: Callable[[], bool]) -> None:
        """Before the first call: ``memfd_passed()`` is asked when a send passes a memfd,
        True to refuse it (EPERM)."""
        self._supervisor.memfd_passed = memfd_passed

    def release(self, listener: Listener | None) -> None:
        """The run's loop is over: the listener goes once no worker holds a call."""
        self._supervisor.release(listener)

    def nest(self, texts: Mapping[str, Sequence[str]] | None, probe: socket.socket, name: str,
             trusted: bool = True, ruleset: int = -1) -> None:
        """A nested sandbox whose processes' calls these rules narrow (``texts``: lists
        of rules in the grammars of --net-allow, --net-deny, --net-bind, --http-allow
        and --http-deny, by "allow", "deny", "bind", "http_allow", "http_deny"; "scope":
        [ABSTRACT_SCOPE] if its processes' IPC is scoped; None: its network is the
        sandbox's), told apart by its resident on ``probe``, whose Landlock ``ruleset``
        (-1: none) its pathname binds are under too (both owned from now on; see
        ``_nests``). ValueError for a bad rule, or HTTP rules in a sandbox without a proxy."""
        from ._nests import Nests

        try:
            rules = self._nested_policy(texts) if texts is not None else None
        except BaseException:
            probe.close()
            if ruleset >= 0:
                os.close(ruleset)
            raise
        with self._lock:
            if self._closed:
                probe.close()
                if ruleset >= 0:
                    os.close(ruleset)
                return
            if self._supervisor.nests is None:
                self._supervisor.nests = Nests(self._keeper)
            self._supervisor.nests.add(rules, probe, name, trusted, ruleset)

    def _nested_policy(self, texts: Mapping[str, Sequence[str]]) -> NetPolicy:
        http = HttpRules.parse(tuple(texts.get("http_allow", ())), tuple(texts.get("http_deny", ())))
        if http and self._http is None:
            raise NestRefused("http_allow", "a nested sandbox's HTTP rules are applied by its "
                              "parent's proxy, and the parent has no HTTP rules (so no proxy)")
        return NetPolicy(allow=tuple(map(parse_allow, texts.get("allow", ()))),
                         deny=tuple(map(parse_deny, texts.get("deny", ()))),
                         bind_ports=_bind_ports(texts.get("bind", ())), http=http,
                         http_ports=self._rules.http_ports,
                         abstract_scoped=ABSTRACT_SCOPE in texts.get("scope", ()))

    def _proxy_listens(self, addresses: dict[int, tuple[str, int]]) -> None:
        self._listeners.others = frozenset((ip, port) for ip, port in addresses.values())

    # --- Services (for the supervisor) ---------------------------------------------

    def nesting_target(self) -> UnixAddress | int:
        from ._nesting import NestingService

        with self._lock:
            if self._closed:
                return errno.ECONNREFUSED
            if self._nesting is None:
                try:
                    self._nesting = NestingService(partial(self.nest, trusted=False))
                except OSError as exc:
                    return exc.errno or errno.ECONNREFUSED
            return self._nesting.target

    def wait_for_pins(self) -> None:
        ready = self._pins_ready
        if ready is not None and not ready.is_set():
            self._await_pins(ready)

    def _await_pins(self, ready: threading.Event) -> None:
        """A call of the command waits for the pinning: if the run ends before it is
        over, the names still being resolved are worth a word (``close``)."""
        self._waited_for_pins = True
        ready.wait(DNS_START_TIMEOUT)

    def dns_responder(self, protocol: str, family: int) -> InetAddress | None:
        ready = self._start_pinning()
        if not ready.is_set():
            self._await_pins(ready)
        self._bring_responder_up()
        address = self._listeners.dns_tcp if protocol == "tcp" else self._listeners.dns_udp
        if address is None:
            return None
        return InetAddress(family, address.address, address.port)  # v4-mapped on IPv6 sockets

    def proxy_target(self, sock: Socket, destination: InetAddress, pid: int,
                     nested: tuple[NetPolicy, ...] = ()) -> InetAddress | int:
        """Steer ``sock`` to the proxy: bind it to a known local address, tell the proxy
        where it meant to go (and the HTTP rules of the nested sandboxes the thread is
        in), and return the proxy's address (or an errno)."""
        from ..proxy._launcher import ProxyUnavailable
        from ..proxy._protocol import Route

        proxy = self._http.proxy
        if proxy is None:  # the run is ending
            return errno.ECONNREFUSED
        local = execute.local_address_for_redirect(sock)
        if isinstance(local, int):
            return local
        listener = proxy.address_for(local[0])
        if listener is None:
            return errno.ENETUNREACH
        address = canonical_address(destination.address)
        names = tuple(sorted(self.pins.names_for(address)))
        try:
            proxy.route(Route(local, (str(address), destination.port), names, pid,
                              tuple(_http_texts(rules.http) for rules in nested if rules.http)))
        except ProxyUnavailable:
            return errno.ECONNREFUSED
        return inet(sock.family, *listener)

    def park(self, request: Request, decision: Decision,
             record: Callable[[Request, SockAddress, Decision], None]) -> Outcome:
        with self._lock:
            if self._sink is None and not self._closed:
                from ._udpsink import UdpSink  # (only runs whose UDP connects are denied)

                try:
                    self._sink = UdpSink()
                except OSError:
                    self._sink = False  # (no loopback to bind: refused as the rules say)
                else:
                    self._listeners.sinks = self._sink.addresses
            sink = self._sink
        if not sink:
            denial = unparked(decision)
            record(request, request.address, denial)
            return -1, denial.error
        return sink.park(request, decision, record)

    def confined_worker(self) -> ConfinedWorker:
        with self._lock:
            if self._confined is None:
                self._confined = ConfinedWorker(self._restrict)
            return self._confined

    def _restrict(self) -> None:
        """Make the calling thread as restricted as the command (Landlock and
        capabilities are per thread)."""
        become_the_command(self._ruleset_fd if self._ruleset_fd is not None else -1)

    def bind_path(self, sock: int, bind: PathBind, rulesets: tuple[int, ...]) -> int:
        if self._binder_fd is not None:  # in the sandbox's mount namespace
            with self._lock:
                if self._binder is None:
                    self._binder = Binder(self._binder_fd)
            return self._binder.bind(sock, bind, rulesets)
        # Without namespaces, the host's: the confined worker is the command's equal.
        return self.confined_worker().call(lambda: (perform(sock, bind, rulesets), 0))[0]

    # --- DNS -------------------------------------------------------------------------

    def _start_pinning(self) -> threading.Event:
        with self._lock:
            if self._pins_ready is None:
                self._pins_ready = threading.Event()
                threading.Thread(target=self._run_pinning, daemon=True,
                                 name="sandlock-dns-pinning").start()
            return self._pins_ready

    def _run_pinning(self) -> None:
        try:
            self._pin_names()
        except Exception as exc:  # noqa: BLE001 - DNS stays down: lookups fail, nothing opens
            print(f"sandlock: warning: DNS for the sandbox could not start: {exc}",
                  file=sys.stderr, flush=True)
        finally:
            self._pins_ready.set()

    def _pin_names(self) -> None:
        """Pin the policy's names (on the pinning thread). Names given with --resolve
        need nothing more: no resolver, no dnspython."""
        from ..dns import DnsSettings, HostsFile, SystemFiles, Upstream, pin_at_start

        settings = DnsSettings.from_policy(self._policy)
        names = self._rules.hostnames()
        system = self._system or SystemFiles.read()  # (no rules admit a name: harmless)
        hosts = HostsFile.of(system)
        unpinned = {name for name in names - {name for name, _ in settings.static}
                    if hosts.before_dns(name) is None}
        needs_upstream = bool(unpinned) or self._rules.resolves_unlisted_names
        upstream = Upstream(settings, resolv_text=system and system.resolv_conf) \
            if needs_upstream else None
        warnings = pin_at_start(names, settings, self.pins, upstream, hosts)
        with self._lock:  # said once: here, or by close() if the run ended first
            self._dns_said = True
            self._dns_setup = (settings, upstream, hosts)
        if not self._quiet:
            for warning in warnings:
                print(warning, file=sys.stderr, flush=True)

    def _bring_responder_up(self) -> None:
        """Start the command's DNS server at its first lookup (dnspython costs ~40 ms
        to import: a run that never asks does not pay it)."""
        with self._responder_lock:
            if self._responder is not None or self._dns_setup is None:
                return  # up already, or pinning failed: lookups fail
            from ..dns import DnsResponder

            settings, upstream, hosts = self._dns_setup
            reason = "no --net-allow or --http-allow rule" if self._rules.http else "no --net-allow rule"
            responder = DnsResponder(self.pins, self._rules, upstream, settings, hosts=hosts,
                                     on_refused=partial(self.audit.lookup_denied, reason=reason))
            with self._lock:
                if self._closed:
                    return
                responder.start()
                self._responder = responder
            self._listeners.dns_udp = inet(2, *responder.udp_address)
            self._listeners.dns_tcp = inet(2, *responder.tcp_address)

    def _say_still_resolving(self) -> None:
        """The run ended before the names were pinned: say so, naming them, rather than
        let a slow or silent DNS server go unnoticed."""
        given = resolved_names(self._policy.resolve)  # pinned without DNS
        pending = sorted(name for name in self._rules.hostnames() - given
                         if self.pins.addresses(name) is None)
        if pending:
            print(f"sandlock: warning: the command ended while sandlock was still resolving "
                  f"{', '.join(pending)} (slow or silent DNS server?); "
                  "it would not have been reachable before that", file=sys.stderr, flush=True)

    def close(self) -> str | None:
        """Stop everything (after the run's loop); returns the denial summary line, if
        any denial happened."""
        self._supervisor.release(None)
        with self._lock:
            self._closed = True
            responder = self._responder
            # Said only if the command needed the names meanwhile: a quick command that
            # never looked anything up ended before a prompt server answered, that is all.
            unsaid = self._pins_ready is not None and not self._dns_said and self._waited_for_pins
            self._dns_said = True
        if unsaid and not self._quiet:
            self._say_still_resolving()
        if responder is not None:
            responder.stop()
        if self._sink:
            self._sink.stop()
        if self._nesting is not None:
            self._nesting.close()
        if self._confined is not None:
            self._confined.stop()
        if self._binder is not None:
            self._binder.close()
        elif self._binder_fd is not None:
            os.close(self._binder_fd)
        if self._ruleset_fd is not None:
            os.close(self._ruleset_fd)
        if self._http is not None:
            self._http.close()
        return self.audit.summary()

