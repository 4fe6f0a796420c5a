"""Helpers for test_net_attacks.py: confined runs of attack snippets, and loopback
servers that record every connection and datagram they get.

Addresses: every "outside" destination is a loopback alias, so that a sandbox that
let something through would visibly reach a real listener, and nothing leaves the
machine. DENIED and OUTSIDE are never allowed by a test's policy; ALLOWED is.
"""

from __future__ import annotations

import json
import os
import random
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PY = sys.executable
DENIED = "127.0.0.2"
OUTSIDE = "127.0.0.3"  # an "outside resolver"
ALLOWED = "127.0.0.4"
BYSTANDER = "127.0.0.5"  # source address of the test's own filler connections

# Runs first in every snippet: raw libc access, sockaddr builders, one JSON report line.
PRELUDE = r'''
import ctypes, errno, json, os, signal, socket, struct, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
_VP, _U32, _INT, _SZ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_size_t
for _name, _args, _res in (
    ("connect", (_INT, _VP, _U32), _INT), ("bind", (_INT, _VP, _U32), _INT),
    ("send", (_INT, _VP, _SZ, _INT), ctypes.c_ssize_t),
    ("sendto", (_INT, _VP, _SZ, _INT, _VP, _U32), ctypes.c_ssize_t),
    ("sendmsg", (_INT, _VP, _INT), ctypes.c_ssize_t),
    ("sendmmsg", (_INT, _VP, ctypes.c_uint, _INT), _INT),
    ("setsockopt", (_INT, _INT, _INT, _VP, _U32), _INT),
):
    getattr(libc, _name).argtypes, getattr(libc, _name).restype = _args, _res
libc.syscall.restype = ctypes.c_long
MSG_FASTOPEN = 0x20000000


def sin(host, port, family=socket.AF_INET):
    """A 16-byte sockaddr_in; ``family`` may lie (AF_UNSPEC attacks)."""
    return struct.pack("=H", family) + struct.pack("!H", port) + socket.inet_aton(host) + bytes(8)


def sin6(host, port):
    return (struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, 0)
            + socket.inet_pton(socket.AF_INET6, host) + struct.pack("=I", 0))


def errname(code):
    return errno.errorcode.get(code, str(code))


def outcome(result):
    """A libc result: the value, or the errno's name when it failed."""
    return result if result >= 0 else errname(ctypes.get_errno())


def attempt(function, *args):
    """"ok", or the name of the errno the call failed with."""
    try:
        function(*args)
    except OSError as exc:
        return errname(exc.errno) if exc.errno else type(exc).__name__
    return "ok"


def count(results, key):
    results[key] = results.get(key, 0) + 1


class IoVec(ctypes.Structure):
    _fields_ = [("base", _VP), ("len", _SZ)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("name", _VP), ("namelen", _U32), ("iov", ctypes.POINTER(IoVec)), ("iovlen", _SZ),
                ("control", _VP), ("controllen", _SZ), ("flags", _INT)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


def message(address, payload, control=b"", keep=None):
    """A MsgHdr for (address bytes or None, payload, raw ancillary data)."""
    keep = [] if keep is None else keep
    data = ctypes.create_string_buffer(payload, len(payload))
    iov = IoVec(ctypes.addressof(data), len(payload))
    header = MsgHdr(None, 0, ctypes.pointer(iov), 1, None, 0, 0)
    keep += [data, iov]
    if address is not None:
        name = ctypes.create_string_buffer(address, len(address))
        header.name, header.namelen = ctypes.addressof(name), len(address)
        keep.append(name)
    if control:
        ancillary = ctypes.create_string_buffer(control, len(control))
        header.control, header.controllen = ctypes.addressof(ancillary), len(control)
        keep.append(ancillary)
    return header


def cmsg(level, kind, data):
    """One ancillary item (struct cmsghdr + data, padded to 8 bytes)."""
    item = struct.pack("=Qii", 16 + len(data), level, kind) + data
    return item + bytes(-len(item) % 8)


def report(**results):
    print(json.dumps(results), flush=True)
'''


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict:
        assert self.returncode == 0, f"snippet failed ({self.returncode}): {self.stderr[-3000:]}"
        return json.loads(self.stdout.strip().splitlines()[-1])


def snippet(code: str, **constants: object) -> str:
    """PRELUDE, then NAME = repr(value) lines, then ``code``."""
    lines = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return PRELUDE + lines + textwrap.dedent(code)


def sandlock_argv(code: str, *options: str, **constants: object) -> list[str]:
    return [PY, "-m", "sandlock", "run", *options, "--", PY, "-c", snippet(code, **constants)]


def confined(code: str, *options: str, wrap: Callable[[list[str]], list[str]] | None = None,
             timeout: float = 30, cwd: str | None = None, **constants: object) -> Run:
    """Run ``code`` under `sandlock run OPTIONS` (``wrap``: e.g. as another user)."""
    argv = sandlock_argv(code, *options, **constants)
    if wrap is not None:
        argv = wrap(argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd or "/tmp",
                          check=False)
    return Run(done.returncode, done.stdout, done.stderr)


def bare(code: str, timeout: float = 30, cwd: str | None = None, **constants: object) -> Run:
    """The same snippet without sandlock: the control showing what the attack does."""
    done = subprocess.run([PY, "-c", snippet(code, **constants)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or "/tmp", check=False)
    return Run(done.returncode, done.stdout, done.stderr)


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class _Server:
    """A background thread serving one socket until close()."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            ready, _, _ = select.select([self.sock, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            self._serve_one()

    def _serve_one(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        self.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpServer(_Server):
    """Accepts on host:port (0: any free one) and keeps every connection.

    ``paused``: not accepting, so that with backlog 0 one connection fills the queue
    and later SYNs are dropped (a connect that stays pending, deterministically).
    """

    def __init__(self, host: str, port: int = 0, backlog: int = 512, paused: bool = False,
                 reuseport: bool = False) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:  # (to share a port with a listener that set it too)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        self.host, self.port = host, sock.getsockname()[1]
        self.connections: list[tuple[socket.socket, tuple]] = []
        self._paused = threading.Event()
        if paused:
            self._paused.set()
        super().__init__(sock)

    @property
    def peers(self) -> list[tuple]:
        with self._lock:
            return [peer for _, peer in self.connections]

    @property
    def accepted(self) -> int:
        return len(self.peers)

    def resume(self) -> None:
        self._paused.clear()  # the loop looks again within 20 ms

    def _loop(self) -> None:
        while True:
            watched = [self._wake_r] if self._paused.is_set() else [self.sock, self._wake_r]
            ready, _, _ = select.select(watched, [], [], 0.02)
            if self._wake_r in ready:
                return
            if self.sock in ready:
                self._serve_one()

    def _serve_one(self) -> None:
        try:
            connection, peer = self.sock.accept()
        except OSError:
            return
        with self._lock:
            self.connections.append((connection, peer))

    def received(self, index: int, size: int = 64, timeout: float = 2.0) -> bytes:
        """What connection ``index`` sent (until EOF, ``size`` bytes or ``timeout``)."""
        connection = self.connections[index][0]
        connection.settimeout(timeout)
        data = b""
        try:
            while len(data) < size:
                chunk = connection.recv(size - len(data))
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        return data

    def close(self) -> None:
        super().close()
        for connection, _ in self.connections:
            connection.close()


class UdpServer(_Server):
    def __init__(self, host: str, port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((host, port))
        self.host, self.port = host, sock.getsockname()[1]
        self.datagrams: list[tuple[bytes, tuple]] = []
        super().__init__(sock)

    @property
    def payloads(self) -> list[bytes]:
        with self._lock:
            return [data for data, _ in self.datagrams]

    def _serve_one(self) -> None:
        try:
            data, peer = self.sock.recvfrom(65535)
        except OSError:
            return
        with self._lock:
            self.datagrams.append((data, peer))


class UnixServer(_Server):
    """A unix stream listener at a path (or an abstract name starting with NUL)."""

    def __init__(self, address: str, kind: int = socket.SOCK_STREAM) -> None:
        sock = socket.socket(socket.AF_UNIX, kind)
        sock.bind(address)
        if kind == socket.SOCK_STREAM:
            sock.listen(512)
        self.address = address
        self.kind = kind
        self.connections: list[socket.socket] = []
        self.datagrams: list[bytes] = []
        super().__init__(sock)

    @property
    def accepted(self) -> int:
        with self._lock:
            return len(self.connections)

    def _serve_one(self) -> None:
        try:
            if self.kind == socket.SOCK_STREAM:
                connection, _ = self.sock.accept()
                with self._lock:
                    self.connections.append(connection)
            else:
                data = self.sock.recv(65535)
                with self._lock:
                    self.datagrams.append(data)
        except OSError:
            pass

    def close(self) -> None:
        super().close()
        for connection in self.connections:
            connection.close()


def common_port(hosts: Sequence[str]) -> int:
    """A port free for both TCP and UDP on every one of ``hosts`` (servers on aliases).
    Below the kernel's ephemeral range: a port another test takes with bind(port 0) to
    probe "nothing listens here" (tests run side by side under pytest -n) is never one
    of these servers'."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        try:
            for host in hosts:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                    with socket.socket(family, kind) as other:
                        other.bind((host, port))
        except OSError:
            continue
        return port
    raise OSError("no common free port")


def fill_backlog(server: TcpServer) -> socket.socket:
    """One connection from BYSTANDER that fills a paused backlog-0 server's queue."""
    filler = socket.socket()
    filler.bind((BYSTANDER, 0))
    filler.connect((server.host, server.port))
    return filler
