"""A second opinion on network calls the static policy has judged: the run's
runtime policy (``policy_fn``) sees each IP destination and may refuse what the
static policy allows, never the reverse."""

from __future__ import annotations

import errno

from .._record import record
from ..netcall import InetAddress
from ..netrules import Verdict
from ._judge import Decision

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..netrules import IPAddress


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
