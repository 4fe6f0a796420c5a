"""--net-private-loopback: the sandbox's own network namespace, only `lo` in it.

Every attack runs in a real confined process against real servers on the host's
loopback, each of which records who reached it; each has a control showing the same
client reaching the server where it may (the rule that allows it, or no private
loopback), so that a test cannot pass because the client is broken.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from conftest import SANDLOCK, sandlock, users
from dnsserver import FakeDns

PY = sys.executable
PRIVATE = "--net-private-loopback"


class _Recording:
    """A TCP (or UDP) server on the host's loopback counting whoever reaches it."""

    def __init__(self, kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        self.reached = 0
        self.kind = kind
        if kind == socket.SOCK_STREAM:
            self.sock.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, _ = self.sock.accept()
                    self.reached += 1
                    conn.sendall(b"host")
                    conn.close()
                else:
                    _, peer = self.sock.recvfrom(100)
                    self.reached += 1
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def host_server():
    server = _Recording()
    yield server
    server.close()


CONNECT = """
import errno, socket, sys
for host in sys.argv[2:]:
    try:
        c = socket.create_connection((host, int(sys.argv[1])), timeout=5)
        print(host, c.recv(10).decode() or "connected")
    except OSError as e:
        print(host, errno.errorcode.get(e.errno, e))
"""


def _connect(*hosts: str, port: int) -> list[str]:
    return [PY, "-c", CONNECT, str(port), *hosts]


def _run(argv: list[str], wrap=None) -> subprocess.CompletedProcess:
    argv = [*SANDLOCK, "run", *argv]
    return subprocess.run(wrap(argv) if wrap else argv, capture_output=True, text=True,
                          timeout=60, cwd="/tmp")


# --- the host's loopback is out of sight ---------------------------------------------

LOOPBACKS = ("127.0.0.1", "0.0.0.0", "127.0.0.9", "::1", "::ffff:127.0.0.1", "localhost")


@users
def test_the_hosts_loopback_services_are_out_of_reach(host_server, as_nobody_or_self):
    """Every spelling of loopback finds the sandbox's own namespace, where nobody
    listens on the host server's port: refused, and the server never reached."""
    result = _run([PRIVATE, "--", *_connect(*LOOPBACKS, port=host_server.port)],
                  as_nobody_or_self)
    lines = result.stdout.split("\n")
    assert [line.split()[-1] for line in lines if line] == ["ECONNREFUSED"] * len(LOOPBACKS), \
        result.stdout + result.stderr
    assert host_server.reached == 0


@users
def test_control_the_same_client_reaches_it_where_the_rules_allow(host_server, as_nobody_or_self):
    """Control: with a rule naming it, the host's server is the destination (with the
    private loopback: a socket of the host's, installed in the command's place), and
    without the private loopback too."""
    rule = f"127.0.0.1:{host_server.port}"
    for options in ([PRIVATE, "--net-allow", rule], ["--net-allow", rule]):
        result = _run([*options, "--", *_connect("127.0.0.1", port=host_server.port)],
                      as_nobody_or_self)
        assert result.stdout.strip() == "127.0.0.1 host", (options, result.stdout, result.stderr)
    assert host_server.reached == 2


SERVER_AND_CLIENT = """
import socket, sys, threading
port = int(sys.argv[1])
server = socket.socket()
try:
    server.bind(("127.0.0.1", port))
except OSError as e:
    sys.exit("bind: %s" % e)
server.listen()
def serve():
    conn, _ = server.accept()
    conn.sendall(b"inside")
    conn.close()
threading.Thread(target=serve).start()
client = socket.create_connection(("127.0.0.1", port), timeout=5)
print(client.recv(10).decode())
"""


@users
def test_two_processes_inside_talk_on_a_port_the_host_uses(host_server, as_nobody_or_self):
    """A server and a client inside, on 127.0.0.1 and the very port a host service
    holds: they meet each other, without --net-allow-bind, and the host's is untouched."""
    port = str(host_server.port)
    client_server = ["sh", "-c", f'{PY} -c "$1" {port}', "sh", SERVER_AND_CLIENT]
    result = _run([PRIVATE, "--", *client_server], as_nobody_or_self)
    assert result.stdout.strip() == "inside", result.stderr
    assert host_server.reached == 0
    # Control: in the host's namespace that port is taken.
    result = _run(["--net-allow-bind", port, "--", *client_server], as_nobody_or_self)
    assert "Address already in use" in result.stderr, result.stdout + result.stderr


# --- what the rules allow stays reachable ---------------------------------------------


@pytest.fixture
def web():
    server = _Recording(host="127.0.0.2")
    with FakeDns({"web.test": ["127.0.0.2"]}) as dns:
        yield server, dns
    server.close()


@users
def test_a_destination_the_rules_allow_by_name_is_reached(web, as_nobody_or_self):
    """A name the DNS server (through sandlock's responder, on the host's loopback)
    gives a loopback address the rules allow: resolved and reached from inside."""
    server, dns = web
    result = _run([PRIVATE, "--dns-server", "%s:%d" % dns.address, "--dns-allow-private",
                   "--net-allow", f"web.test:{server.port}", "--",
                   *_connect("web.test", port=server.port)], as_nobody_or_self)
    assert result.stdout.strip() == "web.test host", result.stderr
    assert server.reached == 1
    assert ("web.test", "A") in dns.queries or ("web.test.", "A") in dns.queries


NONBLOCKING = """
import select, socket, sys
s = socket.socket()
s.setblocking(False)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
try:
    s.connect(("127.0.0.2", int(sys.argv[1])))
except BlockingIOError:
    select.select([], [s], [], 5)
print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, s.getblocking(),
      s.recv(10).decode() if select.select([s], [], [], 5)[0] else "nothing")
"""


def test_a_non_blocking_connect_completes_on_the_installed_socket(web):
    """asyncio's way: EINPROGRESS, then the command polls the descriptor it has,
    which is by then the host's socket, with the option it set before connecting."""
    server, _ = web
    result = _run([PRIVATE, "--net-allow", f"127.0.0.2:{server.port}", "--",
                   PY, "-c", NONBLOCKING, str(server.port)])
    assert result.stdout.split() == ["True", "False", "host"], result.stderr


UDP_REUSE = """
import errno, socket, sys
allowed, other = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("127.0.0.1", allowed))   # the host's: sandlock installs a socket of the host's
s.send(b"allowed")
for attempt in (lambda: s.connect(("127.0.0.1", other)),
                lambda: s.sendto(b"x", ("127.0.0.1", other))):
    try:
        attempt()
        print("done")
    except OSError as e:
        print(errno.errorcode[e.errno])
"""


@users
def test_a_socket_of_the_hosts_never_reaches_the_hosts_other_loopback_ports(as_nobody_or_self):
    """The socket sandlock installed is the host's: a later connect or send to a
    loopback port the rules leave to the sandbox must not be performed on it (it would
    reach the host's service there). EACCES, and the other server hears nothing."""
    allowed, other = _Recording(socket.SOCK_DGRAM), _Recording(socket.SOCK_DGRAM)
    try:
        result = _run([PRIVATE, "--net-allow", f"udp://127.0.0.1:{allowed.port}", "--",
                       PY, "-c", UDP_REUSE, str(allowed.port), str(other.port)],
                      as_nobody_or_self)
        assert result.stdout.split() == ["EACCES", "EACCES"], result.stdout + result.stderr
        _settle()
        assert (allowed.reached, other.reached) == (1, 0)
        # Control: the rule for the other port makes it the host's, and it hears.
        result = _run([PRIVATE, "--net-allow", f"udp://127.0.0.1:{allowed.port}",
                       "--net-allow", f"udp://127.0.0.1:{other.port}", "--",
                       PY, "-c", UDP_REUSE, str(allowed.port), str(other.port)],
                      as_nobody_or_self)
        assert result.stdout.split() == ["done", "done"], result.stdout + result.stderr
        _settle()
        assert other.reached == 1
    finally:
        allowed.close()
        other.close()


def _settle() -> None:
    import time

    time.sleep(0.2)  # datagrams on loopback: delivered long before this


# --- the option itself ------------------------------------------------------------------


def test_the_policy_file_key_and_its_printout(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text("[network]\nprivate_loopback = true\n")
    printed = sandlock("run", "--policy", str(policy), "--print-policy", "--", "true")
    assert "private_loopback = true" in printed.stdout, printed.stderr
    result = sandlock("run", "--policy", str(policy), "--", "cat", "/proc/net/dev", cwd="/tmp")
    interfaces = [line.split(":")[0].strip() for line in result.stdout.splitlines()[2:]]
    assert interfaces == ["lo"], result.stdout + result.stderr


def test_full_access_refuses_it():
    result = sandlock("run", "--mode", "full-access", "--dangerously-allow-full-access",
                      PRIVATE, "--", "true")
    assert result.returncode == 2 and "--net-private-loopback" in result.stderr
    assert "Traceback" not in result.stderr
