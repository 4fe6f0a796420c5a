"""The DNS responder's fast path (dns/_dnswire) against dnspython (dns/_dnsmessage):
whatever the fast path reads, dnspython reads the same way, and the answers it writes
are the messages dnspython writes. What it does not read goes to dnspython."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from ipaddress import ip_address

import dns.edns
import dns.message
import dns.opcode
import dns.rdataclass
import dns.rdatatype
import pytest

from sandlock.dns import _dnsmessage, _dnswire
from sandlock.dns._dnswire import (
    FORMERR,
    NOERROR,
    NXDOMAIN,
    REFUSED,
    SERVFAIL,
)

NAMES = ["api.example.com", "Api.Example.COM", "x_y-z.test", "a" * 63 + ".test", ".",
         "bad name.test", "star*.test", "dot\\.inside.test", "\\200.test"]
TYPES = ["A", "AAAA", "HTTPS", "SVCB", "PTR", "TXT", "ANY"]
EDNS = [None, 512, 1232, 4096, 100]
V4 = [ip_address(f"198.51.100.{i}") for i in range(1, 61)]
V6 = [ip_address(f"2001:db8::{i:x}") for i in range(1, 61)]


def query(name: str, rdtype: str, rdclass: str = "IN", payload: int | None = None,
          flags: int | None = None) -> bytes:
    edns = {"use_edns": 0, "payload": payload} if payload is not None else {}
    message = dns.message.make_query(name, rdtype, rdclass, **edns)
    if flags is not None:
        message.flags = flags
    return message.to_wire()


def same_reading(wire: bytes) -> tuple[_dnswire.SimpleQuery, _dnsmessage.FullQuery]:
    fast, full = _dnswire.parse(wire), _dnsmessage.parse(wire)
    assert fast is not None and full is not None
    assert (fast.hostname, fast.rdtype, fast.rdclass, fast.early_rcode) == \
        (full.hostname, full.rdtype, full.rdclass, full.early_rcode)
    assert fast.payload == full.payload
    return fast, full


def same_message(got: bytes, expected: bytes) -> bool:
    """Equal but for the order of the answer records (dnspython shuffles them; the fast
    path keeps the pinned order): same length, header, question, records, EDNS."""
    if len(got) != len(expected) or got[:12] != expected[:12]:
        return False
    a, b = dns.message.from_wire(got), dns.message.from_wire(expected)
    return a == b and (a.edns, a.payload, a.ednsflags) == (b.edns, b.payload, b.ednsflags)


def outcomes(rdtype: int) -> list[tuple[int, bool, list, int]]:
    """(rcode, authoritative, addresses, max size) worth writing for a question type."""
    plain = [(rcode, authoritative, [], 512) for rcode in (NOERROR, NXDOMAIN, REFUSED, SERVFAIL)
             for authoritative in (False, True)]
    pool = {_dnswire.A: V4, _dnswire.AAAA: V6}.get(rdtype)
    answered = [(NOERROR, True, pool[:count], size) for count in (1, 3, 60)
                for size in (512, 65535)] if pool else []
    return plain + answered


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("payload", EDNS)
def test_everyday_queries_read_and_answered_as_dnspython_does(name, payload):
    for rdtype in TYPES:
        for rdclass in ("IN", "CH"):
            for flags in (None, dns.flags.RD | dns.flags.CD | dns.flags.AD):
                fast, full = same_reading(query(name, rdtype, rdclass, payload, flags))
                for rcode, authoritative, addresses, size in outcomes(fast.rdtype):
                    got = fast.encode(rcode, authoritative, addresses, size)
                    expected = full.encode(rcode, authoritative, addresses, size)
                    assert same_message(got, expected), (name, rdtype, rdclass, payload, flags,
                                                         rcode, len(addresses), size)


def test_answers_that_do_not_fit_are_truncated_without_answers():
    fast = _dnswire.parse(query("many.test", "A"))
    wire = fast.encode(NOERROR, True, V4, 512)
    assert len(wire) <= 512 and wire[2] & 0x02  # TC
    assert struct.unpack("!H", wire[6:8]) == (0,)
    assert len(fast.encode(NOERROR, True, V4, 65535)) > 512


def rejected_shapes() -> dict[str, bytes]:
    plain = query("api.example.com", "A")
    two = dns.message.make_query("a.test", "A")
    two.question.append(dns.message.make_query("b.test", "A").question[0])
    notify = dns.message.make_query("a.test", "A")
    notify.set_opcode(dns.opcode.NOTIFY)
    cookie = dns.message.make_query("a.test", "A", use_edns=0,
                                    options=[dns.edns.GenericOption(dns.edns.COOKIE, b"12345678")])
    version1 = dns.message.make_query("a.test", "A", use_edns=1)
    compressed = plain[:12] + b"\xc0\x0c" + plain[-4:]
    response = dns.message.make_response(dns.message.from_wire(plain)).to_wire()
    return {
        "two questions": two.to_wire(), "NOTIFY": notify.to_wire(), "EDNS option": cookie.to_wire(),
        "EDNS version 1": version1.to_wire(), "compressed name": compressed,
        "trailing junk": plain + b"\0", "a response": response, "empty": b"",
        "label of 64": plain[:12] + b"\x40" + b"a" * 64 + b"\0" + plain[-4:],
    }


@pytest.mark.parametrize("shape", rejected_shapes())
def test_other_shapes_go_to_dnspython(shape):
    assert _dnswire.parse(rejected_shapes()[shape]) is None


def test_dnspython_answers_what_the_fast_path_does_not_read():
    full = _dnsmessage.parse(rejected_shapes()["two questions"])
    assert full.early_rcode == FORMERR
    assert _dnsmessage.parse(rejected_shapes()["a response"]) is None


def test_every_prefix_and_mutation_is_read_the_same_or_not_at_all():
    """Fuzz: no exception, and what the fast path reads dnspython reads identically."""
    rng = random.Random(1234)
    seeds = [query(n, t, "IN", p) for n in NAMES[:5] for t in ("A", "AAAA", "HTTPS") for p in EDNS]
    for wire in seeds:
        for end in range(len(wire)):
            assert _dnswire.parse(wire[:end]) is None
    read = 0
    for _ in range(20000):
        wire = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            wire[rng.randrange(len(wire))] = rng.randrange(256)
        fast = _dnswire.parse(bytes(wire))
        if fast is not None:
            read += 1
            full = _dnsmessage.parse(bytes(wire))
            assert full is not None, bytes(wire)
            assert (fast.hostname, fast.rdtype, fast.rdclass, fast.payload) == \
                (full.hostname, full.rdtype, full.rdclass, full.payload), bytes(wire)
    assert read > 1000  # the fuzz reached the fast path


def test_a_first_lookup_of_a_pinned_name_does_not_load_dnspython(tmp_path):
    """The command resolves a pinned name through sandlock's responder: answered on the
    fast path, dnspython never imported in sandlock's process."""
    script = """
import sys
from sandlock import Policy, Sandbox
policy = Policy(net_allow=("api.test:80",), resolve=("api.test=127.0.0.2",))
result = Sandbox(policy).run(["getent", "ahostsv4", "api.test"])
print(result.exit_code, result.stdout.split()[0].decode(), "dns" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.stdout.split() == ["0", "127.0.0.2", "False"], done.stderr
