"""Attacks on the network policy, each against real listeners on loopback aliases.

Every test runs a confined snippet that tries to reach DENIED (127.0.0.2) or OUTSIDE
(127.0.0.3) by a trick, with a real server listening there, and asserts the server saw
nothing. Where it makes sense a control shows the trick is real: the same snippet
without sandlock (``bare``) reaches the server, or the same action succeeds when the
policy allows it. Nothing leaves the machine.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from conftest import host_pid, users

from dnsserver import FakeDns
from netattack_helpers import (
    ALLOWED,
    BYSTANDER,
    DENIED,
    OUTSIDE,
    PY,
    TcpServer,
    UdpServer,
    UnixServer,
    bare,
    common_port,
    confined,
    fill_backlog,
    sandlock_argv,
    snippet,
    wait_until,
)

IS_ROOT = os.getuid() == 0
# A run allowing no network gets a private network by default (docs/usage.md "A private
# loopback"): the attacks on the supervisor's own verdicts keep the host's namespace.
NO_PRIVATE = "--no-net-private-loopback"
ATTEMPTS = 300


# --- 1. TOCTOU: the sockaddr rewritten while the call is held -----------------------

FLIP_SOCKADDR = """
address = ctypes.create_string_buffer(sin(ALLOWED, PORT), 16)
good, bad = sin(ALLOWED, PORT), [sin(DENIED, PORT), sin(ALLOWED, OTHER_PORT)]
stop = False

def flip():  # ctypes.memmove releases the GIL: this runs while connect is held
    while not stop:
        for variant in bad:
            ctypes.memmove(address, variant, 16)
            ctypes.memmove(address, good, 16)

threading.Thread(target=flip, daemon=True).start()
results = {}
deadline = time.monotonic() + 10
for _ in range(ATTEMPTS):
    if time.monotonic() > deadline:
        break
    s = socket.socket()
    count(results, "ok" if libc.connect(s.fileno(), address, 16) == 0 else errname(ctypes.get_errno()))
    s.close()
stop = True
report(**results)
"""


@users
def test_toctou_sockaddr_rewritten_during_connect(as_nobody_or_self):
    port = common_port([ALLOWED, DENIED])
    with TcpServer(ALLOWED, port) as allowed, TcpServer(DENIED, port) as denied, \
            TcpServer(ALLOWED) as other_port:
        constants = dict(ALLOWED=ALLOWED, DENIED=DENIED, PORT=port, OTHER_PORT=other_port.port,
                         ATTEMPTS=ATTEMPTS)
        got = confined(FLIP_SOCKADDR, "-q", "--net-allow", f"{ALLOWED}:{port}",
                       wrap=as_nobody_or_self, **constants).report
        assert wait_until(lambda: allowed.accepted == got.get("ok"), 5), (got, allowed.accepted)
        assert denied.accepted == 0 and other_port.accepted == 0, got
        # The flips did land inside the window: both snapshots were judged.
        assert got.get("ok", 0) > 0 and got.get("EACCES", 0) > 0, got
        assert set(got) == {"ok", "EACCES"}, got

        # Control: unchecked, the same race reaches the denied listeners. (Unsupervised,
        # the kernel copies the address at once: the flip must land between two
        # memmoves, which a loaded machine may not give it in one run.)
        for _ in range(5):
            assert bare(FLIP_SOCKADDR, **constants).returncode == 0
            if wait_until(lambda: denied.accepted + other_port.accepted > 0, 2):
                break
        assert denied.accepted + other_port.accepted > 0


# --- 2. fd swap with dup2 while the call is held -------------------------------------

SWAP_FD = """
target = os.open("/dev/null", os.O_RDONLY)  # the fd number the racer points at either socket
sys.setswitchinterval(0.0001)  # the racer spins: hand the GIL back often
pair = [-1, -1]
stop = False

def swap():
    while not stop:
        for fd in tuple(pair):
            try:
                os.dup2(fd, target)
            except OSError:
                pass

threading.Thread(target=swap, daemon=True).start()
results = {}
deadline = time.monotonic() + 10
for _ in range(ATTEMPTS):
    if time.monotonic() > deadline:
        break
    first = socket.socket(socket.AF_INET, FIRST)
    second = socket.socket(socket.AF_INET, SECOND)
    os.dup2(first.fileno(), target)
    pair[:] = [second.fileno(), first.fileno()]
    address = sin(ALLOWED, PORT)
    time.sleep(0.0002)  # let the racer get going
    if OPERATION == "connect":
        result = libc.connect(target, address, 16)
    else:
        result = libc.sendto(target, b"x", 1, MSG_FASTOPEN, address, 16)
    outcome = "ok" if result >= 0 else errname(ctypes.get_errno())
    if outcome == "ok" and OPERATION == "connect":
        try:
            second.getpeername()  # the UDP socket (denied) was connected: to sandlock's sink
            outcome = "parked"
        except OSError:
            pass
    count(results, outcome)
    pair[:] = [-1, -1]
    if OPERATION == "connect":  # a UDP socket connected behind the policy's back would send
        libc.send(second.fileno(), b"leak", 4, 0)
    first.close()
    second.close()
stop = True
report(**results)
"""


@pytest.mark.parametrize("operation", ["connect", "sendto_fastopen"])
def test_dup2_swaps_the_socket_during_the_call(operation):
    """TCP allowed only (connect) or UDP allowed only (sendto): the other socket type,
    swapped in under the same fd number, must never carry anything to the port."""
    port = common_port([ALLOWED])
    with TcpServer(ALLOWED, port) as tcp, UdpServer(ALLOWED, port) as udp:
        received = {"tcp": lambda: tcp.accepted, "udp": lambda: len(udp.payloads)}
        allowed, other = ("tcp", "udp") if operation == "connect" else ("udp", "tcp")
        kinds = {"tcp": int(socket.SOCK_STREAM), "udp": int(socket.SOCK_DGRAM)}
        constants = dict(ALLOWED=ALLOWED, PORT=port, ATTEMPTS=ATTEMPTS // 2, FIRST=kinds[allowed],
                         SECOND=kinds[other], OPERATION=operation.split("_")[0])
        got = confined(SWAP_FD, "-q", "--net-allow", f"{allowed}://{ALLOWED}:{port}", **constants).report
        assert wait_until(lambda: received[allowed]() == got.get("ok"), 5), (got, received[allowed]())
        time.sleep(0.2)
        assert received[other]() == 0, got
        refused = got.get("EACCES", 0) + got.get("parked", 0)  # (a denied UDP connect is parked)
        assert got.get("ok", 0) > 0 and refused > 0, got  # both sockets were judged

        # Control: unchecked, the swap does reach the other socket type.
        assert bare(SWAP_FD, **constants).returncode == 0
        assert wait_until(lambda: received[other]() > 0, 5)


# --- 3. i386 syscalls from a 64-bit process ---------------------------------------------

INT80_CONNECT = """
import resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGSYS would dump core
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long)
MAP_PRIVATE, MAP_ANONYMOUS, MAP_32BIT = 0x02, 0x20, 0x40  # i386 pointers: below 4 GiB
page = libc.mmap(None, 4096, 7, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0)
s = socket.socket()
ctypes.memmove(page + 256, sin(DENIED, PORT), 16)
ctypes.memmove(page + 512, struct.pack("<III", s.fileno(), page + 256, 16), 12)
if CALL == "connect":  # i386 connect(2) is 362 (42 is pipe there)
    eax, ebx, ecx, edx = 362, s.fileno(), page + 256, 16
else:  # socketcall(SYS_CONNECT, args)
    eax, ebx, ecx, edx = 102, 3, page + 512, 0
code = (b"\\x53"  # push rbx (callee-saved)
        + b"\\xb8" + struct.pack("<I", eax) + b"\\xbb" + struct.pack("<I", ebx)
        + b"\\xb9" + struct.pack("<I", ecx) + b"\\xba" + struct.pack("<I", edx)
        + b"\\xcd\\x80\\x5b\\xc3")  # int 0x80; pop rbx; ret
ctypes.memmove(page, code, len(code))
result = ctypes.CFUNCTYPE(ctypes.c_int)(page)()
report(result=result)
"""


@pytest.mark.parametrize("call", ["connect", "socketcall"])
def test_i386_int80_connect_is_killed(call):
    with TcpServer(DENIED) as denied:
        constants = dict(DENIED=DENIED, PORT=denied.port, CALL=call)
        run = confined(INT80_CONNECT, "-q", **constants)
        assert run.returncode == 128 + signal.SIGSYS, run
        assert run.stdout == ""
        time.sleep(0.1)
        assert denied.accepted == 0

        # Control: without sandlock the same code does connect.
        assert bare(INT80_CONNECT, **constants).report == {"result": 0}
        assert wait_until(lambda: denied.accepted == 1, 5)


# --- 4, 5. io_uring, raw and packet sockets ---------------------------------------------

KERNEL_BYPASSES = """
params = ctypes.create_string_buffer(120)
long = ctypes.c_long
results = {
    "io_uring_setup": outcome(libc.syscall(long(425), long(8), params)),
    "io_uring_enter": outcome(libc.syscall(long(426), long(-1), *[long(0)] * 4)),
    "io_uring_register": outcome(libc.syscall(long(427), long(-1), *[long(0)] * 3)),
}
ETH_P_ALL, ETH_P_IP = socket.htons(3), socket.htons(0x0800)
for name, args in {
    "inet_raw_udp": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP),
    "inet_raw_tcp": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
    "inet_raw_ip": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
    "inet6_raw_udp": (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP),
    "packet_raw": (socket.AF_PACKET, socket.SOCK_RAW, ETH_P_ALL),
    "packet_dgram": (socket.AF_PACKET, socket.SOCK_DGRAM, ETH_P_IP),
    "inet_sock_packet": (socket.AF_INET, 10, ETH_P_ALL),  # SOCK_PACKET
    "inet_sctp": (socket.AF_INET, socket.SOCK_STREAM, 132),
}.items():
    results[name] = attempt(socket.socket, *args)
report(**{k: v if isinstance(v, str) else "ok" for k, v in results.items()})
"""


def test_io_uring_raw_and_packet_sockets_are_refused():
    got = confined(KERNEL_BYPASSES, "--net-allow", "*").report  # even with every host allowed
    assert got == dict.fromkeys(got, "EPERM") and len(got) == 11, got
    if IS_ROOT:  # control: root's kernel answers differ (EBADF for the fd -1 calls)
        control = bare(KERNEL_BYPASSES).report
        assert control["io_uring_setup"] == "ok" and control["io_uring_enter"] == "EBADF"
        assert control["inet_raw_udp"] == "ok" and control["packet_raw"] == "ok"


# --- 6. TCP Fast Open: sendto that connects ----------------------------------------------

FASTOPEN = """
def fastopen(payload, address):
    s = socket.socket()
    size = 16 if address else 0
    return outcome(libc.sendto(s.fileno(), payload, len(payload), MSG_FASTOPEN, address, size))

report(
    sendto_denied=fastopen(b"tfo-denied", sin(DENIED, PORT)),
    sendmsg_denied=attempt(socket.socket().sendmsg, [b"tfo-denied"], [], MSG_FASTOPEN, (DENIED, PORT)),
    sendto_null_address=fastopen(b"x", None),
    sendto_allowed=fastopen(b"tfo-allowed", sin(ALLOWED, PORT)),
)
"""


def test_tcp_fast_open_sendto_is_judged_like_connect():
    port = common_port([ALLOWED, DENIED])
    with open("/proc/sys/net/ipv4/tcp_fastopen") as f:
        client_enabled = int(f.read()) & 1
    with TcpServer(ALLOWED, port) as allowed, TcpServer(DENIED, port) as denied:
        got = confined(FASTOPEN, "--net-allow", f"{ALLOWED}:{port}",
                       ALLOWED=ALLOWED, DENIED=DENIED, PORT=port).report
        assert got["sendto_denied"] == "EACCES" and got["sendmsg_denied"] == "EACCES", got
        assert got["sendto_null_address"] in ("EINVAL", "EDESTADDRREQ", "EOPNOTSUPP"), got
        if client_enabled:
            assert got["sendto_allowed"] == 11, got
            assert wait_until(lambda: allowed.accepted == 1, 5)
            assert allowed.received(0, 11) == b"tfo-allowed"
        else:  # the kernel refuses TFO itself; it must still not have connected anywhere
            assert got["sendto_allowed"] == "EOPNOTSUPP", got
        time.sleep(0.1)
        assert denied.accepted == 0


# --- 7. sendmmsg: a batch with a denied entry ----------------------------------------------

SENDMMSG = """
def sendmmsg(fd, entries):
    keep = []
    vector = (MMsgHdr * len(entries))()
    for i, (address, payload) in enumerate(entries):
        vector[i].hdr = message(address, payload, keep=keep)
        vector[i].len = 0xDEAD  # msg_len untouched stays 0xDEAD
    result = outcome(libc.sendmmsg(fd, vector, len(entries), 0))
    return result, [vector[i].len for i in range(len(entries))]

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
good, bad = sin(ALLOWED, PORT), sin(DENIED, PORT)
mixed = sendmmsg(s.fileno(), [(good, b"m0"), (good, b"mm1"), (bad, b"m2"), (good, b"m3")])
denied_first = sendmmsg(s.fileno(), [(bad, b"n0"), (good, b"n1")])
report(mixed=mixed, denied_first=denied_first)
"""


@users
def test_sendmmsg_stops_at_the_first_denied_destination(as_nobody_or_self):
    port = common_port([ALLOWED, DENIED])
    with UdpServer(ALLOWED, port) as allowed, UdpServer(DENIED, port) as denied:
        got = confined(SENDMMSG, "-q", "--net-allow", f"udp://{ALLOWED}:{port}", wrap=as_nobody_or_self,
                       ALLOWED=ALLOWED, DENIED=DENIED, PORT=port).report
        assert got["mixed"] == [2, [2, 3, 0xDEAD, 0xDEAD]], got
        assert got["denied_first"] == ["EACCES", [0xDEAD, 0xDEAD]], got
        assert wait_until(lambda: len(allowed.payloads) >= 2, 5)
        time.sleep(0.1)
        assert allowed.payloads == [b"m0", b"mm1"]  # m3 and n1 were never sent
        assert denied.payloads == []


# --- 8. UDP: sendto, sendmsg, connect; and AF_UNSPEC sockaddrs --------------------------

UDP_ATTACKS = """
AF_UNSPEC = 0
results = {}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
results["sendto_denied_host"] = attempt(s.sendto, b"a", (DENIED, PORT))
results["sendto_denied_port"] = attempt(s.sendto, b"b", (ALLOWED, OTHER_PORT))
results["sendmsg_denied"] = attempt(s.sendmsg, [b"c"], [], 0, (DENIED, PORT))
# The kernel reads an AF_UNSPEC sockaddr as AF_INET for an IPv4 UDP send.
unspec = sin(DENIED, PORT, AF_UNSPEC)
results["sendto_af_unspec"] = outcome(libc.sendto(s.fileno(), b"d", 1, 0, unspec, 16))
keep = []
header = message(unspec, b"e", keep=keep)
results["sendmsg_af_unspec"] = outcome(libc.sendmsg(s.fileno(), ctypes.byref(header), 0))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
results["connect_denied"] = attempt(c.connect, (DENIED, PORT))
results["send_after_denied_connect"] = attempt(c.send, b"f")
results["sendto_allowed"] = attempt(s.sendto, b"allowed", (ALLOWED, PORT))
report(**results)
"""


@users
def test_udp_to_denied_destinations(as_nobody_or_self):
    port = common_port([ALLOWED, DENIED])
    with UdpServer(ALLOWED, port) as allowed, UdpServer(DENIED, port) as denied, \
            UdpServer(ALLOWED) as other_port:
        got = confined(UDP_ATTACKS, "-q", "--net-allow", f"udp://{ALLOWED}:{port}",
                       wrap=as_nobody_or_self, ALLOWED=ALLOWED, DENIED=DENIED, PORT=port,
                       OTHER_PORT=other_port.port).report
        # A denied UDP connect is parked at sandlock's sink (docs/usage.md): it succeeds,
        # and its send reaches the sink, never the destination (checked below).
        assert got == {
            "sendto_denied_host": "EACCES", "sendto_denied_port": "EACCES", "sendmsg_denied": "EACCES",
            "sendto_af_unspec": "EAFNOSUPPORT", "sendmsg_af_unspec": "EAFNOSUPPORT",
            "connect_denied": "ok", "send_after_denied_connect": "ok",
            "sendto_allowed": "ok",
        }, got
        assert wait_until(lambda: allowed.payloads == [b"allowed"], 5)
        time.sleep(0.1)
        assert denied.payloads == [] and other_port.payloads == []


def test_udp_af_unspec_sendto_reaches_the_host_without_sandlock():
    """Control for the AF_UNSPEC cases above: the kernel really sends such a datagram."""
    with UdpServer(DENIED) as denied:
        got = bare(UDP_ATTACKS, ALLOWED=ALLOWED, DENIED=DENIED, PORT=denied.port, OTHER_PORT=9).report
        assert got["sendto_af_unspec"] == 1
        assert wait_until(lambda: b"d" in denied.payloads, 5)


AF_UNSPEC_BIND = """
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# AF_UNSPEC with INADDR_ANY: the kernel binds it as AF_INET (compatibility).
result = outcome(libc.bind(s.fileno(), sin("0.0.0.0", PORT, 0), 16))
report(result=result, bound_port=s.getsockname()[1])
"""


def test_bind_with_an_af_unspec_sockaddr_needs_net_allow_bind():
    port = common_port(["0.0.0.0"])
    got = confined(AF_UNSPEC_BIND, "-q", PORT=port).report
    assert got == {"result": "EAFNOSUPPORT", "bound_port": 0}, got
    assert bare(AF_UNSPEC_BIND, PORT=port).report == {"result": 0, "bound_port": port}  # control


# --- 9. unspecified and IPv4-mapped destinations ---------------------------------------------

UNSPECIFIED = """
def tcp(family, address, bind=None):
    s = socket.socket(family, socket.SOCK_STREAM)
    if bind:
        s.bind(bind)
    result = attempt(s.connect, address)
    return result if result != "ok" else "ok " + s.getpeername()[0]

def udp(address, bind):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(bind)
    return attempt(s.sendto, b"from-bound-socket", address)

v4, v6 = socket.AF_INET, socket.AF_INET6
report(
    any4=tcp(v4, ("0.0.0.0", PORT)),
    any6=tcp(v6, ("::", PORT)),
    mapped_loopback=tcp(v6, ("::ffff:127.0.0.1", PORT)),
    mapped_denied=tcp(v6, ("::ffff:" + DENIED, PORT)),
    mapped_any=tcp(v6, ("::ffff:0.0.0.0", PORT)),
    # 0.0.0.0 means "my own source address": bound to DENIED, it would reach DENIED.
    any4_from_denied=tcp(v4, ("0.0.0.0", PORT), (DENIED, 0)),
    mapped_any_from_denied=tcp(v6, ("::ffff:0.0.0.0", PORT), ("::ffff:" + DENIED, 0)),
    udp_any_from_denied=udp(("0.0.0.0", PORT), (DENIED, 0)),
)
"""


def test_unspecified_and_mapped_destinations():
    port = common_port(["127.0.0.1", DENIED, "::1"])
    with TcpServer("127.0.0.1", port) as loopback, TcpServer(DENIED, port) as denied, \
            TcpServer("::1", port) as loopback6, UdpServer(DENIED, port) as denied_udp, \
            UdpServer("127.0.0.1", port) as loopback_udp:
        constants = dict(PORT=port, DENIED=DENIED)
        # (the host's namespace: the verdict's own refusals, not the private network's)
        closed = confined(UNSPECIFIED, "-q", NO_PRIVATE, **constants).report
        assert set(closed.values()) == {"EACCES"}, closed
        time.sleep(0.1)
        assert loopback.accepted == denied.accepted == loopback6.accepted == 0
        assert loopback_udp.payloads == denied_udp.payloads == []

        opened = confined(UNSPECIFIED, "-q", "--net-allow", f"127.0.0.1:{port}", **constants).report
        assert opened == {
            "any4": "ok 127.0.0.1",
            "any6": "EACCES",  # ::1 is not 127.0.0.1
            "mapped_loopback": "ok ::ffff:127.0.0.1",
            "mapped_denied": "EACCES",
            "mapped_any": "ok ::ffff:127.0.0.1",
            "any4_from_denied": "ok 127.0.0.1",
            "mapped_any_from_denied": "ok ::ffff:127.0.0.1",
            "udp_any_from_denied": "ok",
        }, opened
        assert wait_until(lambda: loopback.accepted == 5, 5), loopback.peers
        assert wait_until(lambda: loopback_udp.payloads == [b"from-bound-socket"], 5)
        time.sleep(0.1)
        assert denied.accepted == 0 and loopback6.accepted == 0 and denied_udp.payloads == [], \
            (denied.peers, loopback6.peers, denied_udp.payloads)

    # Control: the kernel itself sends 0.0.0.0 from a DENIED-bound socket to DENIED.
    with TcpServer(DENIED, port) as denied:
        control = bare(UNSPECIFIED, **constants).report
        assert control["any4_from_denied"] == f"ok {DENIED}"
        assert wait_until(lambda: denied.accepted >= 1, 5)


# --- IP source routing: the packet goes to the first hop, not to the destination ----------

SOURCE_ROUTE = """
IP_OPTIONS, IP_RETOPTS = 4, 7
lsrr = bytes([0x83, 7, 4]) + socket.inet_aton(DENIED) + bytes([1])  # first hop DENIED, NOP
results = {}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
results["setsockopt_udp"] = attempt(s.setsockopt, socket.IPPROTO_IP, IP_OPTIONS, lsrr)
results["sendto_udp"] = attempt(s.sendto, b"SECRET-setsockopt", (ALLOWED, PORT))
t = socket.socket()
results["setsockopt_tcp"] = attempt(t.setsockopt, socket.IPPROTO_IP, IP_OPTIONS, lsrr)
t.settimeout(0.3)
results["connect_tcp"] = attempt(t.connect, (ALLOWED, PORT))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
keep = []
header = message(sin(ALLOWED, PORT), b"SECRET-cmsg", cmsg(socket.IPPROTO_IP, IP_RETOPTS, lsrr), keep)
results["sendmsg_ip_retopts"] = outcome(libc.sendmsg(u.fileno(), ctypes.byref(header), 0))
report(**{k: v if isinstance(v, str) else "ok" for k, v in results.items()})
"""


class Sniffer:
    """IPv4 packets with IP options on lo (root only): where source-routed packets went.

    The kernel keeps only those (a socket filter: the header's length over 5 words) in
    a large buffer: whatever else crosses lo meanwhile (other tests, Ray) can neither
    crowd them out nor be taken for them."""

    _OPTIONS_ONLY = (  # ldb [0]; and #0xf; jgt #5 ? keep : drop
        (0x30, 0, 0, 0), (0x54, 0, 0, 0xF), (0x25, 0, 1, 5), (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0))

    def __init__(self) -> None:
        import ctypes
        import struct

        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        program = ctypes.create_string_buffer(b"".join(
            struct.pack("HBBI", *instruction) for instruction in self._OPTIONS_ONLY))
        self.sock.setsockopt(socket.SOL_SOCKET, 26, struct.pack(  # SO_ATTACH_FILTER
            "HxxxxxxP", len(self._OPTIONS_ONLY), ctypes.addressof(program)))
        self.sock.bind(("lo", 0))
        self.sock.setblocking(False)
        self.to("")  # what came before the filter

    def to(self, host: str) -> list[bytes]:
        """Such packets addressed to ``host`` since the last call (IP header included)."""
        packets = []
        while True:
            try:
                packet = self.sock.recv(65535)
            except BlockingIOError:
                return packets
            if socket.inet_ntoa(packet[16:20]) == host and packet[0] & 0xF > 5:  # has options
                packets.append(packet)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.skipif(not IS_ROOT, reason="watching lo needs CAP_NET_RAW in the test")
def test_ip_source_route_cannot_send_to_another_host():
    with TcpServer(ALLOWED) as allowed, UdpServer(ALLOWED, allowed.port) as allowed_udp:
        constants = dict(ALLOWED=ALLOWED, DENIED=DENIED, PORT=allowed.port)
        sniffer = Sniffer()
        try:
            sniffer.to(DENIED)
            got = confined(SOURCE_ROUTE, "-q", "--net-allow", f"{ALLOWED}:{allowed.port}", **constants).report
            time.sleep(0.2)
            assert sniffer.to(DENIED) == [], got
            assert got["setsockopt_udp"] == got["setsockopt_tcp"] == "EPERM", got
            assert got["sendmsg_ip_retopts"] == "EPERM", got
            assert got["sendto_udp"] == "ok" and got["connect_tcp"] == "ok", got  # without options
            assert wait_until(lambda: allowed_udp.payloads == [b"SECRET-setsockopt"], 5)

            # Control: unconfined, the "allowed" datagrams are sent to DENIED instead.
            control = bare(SOURCE_ROUTE, **constants).report
            assert control["setsockopt_udp"] == "ok" and control["sendmsg_ip_retopts"] == "ok"
            seen = []
            assert wait_until(lambda: seen.extend(sniffer.to(DENIED)) or all(
                secret in b"".join(seen) for secret in (b"SECRET-setsockopt", b"SECRET-cmsg")), 5), seen
        finally:
            sniffer.close()


ROUTING_HEADER = """
IPV6_RTHDR, IPV6_2292RTHDR, IPV6_2292PKTOPTIONS = 57, 5, 6
loopback = socket.inet_pton(socket.AF_INET6, "::1")
# Segment routing (type 4), segments [::1 (last), ::1 (first hop)]: setsockopt takes it.
srh = bytes([17, 4, 4, 1, 1, 0, 0, 0]) + loopback * 2
# Type 2 (Mobile IPv6), first hop ::1: what ancillary data takes (kernels with MIP6).
rt2 = bytes([17, 2, 2, 1, 0, 0, 0, 0]) + loopback
results = {}
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
results["setsockopt_rthdr"] = attempt(s.setsockopt, socket.IPPROTO_IPV6, IPV6_RTHDR, srh)
results["setsockopt_2292rthdr"] = attempt(s.setsockopt, socket.IPPROTO_IPV6, IPV6_2292RTHDR, srh)
results["setsockopt_2292pktoptions"] = attempt(
    s.setsockopt, socket.IPPROTO_IPV6, IPV6_2292PKTOPTIONS, cmsg(socket.IPPROTO_IPV6, IPV6_RTHDR, rt2))
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
keep = []
header = message(sin6("::1", PORT), b"x", cmsg(socket.IPPROTO_IPV6, IPV6_RTHDR, rt2), keep)
results["sendmsg_rthdr"] = outcome(libc.sendmsg(u.fileno(), ctypes.byref(header), 0))
report(**{k: v if isinstance(v, str) else "ok" for k, v in results.items()})
"""


def test_ipv6_routing_headers_are_refused():
    """The IPv6 twin of source routing (unprivileged): first hop = the first segment."""
    with UdpServer("::1") as server:
        got = confined(ROUTING_HEADER, "-q", "--net-allow", f"[::1]:{server.port}", PORT=server.port).report
        assert got == dict.fromkeys(got, "EPERM") and len(got) == 4, got
        control = bare(ROUTING_HEADER, PORT=server.port).report
        assert control["setsockopt_rthdr"] == control["setsockopt_2292rthdr"] == "ok", control
        # Ancillary routing headers need a kernel with Mobile IPv6 (EINVAL without).
        assert control["sendmsg_rthdr"] in ("ok", "EINVAL"), control


# --- 10, 11. DNS -------------------------------------------------------------------------

DNS_QUERIES = """
import dns.message, dns.rcode, dns.rdatatype

def ask(sock, name, rdtype, tcp=False):
    wire = dns.message.make_query(name, rdtype).to_wire()
    if tcp:
        sock.sendall(struct.pack("!H", len(wire)) + wire)
        length = struct.unpack("!H", sock.recv(2))[0]
        reply = dns.message.from_wire(sock.recv(length))
    else:
        sock.send(wire)
        reply = dns.message.from_wire(sock.recv(4096))
    addresses = [r.address for rrset in reply.answer for r in rrset if hasattr(r, "address")]
    return [dns.rcode.to_text(reply.rcode()), addresses]

def resolve(name):
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as exc:
        return "gaierror %d" % exc.errno

u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect((OUTSIDE, 53))  # a resolver of the command's choosing
t = socket.socket()
t.settimeout(5)
t.connect((OUTSIDE, 53))
v = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
v.settimeout(5)
v.sendto(dns.message.make_query("unlisted.test", "A").to_wire(), (OUTSIDE, 53))
reply, source = v.recvfrom(4096)
report(
    getaddrinfo_unlisted=resolve("unlisted.test"),
    getaddrinfo_listed=resolve("listed.test"),
    udp_unlisted=ask(u, "unlisted.test", "A"),
    udp_txt=ask(u, "listed.test", "TXT"),
    udp_listed=ask(u, "listed.test", "A"),
    tcp_unlisted=ask(t, "unlisted.test", "A", tcp=True),
    udp_peer=list(u.getpeername()),
    sendto_rcode=dns.rcode.to_text(dns.message.from_wire(reply).rcode()),
    sendto_source=list(source),
)
"""


@pytest.fixture
def outside_resolver():
    """Sinks on OUTSIDE:53 (UDP and TCP), if this user may bind port 53."""
    try:
        udp = UdpServer(OUTSIDE, 53)
    except OSError:  # not root (or taken): the responder's answers are the proof
        yield None
        return
    try:
        tcp = TcpServer(OUTSIDE, 53)
    except OSError:
        udp.close()
        yield None
        return
    yield udp, tcp
    udp.close()
    tcp.close()


def test_dns_only_listed_names_and_only_sandlocks_answers(outside_resolver):
    zone = {"listed.test": [ALLOWED], "unlisted.test": [DENIED]}
    with FakeDns(zone) as upstream:
        host, port = upstream.address
        got = confined(DNS_QUERIES, "--net-allow", "listed.test:443", "--dns-server", f"{host}:{port}",
                       "--dns-allow-private", OUTSIDE=OUTSIDE).report
        assert got["getaddrinfo_unlisted"] == f"gaierror {socket.EAI_NONAME}", got
        assert got["getaddrinfo_listed"] == [ALLOWED], got
        assert got["udp_unlisted"] == ["NXDOMAIN", []] and got["tcp_unlisted"] == ["NXDOMAIN", []], got
        assert got["udp_txt"] == ["REFUSED", []], got
        assert got["udp_listed"] == ["NOERROR", [ALLOWED]], got
        # The redirect is visible: the answers came from sandlock's responder.
        assert got["udp_peer"][0] == "127.0.0.1" and got["udp_peer"][1] != 53, got
        assert got["sendto_rcode"] == "NXDOMAIN" and got["sendto_source"] == got["udp_peer"], got
        assert upstream.asked("unlisted.test") == [] and "TXT" not in upstream.asked("listed.test")
    if outside_resolver is not None:
        udp, tcp = outside_resolver
        assert udp.payloads == [] and tcp.accepted == 0


REBIND = """
first = sorted({info[4][0] for info in socket.getaddrinfo("pinned.test", PORT, socket.AF_INET)})
s = socket.socket()
connected_first = attempt(s.connect, ("pinned.test", PORT))
print(json.dumps(first), flush=True)
sys.stdin.readline()  # the test rebinds the name upstream meanwhile
again = sorted({info[4][0] for info in socket.getaddrinfo("pinned.test", PORT, socket.AF_INET)})
s = socket.socket()
connected_again = attempt(s.connect, ("pinned.test", PORT))
s = socket.socket()
new_address = attempt(s.connect, (DENIED, PORT))
report(first=first, again=again, connected_first=connected_first, connected_again=connected_again,
       new_address=new_address)
"""


def test_dns_rebinding_mid_run_keeps_the_pinned_address():
    port = common_port([ALLOWED, DENIED])
    with FakeDns({"pinned.test": [ALLOWED]}) as upstream, TcpServer(ALLOWED, port) as allowed, \
            TcpServer(DENIED, port) as denied:
        host, dns_port = upstream.address
        child = subprocess.Popen(
            sandlock_argv(REBIND, "-q", "--net-allow", f"pinned.test:{port}", "--dns-server",
                          f"{host}:{dns_port}", "--dns-allow-private", PORT=port, DENIED=DENIED),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp")
        try:
            assert json.loads(child.stdout.readline()) == [ALLOWED]
            upstream.set("pinned.test", [DENIED])  # the attacker's DNS now points elsewhere
            out, err = child.communicate("go\n", timeout=30)
        finally:
            child.kill()
        got = json.loads(out.splitlines()[-1])
        assert got == {"first": [ALLOWED], "again": [ALLOWED], "connected_first": "ok",
                       "connected_again": "ok", "new_address": "EACCES"}, err
        assert allowed.accepted == 2 and denied.accepted == 0


# --- 12. pathname unix sockets: the "host daemon" ------------------------------------------

UNIX_CONNECT = """
results = {}
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    return attempt(s.connect, path)

results["readable"] = attempt(os.stat, DAEMON)
results["daemon"] = connect(DAEMON)
if os.path.isdir(WORK):
    link = os.path.join(WORK, "app.sock")  # --unix-allow'ed path, planted as a symlink
    os.symlink(DAEMON, link)
    results["symlink"] = connect(link)
    os.chdir(WORK)
    results["relative_symlink"] = connect("app.sock")
    os.symlink(os.path.dirname(DAEMON), os.path.join(WORK, "dir"))
    results["symlinked_directory"] = connect(os.path.join(WORK, "dir", os.path.basename(DAEMON)))
    results["hardlink"] = attempt(os.link, DAEMON, os.path.join(WORK, "hard.sock"))
    results["via_hardlink"] = connect(os.path.join(WORK, "hard.sock"))
    results["via_proc_fd"] = connect("/proc/self/fd/%d" % os.open(DAEMON, os.O_PATH))
report(**results)
"""


def _unix_dirs(base):
    host, work = base / "host", base / "work"
    for d in (host, work):
        d.mkdir()
        d.chmod(0o777)
    return host, work


@users
def test_host_daemon_unix_socket(tmp_path, world_tmp, as_nobody_or_self):
    host, work = _unix_dirs(world_tmp)
    with UnixServer(str(host / "daemon.sock")) as daemon:
        os.chmod(daemon.address, 0o777)
        constants = dict(DAEMON=daemon.address, WORK=str(work))
        fs = ["-r", "/", "-w", str(work)]
        allow = ["--unix-allow", str(work / "app.sock"), "--unix-allow", str(work / "hard.sock")]
        attacks = confined(UNIX_CONNECT, "-q", *fs, *allow, wrap=as_nobody_or_self, **constants).report
        assert attacks["readable"] == "ok", attacks  # the filesystem policy does not hide it
        assert attacks["hardlink"] in ("EXDEV", "EACCES", "EPERM"), attacks
        del attacks["readable"], attacks["hardlink"]
        # /proc/self names sandlock when sandlock resolves the path: not the daemon either way
        assert attacks.pop("via_proc_fd") in ("EACCES", "ENOENT"), attacks
        assert attacks == dict.fromkeys(attacks, "EACCES") | {"via_hardlink": "ENOENT"}, attacks
        time.sleep(0.1)
        assert daemon.accepted == 0

        allowed = confined(UNIX_CONNECT, *fs, "--unix-allow", daemon.address, wrap=as_nobody_or_self,
                           DAEMON=daemon.address, WORK="/nonexistent").report
        assert allowed == {"readable": "ok", "daemon": "ok"}
        assert wait_until(lambda: daemon.accepted == 1, 5)


UNIX_SWAP_RACE = """
app, service = os.path.join(WORK, "app.sock"), os.path.join(WORK, "service.sock")
stop = False

def swap():  # app.sock: a hard link to the allowed service, then a symlink to the daemon
    while not stop:
        try:
            os.link(service, app + ".a")
            os.replace(app + ".a", app)
            os.symlink(DAEMON, app + ".b")
            os.replace(app + ".b", app)
        except OSError:
            pass

os.symlink(DAEMON, app)  # (renaming a hard link over another link of it would do nothing)
threading.Thread(target=swap, daemon=True).start()
results, tried = {}, 0
deadline = time.monotonic() + 10
# ATTEMPTS, and up to three times that until both phases of the swap were met: a fast
# supervisor can otherwise answer every attempt between two swaps.
while time.monotonic() < deadline and (tried < ATTEMPTS or (len(results) < 2 and tried < 3 * ATTEMPTS)):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    count(results, attempt(s.connect, app))
    s.close()
    tried += 1
    time.sleep(0)  # let the swapping thread run
stop = True
report(**results)
"""


def test_unix_symlink_swap_race_cannot_reach_the_daemon(tmp_path):
    host, work = _unix_dirs(tmp_path)
    with UnixServer(str(host / "daemon.sock")) as daemon, UnixServer(str(work / "service.sock")) as service:
        constants = dict(DAEMON=daemon.address, WORK=str(work), ATTEMPTS=ATTEMPTS)
        got = confined(UNIX_SWAP_RACE, "-q", "-r", "/", "-w", str(work),
                       "--unix-allow", str(work / "app.sock"), **constants).report
        assert wait_until(lambda: service.accepted == got.get("ok"), 5), (got, service.accepted)
        assert daemon.accepted == 0, got
        assert got.get("ok", 0) > 0 and sum(got.values()) > got["ok"], got  # the race ran

        for leftover in work.glob("app.sock*"):
            leftover.unlink()
        assert bare(UNIX_SWAP_RACE, **constants).returncode == 0  # control: the swap reaches it
        assert wait_until(lambda: daemon.accepted > 0, 5)


# --- 13. killing the supervisor --------------------------------------------------------------

CONNECT_LOOP = """
from sandlock.kernel import _bpf, _seccomp
print(os.getpid(), flush=True)
log = open("attempts.log", "a", buffering=1)
asm = _bpf.Assembler()
asm.ret(_seccomp.SECCOMP_RET_ALLOW)
own_listener = _seccomp.SECCOMP_FILTER_FLAG_NEW_LISTENER
while True:
    s = socket.socket()
    s.settimeout(2)
    result = attempt(s.connect, (DENIED, PORT))
    s.close()
    if result == "ENOSYS":  # the listener is gone: try to become our own supervisor
        result += " seccomp:" + attempt(_seccomp.install, asm.assemble(), own_listener)
    log.write(result + "\\n")
"""


def test_killing_sandlock_kills_the_command_and_opens_nothing(tmp_path):
    with TcpServer(DENIED) as denied:
        sandlock = subprocess.Popen(sandlock_argv(CONNECT_LOOP, "-q", NO_PRIVATE, DENIED=DENIED,
                                                  PORT=denied.port),
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    cwd=tmp_path)
        child = host_pid(int(sandlock.stdout.readline()), sandlock.pid)
        log = tmp_path / "attempts.log"
        assert wait_until(lambda: log.exists() and log.read_text().count("\n") >= 20, 10)
        sandlock.kill()
        sandlock.wait()
        assert wait_until(lambda: not os.path.exists(f"/proc/{child}"), 5), "the command survived"
        sandlock.stdout.close()
        attempts = log.read_text().split()
        assert attempts and not any(a.startswith("ok") or "seccomp:ok" in a for a in attempts), attempts
        assert set(attempts) <= {"EACCES", "ENOSYS", "seccomp:EPERM"}, set(attempts)
        time.sleep(0.2)
        assert denied.accepted == 0


# --- 14. signals and kills while a connect is held -------------------------------------------

HELD_CONNECT = """
signals = []
signal.signal(signal.SIGUSR1, lambda *a: signals.append(1))  # no SA_RESTART: EINTR if abandoned
s = socket.socket()
print(os.getpid(), flush=True)
result = libc.connect(s.fileno(), sin(ALLOWED, PORT), 16)
result = "ok" if result == 0 else errname(ctypes.get_errno())
if result == "ok":
    s.sendall(b"mine")
report(result=result, signalled=bool(signals))
"""


def test_signal_during_a_held_connect_leaves_no_ghost_connection():
    with TcpServer(ALLOWED, backlog=0, paused=True) as server:
        filler = fill_backlog(server)  # the queue is full: the command's SYNs are dropped
        argv = sandlock_argv(HELD_CONNECT, "-q", "--net-allow", f"{ALLOWED}:{server.port}",
                             ALLOWED=ALLOWED, PORT=server.port)
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp")
        try:
            pid = host_pid(int(child.stdout.readline()), child.pid)
            time.sleep(0.3)  # the connect is held by sandlock's worker by now
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.2)
            server.resume()  # accept the filler: the next SYN retransmission gets through
            out, _ = child.communicate(timeout=20)
        finally:
            child.kill()
            filler.close()
        got = json.loads(out.splitlines()[-1])
        assert got["signalled"], got

        def from_command():
            return [i for i, peer in enumerate(server.peers) if peer[0] != BYSTANDER]

        if got["result"] == "ok":  # the call was held through the signal: the command owns it
            assert wait_until(lambda: len(from_command()) == 1, 5)
            assert server.received(from_command()[0], 4) == b"mine"
        else:  # abandoned: nothing may be established for it later
            time.sleep(1.5)  # past the next SYN retransmission
            assert from_command() == [], (got, server.peers)


GHOST = """
s = socket.socket()
print("connecting", flush=True)
s.connect((ALLOWED, PORT))
print("connected", flush=True)
time.sleep(60)
"""


def test_killed_during_a_held_connect_leaves_no_ghost_connection():
    """The sandbox is killed while sandlock's worker holds a blocking connect for it;
    sandlock (here: this process, through the API) lives on."""
    from sandlock import Policy, Sandbox

    with TcpServer(ALLOWED, backlog=0, paused=True) as server:
        filler = fill_backlog(server)
        read_end, write_end = os.pipe()
        sandbox = Sandbox(Policy(net_allow=(f"{ALLOWED}:{server.port}",)), quiet=True)
        argv = [PY, "-c", snippet(GHOST, ALLOWED=ALLOWED, PORT=server.port)]
        process = sandbox.start(argv, stdout=write_end)
        os.close(write_end)
        try:
            with os.fdopen(read_end) as output:
                assert output.readline() == "connecting\n"
                time.sleep(0.3)  # the SYN was dropped; retransmissions follow at +1 s, +3 s
                process.kill()
                process.wait()
                server.resume()  # the queue has room again
                time.sleep(2.0)
                assert output.read() == ""  # it never connected
        finally:
            filler.close()
        assert [peer for peer in server.peers if peer[0] != BYSTANDER] == [], server.peers


# --- 15. sandlock's and the keeper's /proc entries ------------------------------------------

PROC_PROBES = """
# The command's parent is the init of the sandbox's PID namespace (a copy of sandlock,
# as the keeper is); OUTSIDE is a process outside the sandbox (sandlock itself through
# the API, sandlock's parent for the CLI), which the namespace does not even show.
parent = os.getppid()

class IoVec2(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def vm_read(pid):
    buffer = ctypes.create_string_buffer(8)
    local, remote = IoVec2(ctypes.addressof(buffer), 8), IoVec2(0x400000, 8)
    return outcome(libc.syscall(ctypes.c_long(310), ctypes.c_long(pid), ctypes.byref(local),
                                ctypes.c_long(1), ctypes.byref(remote), ctypes.c_long(1), ctypes.c_long(0)))

def steal_fd(pid):
    pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))
    if pidfd < 0:
        return "pidfd_open " + errname(ctypes.get_errno())
    long = ctypes.c_long
    got = [outcome(libc.syscall(long(438), long(pidfd), long(fd), long(0))) for fd in range(8)]
    return sorted({g if isinstance(g, str) else "ok" for g in got})

def read(path):
    with open(path, "rb") as f:
        f.read(1)

results = {}
for who, pid in (("parent", parent), ("outside", OUTSIDE)):
    results[who] = {
        "mem": attempt(read, f"/proc/{pid}/mem"),
        "environ": attempt(read, f"/proc/{pid}/environ"),
        "maps": attempt(read, f"/proc/{pid}/maps"),
        "fd_link": attempt(os.readlink, f"/proc/{pid}/fd/0"),
        "cwd": attempt(os.readlink, f"/proc/{pid}/cwd"),
        "process_vm_readv": vm_read(pid),
        "pidfd_getfd": steal_fd(pid),
        "kill_0": attempt(os.kill, pid, 0),
    }
report(parent_pid=parent, **results)
"""
REFUSED = {"EACCES", "EPERM"}
ABSENT = {"ENOENT", "ESRCH"}


def _all_refused(probes: dict, outcomes: set = REFUSED) -> bool:
    values = [v for value in probes.values() for v in (value if isinstance(value, list) else [value])]
    return all(v.removeprefix("pidfd_open ") in outcomes for v in values)


@users
def test_sandlock_and_keeper_are_out_of_reach_cli(as_nobody_or_self):
    argv = sandlock_argv(PROC_PROBES, "--net-allow", "*", OUTSIDE=os.getpid())
    if as_nobody_or_self is not None:
        argv = as_nobody_or_self(argv)
    launched = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp")
    out, _ = launched.communicate(timeout=30)
    got = json.loads(out.splitlines()[-1])
    assert got["parent_pid"] == 1
    assert _all_refused(got["parent"]), got["parent"]
    assert _all_refused(got["outside"], ABSENT), got["outside"]


def test_sandlock_out_of_reach_through_the_api():
    """Through the API sandlock is this (dumpable) test process: not in the sandbox's
    PID namespace at all, and the namespace's init refuses everything."""
    from sandlock import Policy, Sandbox

    result = Sandbox(Policy(net_allow=("*",)), quiet=True).run(
        [PY, "-c", snippet(PROC_PROBES, OUTSIDE=os.getpid())], timeout=30)
    assert result.exit_code == 0, result.stderr
    got = json.loads(result.stdout.decode().splitlines()[-1])
    assert _all_refused(got["parent"]), got["parent"]
    assert _all_refused(got["outside"], ABSENT), got["outside"]


@pytest.mark.skipif(not IS_ROOT, reason="the control reads another process's memory")
def test_proc_probes_work_without_a_sandbox():
    """Control: the same probes against a plain parent and an outside process succeed."""
    launcher = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    inner = [PY, "-c", launcher, PY, "-c", snippet(PROC_PROBES, OUTSIDE=os.getpid())]
    done = subprocess.run([PY, "-c", launcher, *inner], capture_output=True, text=True, timeout=30,
                          check=True)
    got = json.loads(done.stdout.splitlines()[-1])
    for probes in (got["parent"], got["outside"]):
        assert probes["environ"] == probes["maps"] == probes["fd_link"] == probes["kill_0"] == "ok", probes
        assert probes["process_vm_readv"] != "EPERM" and probes["pidfd_getfd"] != ["EPERM"], probes


NETLINK_ADMIN = """
# RTM_DELLINK of an interface that does not exist: harmless, and the kernel checks
# CAP_NET_ADMIN before looking (EPERM without it, ENODEV with it). With an address,
# only the capabilities of the thread that sends count: sandlock's, when it sends.
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
request = struct.pack("=IHHII", 32, 17, 5, 1, 0) + struct.pack("=BxHiII", 0, 0, 0x7FFFFFFF, 0, 0)
s.sendto(request, (0, 0))
reply = s.recv(4096)
# Aiming the socket at the link-events group (to feed other processes' listeners forged
# events) needs CAP_NET_ADMIN too; connecting alone sends nothing.
g = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
report(dellink=errname(-struct.unpack_from("=i", reply, 16)[0]), connect_group=attempt(g.connect, (0, 1)))
"""


@pytest.mark.skipif(not IS_ROOT, reason="only root holds CAP_NET_ADMIN to lose")
def test_root_command_cannot_reconfigure_the_network():
    """NETLINK_ROUTE is allowed (interfaces, addresses): root must not be able to change
    routes, addresses or qdiscs with it, which would override every rule."""
    assert confined(NETLINK_ADMIN, "--net-allow", "*").report == {"dellink": "EPERM", "connect_group": "EPERM"}
    # Control: root holds the capability here.
    assert bare(NETLINK_ADMIN).report == {"dellink": "ENODEV", "connect_group": "ok"}


# --- 16. sandlock's own DNS responder ------------------------------------------------------

RESPONDER_DIRECT = """
import dns.message
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect((OUTSIDE, 53))  # redirected: the peer is now the responder
u.send(dns.message.make_query("x.test", "A").to_wire())
u.recv(4096)
udp_host, udp_port = u.getpeername()
t = socket.socket()
t.connect((OUTSIDE, 53))
tcp_host, tcp_port = t.getpeername()

def tcp(address, family=socket.AF_INET):
    return attempt(socket.socket(family).connect, address)

def udp_sendto(address):
    return attempt(socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto, b"query", address)

report(
    responder=[udp_host, udp_port, tcp_host, tcp_port],
    udp_sendto=udp_sendto((udp_host, udp_port)),
    udp_connect=attempt(socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect, (udp_host, udp_port)),
    udp_any=udp_sendto(("0.0.0.0", udp_port)),
    tcp=tcp((tcp_host, tcp_port)),
    tcp_any=tcp(("0.0.0.0", tcp_port)),
    tcp_mapped=tcp(("::ffff:127.0.0.1", tcp_port), socket.AF_INET6),
    loopback_control=tcp(("127.0.0.1", CONTROL_PORT)),
)
"""


def test_sandlocks_dns_responder_is_not_reachable_directly():
    with TcpServer("127.0.0.1") as control:
        got = confined(RESPONDER_DIRECT, "-q", "--net-allow", "127.0.0.1", OUTSIDE=OUTSIDE,
                       CONTROL_PORT=control.port).report
        udp_host, udp_port, tcp_host, tcp_port = got.pop("responder")
        assert udp_host == tcp_host == "127.0.0.1" and 53 not in (udp_port, tcp_port), got
        assert got.pop("loopback_control") == "ok"  # loopback really is allowed
        assert got == dict.fromkeys(got, "EACCES"), got


# --- 17. abstract unix sockets -----------------------------------------------------------

ABSTRACT = """
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
report(connect=attempt(s.connect, NAME), sendto=attempt(d.sendto, b"hello", NAME + "-dgram"))
"""


def test_abstract_unix_socket_of_an_outside_listener():
    name = f"\0sandlock-attack-{uuid.uuid4().hex}"
    with UnixServer(name) as stream, UnixServer(name + "-dgram", socket.SOCK_DGRAM) as dgram:
        scoped = confined(ABSTRACT, "-q", "--net-allow", "*", NAME=name).report
        assert scoped == {"connect": "EPERM", "sendto": "EPERM"}
        time.sleep(0.1)
        assert stream.accepted == 0 and dgram.datagrams == []
        opened = confined(ABSTRACT, "--allow-ipc", NAME=name).report
        assert opened == {"connect": "ok", "sendto": "ok"}
        assert wait_until(lambda: stream.accepted == 1 and dgram.datagrams == [b"hello"], 5)


# --- the verdict itself (pure): the fixes above at their own level -----------------------


def _context(*rules: str, bind: str | None = None):
    from sandlock.net._judge import OwnListeners, RunContext
    from sandlock.netrules._netpolicy import NetPolicy
    from sandlock.netrules._ports import parse_ports
    from sandlock.netrules._spec import parse_allow
    from sandlock.netrules._pins import PinTable

    policy = NetPolicy(allow=tuple(map(parse_allow, rules)), bind_ports=parse_ports(bind) if bind else None)
    return RunContext(policy, PinTable(), OwnListeners(), ipc_scoped=True)


def _socket(family=socket.AF_INET, kind=socket.SOCK_DGRAM):
    from sandlock.netcall._materialize import Socket

    return Socket(-1, family, kind, 0, False)


@pytest.mark.parametrize("family,destination,target", [
    (socket.AF_INET, "0.0.0.0", "127.0.0.1"),
    (socket.AF_INET6, "::", "::1"),
    (socket.AF_INET6, "::ffff:0.0.0.0", "127.0.0.1"),
    (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
])
def test_verdict_connects_where_it_looked(family, destination, target):
    from ipaddress import ip_address

    from sandlock.net._judge import judge_destination
    from sandlock.netcall._sockaddr import InetAddress

    decision = judge_destination(_socket(family), InetAddress(family, ip_address(destination), 8080),
                                 _context("127.0.0.1:8080", "[::1]:8080"))
    assert decision.allowed and decision.target == InetAddress(family, ip_address(target), 8080)


def test_verdict_on_af_unspec_depends_on_the_call():
    from sandlock.net._judge import judge_destination, judge_message
    from sandlock.netcall._materialize import Message
    from sandlock.netcall._sockaddr import OtherAddress

    unspec = OtherAddress(0, bytes(16))
    ctx = _context("*", bind="*")
    assert judge_destination(_socket(), unspec, ctx).allowed  # connect: dissolve
    assert not judge_destination(_socket(), unspec, ctx, binding=True).allowed
    refused = judge_message(_socket(), Message(unspec, (b"x",)), ctx)
    assert not refused.allowed and refused.error == errno.EAFNOSUPPORT


@pytest.mark.parametrize("kind", [(0, 7), (41, 57), (41, 5)])
def test_verdict_refuses_source_routing_ancillary_data(kind):
    from ipaddress import ip_address

    from sandlock.net._judge import judge_message
    from sandlock.netcall._materialize import Message
    from sandlock.netcall._sockaddr import InetAddress

    destination = InetAddress(socket.AF_INET, ip_address(ALLOWED), 9)
    routed = Message(destination, (b"x",), control_kinds=((1, 2), kind))
    decision = judge_message(_socket(), routed, _context("*"))
    assert not decision.allowed and decision.error == errno.EPERM
    plain = Message(destination, (b"x",), control_kinds=((0, 8),))  # IP_PKTINFO-like: fine
    assert judge_message(_socket(), plain, _context("*")).allowed
    # a unix socket: the kernel ignores IP-level items there
    assert judge_message(_socket(socket.AF_UNIX), Message(None, (b"x",), control_kinds=(kind,)),
                         _context()).allowed


def test_remembered_verdicts_follow_new_pins_and_listeners():
    """Decisions about IP destinations are reused, but never past a pin (a name the rule
    allows now means this address) or one of sandlock's listeners starting there."""
    from ipaddress import ip_address

    from sandlock.net._judge import judge_destination
    from sandlock.netcall._sockaddr import InetAddress

    ctx = _context("api.example.test:443", "127.0.0.1:5353")
    api = InetAddress(socket.AF_INET, ip_address("192.0.2.7"), 443)
    stream = _socket(kind=socket.SOCK_STREAM)
    assert not judge_destination(stream, api, ctx).allowed
    assert not judge_destination(stream, api, ctx).allowed  # remembered
    ctx.pins.pin("api.example.test", (ip_address("192.0.2.7"),))
    assert judge_destination(stream, api, ctx).allowed
    responder = InetAddress(socket.AF_INET, ip_address("127.0.0.1"), 5353)
    assert judge_destination(_socket(), responder, ctx).allowed
    ctx.listeners.dns_udp = responder  # the DNS responder came up on that port
    assert not judge_destination(_socket(), responder, ctx).allowed
    # the socket's transport is part of what is remembered
    assert judge_destination(_socket(socket.AF_UNIX), api, ctx).error == errno.EAFNOSUPPORT


def test_own_socket_recognition_cannot_be_raced_onto_a_host_socket(tmp_path):
    """Bind a socket, and race a hard link to a host daemon's socket over its path while
    sandlock records what the sandbox bound: the daemon must never be reached. (The
    first design recorded the file found by a second path lookup: escaped in <1 s.)"""
    daemon_path = tmp_path / "host" / "daemon.sock"
    daemon_path.parent.mkdir()
    daemon = UnixServer(str(daemon_path))
    work = tmp_path / "race"
    work.mkdir()
    script = (
        "import os, socket, sys, time\n"
        "daemon = sys.argv[1]\n"
        "host_inode = os.stat(daemon).st_ino\n"
        "if os.fork() == 0:  # keep putting a hard link to the daemon's socket at 's'\n"
        "    end = time.time() + 4\n"
        "    while time.time() < end:\n"
        "        try:\n"
        "            if os.lstat('s').st_ino != host_inode:\n"
        "                try: os.link(daemon, 'l')\n"
        "                except OSError: pass\n"
        "                os.rename('l', 's')\n"
        "        except OSError: pass\n"
        "    os._exit(0)\n"
        "end = time.time() + 4\n"
        "while time.time() < end:\n"
        "    try: os.unlink('s')\n"
        "    except OSError: pass\n"
        "    a = socket.socket(socket.AF_UNIX)\n"
        "    try: a.bind('s')\n"
        "    except OSError: a.close(); continue\n"
        "    c = socket.socket(socket.AF_UNIX)\n"
        "    try: c.connect('s')\n"
        "    except OSError: pass\n"
        "    c.close(); a.close()\n"
        "os.wait()\n"
    )
    with daemon:
        subprocess.run([sys.executable, "-m", "sandlock", "run", "-q", "--cwd", str(work), "--",
                        sys.executable, "-c", script, str(daemon_path)], timeout=60)
        assert daemon.accepted == 0


def test_nothing_is_sent_for_a_command_that_was_killed():
    """A blocking 50 MB send to a peer that does not read waits on a worker; when the
    sandbox is killed (timeout), sandlock stops sending for it."""
    from sandlock import Policy, Sandbox

    server = socket.socket()
    server.bind(("127.0.0.4", 0))
    server.listen()
    port = server.getsockname()[1]
    script = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.4', int(sys.argv[1])))\n"
        "s.sendmsg([b'x' * (50 << 20)])\n"
    )
    try:
        result = Sandbox(Policy(net_allow=(f"127.0.0.4:{port}",), timeout=1.5), quiet=True).run(
            [sys.executable, "-c", script, str(port)])
        assert result.timed_out
        connection, _ = server.accept()
        connection.settimeout(5)
        total = 0
        while chunk := connection.recv(1 << 20):  # EOF: nobody holds the socket any more
            total += len(chunk)
    finally:
        server.close()
    assert total < 50 << 20


FORGED_CREDENTIALS = r'''
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
b.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
results = {}
for name, pid, uid in (("own", os.getpid(), os.getuid()), ("init", 1, 0), ("root", os.getpid(), 0)):
    credentials = struct.pack("3i", pid, uid, os.getgid())
    results[name] = attempt(a.sendmsg, [b"x"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials)])
a.send(b"plain")
data, ancillary, _, _ = b.recvmsg(16, 64)
while data != b"plain":
    data, ancillary, _, _ = b.recvmsg(16, 64)
results["stamped"] = list(struct.unpack("3i", ancillary[0][2]))[1:] == [os.getuid(), os.getgid()]
report(**results)
'''


@users
def test_forged_scm_credentials_are_refused(as_nobody_or_self):
    """Sent on the command's behalf, SCM_CREDENTIALS would be checked against sandlock's
    own (root's, for a root sandlock) and claim what the command never could."""
    assert bare(FORGED_CREDENTIALS).report["init"] == "EPERM" or os.getuid() == 0
    attacks = confined(FORGED_CREDENTIALS, "-q", wrap=as_nobody_or_self).report
    assert attacks == {"own": "EPERM", "init": "EPERM", "root": "EPERM", "stamped": True}
