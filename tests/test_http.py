"""HTTP rules through the proxy, with real clients against real servers on loopback.

api.test is 127.0.0.2 and other.test 127.0.0.3, both serving on one port that the
runs govern with --http-port (an unprivileged port: the suite also runs as a user).
Plain HTTP here; HTTPS is in test_https.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import sandlock
from httpservers import Upstream, free_port_on, served_repository
from proxies import FRESH

API, OTHER = "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def port():
    return free_port_on(API, OTHER)


@pytest.fixture
def api(port):
    with Upstream(API, port, name="api") as server:
        yield server


@pytest.fixture
def other(port):
    with Upstream(OTHER, port, name="other") as server:
        yield server


def run(port: int, *options: str, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return sandlock("run", "--resolve", f"api.test={API}", "--resolve", f"other.test={OTHER}",
                    "--http-port", str(port), "--https-inspect", "off", *options, "--", *cmd,
                    **kwargs)


def curl(*args: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "10", *args]


PY_RAW = r"""
import socket, sys
host, port, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
s = socket.create_connection((host, port), timeout=10)
s.sendall(payload)
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
sys.stdout.write(data.decode("latin-1"))
"""


def raw(host: str, port: int, payload: str) -> list[str]:
    """A python client sending ``payload`` (escapes allowed) as is, printing the reply."""
    return [sys.executable, "-c", PY_RAW, host, str(port), payload]


# --- the user's example ------------------------------------------------------------------


def test_github_example_with_a_stand_in_host(api, other, port):
    url = f"http://api.test:{port}"
    result = run(port, "--http-allow", "GET api.test/repos/*", cmd=["sh", "-c", f"""
        curl -sS -o /dev/null -w '%{{http_code}}\\n' {url}/repos/x/y
        curl -sS -o /dev/null -w '%{{http_code}}\\n' {url}/user
        curl -sS -o /dev/null -w '%{{http_code}}\\n' -X POST -d x=1 {url}/repos/x/y/issues
        curl -sS -o /dev/null -w '%{{http_code}}\\n' http://other.test:{port}/ 2>&1 | tail -1
    """])
    lines = result.stdout.split()
    assert lines[:3] == ["200", "403", "403"], result
    assert lines[3] == "000"  # other.test: the connect itself is refused
    assert api.log == [("GET", "/repos/x/y", f"api.test:{port}", 0)]
    assert other.log == []
    assert "sandlock: denied GET api.test/user (no --http-allow rule matches)" in result.stderr
    assert "sandlock: denied POST api.test/repos/x/y/issues" in result.stderr
    assert "denied connect to 127.0.0.3" in result.stderr


def test_denied_request_says_why(api, port):
    result = run(port, "--http-allow", "GET api.test/repos/*",
                 cmd=curl("-i", f"http://api.test:{port}/user?token=1"))
    head, _, body = result.stdout.partition("\n\n")  # text mode: \r\n read as \n
    assert head.startswith("HTTP/1.1 403")
    assert "X-Sandlock-Denied: no --http-allow rule matches" in head
    assert body == "sandlock: denied GET api.test/user: no --http-allow rule matches\n"
    assert api.log == []


def test_deny_rules_win(api, port):
    result = run(port, "--http-allow", "* api.test", "--http-deny", "* */admin/*", cmd=["sh", "-c", f"""
        curl -sS http://api.test:{port}/x
        curl -sS http://api.test:{port}/admin/b
    """])
    assert result.stdout.startswith("api GET /x\n")
    assert "denied GET api.test/admin/b: --http-deny * */admin/*" in result.stdout
    assert api.paths() == ["/x"]


def test_deny_rules_alone_open_nothing_and_need_no_host_for_the_ca(api, port):
    """Deny rules narrow what --net-allow opens; alone they open nothing, and an
    inspecting run has no host to sign for (this run used to fail with 125)."""
    result = sandlock("run", "--resolve", f"api.test={API}", "--http-port", str(port),
                      "--http-deny", "GET */admin/*", "--",
                      *curl("-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://api.test:{port}/x"))
    assert result.returncode != 0 and result.stdout == "000", result.stderr
    assert "denied connect to" in result.stderr and api.log == []


def test_deny_rules_alone_allow_everything_else(api, port):
    result = run(port, "--net-allow", f"api.test:{port}", "--http-deny", "POST api.test",
                 cmd=["sh", "-c", f"curl -sS http://api.test:{port}/a; "
                                  f"curl -sS -d x http://api.test:{port}/b"])
    assert result.stdout.startswith("api GET /a\n")
    assert "denied POST api.test/b: --http-deny POST api.test" in result.stdout
    assert api.paths() == ["/a"]


def test_methods_are_case_insensitive_in_rules_and_requests(api, port):
    request = f"post /x HTTP/1.1\\r\\nHost: api.test:{port}\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n"
    result = run(port, "--http-allow", "* api.test", "--http-deny", "Post api.test",
                 cmd=raw("api.test", port, request))
    assert " 403 " in result.stdout.splitlines()[0], result
    assert api.log == []


def test_query_string_is_forwarded_not_matched(api, port):
    result = run(port, "--http-allow", "GET api.test/search",
                 cmd=curl(f"http://api.test:{port}/search?q=/admin/&x=1"))
    assert result.stdout == "api GET /search?q=/admin/&x=1\n"


def test_audit_log_records_requests(api, port, tmp_path):
    log = tmp_path / "audit.jsonl"
    run(port, "--audit", str(log), "--http-allow", "GET api.test/ok",
        cmd=["sh", "-c", f"curl -sS http://api.test:{port}/ok; curl -sS http://api.test:{port}/no"])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    http = [(r["method"], r["hostname"], r["path"], r["verdict"]) for r in records
            if r.get("protocol") == "http"]
    assert ("GET", "api.test", "/ok", "allow") in http
    assert ("GET", "api.test", "/no", "deny") in http
    denied = next(r for r in records if r.get("path") == "/no")
    assert denied["reason"] == "no --http-allow rule matches"
    assert denied["destination"] == f"{API}:{port}"
    redirects = [r for r in records if r.get("syscall") == "connect" and r["verdict"] == "redirect"
                 and r["protocol"] == "tcp"]
    assert redirects and redirects[0]["destination"] == f"{API}:{port}"


def test_quiet_suppresses_notices(api, port):
    result = run(port, "-q", "--http-allow", "GET api.test/ok",
                 cmd=curl(f"http://api.test:{port}/no"))
    assert "403" not in result.stderr and result.stderr == ""


# --- clients --------------------------------------------------------------------------


def test_python_urllib_and_http_client(api, port):
    code = f"""
import http.client, urllib.request, urllib.error
print(urllib.request.urlopen("http://api.test:{port}/repos/a").read().decode().strip())
try:
    urllib.request.urlopen("http://api.test:{port}/admin")
except urllib.error.HTTPError as e:
    print(e.code, e.headers["X-Sandlock-Denied"])
c = http.client.HTTPConnection("api.test", {port})
for path in ("/repos/b", "/repos/c"):  # one keep-alive connection
    c.request("GET", path)
    print(c.getresponse().read().decode().strip())
"""
    result = run(port, "--http-allow", "GET api.test/repos/*", cmd=[sys.executable, "-c", code])
    assert result.stdout.splitlines() == [
        "api GET /repos/a", "403 no --http-allow rule matches", "api GET /repos/b", "api GET /repos/c",
    ], result


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fetch_and_http(api, port):
    code = f"""
const http = require('http');
(async () => {{
  let r = await fetch('http://api.test:{port}/repos/a');
  console.log(r.status, (await r.text()).trim());
  r = await fetch('http://api.test:{port}/nope', {{method: 'POST', body: 'x'}});
  console.log(r.status, r.headers.get('x-sandlock-denied'));
  http.get('http://api.test:{port}/repos/b', res => {{
    let body = ''; res.on('data', d => body += d); res.on('end', () => console.log(res.statusCode, body.trim()));
  }});
}})();
"""
    result = run(port, "--http-allow", "GET api.test/repos/*", cmd=["node", "-e", code])
    assert result.stdout.splitlines() == [
        "200 api GET /repos/a", "403 no --http-allow rule matches", "200 api GET /repos/b",
    ], result


@pytest.mark.skipif(shutil.which("wget") is None, reason="wget is not installed")
def test_wget(api, port, tmp_path):
    result = run(port, "-w", str(tmp_path), "-r", "/", "--http-allow", "GET api.test/repos/*",
                 cmd=["sh", "-c", f"cd {tmp_path} && wget -q -O - http://api.test:{port}/repos/a; "
                                  f"wget -q -O - http://api.test:{port}/x; echo $?"])
    assert result.stdout.splitlines() == ["api GET /repos/a", "8"], result  # 8: server error response


def test_git_clone_over_http(port, tmp_path):
    clone = tmp_path / "clone"
    with Upstream(API, port, files=served_repository(tmp_path)) as server:
        result = run(port, "--http-allow", "GET api.test/files/repo.git/*",
                     cmd=["git", "clone", "-q", f"http://api.test:{port}/files/repo.git", str(clone)])
        assert result.returncode == 0, result.stderr
        log = subprocess.run(["git", "-C", str(clone), "log", "--format=%s"], capture_output=True,
                             text=True)
        assert log.stdout == "hello\n"
        push = run(port, "--http-allow", "GET api.test/files/repo.git/*",
                   cmd=["git", "-C", str(clone), "push", "-q", "origin", "HEAD:refs/heads/x"])
        assert push.returncode != 0
        assert all(method == "GET" for method, *_ in server.log)


# --- attacks ------------------------------------------------------------------------------


def test_host_header_spoofing(api, other, port):
    result = run(port, "--http-allow", "GET api.test", "--http-allow", "GET other.test/public/*",
                 cmd=curl("-i", "-H", "Host: other.test", f"http://api.test:{port}/secret"))
    assert result.stdout.startswith("HTTP/1.1 421"), result
    assert api.log == [] and other.log == []


def test_absolute_form_request_to_another_host(api, other, port):
    request = (f"GET http://other.test:{port}/x HTTP/1.1\\r\\nHost: api.test:{port}\\r\\n"
               "Connection: close\\r\\n\\r\\n")
    result = run(port, "--http-allow", "GET api.test", "--http-allow", "GET other.test",
                 cmd=raw("api.test", port, request))
    assert " 421 " in result.stdout.splitlines()[0], result
    assert api.log == [] and other.log == []


def test_keep_alive_connection_reused_for_a_second_host(api, other, port):
    request = (f"GET /a HTTP/1.1\\r\\nHost: api.test:{port}\\r\\n\\r\\n"
               f"GET /b HTTP/1.1\\r\\nHost: other.test:{port}\\r\\nConnection: close\\r\\n\\r\\n")
    result = run(port, "--http-allow", "GET api.test", "--http-allow", "GET other.test",
                 cmd=raw("api.test", port, request))
    assert "api GET /a" in result.stdout
    assert "421" in result.stdout
    assert api.paths() == ["/a"] and other.log == []


@pytest.mark.parametrize("path", [
    "/public/../admin", "/public/%2e%2e/admin", "/public/%2E%2e/admin", "//admin",
    "/public/./../admin", "/public%2F..%2Fadmin", "/public/..%2Fadmin", "/ADMIN/../admin",
    "/public/%zz", "/public/\\..\\admin",
    # ;params and %3B as Tomcat and Jetty read them; case as IIS reads it
    "/x/..;/admin", "/public/..;/admin", "/public/..%3B/admin", "/public/%2e%2e;x=1/admin",
    "/ADMIN", "/public/../Admin",
])
def test_path_tricks(api, port, path):
    result = run(port, "--http-allow", "GET api.test/public/*", "--http-allow", "GET api.test/x/*",
                 "--http-deny", "* api.test/admin*",
                 cmd=curl("--path-as-is", "-o", "/dev/null", "-w", "%{http_code}",
                          f"http://api.test:{port}{path}"))
    assert result.stdout in ("403", "400"), (path, result)
    assert api.log == []


def test_encoded_slash_allowed_when_every_reading_is(api, port):
    result = run(port, "--http-allow", "GET api.test/projects/*",
                 cmd=curl(f"http://api.test:{port}/projects/group%2Fname"))
    assert result.stdout == "api GET /projects/group%2Fname\n"


def test_denied_large_post_never_reaches_upstream_nor_fills_memory(api, port, tmp_path):
    body = tmp_path / "body"
    body.write_bytes(b"x" * (200 << 20))
    script = f"""
curl -sS -o /dev/null -w '%{{http_code}}\\n' --data-binary @{body} http://api.test:{port}/upload &
sleep 0.3
proxy=$(pgrep -f sandlock.proxy._server | head -1)
wait
grep VmHWM /proc/$proxy/status
"""
    result = run(port, "-r", "/", "--http-allow", "GET api.test", cmd=["sh", "-c", script],
                 env={**os.environ, **FRESH})  # pgrep finds the proxy by its command line
    code, peak = result.stdout.splitlines()
    assert code == "403", result
    assert api.log == []
    assert int(peak.split()[1]) < 150_000, peak  # kB: the 200 MiB body was never kept


def test_allowed_large_upload_streams(api, port, tmp_path):
    body = tmp_path / "body"
    body.write_bytes(b"x" * (20 << 20))
    result = run(port, "-r", "/", "--http-allow", "PUT api.test/upload",
                 cmd=curl("-T", str(body), f"http://api.test:{port}/upload"))
    assert result.stdout == "api PUT /upload\n", result
    assert api.log == [("PUT", "/upload", f"api.test:{port}", 20 << 20)]


def test_request_smuggling_conflicting_lengths(api, port):
    smuggled = f"GET /admin HTTP/1.1\\r\\nHost: api.test:{port}\\r\\n\\r\\n"
    request = (f"POST /public HTTP/1.1\\r\\nHost: api.test:{port}\\r\\nContent-Length: 4\\r\\n"
               f"Transfer-Encoding: chunked\\r\\nConnection: close\\r\\n\\r\\n0\\r\\n\\r\\n{smuggled}")
    run(port, "--http-allow", "* api.test/public", cmd=raw("api.test", port, request))
    assert "/admin" not in api.paths()


def test_connect_method_refused(api, port):
    request = f"CONNECT other.test:{port} HTTP/1.1\\r\\nHost: other.test:{port}\\r\\n\\r\\n"
    result = run(port, "--http-allow", "* api.test", cmd=raw("api.test", port, request))
    assert result.stdout.split()[1] in ("400", "403"), result  # mitmproxy's 400 comes first
    assert api.log == []


def test_h2c_upgrade_refused(api, port):
    result = run(port, "--http-allow", "* api.test",
                 cmd=curl("-o", "/dev/null", "-w", "%{http_code}", "--http2",
                          f"http://api.test:{port}/x"))
    assert result.stdout == "403", result
    assert api.log == []


def test_non_http_bytes_on_an_http_port(api, port):
    result = run(port, "--http-allow", "* api.test",
                 cmd=raw("api.test", port, "SSH-2.0-OpenSSH_9.2\\r\\n\\x00\\x01\\x02"))
    assert "api" not in result.stdout
    assert api.log == []


def test_direct_connection_to_the_proxy_is_refused(api, port):
    # The child finds every listening TCP socket on loopback (the proxy's included, from
    # /proc/net/tcp), connects to each and speaks HTTP: nothing may answer as the proxy.
    code = r"""
import socket
ports = set()
for table, family, host in (("/proc/net/tcp", socket.AF_INET, "127.0.0.1"),
                            ("/proc/net/tcp6", socket.AF_INET6, "::1")):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":
            ports.add((family, host, int(local.split(":")[1], 16)))
for family, host, port in ports:
    if port == HTTP_PORT:
        continue  # steered to the proxy the proper way, with a route
    s = socket.socket(family)
    s.settimeout(3)
    try:
        s.connect((host, port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
        reply = s.recv(4096)
        if b"sandlock" in reply.lower():
            print("PROXY REACHED", port, reply)
    except OSError as e:
        print("refused", port, e.errno)
"""
    result = run(port, "--net-allow", "127.0.0.1", "--net-allow", "[::1]", "--http-allow", "* api.test",
                 cmd=[sys.executable, "-c", f"HTTP_PORT = {port}\n" + code])
    assert "PROXY REACHED" not in result.stdout, result
    assert "refused" in result.stdout, result
    assert "sandlock's own service port" in result.stderr


def test_quic_udp_443_is_refused_unless_allowed(port):
    code = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"q", ("127.0.0.2", %d)); print("sent")
except OSError as e:
    print(e.errno)
""" % port
    result = run(port, "--http-allow", "* api.test", cmd=[sys.executable, "-c", code])
    assert result.stdout.strip() == "13", result
    allowed = run(port, "--http-allow", "* api.test", "--net-allow", f"udp://api.test:{port}",
                  cmd=[sys.executable, "-c", code])
    assert allowed.stdout.strip() == "sent", allowed


def test_wildcard_host_pinned_when_resolved(port):
    from dnsserver import FakeDns

    with FakeDns({"a.svc.test": [API], "b.elsewhere.test": [OTHER]}) as dns, \
            Upstream(API, port, name="api") as server:
        host, dns_port = dns.address
        result = sandlock(
            "run", "--dns-server", f"{host}:{dns_port}", "--dns-allow-private",
            "--http-port", str(port), "--https-inspect", "off", "--http-allow", "GET *.svc.test",
            "--", "sh", "-c",
            f"curl -sS http://a.svc.test:{port}/x; curl -sS http://b.elsewhere.test:{port}/y 2>&1",
        )
        assert result.stdout.startswith("api GET /x\n"), result
        assert "Could not resolve host: b.elsewhere.test" in result.stdout
        assert dns.asked("b.elsewhere.test") == []
        assert server.paths() == ["/x"]


def test_http_rules_imply_no_other_port(api, port):
    result = run(port, "--http-allow", "* api.test", cmd=[sys.executable, "-c", """
import socket
try:
    socket.create_connection(("api.test", 22), timeout=5); print("connected")
except OSError as e:
    print(e.errno)
"""])
    assert result.stdout.strip() == "13", result


def test_bad_rules_are_exit_2():
    for rule, message in [("GET", "expected 'METHODS HOST[/PATH]'"),
                          ("GET host:80/x", "no port here"),
                          ("G@T host", "is not an HTTP method"),
                          ("GET a.*.com", "only allowed as a whole first label")]:
        result = sandlock("run", "--http-allow", rule, "--", "true")
        assert result.returncode == 2, rule
        assert result.stderr.startswith(f"sandlock: error: --http-allow: '{rule}': "), result.stderr
        assert message in result.stderr


# --- WebSocket ----------------------------------------------------------------------------

WS_CLIENT = r"""
import base64, os, socket, sys
host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=10)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
print(head.split(b"\r\n")[0].decode())
if b" 101 " in head.split(b"\r\n")[0]:
    payload, mask = b"hello", os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    frame = s.recv(2 + len(payload))
    print(frame[2:].decode())
"""


class _WsEcho:
    """A WebSocket echo server (one text frame) built on the RFC's handshake."""

    def __init__(self, host: str, port: int) -> None:
        import threading

        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen()
        self.paths: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import base64
        import hashlib

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                lines = head.decode().split("\r\n")
                self.paths.append(lines[0].split()[1])
                key = next(line.split(":", 1)[1].strip() for line in lines
                           if line.lower().startswith("sec-websocket-key"))
                accept = base64.b64encode(hashlib.sha1(
                    (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
                conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                              f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").encode())
                frame = conn.recv(2 + 4 + 5)
                mask, data = frame[2:6], frame[6:]
                conn.sendall(bytes([0x81, len(data)]) + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        except OSError:
            pass
        self.sock.close()


def test_websocket_upgrade_is_checked_as_a_request(port):
    server = _WsEcho(API, port)
    try:
        allowed = run(port, "--http-allow", "GET api.test/ws/*",
                      cmd=[sys.executable, "-c", WS_CLIENT, "api.test", str(port), "/ws/chat"])
        assert allowed.stdout.splitlines() == ["HTTP/1.1 101 Switching Protocols", "hello"], allowed
        denied = run(port, "--http-allow", "GET api.test/ws/*",
                     cmd=[sys.executable, "-c", WS_CLIENT, "api.test", str(port), "/admin/ws"])
        assert denied.stdout.splitlines()[0].startswith("HTTP/1.1 403"), denied
        assert server.paths == ["/ws/chat"]
    finally:
        server.close()


def test_fragment_in_request_target_is_denied(api, port):
    request = f"GET /x#/../y HTTP/1.1\\r\\nHost: api.test:{port}\\r\\nConnection: close\\r\\n\\r\\n"
    result = run(port, "--http-allow", "GET api.test/x", cmd=raw("api.test", port, request))
    assert result.stdout.split()[1] in ("400", "403"), result
    assert api.log == []


# --- the control channel under load ---------------------------------------------------------

BURST = r"""
import select, socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks, errors = [], {}
for _ in range(count):
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    except OSError as e:
        errors[e.errno] = errors.get(e.errno, 0) + 1
        continue
    socks.append(s)
for s in socks:
    select.select([], [s], [], 10)
    code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code:
        errors[code] = errors.get(code, 0) + 1
print(len(socks), errors)
"""


def test_a_burst_of_connections_at_start_is_routed(api, port):
    # Hundreds of connects before mitmproxy has even loaded: every route must get there.
    result = run(port, "--http-allow", "GET api.test", cmd=[sys.executable, "-c", BURST, "api.test",
                                                           str(port), "600"])
    assert result.stdout.strip() == "600 {}", result


FLOOD = r"""
import http.client, sys
c = http.client.HTTPConnection("api.test", int(sys.argv[1]))
for i in range(int(sys.argv[2])):
    c.request("GET", f"/denied/{i}"); c.getresponse().read()
"""


def test_no_decision_is_lost_in_a_flood(api, port, tmp_path):
    log = tmp_path / "audit.jsonl"
    result = run(port, "--audit", str(log), "--http-allow", "GET api.test/ok",
                 cmd=[sys.executable, "-c", FLOOD, str(port), "1500"])
    assert result.returncode == 0, result.stderr[-500:]
    denied = [line for line in log.read_text().splitlines() if '"syscall": "http"' in line]
    assert len(denied) == 1500
    assert "sandlock: 1500 network operations denied" in result.stderr


def test_quic_is_refused_even_with_any_host_allowed(port):
    code = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"q", ("127.0.0.2", %d)); print("sent")
except OSError as e:
    print(e.errno)
""" % port
    result = run(port, "--net-allow", "*", "--http-allow", "* api.test", cmd=[sys.executable, "-c", code])
    assert result.stdout.strip() == "13", result
    assert "UDP to an HTTP port (QUIC)" in result.stderr
