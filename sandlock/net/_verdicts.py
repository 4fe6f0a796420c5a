"""The verdict on one network call, as the supervisor asks for it: the pure judgement
(``_judge``) of the destination it names, then what the run adds around it (the
sandbox's own sockets and listeners recognised, nested sandboxes' narrowing,
policy_fn's word, a denied UDP connect parked) and the audit record it leaves.

policy_fn's is a second opinion (``reviewed``): the run's runtime policy sees each IP
destination the static policy has judged (``NetworkCall``) and may refuse what it
allows, never the reverse."""

from __future__ import annotations

import errno

from .._record import record, replace
from ..netcall import InetAddress
from ..netrules import Verdict
from ._judge import OWN_LISTENER_REASON, Decision, judge_destination, judge_message, named, park
from ._nests import narrowed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netcall import Message, Request, SockAddress
    from ..netrules import IPAddress
    from ._audit import Audit
    from ._judge import RunContext
    from ._listening import SandboxListeners
    from ._portmap import PortMap
    from ._services import Services


class Verdicts:
    def __init__(self, context: RunContext, services: Services, audit: Audit,
                 listening: SandboxListeners, review: Callable[[NetworkCall], int] | None,
                 ports: PortMap | None = None) -> None:
        self._context, self._services, self._audit = context, services, audit
        self._listening, self._review, self._ports = listening, review, ports

    def decide(self, request: Request, address: SockAddress | None, *,
               binding: bool = False) -> Decision:
        if isinstance(address, InetAddress):
            self._services.wait_for_pins()
        if not binding:
            address = self._context.own_sockets.identify(address)
        decision = judge_destination(request.socket, address, self._context, binding=binding)
        real = address  # --port-remap: a virtual port's real one, on loopback
        if self._ports is not None and not binding and request.socket.transport == "tcp":
            real = self._ports.real_address(address)
        if real is not address:  # there only to the sandbox's own listener (asked now)
            own = self._listening.reach(request.syscall, real, replace(decision, target=None))
            if own.verdict.reason == OWN_LISTENER_REASON:  # (else: where the verdict looked)
                decision = own
        elif not decision.allowed:  # the sandbox's own server, on loopback?
            decision = self._listening.reach(request.syscall, address, decision)
        if request.nested:
            decision = self.narrowed(request, address, decision)
        judged = decision
        decision = park(request.syscall, judged, reviewed(
            self._review, request.notification.pid, request.syscall, address, judged))
        self.record(request, address, decision)
        return decision

    def message(self, request: Request, message: Message) -> Decision:
        if isinstance(message.destination, InetAddress):
            self._services.wait_for_pins()
        identified = self._context.own_sockets.identify(message.destination)
        if identified is not message.destination:
            message = replace(message, destination=identified)
        decision = judge_message(request.socket, message, self._context)
        if request.nested:
            decision = self.narrowed(request, message.destination, decision)
        decision = reviewed(self._review, request.notification.pid, request.syscall,
                            message.destination, decision)
        self.record(request, message.destination, decision)
        return decision

    def narrowed(self, request: Request, address: SockAddress | None, decision: Decision) -> Decision:
        for rules in request.nested:  # (only once nested sandboxes have network rules)
            decision = narrowed(rules, self._context.pins, request.syscall, address, decision,
                                self._context.own_sockets)
        return decision

    def record(self, request: Request, address: SockAddress | None, decision: Decision) -> None:
        if decision.allowed and not self._audit.logs_allowed:
            return  # the hot path: nothing to write, nothing to say
        if decision.audited and address is not None:
            if isinstance(address, InetAddress) and decision.verdict.hostname:
                decision = named(decision, address, self._context)  # (names sharing an IP)
            self._audit.record(
                pid=request.notification.pid, syscall=request.syscall, protocol=decision.protocol,
                address=address, verdict=decision.verdict,
                redirected=decision.redirected,
            )


@record
class NetworkCall:
    """One destination of one call, as judged: ``tid`` the calling thread; ``host``
    the pinned name of ``address``, if any; ``denied`` the static verdict; ``lookup``:
    a DNS query, answered by sandlock's responder from the pinned table."""

    tid: int
    syscall: str
    protocol: str
    address: IPAddress
    port: int
    host: str | None
    denied: bool
    lookup: bool = False


def reviewed(review: Callable[[NetworkCall], int] | None, tid: int, syscall: str,
             address: object, decision: Decision) -> Decision:
    """``decision``, or a refusal if ``review`` (an errno, 0 to allow) refuses an IP
    destination; it is asked about refused ones too (``denied``), to observe."""
    if review is None or not isinstance(address, InetAddress) or not decision.protocol:
        return decision
    call = NetworkCall(tid, syscall, decision.protocol, address.address, address.port,
                       decision.verdict.hostname, not decision.allowed, decision.to_dns_responder)
    error = review(call)
    if not error or not decision.allowed:
        return decision
    verdict = Verdict(False, "refused by policy_fn", decision.verdict.hostname)
    return Decision(False, None, verdict, decision.protocol, error or errno.EPERM)
