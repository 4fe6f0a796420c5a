"""The verdict on one network call, as the supervisor asks for it: the pure judgement
(``_judge``) of the destination it names, then what the run adds around it (the
sandbox's own sockets and listeners recognised, nested sandboxes' narrowing,
policy_fn's word, a denied UDP connect parked) and the audit record it leaves."""

from __future__ import annotations

from .._record import replace
from ..netcall import InetAddress
from ._judge import OWN_LISTENER_REASON, judge_destination, judge_message, named, park
from ._nests import narrowed
from ._review import reviewed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netcall import Message, Request, SockAddress
    from ._audit import Audit
    from ._judge import Decision, RunContext
    from ._listening import SandboxListeners
    from ._portmap import PortMap
    from ._review import NetworkCall
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
