"""The network supervisor: notification -> materialize -> verdict -> execute -> reply.

Runs in sandlock's process, on the run's supervision thread, which reads each call and
hands the network's here (``handle``). Every allowed operation is
performed here, from sandlock's copies, on a duplicate of the child's socket, so
nothing the child changes after the check can matter. The one CONTINUE: a unix socket
file the command binds itself, where nothing is checked (``_bind_as_the_command``).
Operations that may block (on blocking sockets) run on worker threads, so a connect
to a silent host never delays the other notifications.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable

from .._record import replace
from ..kernel import (
    SUPERVISED,
    Arch,
    Gone,
    Listener,
    Notification,
    open_pidfd,
)
from . import _execute, _sending
from ._audit import Audit
from ._execute import Deferred, Outcome
from ._judge import (
    OWN_LISTENER_REASON,
    OWN_SOCKET,
    TO_NESTING,
    Decision,
    RunContext,
    judge_destination,
    judge_listen,
    judge_message,
    named,
    park,
)
from ._listening import SandboxListeners
from ._materialize import (
    Message,
    Refused,
    Request,
    materialize,
)
from ._nests import Nests, narrowed
from ._netpolicy import Verdict
from ._payload import HeldBytes, passes_memfd
from ._review import NetworkCall, reviewed
from ._services import Services
from ._sockaddr import AF_UNIX, InetAddress, SockAddress, UnixAddress
from ._workers import PidfdCache, WorkerPool

# Performed on the confined worker, a thread with the command's Landlock domain and
# capabilities: unix binds create files; netlink checks the capabilities of the thread
# that binds, connects or sends (sandlock's own, root's perhaps, would be lent out).
_AS_THE_COMMAND = ("unix", "netlink")


class Supervisor:
    def __init__(self, arch: Arch, context: RunContext, audit: Audit, services: Services,
                 review: Callable[[NetworkCall], int] | None = None) -> None:
        """``review``: the runtime policy's word on each judged IP destination."""
        self._review = review
        self.memfd_passed: Callable[[], bool] | None = None  # a send passes a memfd: refuse?
        self._names = {arch.numbers[name]: name for name in SUPERVISED}
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
            try:
                print(f"sandlock: internal error in the network supervisor (call refused): "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass

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
        if outcome is _execute.KERNEL_PROCEEDS:
            listener.proceed(request.notification.id)
        else:
            listener.reply(request.notification.id, *outcome)

    # --- verdict and execution ---------------------------------------------------

    def _perform(self, request: Request) -> Outcome | Deferred:
        syscall = request.syscall
        if syscall in ("sendto", "sendmsg", "sendmmsg"):
            return self._send(request)
        if syscall == "listen":
            decision = judge_listen(request.socket, request.address, self._context)
            if request.nested:
                decision = self._narrowed(request, request.address, decision)
            self._record(request, request.address, decision)
        else:
            decision = self._decide(request, request.address, binding=syscall == "bind")
        if not decision.allowed:
            return -1, decision.error
        if decision.parked:  # a denied UDP connect: to the sink, said at its first datagram
            return self._services.park(request, decision, self._record)
        if syscall == "listen":
            outcome = _execute.listen(request.socket, request.flags)
            if not outcome[1] and decision.protocol == "tcp":
                self.listening.add(request.socket)  # reachable from inside, on loopback
            return outcome
        if syscall == "bind":
            # A unix bind creates a file, netlink checks the caller's capabilities:
            # both under the command's own rules.
            if decision.protocol in _AS_THE_COMMAND or isinstance(decision.target, UnixAddress):
                return self._bind_as_the_command(request, decision.target)
            return _execute.bind(request.socket, decision.target)
        target = self._target(request, decision)
        if target is None:
            return -1, errno.ECONNREFUSED
        if isinstance(target, int):
            return -1, target
        if decision.protocol == "netlink":  # a datagram socket: never Deferred
            return self._services.confined_worker().call(lambda: _execute.connect(request.socket, target))
        if request.socket.family == AF_UNIX:
            return self._on_unix(request, target, decision,
                                 lambda: _execute.connect(request.socket, target))
        if decision.verdict.reason == OWN_LISTENER_REASON:  # (asked of the kernel again)
            return self.listening.connect(request, target, self._record)
        return _execute.connect(request.socket, target)  # may be Deferred

    def _bind_as_the_command(self, request: Request, address: SockAddress) -> Outcome:
        """A unix socket the sandbox binds is its own IPC: remembered, so that the
        sandbox may reach it without --unix-allow (or --allow-ipc, for abstract names).

        A socket file is bound by the command itself (CONTINUE): the path is one of its
        mount namespace (its own /tmp), which no thread here can create a file in under
        that name, and nothing was judged that the command could change since: every
        unix bind is allowed, and Landlock decides on the file, in the kernel, as the
        command. Which file it became is asked of the kernel when it matters. An
        abstract name, or one the kernel chooses (autobind), is bound here: the name it
        got is then asked of the kernel, with the socket's identity."""
        sock = request.socket
        if isinstance(address, UnixAddress) and address.path and not address.abstract:
            self._context.own_sockets.add_pending(_execute.socket_inode(sock))
            return _execute.KERNEL_PROCEEDS
        outcome = self._services.confined_worker().call(lambda: _execute.bind(sock, address))
        if not outcome[1] and isinstance(address, UnixAddress) and sock.family == AF_UNIX:
            self._context.own_sockets.add_abstract(sock.fd, request.nested)
        return outcome

    def _on_unix(self, request: Request, target: SockAddress, decision: Decision,
                 operation: Callable[[], Outcome | Deferred]) -> Outcome | Deferred:
        """A connect or send on a unix socket: see ``SandboxSockets.perform``."""
        def taken() -> None:
            verdict = Verdict(False, "the sandbox's socket there was closed and its name taken")
            self._record(request, target, Decision(False, None, verdict, "unix", errno.ECONNREFUSED))

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
            decision = self._decide_message(request, message)
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
        return _sending.sent(self._listener, request, index, outcome, late=late)

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
                lambda: _sending.send_blocking(request, message, self.held))
        if request.socket.family == AF_UNIX and message.destination is not None:
            return self._on_unix(request, message.destination, decision,
                                 lambda: _sending.send(request.socket, message, request.flags, self.held))
        return _sending.send(request.socket, message, request.flags, self.held)

    def _decide(self, request: Request, address: SockAddress | None, *,
                binding: bool = False) -> Decision:
        if isinstance(address, InetAddress):
            self._services.wait_for_pins()
        if not binding:
            address = self._context.own_sockets.identify(address)
        decision = judge_destination(request.socket, address, self._context, binding=binding)
        if not decision.allowed:  # the sandbox's own server, on loopback?
            decision = self.listening.reach(request.syscall, address, decision)
        if request.nested:
            decision = self._narrowed(request, address, decision)
        judged = decision
        decision = park(request.syscall, judged, reviewed(
            self._review, request.notification.pid, request.syscall, address, judged))
        self._record(request, address, decision)
        return decision

    def _decide_message(self, request: Request, message: Message) -> Decision:
        if isinstance(message.destination, InetAddress):
            self._services.wait_for_pins()
        identified = self._context.own_sockets.identify(message.destination)
        if identified is not message.destination:
            message = replace(message, destination=identified)
        decision = judge_message(request.socket, message, self._context)
        if request.nested:
            decision = self._narrowed(request, message.destination, decision)
        decision = reviewed(self._review, request.notification.pid, request.syscall,
                            message.destination, decision)
        self._record(request, message.destination, decision)
        return decision

    def _narrowed(self, request: Request, address: SockAddress | None, decision: Decision) -> Decision:
        for rules in request.nested:  # (only once nested sandboxes have network rules)
            decision = narrowed(rules, self._context.pins, request.syscall, address, decision,
                                self._context.own_sockets)
        return decision

    def _record(self, request: Request, address: SockAddress | None, decision: Decision) -> None:
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
