"""Network rules of sandboxes nested in a running one (``sb.sandbox(Policy(net_allow=...))``).

A nested sandbox's processes are the running sandbox's: their calls reach its one
listener (the kernel allows one per chain of filters), and its engine judges them. What
marks them is their Landlock domain. Each such nested sandbox has a resident of its own,
which every one of its processes descends from, in a layer scoped for signals
(``LANDLOCK_SCOPE_SIGNAL``): the kernel lets that resident signal a process only if
the process is in its layer or below. So the engine asks it, once per thread: the
thread's pidfd goes over, and the resident answers the errno of
``pidfd_send_signal(pidfd, 0)``. No process can leave a domain, forge one, or answer
for the resident (no process of the sandbox can reach it), and a thread's answer
holds for its life: its pidfd names it for good. (A pidfd gives its receiver nothing
it could not get with pidfd_open: every permission is checked when it is used.)

    engine ──"?N" + pidfd──> nested resident: pidfd_send_signal(pidfd, 0) ──"N errno"──> engine

Only threads under more seccomp filters than the sandbox's own processes are asked
about: a nested sandbox adds its filter, and filters are never shed. A ``sandlock
run`` inside the sandbox registers the same way (``_nesting``), its keeper answering;
anything in the sandbox can, so such a nest is untrusted: it may only narrow.

A call allowed by the sandbox's rules is then judged again by the nested rules, with
the sandbox's pinned names: a destination must be allowed by both.

A nest also brings its Landlock ruleset: a socket file its processes bind is bound by
sandlock's binder (``_binder``), under the sandbox's ruleset and those of the nests
the thread is in (``rulesets_for``, asked at such a bind only). A nest whose network is
the sandbox's registers for that alone (``rules`` None): its threads are asked about
only when they bind a path.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import sys
import threading
import time

from ..kernel import tasks
from ..netcall import InetAddress, Refused, UnixAddress
from ..netrules import Endpoint, NetPolicy, Verdict, canonical_address
from ._judge import TO_NESTING, Decision

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netrules import PinTable
    from ._ownsockets import SandboxSockets

PROBE_TIMEOUT = 10.0  # seconds: a paused sandbox holds its nested residents too
MAX_NESTS = 64  # each is asked about every thread's first call: a bound on that cost
UNKNOWN = errno.EPERM  # the call's errno when the thread's sandbox cannot be told


class NestRefused(ValueError):
    """A nested sandbox's rules cannot be applied here: ``field`` names the policy's."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field = field


class Unknown(Exception):
    """Which sandbox the thread belongs to cannot be told: refuse its call."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Nest:
    """One nested sandbox: its rules, and the socket its resident answers on.

    ``trusted``: its resident is sandlock's (``sb.sandbox``), and a question it leaves
    unanswered fails the call. A nest registered from inside the sandbox (a ``sandlock
    run`` there, through ``_nesting``) answers for a process sandlock does not control:
    its word can only narrow the threads it claims, so silence claims nothing."""

    def __init__(self, rules: NetPolicy | None, probe: socket.socket, name: str, trusted: bool,
                 ruleset: int = -1) -> None:
        self.rules = rules  # None: the sandbox's network (registered for binds alone)
        self.ruleset = ruleset  # its Landlock ruleset (owned; -1: none given)
        self.name = name
        self.trusted = trusted
        self.gone = ""  # why it can answer no more
        self._unasked = 0  # a question its full socket could not take
        self._probe = probe
        self._probe.setblocking(False)

    def ask(self, pidfd: int, question: int) -> None:
        try:
            socket.send_fds(self._probe, [b"?%d" % question], [pidfd])
        except BlockingIOError:
            self._unasked = question  # (it reads none: answered as silence)
        except OSError:
            self.gone = "is gone"

    def answer(self, question: int, deadline: float) -> int | None:
        """The errno it answered ``question`` with; None if it cannot say in time."""
        while not self.gone and self._unasked != question:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._probe], [], [], remaining)[0]:
                return None
            try:
                reply = self._probe.recv(32)
            except OSError:
                reply = b""
            if not reply:
                self.gone = "is gone"
                break
            number, _, error = reply.partition(b" ")
            if number == b"%d" % question:
                return int(error)
            # (a late answer to an earlier question: skipped)
        return None

    def close(self) -> None:
        self._probe.close()
        if self.ruleset >= 0:
            os.close(self.ruleset)
            self.ruleset = -1


class Nests:
    """The nested sandboxes with network rules of a running sandbox; ``rules_for``
    tells the engine which of them a calling thread is in. One question at a time
    (the engine lets a call go on while policy_fn reviews another)."""

    def __init__(self, keeper: int) -> None:
        """``keeper``: the pid of the sandbox's keeper, forked by the thread that started
        it (so under the same seccomp filters), which never adds one."""
        self._nests: list[_Nest] = []
        self._lock = threading.Lock()
        self._asking = threading.Lock()
        self._questions = 0
        # The sandbox's processes run under one seccomp filter more than its keeper; a
        # nested sandbox's, under at least one more again (its own). Filters are never
        # shed, so a thread with no more than the sandbox's is in none: not asked about.
        # (Unknown, e.g. the keeper gone as the run ends: every thread is asked.)
        keepers = _seccomp_filters(str(keeper)) if keeper > 0 else None
        self._sandbox_filters = -1 if keepers is None else keepers + 1

    def add(self, rules: NetPolicy | None, probe: socket.socket, name: str, trusted: bool = True,
            ruleset: int = -1) -> None:
        """A nested sandbox whose resident answers on ``probe``, with its Landlock
        ``ruleset`` (both owned from now on); ``rules`` None: its network is the
        sandbox's. Threads judged earlier need no new question: none can enter its
        domain."""
        nest = _Nest(rules, probe, name, trusted, ruleset)
        with self._lock:
            self._prune()
            if len(self._nests) >= MAX_NESTS:
                nest.close()
                raise NestRefused("-", f"at most {MAX_NESTS} nested sandboxes are registered at "
                                  "once")
            self._nests = [*self._nests, nest]

    def _prune(self) -> None:
        """(Lock held) An untrusted nest that is gone: its run is over, and the
        processes it vouched for with it."""
        kept = [nest for nest in self._nests if nest.trusted or not nest.gone]
        if len(kept) < len(self._nests):
            for nest in self._nests:
                if nest not in kept and nest.ruleset >= 0:
                    os.close(nest.ruleset)  # (rulesets_for hands out copies)
                    nest.ruleset = -1
            self._nests = kept

    def rules_for(self, tid: int, pidfd: int,
                  known: dict[int, tuple[NetPolicy, ...]]) -> tuple[NetPolicy, ...]:
        """The rules of every nested sandbox thread ``tid`` (``pidfd``) is in (none: the
        sandbox's own alone); ``known``: the answers so far, by pidfd (the caller drops a
        pidfd's answer with it). Refused(ESRCH) if the pidfd is stale (its thread is
        gone: the caller opens a fresh one), Refused(UNKNOWN) if it cannot be told."""
        if pidfd in known:
            return known[pidfd]
        if all(nest.rules is None for nest in self._nests):
            rules = ()  # (nests for binds alone: nothing to ask, nor to count, here)
        else:
            rules = tuple(nest.rules for nest in self._claiming(tid, pidfd, networks=True))
        known[pidfd] = rules
        return rules

    def rulesets_for(self, tid: int, pidfd: Callable[[bool], int]) -> tuple[int, ...]:
        """Copies (the caller's to close) of the Landlock rulesets of every nested
        sandbox thread ``tid`` is in, for a bind to a path: every nest is asked, the
        answers are not kept (binds are rare). ``pidfd(fresh)``: the thread's (a cached
        one may name an earlier thread: then a fresh one). Refused as ``rules_for``."""
        try:
            found = self._claiming(tid, pidfd(False), networks=False)
        except Refused as refused:
            if refused.errno != errno.ESRCH:
                raise
            found = self._claiming(tid, pidfd(True), networks=False)
        with self._lock:  # (a nest pruned meanwhile has closed its ruleset: -1)
            return tuple(os.dup(nest.ruleset) for nest in found if nest.ruleset >= 0)

    def _claiming(self, tid: int, pidfd: int, *, networks: bool) -> list[_Nest]:
        """The nests (``networks``: those with network rules) that claim thread ``tid``."""
        filters = _seccomp_filters(str(tid))
        try:
            if filters is not None and filters <= self._sandbox_filters:
                return []  # (if the pidfd names an earlier thread, it is dropped, and this)
            with self._asking:
                return self._ask(tid, pidfd, [nest for nest in self._nests
                                              if nest.rules is not None or not networks])
        except ProcessLookupError:
            raise Refused(errno.ESRCH) from None
        except Unknown as unknown:
            print(f"sandlock: a network call refused: {unknown.why}", file=sys.stderr, flush=True)
            raise Refused(UNKNOWN) from None

    def _ask(self, tid: int, pidfd: int, nests: list[_Nest]) -> list[_Nest]:
        self._questions += 1
        for nest in nests:  # all asked at once: a slow one delays the answer once
            nest.ask(pidfd, self._questions)
        deadline = time.monotonic() + PROBE_TIMEOUT
        found = []
        for nest in nests:
            error = nest.answer(self._questions, deadline)
            if error == errno.ESRCH and nest.trusted:  # (an untrusted one could say it always)
                raise ProcessLookupError(tid)  # the pidfd names an earlier thread: reopen
            if error == 0:
                found.append(nest)
            elif not (error == errno.EPERM and _may_be_signalled(tid)) and nest.trusted:
                why = nest.gone or ("does not answer" if error is None else os.strerror(error))
                raise Unknown(f"{nest.name}'s resident {why}: thread {tid} cannot be told apart")
        if any(nest.gone and not nest.trusted for nest in nests):
            with self._lock:
                self._prune()
        return found

    def close(self) -> None:
        with self._lock:
            nests, self._nests = self._nests, []
        for nest in nests:
            nest.close()


def narrowed(rules: NetPolicy, pins: PinTable, syscall: str, address: object,
             decision: Decision, own: SandboxSockets) -> Decision:
    """``decision`` (the sandbox's), or a refusal if the nested ``rules`` refuse the IP
    destination (connect, send) or port (bind, listen) that it allows, or the
    abstract unix socket (``own``: the sandbox's) bound outside the nested sandbox."""
    if not decision.allowed:
        return decision
    if isinstance(address, UnixAddress):
        return _scoped(rules, syscall, address, decision, own)
    if not isinstance(address, InetAddress) or not decision.protocol:
        return decision
    endpoint = Endpoint(decision.protocol, canonical_address(address.address), address.port)
    if syscall == "bind":
        verdict = rules.bind(endpoint)
    elif syscall == "listen":
        verdict = rules.listen(endpoint)
    else:
        verdict = rules.connect(endpoint, pins)
    if verdict.allowed:
        return decision
    refusal = Verdict(False, f"nested sandbox: {verdict.reason}", verdict.hostname or
                      decision.verdict.hostname)
    return Decision(False, None, refusal, decision.protocol, errno.EACCES)


def _scoped(rules: NetPolicy, syscall: str, address: UnixAddress, decision: Decision,
            own: SandboxSockets) -> Decision:
    """Landlock's IPC scope of a nested sandbox, which the sandbox's supervisor,
    connecting in its processes' stead, must not widen: an abstract name is theirs to
    reach only if bound by one of them (the sandbox's own rules judged the rest)."""
    if (not rules.abstract_scoped or not address.abstract or syscall in ("bind", "listen")
            or decision.verdict is TO_NESTING or own.bound_within(address, (rules,))):
        return decision
    refusal = Verdict(False, "nested sandbox: abstract unix sockets are scoped")
    return Decision(False, None, refusal, "unix", errno.EPERM)


def _seccomp_filters(task: str) -> int | None:
    """How many seccomp filters the thread ``task`` (a tid, or "self") runs under."""
    try:
        return int(tasks.status_field(task, b"Seccomp_filters"))
    except (OSError, ValueError):
        return None


def _may_be_signalled(tid: int) -> bool:
    """Whether the kernel's credential check lets a process of sandlock's user signal
    ``tid`` (its real or saved uid is the user's, or the user is root), so that an
    EPERM was the domain's. Otherwise (a process that changed its uids) it cannot be
    told."""
    uid = os.geteuid()
    if uid == 0:
        return True  # root's sandbox maps uid 0 alone: every process in it is root's
    try:
        with open(f"/proc/{tid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    real, _effective, saved, _fs = map(int, line.split()[1:5])
                    return uid in (real, saved)
    except OSError:
        pass
    return False
