"""Verdict: materialized requests -> decisions. Pure: no I/O, no child access.

NetPolicy decides about endpoints; this module adds what depends on the socket and the
run rather than on the rules: which family is judged how, where DNS goes, that
sandlock's own service ports are never reachable directly, and that abstract unix
sockets follow Landlock's IPC scoping.
"""

from __future__ import annotations

import errno
import os

from .._record import field, record, replace
from ..netcall import AF_NETLINK, InetAddress, Message, OtherAddress, SockAddress, Socket, UnixAddress
from ..netrules import Endpoint, NetPolicy, PinTable, Verdict, canonical_address, rules_admit, unmapped
from ._ownsockets import SandboxSockets


@record(frozen=False)
class OwnListeners:
    """sandlock's own listeners the child's traffic may be steered to.

    Filled in as they start (the DNS responder may start on the first DNS query);
    before that there is nothing of sandlock's to reach.
    """

    dns_udp: InetAddress | None = None
    dns_tcp: InetAddress | None = None
    others: frozenset[tuple[str, int]] = frozenset()  # e.g. the HTTP proxy
    sinks: tuple[InetAddress | None, ...] = ()  # the UDP sink's (``_udpsink``)

    def own(self, address: InetAddress) -> bool:
        """Is ``address`` one of sandlock's listeners (never reachable directly)?"""
        port = address.port
        listeners = (self.dns_udp, self.dns_tcp, *self.sinks)
        if not self.others and all(a is None or a.port != port for a in listeners):
            return False  # the common case, decided without building anything
        key = (str(canonical_address(address.address)), port)
        return key in self.others or any(
            a is not None and key == (str(a.address), a.port) for a in listeners)


class InetDecisions:
    """Decisions about IP endpoints, kept while what they depend on stays the same.

    Such a decision is a function of the transport, the address (all its fields),
    whether it is a bind, and of the run: the policy (immutable), the pins (which only
    grow: ``PinTable.version``) and sandlock's own listeners (set as they start). All
    entries are dropped as soon as pins or listeners differ from when they were made.
    Used from the supervisor thread.
    """

    LIMIT = 4096  # distinct endpoints; past it, start over

    def __init__(self) -> None:
        self._state: tuple[object, ...] = ()
        self._decisions: dict[tuple[str, InetAddress, bool], Decision] = {}

    def decide(self, protocol: str, address: InetAddress, ctx: RunContext, binding: bool) -> Decision:
        listeners = ctx.listeners
        # Read before judging: a pin made meanwhile makes the next call start over.
        state = (ctx.pins.version, listeners.dns_udp, listeners.dns_tcp, listeners.others,
                 listeners.sinks)
        key = (protocol, address, binding)
        if state == self._state:
            decision = self._decisions.get(key)
            if decision is not None:
                return decision
        if state != self._state or len(self._decisions) >= self.LIMIT:
            self._decisions = {}
            self._state = state
        decision = self._decisions[key] = _judge_inet(protocol, address, ctx, binding)
        return decision


@record
class RunContext:
    policy: NetPolicy
    pins: PinTable
    listeners: OwnListeners
    ipc_scoped: bool  # abstract unix sockets outside the sandbox are off limits
    private_loopback: bool = False  # --net-private-loopback: loopback is the sandbox's own
    own_sockets: SandboxSockets = field(factory=SandboxSockets)
    inet_decisions: InetDecisions = field(factory=InetDecisions, compare=False, repr=False)


@record
class Decision:
    """What to do with one destination: perform (maybe redirected) or refuse."""

    allowed: bool
    target: SockAddress | None  # the address to use when allowed (None: DNS responder)
    verdict: Verdict  # for the audit log and the notice
    protocol: str  # tcp/udp/icmp/unix/... as shown in the audit log
    error: int = errno.EACCES  # errno when refused

    @property
    def to_dns_responder(self) -> bool:
        return self.allowed and self.verdict.redirect_dns

    @property
    def to_proxy(self) -> bool:
        return self.allowed and self.verdict.redirect_proxy

    @property
    def parked(self) -> bool:
        """A denied UDP connect performed to sandlock's sink instead (``park``)."""
        return self.target is None and self.allowed and self.verdict.reason.startswith(PARKED)

    @property
    def redirected(self) -> bool:
        """Performed, but somewhere else than asked (the audit log's "redirect")."""
        return self.to_dns_responder or self.to_proxy or self.parked

    @property
    def audited(self) -> bool:
        """Unix and netlink traffic the rules do not govern is not logged."""
        return self.protocol not in ("", "netlink", "unspec")


_ALLOWED_UNGOVERNED = Verdict(True, "not governed by network rules")
OWN_SERVICE = Verdict(False, "sandlock's own service port")  # never reachable directly
_AF_UNSPEC = 0
# Ancillary data that sets IP options or an IPv6 routing header: a source route sends
# the packet to its first hop, an address no verdict has seen. (level, type):
# IP_RETOPTS, IPV6_RTHDR, IPV6_2292RTHDR. The setsockopt forms are refused by seccomp.
SOURCE_ROUTING_CONTROL = frozenset({(0, 7), (41, 57), (41, 5)})
_SCM_CREDENTIALS = (1, 2)  # (SOL_SOCKET, SCM_CREDENTIALS)


def judge_destination(sock: Socket, address: SockAddress | None, ctx: RunContext,
                      *, binding: bool = False) -> Decision:
    """Decide about sending to / connecting to / binding ``address`` on ``sock``."""
    if address is None:
        # A send on a connected socket: its peer was judged when it connected.
        return Decision(True, None, _ALLOWED_UNGOVERNED, "")
    if isinstance(address, InetAddress):
        protocol = sock.transport
        if not protocol:  # an IP address on a unix/netlink socket: the kernel refuses it
            return Decision(False, None, Verdict(False, "address family mismatch"), "", errno.EAFNOSUPPORT)
        return ctx.inet_decisions.decide(protocol, address, ctx, binding)
    if isinstance(address, UnixAddress):
        return _judge_unix(address, ctx, binding)
    return _judge_other(address, binding)


def judge_message(sock: Socket, message: Message, ctx: RunContext) -> Decision:
    """One message of sendto/sendmsg/sendmmsg: its destination and its ancillary data."""
    protocol = sock.transport  # "" unless an IP socket
    if _SCM_CREDENTIALS in message.control_kinds:
        # Sent on the command's behalf, the kernel would check and stamp them as
        # sandlock's: a pid, uid or gid the command could never claim itself.
        verdict = Verdict(False, "SCM_CREDENTIALS (they would be sandlock's, not the command's)")
        return Decision(False, None, verdict, protocol or "unix", errno.EPERM)
    if protocol and not SOURCE_ROUTING_CONTROL.isdisjoint(message.control_kinds):
        verdict = Verdict(False, "IP options or routing header (source routing)")
        return Decision(False, None, verdict, protocol, errno.EPERM)
    destination = message.destination
    if isinstance(destination, OtherAddress) and destination.family == _AF_UNSPEC:
        # Not a disconnect here: an IPv4 UDP send reads it as an AF_INET address.
        verdict = Verdict(False, "AF_UNSPEC destination")
        return Decision(False, None, verdict, protocol, errno.EAFNOSUPPORT)
    return judge_destination(sock, destination, ctx)


def judge_listen(sock: Socket, local: SockAddress, ctx: RunContext) -> Decision:
    """listen(): TCP servers need --net-allow-bind; unix and others are not governed."""
    if not isinstance(local, InetAddress) or sock.transport != "tcp":
        return Decision(True, local, _ALLOWED_UNGOVERNED, "")
    if ctx.private_loopback:  # (performed only on a socket of the sandbox's namespace)
        return Decision(True, local, PRIVATE_LOOPBACK, "tcp")
    endpoint = Endpoint("tcp", canonical_address(local.address), local.port)
    verdict = ctx.policy.listen(endpoint)
    return Decision(verdict.allowed, local, verdict, "tcp")


def _judge_inet(protocol: str, address: InetAddress, ctx: RunContext, binding: bool) -> Decision:
    endpoint = Endpoint(protocol, canonical_address(address.address), address.port)
    if binding:
        if ctx.private_loopback:  # (performed only on a socket of the sandbox's namespace)
            return Decision(True, address, PRIVATE_LOOPBACK, protocol)
        verdict = ctx.policy.bind(endpoint)
        return Decision(verdict.allowed, address, verdict, protocol)
    own = ctx.listeners.own(address)
    if own and not (ctx.private_loopback and endpoint.address.is_loopback):
        return Decision(False, None, OWN_SERVICE, protocol)
    verdict = ctx.policy.connect(endpoint, ctx.pins)
    if ctx.private_loopback and endpoint.address.is_loopback and (own or not verdict.allowed):
        # Not a destination of the host's the rules allow: the sandbox's own loopback.
        return Decision(True, address, PRIVATE_LOOPBACK, protocol)
    # A DNS redirect leaves target None: the responder's address is filled in by the
    # supervisor, which starts the responder on first use.
    if verdict.redirect_dns:
        return Decision(verdict.allowed, None, verdict, protocol)
    if unmapped(address.address).is_unspecified:
        # The kernel would pick the socket's own bound address (bind(127.0.0.2);
        # connect(0.0.0.0) reaches 127.0.0.2): go where the verdict looked instead.
        address = replace(address, address=endpoint.address)
    return Decision(verdict.allowed, address, verdict, protocol)


# A UDP connect sends nothing: it sets where the socket's sends go. One the rules deny
# is performed to sandlock's sink (``_udpsink``) rather than refused, and its denial
# said when a datagram arrives there: glibc's getaddrinfo connects a UDP socket to each
# candidate address to learn its source address (RFC 6724 sorting) and sends nothing.
PARKED = "parked at sandlock's UDP sink, denied: "


def park(syscall: str, judged: Decision, decision: Decision) -> Decision:
    """``decision``, or, for a UDP connect the rules (``judged``) deny, the decision to
    perform it to the sink. Not one that policy_fn refused (its errno is its own), nor
    one aimed at sandlock's own services (no address lookup ever gives those)."""
    if (decision.allowed or decision is not judged or syscall != "connect"
            or decision.protocol != "udp" or decision.error != errno.EACCES
            or decision.verdict is OWN_SERVICE):
        return decision
    verdict = Verdict(True, PARKED + decision.verdict.reason, decision.verdict.hostname)
    return Decision(True, None, verdict, "udp")


def unparked(decision: Decision) -> Decision:
    """The denial a parked decision stands for (said at the socket's first datagram)."""
    verdict = Verdict(False, decision.verdict.reason[len(PARKED):], decision.verdict.hostname)
    return Decision(False, None, verdict, "udp")


def named(decision: Decision, address: InetAddress, ctx: RunContext) -> Decision:
    """``decision`` with the hostname its audit record gives: of the names pinned to the
    address, the one the command's last lookup that gave it asked for (two names may
    share an address), if that name's own rules reach it; else the verdict's. Only
    for records: the verdict is the same for every name."""
    verdict = decision.verdict
    address_judged = canonical_address(address.address)
    name = ctx.pins.last_answered(address_judged)
    if name is None or name == verdict.hostname or name not in ctx.pins.names_for(address_judged):
        return decision
    if verdict.allowed and not ctx.policy.deny and decision.protocol in ("tcp", "udp", "icmp"):
        endpoint = Endpoint(decision.protocol, address_judged, address.port)
        if not (rules_admit(ctx.policy.allow, endpoint, frozenset({name}))
                or verdict.redirect_proxy and ctx.policy.http.admits_name(name)):
            return decision  # (reached through another name's rule: that one is named)
    return replace(decision, verdict=replace(verdict, hostname=name))


# A nested sandbox whose IPC is scoped says so in its rules ("scope"): abstract unix
# sockets bound outside it are then off limits to its processes (``_nests.narrowed``).
ABSTRACT_SCOPE = "abstract-unix"

# Where a run inside the sandbox registers its network rules: an abstract name, never
# looked up (anything could bind it): the connect goes to sandlock's service instead.
NESTING_NAME = b"sandlock-nesting"
TO_NESTING = Verdict(True, "sandlock's nesting service")


# --net-private-loopback: loopback in the sandbox's own network namespace, where
# nothing but the sandbox lives (binds, listens, and the loopback destinations the
# rules do not give to the host's). Performed on the command's socket only if that
# socket is of that namespace (``_privatenet``).
PRIVATE_LOOPBACK = Verdict(True, "the sandbox's private loopback")

# A socket the sandbox bound itself (``SandboxSockets``): its own IPC.
OWN_SOCKET = Verdict(True, "bound inside the sandbox")
# A TCP port the sandbox listens on itself, reached on loopback (``_listening``).
OWN_LISTENER_REASON = "the sandbox's own listener, on loopback"
LISTENER_TAKEN_REASON = "the sandbox's listener on that port was closed and the port taken"


def _judge_unix(address: UnixAddress, ctx: RunContext, binding: bool) -> Decision:
    if address.unnamed:
        # Passed on as it is: bind autobinds (a name the kernel chooses), connect and
        # send get the kernel's own EINVAL. Never the abstract name "" instead.
        return Decision(True, address, _ALLOWED_UNGOVERNED, "")
    if binding:
        # Creating a socket file is a filesystem operation: the confined worker
        # performs it, so Landlock decides, exactly as for the command itself (and the
        # socket is remembered as the sandbox's own).
        return Decision(True, address, _ALLOWED_UNGOVERNED, "unix")
    if address.abstract and address.path == NESTING_NAME:  # whoever bound that name
        return Decision(True, None, TO_NESTING, "unix")
    if address in ctx.own_sockets:
        return Decision(True, address, OWN_SOCKET, "unix")
    if address.abstract:
        if ctx.ipc_scoped:
            verdict = Verdict(False, "abstract unix sockets are scoped (--allow-ipc lifts it)")
            return Decision(False, None, verdict, "unix", errno.EPERM)
        return Decision(True, address, Verdict(True, "--allow-ipc"), "unix")
    verdict = ctx.policy.unix_connect(os.fsdecode(address.path))
    return Decision(verdict.allowed, address, verdict, "unix")


def _judge_other(address: OtherAddress, binding: bool) -> Decision:
    if address.family == AF_NETLINK:  # socket() already allows only NETLINK_ROUTE
        return Decision(True, address, _ALLOWED_UNGOVERNED, "netlink")
    if address.family == _AF_UNSPEC and not binding:  # connect(): dissolve an association
        return Decision(True, address, _ALLOWED_UNGOVERNED, "unspec")
    # (bind() reads AF_UNSPEC with INADDR_ANY as AF_INET: it would skip --net-allow-bind.)
    return Decision(False, None, Verdict(False, f"address family {address.family}"), "",
                    errno.EAFNOSUPPORT)
