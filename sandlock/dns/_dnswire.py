"""The DNS responder's fast path: the everyday query, read and answered without dnspython.

What resolvers send for a name is one question, opcode QUERY, no compression, at most
an EDNS record without options. ``parse`` reads exactly that and nothing else (None:
let dnspython read it, or reject it, as ``_dnsmessage`` does for every other query);
``SimpleQuery.encode`` writes the answer dnspython would (the tests compare both;
dnspython shuffles the records, this keeps the pinned order). dnspython's import costs ~45 ms, which a command's first lookup used to
wait for; queries this module reads never load it.
"""

from __future__ import annotations

import struct

from .._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..netrules import IPAddress

# RFC 1035 / 6891 / 9460 numbers (dnspython's enums hold the same values).
A, PTR, AAAA, OPT, SVCB, HTTPS = 1, 12, 28, 41, 64, 65
IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080
RESPONSE_PAYLOAD = 1232  # the EDNS payload size answers announce
TTL = 60  # clients asking again get the same pinned answer anyway
_OPCODE_MASK = 0x7800
_HOSTNAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_HEADER = struct.Struct("!HHHHHH")
_QUESTION_TAIL = struct.Struct("!HH")
_OPT = struct.Struct("!BHHIH")  # root name, type, payload size, ext-rcode/version/flags, rdlen
_ANSWER = struct.Struct("!HHIH")  # after the owner name: type, class, TTL, rdlen


def hostname(labels: list[bytes]) -> str | None:
    """The lowercase hostname of a question, or None for names no policy can mean.

    Only letters, digits, '-' and '_' in labels (IDNs arrive as xn--): a label holding
    a dot, a wildcard or a control byte would otherwise pass for another name.
    """
    if not labels or not all(label and set(label) <= _HOSTNAME_CHARS for label in labels):
        return None
    return b".".join(labels).decode("ascii").lower()


def shown_name(labels: list[bytes]) -> str:
    """A question's name for a notice, whatever its bytes: each label as Latin-1 (the
    notice escapes what is not printable)."""
    return ".".join(label.decode("latin-1") for label in labels) or "."


@record
class SimpleQuery:
    """A query in the everyday shape (see the module docstring)."""

    id: int
    flags: int
    question: bytes  # the question section as received (name, type, class)
    hostname: str | None
    rdtype: int
    rdclass: int
    payload: int | None  # the EDNS payload size; None without EDNS
    early_rcode: int | None = None  # dnspython's reader sets FORMERR/NOTIMP here; never set

    def asked_name(self) -> str:
        """The name asked for, as ``shown_name`` writes it."""
        return shown_name(_labels(self.question, 0)[0] or [])

    def encode(self, rcode: int, authoritative: bool, addresses: list[IPAddress],
               max_size: int) -> bytes:
        """The response, at most ``max_size`` bytes (else without answers and with TC)."""
        flags = QR | RA | (self.flags & RD) | (AA if authoritative else 0) | rcode
        # The question's name, by a pointer to it (offset 12), unless it is the root.
        owner = b"\0" if self.question[0] == 0 else b"\xc0\x0c"
        answers = [_answer(owner, self.rdtype, address) for address in addresses]
        edns = _OPT.pack(0, OPT, RESPONSE_PAYLOAD, 0, 0) if self.payload is not None else b""
        size = _HEADER.size + len(self.question) + sum(map(len, answers)) + len(edns)
        if size > max_size:
            flags, answers = flags | TC, []
        header = _HEADER.pack(self.id, flags, 1, len(answers), 0, 1 if edns else 0)
        return b"".join((header, self.question, *answers, edns))


def parse(wire: bytes) -> SimpleQuery | None:
    """``wire`` as a SimpleQuery, or None if it is anything else (malformed included)."""
    if len(wire) < _HEADER.size:
        return None
    ident, flags, questions, answers, authorities, additionals = _HEADER.unpack_from(wire)
    if flags & (QR | _OPCODE_MASK) or (questions, answers, authorities) != (1, 0, 0) \
            or additionals > 1:
        return None
    labels, offset = _labels(wire, _HEADER.size)
    if labels is None or offset + _QUESTION_TAIL.size > len(wire):
        return None
    rdtype, rdclass = _QUESTION_TAIL.unpack_from(wire, offset)
    end = offset + _QUESTION_TAIL.size
    payload = None
    if additionals:
        if len(wire) - end != _OPT.size:
            return None
        root, kind, payload, extended, length = _OPT.unpack_from(wire, end)
        if root or kind != OPT or extended >> 16 or length:  # an RCODE, version or options
            return None
    elif len(wire) != end:
        return None
    return SimpleQuery(id=ident, flags=flags, question=wire[_HEADER.size:end],
                       hostname=hostname(labels), rdtype=rdtype, rdclass=rdclass,
                       payload=payload)


def _labels(wire: bytes, offset: int) -> tuple[list[bytes] | None, int]:
    """The uncompressed name at ``offset`` (at most 255 bytes) and the offset after it."""
    labels = []
    start = offset
    while offset < len(wire):
        length = wire[offset]
        if length == 0:
            return labels, offset + 1
        if length > 63 or offset + 1 + length > len(wire) or offset + 1 + length - start >= 255:
            return None, offset  # a compression pointer, a bad label, or too long a name
        labels.append(wire[offset + 1:offset + 1 + length])
        offset += 1 + length
    return None, offset


def _answer(owner: bytes, rdtype: int, address: IPAddress) -> bytes:
    data = address.packed
    return owner + _ANSWER.pack(rdtype, IN, TTL, len(data)) + data
