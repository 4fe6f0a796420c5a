"""The network supervisor: notification -> materialize -> verdict -> execute -> reply.

Runs in sandlock's process, on the run's supervision thread, which reads each call and
hands the network's here (``handle``). Every allowed operation is performed from
sandlock's copies, on a duplicate of the child's socket, so nothing the child changes
after the check can matter: here, or, for what must be done as the command, by a
thread that is its equal (the confined worker; the binder, for a socket file in the
sandbox's mount namespace: ``_binder``). The kernel never proceeds with a judged call.
Operations that may block (on blocking sockets) run on worker threads, so a connect
to a silent host never delays the other notifications.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

from .._errors import tell
from .._record import replace
from ..kernel import (
    SUPERVISED,
    Arch,
    Gone,
    Listener,
    Notification,
    open_pidfd,
)
from ..netcall import (
    AF_UNIX,
    NAME_CALLS,
    Deferred,
    HeldBytes,
    InetAddress,
    Message,
    Outcome,
    PidfdCache,
    Refused,
    Request,
    SockAddress,
    UnixAddress,
    WorkerPool,
    execute,
    materialize,
    passes_memfd,
    sending,
)
from ..netrules import Verdict
from ._audit import Audit
from ._judge import (
    OWN_LISTENER_REASON,
    OWN_SOCKET,
    TO_NESTING,
    Decision,
    RunContext,
    judge_listen,
)
from ._listening import SandboxListeners
from ._nests import Nests
from ._services import Services
from ._verdicts import Verdicts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._portmap import PortMap
    from ._privatenet import PrivateNetwork
    from ._verdicts import NetworkCall

# Performed on the confined worker, a thread with the command's Landlock domain and
# capabilities: unix binds create files; netlink checks the capabilities of the thread
# that binds, connects or sends (sandlock's own, root's perhaps, would be lent out).
_AS_THE_COMMAND = ("unix", "netlink")


class Supervisor:
    def __init__(self, arch: Arch, context: RunContext, audit: Audit, services: Services,
                 review: Callable[[NetworkCall], int] | None = None,
                 ports: PortMap | None = None) -> None:
        """``review``: the runtime policy's word on each judged IP destination;
        ``ports``: the virtual port space (--port-remap; the name calls come too)."""
        self.memfd_passed: Callable[[], bool] | None = None  # a send passes a memfd: refuse?
        self._names = {arch.numbers[name]: name
                       for name in (*SUPERVISED, *(NAME_CALLS if ports is not None else ()))}
        self.ports = ports
        self._context = context
        self._services = services
        self._audit = audit
        self._workers = WorkerPool()
        self.held = HeldBytes()  # bytes of waiting sends copied at once (counted by -m)
        self._pidfds = PidfdCache()
        self._lock = threading.Lock()
        self._released = False  # pidfds closed: their numbers may belong to others now
        self._listener: Listener | None = None
        self.nests: Nests | None = None  # set once a nested sandbox has network rules
        self.listening = SandboxListeners()  # the TCP ports the sandbox listens on
        self._verdicts = Verdicts(context, services, audit, self.listening, review, ports)
        self._private: PrivateNetwork | None = None  # --net-private-loopback
        if context.private_loopback:
            from ._privatenet import PrivateNetwork

            self._private = PrivateNetwork(audit)

    def handle(self, listener: Listener, notification: Notification) -> None:
        """Answer one network call (read by the run's loop, ``process._supervision``)."""
        self._listener = listener  # the run's one listener, for answers a worker writes late
        self._guarded(listener, notification.id, self._handle, listener, notification)

    def release(self, listener: Listener | None) -> None:
        """The loop is over: the cached pidfds go, and the listener once no worker holds
        a call to answer (a deferred connect keeps it open until it has answered)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._pidfds.close()
            if self.nests is not None:
                self.nests.close()
        if listener is not None:
            listener.close_when_idle()

    # --- one call ----------------------------------------------------------------

    @staticmethod
    def _guarded(listener: Listener, notification_id: int, work: Callable[..., None],
                 *args: object) -> None:
        """Run ``work(*args)``; a bug in it must neither open anything nor leave the
        caller hanging: the call fails with EACCES, the loop goes on, and it is said loudly."""
        try:
            work(*args)
        except Exception as exc:  # noqa: BLE001
            try:
                listener.reply(notification_id, error=errno.EACCES)  # first: nothing may hang
            except OSError:
                pass
            tell(f"sandlock: internal error in the network supervisor (call refused): "
                 f"{type(exc).__name__}: {exc}")

    def _handle(self, listener: Listener, notification: Notification) -> None:
        syscall = self._names.get(notification.nr)
        if syscall is None:  # cannot happen with our filter; refuse rather than guess
            listener.reply(notification.id, error=errno.ENOSYS)
            return
        try:
            request = self._materialize(listener, notification, syscall)
        except Gone:
            return
        except Refused as refused:
            listener.reply(notification.id, error=refused.errno)
            return
        except OSError as exc:
            listener.reply(notification.id, error=exc.errno or errno.EFAULT)
            return
        self._answer(listener, request)

    def _materialize(self, listener: Listener, notification: Notification, syscall: str) -> Request:
        try:
            request = self._read(notification, syscall, self._pidfd(notification.pid))
        except Refused as refused:
            if refused.errno != errno.ESRCH:
                raise
            # The cached pidfd named an earlier thread with this tid: open a fresh one.
            request = self._read(notification, syscall, self._pidfd(notification.pid, fresh=True))
        try:
            listener.check_valid(notification.id)  # the reads above came from that thread
        except Gone:
            request.close()
            raise
        return request

    def _read(self, notification: Notification, syscall: str, pidfd: int) -> Request:
        """The call's arguments, and the rules of the nested sandboxes its thread is in,
        if any (a question only while there are some, once per thread)."""
        nests = self.nests
        if nests is None:
            return materialize(notification, syscall, pidfd)
        nested = nests.rules_for(notification.pid, pidfd, self._pidfds.notes)
        request = materialize(notification, syscall, pidfd)
        return request.replace(nested=nested) if nested else request

    def _pidfd(self, tid: int, fresh: bool = False) -> int:
        try:
            return self._pidfds.reopen(tid) if fresh else self._pidfds.get(tid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise Gone from None  # the thread is gone: nobody to answer
            raise Refused(exc.errno or errno.EAGAIN) from None  # e.g. EMFILE: answer it

    def _answer(self, listener: Listener, request: Request) -> None:
        """Perform the request without blocking; what must wait goes to a worker."""
        try:
            outcome = self._perform(request)
        except BaseException:
            request.close()
            raise
        if callable(outcome):  # a blocking socket that has to wait: not on this thread
            listener.hold()
            waiting = request.replace(messages=())  # no copy of a send's bytes waits (_payload)
            self._workers.submit(lambda: self._deferred(listener, waiting, outcome))
        else:
            self._reply(listener, request, outcome)

    def _deferred(self, listener: Listener, request: Request, outcome: Deferred) -> None:
        try:
            self._guarded(listener, request.notification.id, self._wait, listener, request, outcome)
        finally:
            listener.release()

    def _wait(self, listener: Listener, request: Request, deferred: Deferred) -> None:
        """On a worker: finish ``deferred``, watching the calling thread's pidfd so that
        the wait ends when the caller is killed (no ghost connection after its death)."""
        try:
            gone = open_pidfd(request.notification.pid)
        except OSError:
            request.close()  # already gone
            return
        try:
            listener.check_valid(request.notification.id)  # the pidfd names the caller
            outcome = deferred(gone)
        except Gone:
            request.close()
            return
        finally:
            os.close(gone)
        self._reply(listener, request, outcome)

    @staticmethod
    def _reply(listener: Listener, request: Request, outcome: Outcome) -> None:
        request.close()
        listener.reply(request.notification.id, *outcome)

    # --- verdict and execution ---------------------------------------------------

    def _perform(self, request: Request) -> Outcome | Deferred:
        syscall = request.syscall
        if syscall in ("sendto", "sendmsg", "sendmmsg"):
            return self._send(request)
        if syscall in NAME_CALLS:
            return self.ports.answer_name(request)  # type: ignore[union-attr]
        if syscall == "listen":
            local = request.address  # judged at its virtual port (--port-remap)
            if self.ports is not None:
                local = self.ports.virtual_address(local, request.socket)
            decision = judge_listen(request.socket, local, self._context)
            if request.nested:
                decision = self._verdicts.narrowed(request, local, decision)
            self._verdicts.record(request, local, decision)
        else:
            decision = self._verdicts.decide(request, request.address, binding=syscall == "bind")
        if not decision.allowed:
            return -1, decision.error
        if syscall == "connect" and self._private is not None and request.socket.transport:
            return self._private.connect(self._listener, request, decision,
                                         lambda moved: self._connect(moved, decision))
        if syscall != "connect" and self._private is not None:
            refused = self._private.performs_locally(decision, request.socket)
            if refused is not None:
                return refused
        if syscall == "listen":
            outcome = execute.listen(request.socket, request.flags)
            if not outcome[1] and decision.protocol == "tcp" and self._private is None:
                self.listening.add(request.socket)  # reachable from inside, on loopback
            return outcome
        if syscall == "bind":
            if request.path_bind is not None:  # a socket file: by the binder
                return self._bind_path(request)
            # An abstract name, or netlink, which checks the caller's capabilities: both
            # under the command's own rules.
            if decision.protocol in _AS_THE_COMMAND or isinstance(decision.target, UnixAddress):
                return self._context.own_sockets.bind(self._services.confined_worker(), request,
                                                      decision.target)
            if self.ports is not None and decision.protocol == "tcp" \
                    and isinstance(decision.target, InetAddress):
                return self.ports.bind(request.socket, decision.target)
            return execute.bind(request.socket, decision.target)
        return self._connect(request, decision)

    def _connect(self, request: Request, decision: Decision) -> Outcome | Deferred:
        if decision.parked:  # a denied UDP connect: to the sink, said at its first datagram
            return self._services.park(request, decision, self._verdicts.record)
        target = self._target(request, decision)
        if target is None:
            return -1, errno.ECONNREFUSED
        if isinstance(target, int):
            return -1, target
        if decision.protocol == "netlink":  # a datagram socket: never Deferred
            return self._services.confined_worker().call(lambda: execute.connect(request.socket, target))
        if request.socket.family == AF_UNIX:
            return self._on_unix(request, target, decision,
                                 lambda: execute.connect(request.socket, target))
        if decision.verdict.reason == OWN_LISTENER_REASON:  # (asked of the kernel again)
            return self.listening.connect(request, target, self._verdicts.record)
        return execute.connect(request.socket, target)  # may be Deferred

    def _bind_path(self, request: Request) -> Outcome:
        """A socket file, bound by the binder as the command would bind it (in its mount
        namespace, under its Landlock rules and those of the nested sandboxes it is
        in), from sandlock's copies: the kernel never reads the call again. The socket is
        then the sandbox's own IPC (``SandboxSockets.bind``), known by the file the
        kernel says it is bound to."""
        tid, nests = request.notification.pid, self.nests
        try:
            rulesets = nests.rulesets_for(tid, lambda fresh: self._pidfd(tid, fresh)) if nests else ()
        except (Refused, Gone) as refused:  # (Gone: nobody to answer)
            return -1, getattr(refused, "errno", errno.ESRCH)
        try:
            error = self._services.bind_path(request.socket.fd, request.path_bind, rulesets)
        finally:
            for ruleset in rulesets:
                os.close(ruleset)
        if error:
            return -1, error
        self._context.own_sockets.add_file(execute.socket_inode(request.socket))
        return 0, 0

    def _on_unix(self, request: Request, target: SockAddress, decision: Decision,
                 operation: Callable[[], Outcome | Deferred]) -> Outcome | Deferred:
        """A connect or send on a unix socket: see ``SandboxSockets.perform``."""
        def taken() -> None:
            verdict = Verdict(False, "the sandbox's socket there was closed and its name taken")
            self._verdicts.record(request, target, Decision(False, None, verdict, "unix", errno.ECONNREFUSED))

        return self._context.own_sockets.perform(
            request.socket, target, decision.verdict is OWN_SOCKET, request.syscall == "connect",
            operation, request.nested, taken)

    def _send(self, request: Request) -> Outcome | Deferred:
        """sendto/sendmsg/sendmmsg: message by message, stopping at the first refusal.

        sendmmsg reports how many messages went out before a refusal or a full
        buffer (as the kernel does); a blocking socket whose buffer is full before the
        first message waits on a worker.
        """
        if request.owned_fds and self.memfd_passed is not None and passes_memfd(request) \
                and self.memfd_passed():
            return -1, errno.EPERM  # in flight, no descriptor table would show it
        sent = 0
        for index, message in enumerate(request.messages):
            decision = self._verdicts.message(request, message)
            if self._private is not None and request.socket.transport and message.destination:
                outcome = self._private.send(self._listener, request, decision, lambda moved: (
                    self._send_one(moved, message, decision)))
            else:
                outcome = self._send_one(request, message, decision)
            if callable(outcome):  # the rest of this message waits on a worker
                waiting = request.replace(messages=())  # (it keeps no copy: _payload)
                return lambda gone: self._sent(waiting, index, outcome(gone), late=True)
            value, error = outcome
            if error:
                return (sent, 0) if sent else (-1, error)
            if request.syscall != "sendmmsg":
                return value, 0
            self._sent(request, index, outcome)
            sent += 1
        return sent, 0

    def _sent(self, request: Request, index: int, outcome: Outcome, *, late: bool = False) -> Outcome:
        return sending.sent(self._listener, request, index, outcome, late=late)

    def _send_one(self, request: Request, message: Message, decision: Decision) -> Outcome | Deferred:
        if not decision.allowed:
            return -1, decision.error
        if decision.to_dns_responder or decision.to_proxy:
            target = self._target(request, decision)
            if target is None:
                return -1, errno.ECONNREFUSED
            if isinstance(target, int):
                return -1, target
            message = replace(message, destination=target)
        elif decision.target != message.destination:  # 0.0.0.0: where the verdict looked
            message = replace(message, destination=decision.target)
        if decision.protocol == "netlink":  # see _AS_THE_COMMAND
            return self._services.confined_worker().call(
                lambda: sending.send_blocking(request, message, self.held))
        if request.socket.family == AF_UNIX and message.destination is not None:
            return self._on_unix(request, message.destination, decision,
                                 lambda: sending.send(request.socket, message, request.flags, self.held))
        return sending.send(request.socket, message, request.flags, self.held)

    def _target(self, request: Request, decision: Decision) -> SockAddress | int | None:
        """Where to connect/send: the destination, the DNS responder (None: down) or
        the HTTP proxy (an errno if the socket cannot be steered there)."""
        if decision.to_dns_responder:
            return self._services.dns_responder(decision.protocol, request.socket.family)
        if decision.verdict is TO_NESTING:
            return self._services.nesting_target()
        if decision.to_proxy:
            return self._services.proxy_target(request.socket, decision.target,
                                               request.notification.pid, request.nested)
        return decision.target
