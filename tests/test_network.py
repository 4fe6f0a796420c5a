"""The network policy with real clients against real servers on loopback aliases.

Names come from a test DNS server (FakeDns) that sandlock uses as its upstream
(--dns-server); the child only ever talks to sandlock's responder. Loopback answers
need --dns-allow-private, as they would for a real private service.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import sandlock
from dnsserver import FakeDns
from httpservers import free_port_on

PY = sys.executable


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = f"hello from {self.server.server_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class HttpServer:
    """An HTTP server on host:ephemeral port that counts connections."""

    def __init__(self, host: str) -> None:
        self.httpd = ThreadingHTTPServer((host, 0), _Hello)
        self.host, self.port = self.httpd.server_address[:2]
        self.requests = 0
        original = self.httpd.process_request

        def counted(request, address):
            self.requests += 1
            return original(request, address)

        self.httpd.process_request = counted
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class UdpEcho:
    def __init__(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(2048)
            except OSError:
                return
            self.received.append(data)
            self.sock.sendto(data, peer)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def web():
    """Two web servers: 127.0.0.2 (allowed in tests) and 127.0.0.3 (denied)."""
    servers = HttpServer("127.0.0.2"), HttpServer("127.0.0.3")
    yield servers
    for server in servers:
        server.close()


@pytest.fixture
def names():
    with FakeDns({"web.test": ["127.0.0.2"], "other.test": ["127.0.0.3"],
                  "dual.test": ["127.0.0.2", "::1"]}) as dns_server:
        yield dns_server


def dns_options(dns_server: FakeDns) -> list[str]:
    host, port = dns_server.address
    return ["--dns-server", f"{host}:{port}", "--dns-allow-private"]


def curl(url: str) -> list[str]:
    return ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", url]


# --- default: no network -----------------------------------------------------------


def test_no_network_by_default(web):
    """The default run's private network refuses the host's loopback service (the
    namespace is empty: ECONNREFUSED, and a notice says why); in the host's namespace
    (--no-net-private-loopback, as -r/-w runs have it) the verdict denies it."""
    allowed, denied = web
    result = sandlock("run", "--", *curl(f"http://{allowed.host}:{allowed.port}/"))
    assert result.stdout == "000"
    assert f"sandlock: connect to {allowed.host}:{allowed.port} refused: nothing listens there " \
           "in the sandbox's private network" in result.stderr, result.stderr
    result = sandlock("run", "--no-net-private-loopback", "--",
                      *curl(f"http://{allowed.host}:{allowed.port}/"))
    assert result.stdout == "000"
    assert f"sandlock: denied connect to {allowed.host}:{allowed.port} (no --net-allow rule)" in result.stderr
    assert "1 network operation denied" in result.stderr
    assert allowed.requests == 0


def test_quiet_suppresses_notices(web):
    allowed, _ = web
    result = sandlock("run", "-q", "--", *curl(f"http://{allowed.host}:{allowed.port}/"))
    assert result.stderr == ""


# --- IP rules with several clients -------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_allowed_host_and_port(web):
    allowed, denied = web
    rule = f"{allowed.host}:{allowed.port}"
    ok = sandlock("run", "--net-allow", rule, "--", *curl(f"http://{rule}/"))
    assert ok.stdout == "200" and allowed.requests == 1
    other = sandlock("run", "--net-allow", rule, "--", *curl(f"http://{denied.host}:{denied.port}/"))
    assert other.stdout == "000" and denied.requests == 0


PY_CLIENTS = {
    "blocking": (
        "import socket, sys\n"
        "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
        "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split()[1].decode())\n"
    ),
    "nonblocking": (
        "import select, socket, sys\n"
        "s = socket.socket(); s.setblocking(False)\n"
        "err = s.connect_ex((sys.argv[1], int(sys.argv[2])))\n"
        "assert err in (0, 115), err  # EINPROGRESS\n"
        "select.select([], [s], [], 5)\n"
        "err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)\n"
        "if err: raise OSError(err, 'connect')\n"
        "s.setblocking(True); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
        "print(s.recv(100).split()[1].decode())\n"
    ),
    "asyncio": (
        "import asyncio, sys\n"
        "async def main():\n"
        "    r, w = await asyncio.open_connection(sys.argv[1], int(sys.argv[2]))\n"
        "    w.write(b'GET / HTTP/1.0\\r\\n\\r\\n'); print((await r.read(100)).split()[1].decode())\n"
        "asyncio.run(main())\n"
    ),
}


@pytest.mark.parametrize("client", sorted(PY_CLIENTS))
def test_python_clients(web, client):
    allowed, denied = web
    rule = f"tcp://{allowed.host}:{allowed.port}"
    ok = sandlock("run", "--net-allow", rule, "--", PY, "-c", PY_CLIENTS[client],
                  allowed.host, str(allowed.port))
    assert ok.stdout.strip() == "200", ok.stderr
    refused = sandlock("run", "--net-allow", rule, "--", PY, "-c", PY_CLIENTS[client],
                       denied.host, str(denied.port))
    assert refused.returncode != 0
    assert "Permission denied" in refused.stderr or "13" in refused.stderr
    assert denied.requests == 0


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_net_and_http(web, names):
    allowed, denied = web
    script = (
        "const http = require('http'); const net = require('net');\n"
        "http.get(`http://web.test:${process.argv[1]}/`, r => {\n"
        "  console.log('http', r.statusCode);\n"
        "  const s = net.connect(+process.argv[2], '127.0.0.3');\n"
        "  s.on('error', e => console.log('net', e.code));\n"
        "  s.on('connect', () => { console.log('net connected'); s.end(); });\n"
        "});\n"
    )
    result = sandlock("run", *dns_options(names), "--net-allow", f"web.test:{allowed.port}", "--",
                      "node", "-e", script, str(allowed.port), str(denied.port))
    assert "http 200" in result.stdout, result.stderr
    assert "net EACCES" in result.stdout
    assert denied.requests == 0


def test_ports_and_protocols(web):
    allowed, _ = web
    echo = UdpEcho("127.0.0.2")
    try:
        udp = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)\n"
            "try:\n"
            "    s.sendto(b'ping', ('127.0.0.2', int(sys.argv[1]))); print(s.recv(10).decode())\n"
            "except OSError as e: print(e.errno)\n"
        )
        tcp_only = sandlock("run", "--net-allow", f"tcp://127.0.0.2:{echo.port}", "--",
                            PY, "-c", udp, str(echo.port))
        assert tcp_only.stdout.strip() == "13" and echo.received == []
        udp_rule = sandlock("run", "--net-allow", f"udp://127.0.0.2:{echo.port}", "--",
                            PY, "-c", udp, str(echo.port))
        assert udp_rule.stdout.strip() == "ping"
        both = sandlock("run", "--net-allow", f"127.0.0.2:{echo.port}", "--", PY, "-c", udp, str(echo.port))
        assert both.stdout.strip() == "ping"
        wrong_port = sandlock("run", "--net-allow", f"127.0.0.2:{echo.port + 1}", "--",
                              PY, "-c", udp, str(echo.port))
        assert wrong_port.stdout.strip() == "13"
    finally:
        echo.close()
    ranged = sandlock("run", "--net-allow", "127.0.0.0/29:1-65535", "--",
                      *curl(f"http://127.0.0.2:{allowed.port}/"))
    assert ranged.stdout == "200"


def test_net_deny_mode(web):
    allowed, denied = web
    result = sandlock("run", "--net-deny", "127.0.0.3", "--", "sh", "-c",
                      " ; ".join(" ".join(curl(f"http://{s.host}:{s.port}/")) for s in web))
    assert result.stdout == "200000"
    assert allowed.requests == 1 and denied.requests == 0
    assert "--net-deny 127.0.0.3" in result.stderr


# --- names, pinning, DNS -----------------------------------------------------------


def test_pinned_name_vs_other_name(web, names):
    allowed, denied = web
    script = " ; ".join([
        " ".join(curl(f"http://web.test:{allowed.port}/")),
        "echo",
        " ".join(curl(f"http://127.0.0.3:{denied.port}/")),
        "echo",
        "getent hosts web.test || echo none",
        "getent hosts other.test || echo no-other",
    ])
    result = sandlock("run", *dns_options(names), "--net-allow", f"web.test:{allowed.port}", "--",
                      "sh", "-c", script)
    lines = result.stdout.splitlines()
    assert lines[0] == "200" and lines[1] == "000"
    assert "127.0.0.2" in lines[2] and "web.test" in lines[2]
    assert lines[3] == "no-other"
    assert names.asked("other.test") == []  # never asked upstream: no exfiltration by DNS
    assert denied.requests == 0


def test_resolve_pins_without_dns(web):
    allowed, _ = web
    result = sandlock("run", "--resolve", "pinned.test=127.0.0.2", "--net-allow",
                      f"pinned.test:{allowed.port}", "--", *curl(f"http://pinned.test:{allowed.port}/"))
    assert result.stdout == "200", result.stderr


def test_python_getaddrinfo_pinned_and_unlisted(names):
    script = (
        "import socket\n"
        "print(sorted({a[4][0] for a in socket.getaddrinfo('web.test', 80)}))\n"
        "try:\n"
        "    socket.getaddrinfo('other.test', 80); print('resolved')\n"
        "except socket.gaierror as e: print('gaierror', e.errno)\n"
    )
    result = sandlock("run", *dns_options(names), "--net-allow", "web.test:80", "--", PY, "-c", script)
    lines = result.stdout.splitlines()
    assert lines[0] == "['127.0.0.2']"
    assert lines[1].startswith("gaierror")


def test_rebinding_keeps_the_pinned_address(web, names):
    allowed, denied = web
    script = (
        "import socket, sys, time\n"
        "print(socket.gethostbyname('web.test'))\n"
        "sys.stdout.flush(); sys.stdin.readline()\n"  # the test rebinds the name now
        "print(socket.gethostbyname('web.test'))\n"
        "s = socket.socket()\n"
        "try:\n"
        "    s.connect(('127.0.0.3', int(sys.argv[1]))); print('connected')\n"
        "except OSError as e: print(e.errno)\n"
    )
    argv = ["run", *dns_options(names), "--net-allow", "web.test", "--", PY, "-c", script, str(denied.port)]
    with subprocess.Popen([PY, "-m", "sandlock", *argv], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "127.0.0.2"
        names.set("web.test", ["127.0.0.3"])
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=30)
    assert out.splitlines() == ["127.0.0.2", "13"]
    assert denied.requests == 0


def test_unresolvable_name_warns_and_stays_unreachable(names):
    result = sandlock("run", *dns_options(names), "--net-allow", "missing.test:80", "--",
                      "getent", "hosts", "missing.test")
    assert result.returncode == 2
    assert "cannot resolve missing.test" in result.stderr


def test_a_silent_dns_server_is_reported_even_when_the_command_ends_first():
    """The server never answers: the command looks the name up, and ends (after 1 s)
    before the lookup gives up (after 5 s). The lookup it made waits for the outcome,
    and so does the end of the run: the outcome is said ("timed out"). (A command that
    asks for nothing is told nothing about DNS: test_names.py, "still resolving".)"""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))  # reads nothing: every query times out
    try:
        result = sandlock("run", "--dns-server", "127.0.0.1:%d" % silent.getsockname()[1],
                          "--net-allow", "slow.test:80", "--",
                          "sh", "-c", "getent hosts slow.test & sleep 1")
    finally:
        silent.close()
    assert result.returncode == 0
    assert "cannot resolve slow.test: timed out" in result.stderr


def test_a_closed_dns_server_is_reported_at_once():
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # the port answers with ICMP "port unreachable"
    result = sandlock("run", "--dns-server", f"127.0.0.1:{port}", "--net-allow", "gone.test:80",
                      "--", "getent", "hosts", "gone.test")
    assert result.returncode == 2
    assert "cannot resolve gone.test" in result.stderr


def test_private_answers_need_dns_allow_private(names):
    host, port = names.address
    result = sandlock("run", "--dns-server", f"{host}:{port}", "--net-allow", "web.test:80", "--",
                      "getent", "hosts", "web.test")
    assert result.returncode == 2
    assert "--dns-allow-private" in result.stderr


def test_any_host_rule_resolves_lazily_and_pins(web, names):
    allowed, _ = web
    result = sandlock("run", *dns_options(names), "--net-allow", f"*:{allowed.port}", "--",
                      *curl(f"http://web.test:{allowed.port}/"))
    assert result.stdout == "200", result.stderr


# --- bind, unix sockets, audit, processes ----------------------------------------------


def test_bind_needs_net_allow_bind():
    port = free_port_on("127.0.0.1")  # (a fixed one may be taken by a concurrent run)
    server = (
        "import socket\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); print('listening')\n"
    )
    # (in the host's namespace: a private network's ports are the sandbox's own, all bindable)
    denied = sandlock("run", "--no-net-private-loopback", "--", PY, "-c", server)
    assert "Permission denied" in denied.stderr
    assert f"sandlock: denied bind on 127.0.0.1:{port} (no --net-allow-bind)" in denied.stderr
    allowed = sandlock("run", "--net-allow-bind", str(port), "--", PY, "-c", server)
    assert allowed.stdout.strip() == "listening", allowed.stderr


def test_unix_socket_needs_unix_allow(tmp_path):
    path = tmp_path / "daemon.sock"
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(str(path))
    daemon.listen()
    client = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1]); print('connected')\n"
        "except OSError as e: print(e.errno)\n"
    )
    try:
        denied = sandlock("run", "--", PY, "-c", client, str(path))
        allowed = sandlock("run", "--unix-allow", str(path), "--", PY, "-c", client, str(path))
    finally:
        daemon.close()
    assert denied.stdout.strip() == "13"
    assert allowed.stdout.strip() == "connected"


def test_unix_socketpair_and_own_sockets_work(tmp_path):
    script = (
        "import os, socket, multiprocessing as mp\n"
        "a, b = socket.socketpair(); a.sendmsg([b'x']); print(b.recv(1).decode())\n"
        "r, w = os.pipe()\n"
        "socket.send_fds(a, [b'fd'], [r]); msg, fds, _, _ = socket.recv_fds(b, 10, 1)\n"
        "os.write(w, b'through'); print(os.read(fds[0], 7).decode())\n"
        "srv = socket.socket(socket.AF_UNIX); srv.bind('own.sock'); srv.listen()\n"
        "c = socket.socket(socket.AF_UNIX); c.connect('own.sock'); print('own ok')\n"
    )
    result = sandlock("run", "--cwd", str(tmp_path), "--", PY, "-c", script)
    assert result.stdout.splitlines() == ["x", "through", "own ok"], result.stderr


def test_sockets_the_sandbox_binds_are_its_own_ipc():
    """multiprocessing's Manager (a pathname socket) and an abstract server, both made
    inside the sandbox, work with no --unix-allow and with IPC scoping on."""
    script = (
        "import multiprocessing as mp, os, socket\n"
        "if __name__ == '__main__':\n"
        "    print(mp.Manager().list([1, 2]))\n"
        "    name = '\\0sandlock-own-%d' % os.getpid()\n"
        "    srv = socket.socket(socket.AF_UNIX); srv.bind(name); srv.listen()\n"
        "    if os.fork() == 0:\n"
        "        c = socket.socket(socket.AF_UNIX); c.connect(name); c.sendall(b'hi'); os._exit(0)\n"
        "    conn, _ = srv.accept(); print(conn.recv(2).decode()); os.wait()\n"
    )
    result = sandlock("run", "--", PY, "-c", script)
    assert result.stdout.split() == ["[1,", "2]", "hi"], result.stderr


def test_own_socket_path_taken_over_by_a_host_socket_is_not_reachable(tmp_path):
    """The sandbox binds x.sock, then swaps it for a hard link to a host daemon's socket."""
    daemon_path = tmp_path / "daemon.sock"
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(str(daemon_path))
    daemon.listen()
    script = (
        "import os, socket, sys\n"
        "own = sys.argv[1] + '/x.sock'\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(own); s.listen()\n"
        "c = socket.socket(socket.AF_UNIX); c.connect(own); print('own')\n"
        "os.unlink(own); os.link(sys.argv[2], own)\n"
        "c = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    c.connect(own); print('daemon reached')\n"
        "except OSError as e: print(e.errno)\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    try:
        result = sandlock("run", "-r", "/", "-w", str(work), "-w", str(tmp_path), "--",
                          PY, "-c", script, str(work), str(daemon_path))
    finally:
        daemon.close()
    assert result.stdout.split() == ["own", "13"], result.stderr


def test_unix_bind_follows_the_filesystem_policy(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = tmp_path / "inside"
    inside.mkdir()
    script = (
        "import socket, sys\n"
        "for path in sys.argv[1:]:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        s.bind(path); print('bound')\n"
        "    except OSError as e: print(e.errno)\n"
    )
    result = sandlock("run", "-r", "/", "-w", str(inside), "--", PY, "-c", script,
                      str(inside / "a.sock"), str(outside / "b.sock"))
    assert result.stdout.split() == ["bound", "13"]
    assert not (outside / "b.sock").exists()


def test_audit_log(web, tmp_path):
    allowed, denied = web
    log = tmp_path / "audit.jsonl"
    sandlock("run", "-q", "--audit", str(log), "--net-allow", f"{allowed.host}:{allowed.port}", "--",
             "sh", "-c", " ; ".join(" ".join(curl(f"http://{s.host}:{s.port}/")) for s in web))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    verdicts = {(r["destination"], r["verdict"]) for r in records if r.get("syscall") == "connect"}
    assert (f"{allowed.host}:{allowed.port}", "allow") in verdicts
    assert (f"{denied.host}:{denied.port}", "deny") in verdicts
    *decisions, execution = records  # the run's exec record last (test_audit_exec.py)
    assert execution["event"] == "exec"
    for record in decisions:
        assert {"time", "pid", "syscall", "protocol", "destination", "hostname", "verdict",
                "reason"} <= record.keys()


def test_threads_forks_and_grandchildren(web):
    allowed, denied = web
    script = (
        "import os, socket, sys, threading\n"
        "def attempt(port):\n"
        "    s = socket.socket(); s.settimeout(5)\n"
        "    try: s.connect(('127.0.0.2', port)); return 'ok'\n"
        "    except OSError as e: return str(e.errno)\n"
        "out = []\n"
        "ts = [threading.Thread(target=lambda: out.append(attempt(int(sys.argv[1])))) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(sorted(set(out)))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    if os.fork() == 0:\n"
        "        print('grandchild', attempt(int(sys.argv[1])), attempt(int(sys.argv[2])), flush=True)\n"
        "        os._exit(0)\n"
        "    os.wait(); os._exit(0)\n"
        "os.wait()\n"
    )
    result = sandlock("run", "--net-allow", f"127.0.0.2:{allowed.port}", "--", PY, "-c", script,
                      str(allowed.port), str(denied.port + 1))
    assert result.stdout.splitlines() == ["['ok']", "grandchild ok 13"], result.stderr


def test_many_processes_at_once(web):
    allowed, _ = web
    script = " & ".join([" ".join(curl(f"http://127.0.0.2:{allowed.port}/"))] * 12) + " & wait"
    result = sandlock("run", "--net-allow", f"127.0.0.2:{allowed.port}", "--", "sh", "-c", script)
    assert result.stdout == "200" * 12


def test_blocking_stream_sendmsg_sends_everything():
    """A blocking sendmsg larger than the socket buffer returns only when all is sent."""
    size = 8 * 1024 * 1024
    server = socket.socket()
    server.bind(("127.0.0.2", 0))
    server.listen()
    port = server.getsockname()[1]
    received = []

    def drain() -> None:
        connection, _ = server.accept()
        time.sleep(0.3)  # let the send buffer fill: a non-blocking send would stop short
        total = 0
        while chunk := connection.recv(1 << 16):
            total += len(chunk)
        received.append(total)
        connection.close()

    reader = threading.Thread(target=drain)
    reader.start()
    script = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.2', int(sys.argv[1])))\n"
        f"print(s.sendmsg([b'x' * {size // 2}, b'y' * {size // 2}])); s.close()\n"
    )
    try:
        result = sandlock("run", "--net-allow", f"127.0.0.2:{port}", "--", PY, "-c", script, str(port))
        reader.join(30)
    finally:
        server.close()
    assert result.stdout.strip() == str(size), result.stderr
    assert received == [size]


def test_unwritable_audit_file_is_a_usage_error(tmp_path):
    result = sandlock("run", "--audit", str(tmp_path / "no" / "such" / "dir" / "log"), "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("sandlock: error: --audit: cannot open")


def test_a_closed_stderr_does_not_hang_the_supervisor():
    """Denial notices to a full stderr (2>/dev/full) must not stop calls being answered."""
    script = (
        "import socket\n"
        "for _ in range(3):\n"
        "    try: socket.socket().connect(('127.0.0.3', 9))\n"
        "    except OSError as e: print(e.errno)\n"
    )
    # Denials (the host's namespace), and the private network's refusals, both said.
    for options, errno_seen in ((["--no-net-private-loopback"], "13"), ([], "111")):
        with open("/dev/full", "w") as full:
            result = subprocess.run([PY, "-m", "sandlock", "run", *options, "--", PY, "-c", script],
                                    stdout=subprocess.PIPE, stderr=full, text=True, timeout=30)
        assert result.stdout.split() == [errno_seen] * 3, options


def test_bind_onto_an_existing_symlink_fails_as_natively(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "link.sock").symlink_to(tmp_path / "target" / "real.sock")
    script = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.bind(sys.argv[1]); print('bound')\n"
        "except OSError as e: print(e.errno)\n"
    )
    native = subprocess.run([PY, "-c", script, str(tmp_path / "link.sock")], capture_output=True, text=True)
    boxed = sandlock("run", "--cwd", str(tmp_path), "--", PY, "-c", script, str(tmp_path / "link.sock"))
    assert boxed.stdout.strip() == native.stdout.strip() == "98"  # EADDRINUSE
    assert not (tmp_path / "target" / "real.sock").exists()


# --- the name an audit record gives an address two names share --------------------------

SHARED_NAMES = """
import socket, sys
for name in sys.argv[2:]:
    address = socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    socket.create_connection((address, int(sys.argv[1]))).close()
"""


def test_the_audit_log_names_the_name_looked_up(web, tmp_path):
    """Two allowed names share an address: each connection's record names the one the
    command looked up for it (before: always the first rule's name)."""
    allowed, _ = web
    port = allowed.port
    audit = tmp_path / "audit.jsonl"
    with FakeDns({"a.test": [allowed.host], "b.test": [allowed.host], "c.test": [allowed.host]}) as dns_server:
        result = sandlock("run", *dns_options(dns_server), "--audit", str(audit),
                          "--net-allow", f"a.test:{port}", "--net-allow", f"b.test:{port}",
                          "--net-allow", "c.test:1", "--", PY, "-c", SHARED_NAMES, str(port),
                          "b.test", "a.test", "b.test", "c.test")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    connects = [r for r in records if r.get("syscall") == "connect" and r["protocol"] == "tcp"]
    # c.test's own rule does not reach that port: the record names the rule's name.
    assert [(r["hostname"], r["reason"]) for r in connects] == [
        ("b.test", f"--net-allow a.test:{port}"), ("a.test", f"--net-allow a.test:{port}"),
        ("b.test", f"--net-allow a.test:{port}"), ("a.test", f"--net-allow a.test:{port}")]


# --- a rule without ports ------------------------------------------------------------------


def test_a_portless_rule_is_noted(tmp_path):
    """`--net-allow HOST` opens every port of HOST, TCP and UDP: before, silently."""
    result = sandlock("run", "--net-allow", "127.0.0.2", "--net-allow", "udp://127.0.0.3", "--",
                      "true")
    assert result.stderr.splitlines() == [
        "sandlock: note: --net-allow 127.0.0.2 opens every port of 127.0.0.2, TCP and UDP; "
        "--net-allow udp://127.0.0.3 opens every UDP port of 127.0.0.3 "
        "(give the ports to open only those, e.g. 127.0.0.2:443)"]
    policy = tmp_path / "policy.toml"
    policy.write_text('[network]\nallow = ["127.0.0.2"]\n')
    assert "opens every port of 127.0.0.2" in sandlock("run", "--policy", str(policy), "--", "true").stderr


@pytest.mark.parametrize("options", [
    ["-q", "--net-allow", "127.0.0.2"],  # silenced
    ["--net-allow", "127.0.0.2:80,443"],  # ports given
    ["--net-allow", "127.0.0.2:*"],  # every port, written so
    ["--net-allow-host", "127.0.0.2"],  # the option that means every port
    ["--net-allow", "*"],
    ["--net-allow", "icmp://127.0.0.2"],  # no ports to give
])
def test_rules_that_say_their_ports_are_not_noted(options):
    assert sandlock("run", *options, "--", "true").stderr == ""
