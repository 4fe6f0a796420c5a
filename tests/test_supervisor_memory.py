"""sandlock's own memory does not grow with what the command sends: a send that waits
for a peer that never reads holds none of its bytes in the supervisor, a datagram too
large for its socket is refused before it is copied, and what the supervisor does hold
is bounded (netcall/_payload.py). Real confined processes; sandlock's RSS read from its
/proc/PID/status while the sends wait."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock

THREADS, MIB = 6, 16  # 96 MiB in flight: copied, sandlock would hold at least that

BLOCKED_SENDS = r"""
import os, socket, sys, threading, time
threads, size = int(sys.argv[1]), int(sys.argv[2]) << 20
results, peers = [], []
def send(sock, data):
    results.append(sock.sendmsg([data[:1000], data[1000:]]))
for n in range(threads):
    a, b = socket.socketpair()
    data = bytes([n % 256]) * size  # resident in the command
    peers.append((b, data))
    threading.Thread(target=send, args=(a, data), daemon=True).start()
time.sleep(1.5)
rss = [l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]
print("waiting", len(results), int(rss) >> 10, flush=True)
sys.stdin.readline()  # the test has measured sandlock: now read everything
for b, data in peers:
    got = bytearray()
    while len(got) < len(data):
        got += b.recv(1 << 20)
    assert got == data
while len(results) < threads:
    time.sleep(0.01)
print("delivered", sorted(set(results)) == [size], flush=True)
"""


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) >> 10


def _blocked_sends(argv_prefix: list[str]) -> tuple[int, int, str]:
    """(sandlock's RSS while the sends wait, the command's own RSS, its last line)."""
    argv = [*argv_prefix, "run", "-m", "512M", "--", sys.executable, "-c", BLOCKED_SENDS,
            str(THREADS), str(MIB)]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()) as run:
        try:
            waiting = run.stdout.readline().split()
            assert waiting[:2] == ["waiting", "0"], (waiting, run.stderr.read())  # none returned
            sandlock_rss = _rss_mib(run.pid)
            out, err = run.communicate("go\n", timeout=60)
        finally:
            run.kill()
    assert run.returncode == 0, err
    return sandlock_rss, int(waiting[2]), out.strip()


def test_sends_that_wait_hold_nothing_in_sandlock():
    sandlock_rss, command_rss, last = _blocked_sends(SANDLOCK)
    # Control: the bytes are real, resident in the command, and every send delivers
    # them all once the peers read.
    assert command_rss >= THREADS * MIB and last == "delivered True"
    assert sandlock_rss < 60, f"sandlock holds {sandlock_rss} MiB while the sends wait"


def test_sends_that_wait_hold_nothing_in_sandlock_for_an_unprivileged_user(as_nobody):
    sandlock_rss, command_rss, last = _blocked_sends(as_nobody(SANDLOCK))
    assert command_rss >= THREADS * MIB and last == "delivered True"
    assert sandlock_rss < 60, f"sandlock holds {sandlock_rss} MiB while the sends wait"


TOO_LARGE = r"""
import socket, sys
kind = socket.SOCK_DGRAM if sys.argv[1] == "unix" else None
if kind:
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    send = lambda data: a.sendmsg([data])
else:
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.bind(("127.0.0.1", 0))
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    send = lambda data: a.sendto(data, b.getsockname())
for size in (int(sys.argv[2]), 1000):
    try:
        print(size, send(b"d" * size))
    except OSError as exc:
        print(size, exc.errno)
"""


@pytest.mark.parametrize("family, size", [("unix", 64 << 20), ("udp", 70000)])
def test_a_datagram_larger_than_its_socket_is_refused_as_the_kernel_would(family, size, tmp_path):
    """EMSGSIZE, before sandlock copies it; a datagram that fits goes. Control: the
    kernel's own answer, unconfined."""
    argv = [sys.executable, "-c", TOO_LARGE, family, str(size)]
    bare = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert bare.stdout == f"{size} 90\n1000 1000\n", bare.stderr
    result = sandlock("run", "--net-allow", "127.0.0.1:*", "--", *argv, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, bare.stdout), result.stderr


SENDMMSG = r"""
import ctypes, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
count, size = 64, 200 << 10  # 12.5 MiB in one call
bufs = [ctypes.create_string_buffer(bytes([i]) * size, size) for i in range(count)]
iovs = [struct.pack("QQ", ctypes.addressof(buf), size) for buf in bufs]
iov_bufs = [ctypes.create_string_buffer(iov, 16) for iov in iovs]
table = b"".join(struct.pack("QI4xQQQQi4xI4x", 0, 0, ctypes.addressof(iov), 1, 0, 0, 0, 0)
                 for iov in iov_bufs)
vec = ctypes.create_string_buffer(table, len(table))
sent = libc.sendmmsg(a.fileno(), vec, count, socket.MSG_DONTWAIT)
lengths = [struct.unpack_from("I", vec.raw, i * 64 + 56)[0] for i in range(max(sent, 0))]
ok = all(b.recv(size + 1) == bytes([i]) * size for i in range(max(sent, 0)))
print(0 < sent <= count, set(lengths) == {size}, ok)
"""


def test_one_sendmmsg_is_copied_a_bounded_part_at_a_time(tmp_path):
    """It says how many messages went (all of them whole, their msg_len written back),
    as the kernel may; the command sends the rest with its next call."""
    result = sandlock("run", "--", sys.executable, "-c", SENDMMSG, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "True True True\n"), result.stderr


WAITING_DATAGRAMS = r"""
import socket, sys, threading, time
threads = int(sys.argv[1])
probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
size = min(probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2 - 4096, 4 << 20)
sent, peers = [], []
def send():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    peers.append(b)
    data = b"d" * size
    while a.sendmsg([data]) == size:  # until one waits for room: the peer never reads
        sent.append(1)
for _ in range(threads):
    threading.Thread(target=send, daemon=True).start()
time.sleep(1.5)
print(size >> 10, flush=True)
sys.stdin.readline()
"""


def test_a_datagram_that_waits_for_room_is_not_held(tmp_path):
    """A blocking datagram send to a peer that never reads waits on a worker, which
    keeps no copy of it (it reads it again when there is room)."""
    argv = [*SANDLOCK, "run", "--", sys.executable, "-c", WAITING_DATAGRAMS, "16"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=tmp_path) as run:
        try:
            size_kib = int(run.stdout.readline() or 0)
            rss = _rss_mib(run.pid)
        finally:
            run.kill()
    if size_kib < 1024:
        pytest.skip(f"datagrams of {size_kib} KiB here (net.core.wmem_max): too small to see")
    held_if_copied = 16 * size_kib >> 10
    assert rss < 20 + held_if_copied // 2, f"sandlock holds {rss} MiB for 16 waiting datagrams"
