"""A dev server inside the sandbox, and a client beside it: the sandbox's own listeners
are reachable on loopback (only while they are its own), and the UDP connects glibc's
getaddrinfo makes to sort addresses are not reported as denials.

Every server is real and on loopback; the attacks run in real confined processes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK, sandlock, users
from httpservers import free_port_on
from netattack_helpers import TcpServer

PY = sys.executable

# Wait until the server inside listens (its port in /proc/net/tcp*, without connecting:
# a connect before it listens is a denial), then fetch each URL.
FETCH = """
import sys, time, urllib.request
port = "%04X" % int(sys.argv[1])
for _ in range(200):
    table = open("/proc/net/tcp").read() + open("/proc/net/tcp6").read()
    if any(f[1].endswith(":" + port) and f[3] == "0A" for f in map(str.split, table.splitlines()[1:])):
        break
    time.sleep(0.05)
for url in sys.argv[2:]:
    try:
        print(url, urllib.request.urlopen(url, timeout=5).status, flush=True)
    except OSError as error:
        print(url, "failed", error, flush=True)
"""


# --- the dev server and its client, both inside -----------------------------------------


@users
def test_a_dev_server_inside_is_reachable_from_inside(as_nobody_or_self):
    """Before: two spurious `denied connect to [::]:8000` / `0.0.0.0:8000` lines and
    "2 network operations denied" as the server started, and the client was denied
    without a further --net-allow 127.0.0.1:PORT."""
    wrap = as_nobody_or_self or (lambda argv: argv)
    port = free_port_on("127.0.0.1")
    script = (f"{PY} -m http.server {port} >/dev/null 2>&1 & "
              f"{PY} -c '{FETCH}' {port} http://127.0.0.1:{port}/ http://localhost:{port}/ "
              f"http://0.0.0.0:{port}/; kill $!")
    argv = [*SANDLOCK, "run", "--net-bind", str(port), "--", "sh", "-c", script]
    result = subprocess.run(wrap(argv), capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert result.stdout.splitlines() == [f"http://{host}:{port}/ 200"
                                          for host in ("127.0.0.1", "localhost", "0.0.0.0")], result
    assert result.stderr == ""  # no denial, no summary


def test_a_host_listener_on_another_port_stays_denied():
    """Control: the sandbox's own port opens that port only."""
    port = free_port_on("127.0.0.1")
    with TcpServer("127.0.0.1") as host:
        script = (f"{PY} -m http.server {port} >/dev/null 2>&1 & "
                  f"{PY} -c '{FETCH}' {port} http://127.0.0.1:{port}/ "
                  f"http://127.0.0.1:{host.port}/; kill $!")
        result = sandlock("run", "--net-bind", str(port), "--", "sh", "-c", script, cwd="/tmp")
    lines = result.stdout.splitlines()
    assert lines[0] == f"http://127.0.0.1:{port}/ 200"
    assert lines[1].startswith(f"http://127.0.0.1:{host.port}/ failed"), lines
    assert f"denied connect to 127.0.0.1:{host.port} (no --net-allow rule)" in result.stderr
    assert host.accepted == 0


# Inside: listen on PORT and reach it (the control), close it, wait while the host takes
# the port, then try again.
TAKEN = """
import socket, sys
def attempt():
    c = socket.socket()
    try:
        c.connect(("127.0.0.1", THE_PORT))
        return "connected"
    except OSError as error:
        return str(error.errno)
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if SHARED:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("0.0.0.0", THE_PORT))
s.listen(64)
print("own", attempt(), flush=True)
if not SHARED:
    s.close()
print("ready", flush=True)
sys.stdin.readline()  # the host listens on the port now
print("then", sorted({attempt() for _ in range(20)}), flush=True)
"""


@pytest.mark.parametrize("reuseport", [False, True], ids=["closed-then-taken", "shared-reuseport"])
def test_a_host_service_on_the_sandboxs_port_is_not_reached(reuseport):
    """The attack: the sandbox's listener closes (or shares its port, SO_REUSEPORT) and a
    host service listens on the port; the sandbox's connects must not reach it."""
    port = free_port_on("127.0.0.1")
    script = TAKEN.replace("SHARED", str(reuseport)).replace("THE_PORT", str(port))
    argv = [*SANDLOCK, "run", "--net-bind", str(port), "--", PY, "-c", script]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd="/tmp") as proc:
        assert proc.stdout.readline().split() == ["own", "connected"]  # control: its own
        assert proc.stdout.readline().strip() == "ready"
        with TcpServer("127.0.0.1", port, reuseport=reuseport) as host:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=30)
            time.sleep(0.1)
    assert out.strip() == "then ['13']", (out, err)  # EACCES: the rules' own answer
    assert host.accepted == 0
    assert f"denied connect to 127.0.0.1:{port} (no --net-allow rule)" in err


def test_without_sandlock_the_host_service_is_reached():
    """Control for the attack above: unconfined, the same program reaches the host's."""
    port = free_port_on("127.0.0.1")
    script = TAKEN.replace("SHARED", "False").replace("THE_PORT", str(port))
    with subprocess.Popen([PY, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:
        proc.stdout.readline()
        proc.stdout.readline()
        with TcpServer("127.0.0.1", port):
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, _ = proc.communicate(timeout=30)
    assert out.strip() == "then ['connected']"


# --- the UDP connects of address sorting ------------------------------------------------


def test_getaddrinfo_sorting_probes_are_not_denials():
    """glibc connects a UDP socket to each candidate (RFC 6724) and sends nothing: the
    sandbox sorts as the host does, and nothing is said."""
    script = ("import socket\n"
              "print([a[4][0] for a in socket.getaddrinfo(None, 8000, type=socket.SOCK_STREAM,"
              " flags=socket.AI_PASSIVE)])\n")
    # (in the host's network namespace, where the probes meet the supervisor; a default
    # run's private network has only `lo`, which sorts as such a machine does)
    inside = sandlock("run", "--no-net-private-loopback", "--", PY, "-c", script, cwd="/tmp")
    outside = subprocess.run([PY, "-c", script], capture_output=True, text=True)
    assert inside.stdout == outside.stdout
    assert inside.stderr == ""
    private = sandlock("run", "--", PY, "-c", script, cwd="/tmp")
    assert private.returncode == 0 and private.stderr == ""


UDP_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.5)
s.connect(("127.0.0.1", THE_PORT))
for payload in (b"secret-1", b"secret-2"):
    s.send(payload)
try:
    print("answer", s.recv(100))
except OSError as error:
    print("no answer", type(error).__name__)
"""


@users
def test_a_udp_client_to_a_denied_destination_sends_nothing_there(world_tmp, as_nobody_or_self):
    """A connected UDP client: its connect succeeds (parked at sandlock's sink), its
    datagrams never reach the destination, and the denial is said at the first one."""
    wrap = as_nobody_or_self or (lambda argv: argv)
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.5)
    port = server.getsockname()[1]
    audit = world_tmp / "audit.jsonl"
    # (the sink is the host's namespace's: a default run's private network would send
    # these to its own loopback, test_private_network_default)
    argv = [*SANDLOCK, "run", "--no-net-private-loopback", "--audit", str(audit), "--", PY, "-c",
            UDP_CLIENT.replace("THE_PORT", str(port))]
    try:
        result = subprocess.run(wrap(argv), capture_output=True, text=True, timeout=60, cwd="/tmp")
        with pytest.raises(TimeoutError):
            server.recv(100)
    finally:
        server.close()
    assert result.stdout.strip() == "no answer TimeoutError", result
    assert result.stderr.splitlines() == [
        f"sandlock: denied connect to 127.0.0.1:{port} (no --net-allow rule)",
        "sandlock: 1 network operation denied"]
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    records = [r for r in records if r.get("event") != "exec"]  # (the run's own, last)
    assert [(r["syscall"], r["protocol"], r["destination"], r["verdict"]) for r in records] == [
        ("connect", "udp", f"127.0.0.1:{port}", "redirect"),
        ("connect", "udp", f"127.0.0.1:{port}", "deny")]


def test_without_sandlock_the_udp_client_reaches_its_server():
    """Control: the same client, unconfined, delivers its datagrams."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(5)
    try:
        subprocess.run([PY, "-c", UDP_CLIENT.replace("THE_PORT", str(server.getsockname()[1]))],
                       capture_output=True, timeout=30)
        assert server.recv(100) == b"secret-1"
    finally:
        server.close()


def test_a_default_runs_udp_client_stays_in_its_private_network():
    """The same client in a default run (its private network): its datagrams go to its
    own loopback, where nothing listens, never to the host's server. Control: the
    unconfined client above reaches it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.5)
    try:
        result = sandlock("run", "--", PY, "-c", UDP_CLIENT.replace("THE_PORT", str(server.getsockname()[1])),
                          cwd="/tmp")
        with pytest.raises(TimeoutError):
            server.recv(100)
    finally:
        server.close()
    assert "ConnectionRefusedError" in result.stderr, result  # (its own loopback said so)


def test_the_sink_is_not_a_way_out():
    """The attack: read the sink's address (getpeername of a parked socket), then send
    there, or connect a fresh socket to it: sandlock's own, so refused."""
    script = """
import socket
p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
p.connect(("127.0.0.3", 9))
sink = p.getpeername()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
results = []
for attempt in (lambda: s.sendto(b"x", sink), lambda: s.connect(sink)):
    try:
        attempt(); results.append("ok")
    except OSError as error:
        results.append(error.errno)
print(sink[0], results)
"""
    result = sandlock("run", "-q", "--no-net-private-loopback", "--", PY, "-c", script, cwd="/tmp")
    assert result.stdout.strip() == "127.0.0.1 [13, 13]", result
