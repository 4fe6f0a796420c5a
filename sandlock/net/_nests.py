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
holds for its life: its pidfd names it for good.

    engine ──"?" + pidfd──> nested resident: pidfd_send_signal(pidfd, 0) ──errno──> engine

A call allowed by the sandbox's rules is then judged again by the nested rules, with
the sandbox's pinned names: a destination must be allowed by both.
"""

from __future__ import annotations

import errno
import os
import socket
import threading

from ._judge import Decision
from ._netpolicy import Endpoint, NetPolicy, Verdict, canonical_address
from ._sockaddr import InetAddress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._pins import PinTable

PROBE_TIMEOUT = 10.0  # seconds: a paused sandbox holds its nested residents too
UNKNOWN = errno.EPERM  # the call's errno when the thread's sandbox cannot be told


class Unknown(Exception):
    """Which sandbox the thread belongs to cannot be told: refuse its call."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Nest:
    """One nested sandbox: its rules, and the socket to its resident."""

    def __init__(self, rules: NetPolicy, probe: socket.socket, name: str) -> None:
        self.rules = rules
        self.name = name
        self._probe = probe
        self._probe.settimeout(PROBE_TIMEOUT)
        self._lock = threading.Lock()  # one question at a time: answers come in order

    def holds(self, pidfd: int, tid: int) -> bool:
        """Whether thread ``pidfd`` is in this sandbox (Unknown if that cannot be told)."""
        try:
            with self._lock:
                socket.send_fds(self._probe, [b"?"], [pidfd])
                answer = self._probe.recv(16)
        except (BrokenPipeError, ConnectionResetError):
            raise Unknown(f"{self.name}'s resident is gone") from None
        except OSError as exc:
            raise Unknown(f"{self.name}'s resident does not answer ({exc})") from None
        if not answer:
            raise Unknown(f"{self.name}'s resident is gone")
        error = int(answer)
        if error == 0:
            return True
        if error == errno.ESRCH:
            raise ProcessLookupError(tid)  # the pidfd names an earlier thread: reopen
        if error == errno.EPERM and _may_be_signalled(tid):
            return False  # refused by the kernel for its domain alone
        raise Unknown(f"thread {tid} could not be told apart ({os.strerror(error)})")

    def close(self) -> None:
        self._probe.close()


class Nests:
    """The nested sandboxes with network rules of a running sandbox; ``rules_for``
    tells the engine which of them a calling thread is in."""

    def __init__(self) -> None:
        self._nests: list[_Nest] = []
        self._lock = threading.Lock()

    def add(self, rules: NetPolicy, probe: socket.socket, name: str) -> None:
        """A nested sandbox whose resident answers on ``probe`` (owned from now on).
        Threads judged earlier need no new question: none can enter its domain."""
        with self._lock:
            self._nests = [*self._nests, _Nest(rules, probe, name)]

    def rules_for(self, tid: int, pidfd: int, known: dict[int, NetPolicy | None]) -> NetPolicy | None:
        """The nested rules thread ``tid`` (``pidfd``) is under, None for the sandbox's
        own; ``known``: the answers so far, by pidfd (the caller drops a pidfd's answer
        with it). Raises Unknown, or ProcessLookupError if the pidfd is stale."""
        if pidfd in known:
            return known[pidfd]
        found = None
        for nest in self._nests:
            if nest.holds(pidfd, tid):
                found = nest.rules
                break
        known[pidfd] = found
        return found

    def close(self) -> None:
        with self._lock:
            nests, self._nests = self._nests, []
        for nest in nests:
            nest.close()


def narrowed(rules: NetPolicy, pins: PinTable, syscall: str, address: object,
             decision: Decision) -> Decision:
    """``decision`` (the sandbox's), or a refusal if the nested ``rules`` refuse the IP
    destination (connect, send) or port (bind, listen) that it allows."""
    if not decision.allowed or not isinstance(address, InetAddress) or not decision.protocol:
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


def _may_be_signalled(tid: int) -> bool:
    """Whether the kernel's credential check lets a process of sandlock's user signal
    ``tid`` (its real or saved uid is the user's), so that an EPERM was the domain's.
    A process that changed its uids (root in the sandbox may) cannot be told."""
    uid = os.geteuid()
    try:
        with open(f"/proc/{tid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    real, _effective, saved, _fs = map(int, line.split()[1:5])
                    return uid in (real, saved)
    except OSError:
        pass
    return False
