"""The DNS responder's full path: any query dnspython can read, answered through it.

Used for what ``_dnswire`` does not read (several questions, other opcodes, EDNS
options, compressed names...), and for rejecting what is malformed. Same interface as
``_dnswire.SimpleQuery``: the responder decides, the query object writes the answer.
"""

from __future__ import annotations

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rdataclass
import dns.rdtypes.IN.A
import dns.rdtypes.IN.AAAA
import dns.rrset

from ._dnswire import AAAA, FORMERR, NOTIMP, RESPONSE_PAYLOAD, TTL, A, hostname, shown_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..netrules import IPAddress

_RDATA = {A: dns.rdtypes.IN.A.A, AAAA: dns.rdtypes.IN.AAAA.AAAA}


class FullQuery:
    """A query as dnspython reads it."""

    def __init__(self, message: dns.message.Message) -> None:
        self._message = message
        self.early_rcode: int | None = None
        self.hostname: str | None = None
        self.rdtype = self.rdclass = 0
        if len(message.question) != 1:
            self.early_rcode = FORMERR
        elif message.opcode() != dns.opcode.QUERY:
            self.early_rcode = NOTIMP
        else:
            question = message.question[0]
            self.hostname = hostname([label for label in question.name.labels if label])
            self.rdtype, self.rdclass = int(question.rdtype), int(question.rdclass)
        self.payload = message.payload if message.edns >= 0 else None

    def asked_name(self) -> str:
        """The name asked for, as ``_dnswire.shown_name`` writes it."""
        question = self._message.question
        return shown_name([label for label in question[0].name.labels if label]) if question else "."

    def encode(self, rcode: int, authoritative: bool, addresses: list[IPAddress],
               max_size: int) -> bytes:
        """The response, at most ``max_size`` bytes (else without answers and with TC)."""
        response = dns.message.make_response(self._message, recursion_available=True,
                                             our_payload=RESPONSE_PAYLOAD)
        response.set_rcode(rcode)
        if authoritative:
            response.flags |= dns.flags.AA
        if addresses:
            name = self._message.question[0].name
            rdatas = [_RDATA[self.rdtype](dns.rdataclass.IN, self.rdtype, _text(a))
                      for a in addresses]
            response.answer.append(dns.rrset.from_rdata_list(name, TTL, rdatas))
        try:
            return response.to_wire(max_size=max_size)
        except dns.exception.TooBig:
            del response.answer[:]  # the client asks again over TCP
            response.flags |= dns.flags.TC
            return response.to_wire(max_size=max_size)


def parse(wire: bytes) -> FullQuery | None:
    """A query, or None for anything to drop: malformed, or a response."""
    try:
        message = dns.message.from_wire(wire)
    except Exception:  # dnspython raises many kinds (FormError, TSIG, EDNS...); all mean drop
        return None
    return None if message.flags & dns.flags.QR else FullQuery(message)


def _text(address: IPAddress) -> str:
    return str(address) if address.version == 4 else str(address).partition("%")[0]
