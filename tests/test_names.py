"""Names as a new user writes them: localhost and /etc/hosts, a lookup no rule admits,
and what sandlock says (or does not say) about DNS at the end of a run.

Every server is on loopback; the upstream DNS is a FakeDns (--dns-server), which
records every question, so a test can show what was (not) asked upstream.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from threading import Thread

import pytest

from conftest import PYTHON, SANDLOCK, sandlock, users
from dnsserver import FakeDns
from sandlock.dns._hostsfile import AFTER_DNS, FIRST, UNUSED, HostsFile, hosts_order

PY = sys.executable
IP = ip_address


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    """An HTTP server on 127.0.0.1 (where a user's dev server listens)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def fake():
    with FakeDns({"web.test": ["127.0.0.2"], "devbox.test": ["127.0.0.6"]}) as server:
        yield server


def dns_server(fake: FakeDns) -> list[str]:
    return ["--dns-server", "%s:%d" % fake.address]


def fetch(url: str) -> list[str]:
    """A Python client (the system resolver, getaddrinfo) printing the status or errno."""
    script = ("import sys, urllib.request\n"
              "try: print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n"
              "except OSError as e: print('failed', getattr(e, 'reason', e))\n")
    return [PY, "-c", script, url]


# --- 1. localhost and the hosts file ------------------------------------------------


@users
def test_a_localhost_rule_reaches_a_local_server(server, as_nobody_or_self):
    """The first rule a user writes: before, `cannot resolve localhost: NXDOMAIN`, and
    the connect to 127.0.0.1 was denied."""
    wrap = as_nobody_or_self or (lambda argv: argv)
    argv = [*SANDLOCK, "run", "--net-allow", f"localhost:{server}", "--",
            *fetch(f"http://localhost:{server}/")]
    result = subprocess.run(wrap(argv), capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert result.stdout.strip() == "200", result.stderr
    assert "cannot resolve" not in result.stderr and "denied" not in result.stderr


def test_localhost_means_the_port_written_and_nothing_else(server):
    """Control: localhost is pinned to loopback, and the rule's port still decides."""
    result = sandlock("run", "--net-allow", f"localhost:{server + 1}", "--",
                      *fetch(f"http://localhost:{server}/"), cwd="/tmp")
    assert result.stdout.startswith("failed")
    assert f"denied connect to 127.0.0.1:{server} (localhost) (no --net-allow rule)" in result.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reaches_localhost_on_either_loopback(server):
    """curl resolves localhost itself, to ::1 and 127.0.0.1: both are localhost's."""
    result = sandlock("run", "--net-allow", f"localhost:{server}", "--", "curl", "-sS", "-o",
                      "/dev/null", "-w", "%{http_code}", f"http://localhost:{server}/", cwd="/tmp")
    assert result.stdout == "200", result.stderr
    assert "denied" not in result.stderr


def test_the_api_allows_localhost(server):
    from sandlock import Policy, Sandbox

    result = Sandbox(Policy(net_allow_hosts=("localhost",)), quiet=True).run(
        fetch(f"http://localhost:{server}/"))
    assert result.stdout.decode().strip() == "200"


def test_without_etc_in_view_the_responder_answers_localhost(server):
    """A policy that does not grant /etc: the command's C library cannot read the
    hosts file and asks DNS, i.e. sandlock's responder, which gives localhost's pins."""
    grants = [arg for path in ("/usr", "/lib", "/lib64", *PYTHON) if os.path.exists(path)
              for arg in ("-r", path)]
    result = sandlock("run", *grants, "--net-allow", f"localhost:{server}", "--",
                      *fetch(f"http://localhost:{server}/"), cwd="/tmp")
    assert result.stdout.strip() == "200", result.stderr


root_only = pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                               reason="needs root to bind a hosts file over /etc/hosts")


def with_system_files(tmp_path, hosts: str, nsswitch: str | None, argv: list[str]):
    """Run ``sandlock ARGV`` in a mount namespace of its own where /etc/hosts (and
    /etc/nsswitch.conf) are these: the machine's files are never touched."""
    (tmp_path / "hosts").write_text(hosts)
    mounts = f"mount --bind {tmp_path / 'hosts'} /etc/hosts"
    if nsswitch is not None:
        (tmp_path / "nsswitch.conf").write_text(nsswitch)
        mounts += f" && mount --bind {tmp_path / 'nsswitch.conf'} /etc/nsswitch.conf"
    script = f'{mounts} && exec "$@"'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           "sh", *SANDLOCK, *argv], capture_output=True, text=True, timeout=60,
                          cwd="/tmp")


@root_only
def test_a_hosts_file_name_is_pinned_as_written(tmp_path, fake, server):
    """A dev name in /etc/hosts (a loopback address: no --dns-allow-private needed,
    it is the user's own configuration), pinned without asking DNS."""
    result = with_system_files(
        tmp_path, "127.0.0.1 devbox.test\n", None,
        ["run", *dns_server(fake), "--net-allow", f"devbox.test:{server}", "--",
         *fetch(f"http://devbox.test:{server}/")])
    assert result.stdout.strip() == "200", result.stderr
    assert fake.asked("devbox.test") == []


@root_only
def test_dns_before_files_asks_dns_first(tmp_path, fake, server):
    """nsswitch `hosts: dns files`: DNS's answer (127.0.0.6) wins over the file's."""
    result = with_system_files(
        tmp_path, "127.0.0.1 devbox.test\n", "hosts: dns files\n",
        ["run", *dns_server(fake), "--dns-allow-private", "--net-allow", f"devbox.test:{server}",
         "--", PY, "-c", "import socket; print(socket.gethostbyname('devbox.test'))"])
    assert fake.asked("devbox.test")
    assert result.stdout.strip() == "127.0.0.6", result.stderr


@root_only
def test_without_files_in_nsswitch_the_hosts_file_is_not_read(tmp_path, fake):
    result = with_system_files(
        tmp_path, "127.0.0.1 nowhere.test\n", "hosts: dns\n",
        ["run", *dns_server(fake), "--net-allow", "nowhere.test:80", "--",
         "getent", "hosts", "nowhere.test"])
    assert "cannot resolve nowhere.test: NXDOMAIN" in result.stderr
    assert result.returncode == 2  # not found: the command's own lookup read no file


REWRITE_HOSTS = """
import socket, sys
if sys.argv[2] == "rewrite":
    with open("/etc/hosts", "a") as hosts:
        hosts.write("127.0.0.3 localhost\\n")
s = socket.socket()
try:
    s.connect(("127.0.0.3", int(sys.argv[1])))
    print("connected")
except OSError as error:
    print(error.errno)
"""


@root_only
@pytest.mark.parametrize("hosts, attempt, expected", [
    ("127.0.0.1 localhost\n", "rewrite", "13"),  # the attack: refused
    ("127.0.0.1 localhost\n127.0.0.3 localhost\n", "as-is", "connected"),  # control
])
def test_a_command_that_can_write_the_hosts_file_cannot_choose_a_pin(tmp_path, hosts, attempt,
                                                                     expected):
    """The attack: a policy that lets the command write /etc/hosts (here -w /etc/hosts;
    -w /etc or -w / alike), and a rule naming localhost. The command adds another
    loopback address of its choosing for localhost before its first network call,
    when sandlock pins the name. The files are read before the command starts: the
    pin is what the user's file said. Control: written by the user, it counts."""
    from netattack_helpers import TcpServer

    with TcpServer("127.0.0.3") as target:
        result = with_system_files(
            tmp_path, hosts, None,
            ["run", "-r", "/", "-w", "/etc/hosts", "--net-allow", f"localhost:{target.port}",
             "--", PY, "-c", REWRITE_HOSTS, str(target.port), attempt])
    assert result.stdout.strip() == expected, result.stderr
    assert target.accepted == (1 if expected == "connected" else 0)


def test_hosts_file_lookups(tmp_path):
    text = ("# comment devbox.test\n127.0.0.1\tlocalhost\n::1 localhost ip6-localhost\n"
            "10.1.2.3 devbox.test db.devbox.test  # trailing devbox.test\n"
            "10.1.2.4 DevBox.Test.\nfe80::1%eth0 devbox.test\nnot-an-ip devbox.test\n"
            "192.0.2.1 xdevbox.test devbox.testx\n")
    hosts = HostsFile(text)
    assert hosts.before_dns("devbox.test") == (IP("10.1.2.3"), IP("10.1.2.4"))
    assert hosts.before_dns("db.devbox.test") == (IP("10.1.2.3"),)
    assert hosts.before_dns("other.test") is None
    assert hosts.after_dns("devbox.test") == ()
    after = HostsFile(text, AFTER_DNS)
    assert after.before_dns("devbox.test") is None
    assert after.after_dns("devbox.test") == (IP("10.1.2.3"), IP("10.1.2.4"))


def test_localhost_is_always_loopback():
    """RFC 6761: localhost and *.localhost, whatever the file says (or without one)."""
    loopback = (IP("127.0.0.1"), IP("::1"))
    assert HostsFile("", UNUSED).before_dns("localhost") == loopback
    assert HostsFile("", UNUSED).before_dns("app.localhost") == loopback
    assert HostsFile("203.0.113.9 localhost\n127.0.1.1 localhost\n").before_dns("LocalHost.") == \
        (*loopback, IP("127.0.1.1"))


@pytest.mark.parametrize("line, order", [
    ("hosts: files dns", FIRST),
    ("hosts:          files mdns4_minimal [NOTFOUND=return] dns myhostname", FIRST),
    ("hosts: dns [!UNAVAIL=return] files", AFTER_DNS),
    ("hosts: resolve [!UNAVAIL=return] files dns", AFTER_DNS),
    ("hosts: dns", UNUSED),
    ("passwd: files", FIRST),  # no hosts line: files first
    ("# hosts: dns\nhosts: files", FIRST),
])
def test_nsswitch_order(tmp_path, line, order):
    path = tmp_path / "nsswitch.conf"
    path.write_text(line + "\n")
    assert hosts_order(str(path)) == order


def test_a_missing_nsswitch_means_files_first(tmp_path):
    assert hosts_order(str(tmp_path / "missing")) == FIRST


# --- 3. a lookup no rule admits ---------------------------------------------------------


LOOKUPS = ("import socket, sys\n"
           "for name in sys.argv[1:]:\n"
           "    for attempt in range(3):\n"
           "        try: socket.getaddrinfo(name, 80)\n"
           "        except OSError: pass\n")


@users
def test_a_denied_lookup_is_said_once_per_name(fake, world_tmp, as_nobody_or_self):
    """Before: nothing at all (curl: "Could not resolve host", pip: five retries)."""
    wrap = as_nobody_or_self or (lambda argv: argv)
    audit = world_tmp / "audit.jsonl"
    argv = [*SANDLOCK, "run", *dns_server(fake), "--dns-allow-private", "--audit", str(audit),
            "--net-allow", "web.test:80", "--", PY, "-c", LOOKUPS,
            "files.pythonhosted.org", "web.test", "files.pythonhosted.org", "other.test"]
    result = subprocess.run(wrap(argv), capture_output=True, text=True, timeout=60, cwd="/tmp")
    lines = result.stderr.splitlines()
    assert lines.count("sandlock: denied lookup of files.pythonhosted.org (no --net-allow rule)") == 1
    assert lines.count("sandlock: denied lookup of other.test (no --net-allow rule)") == 1
    assert "web.test" not in result.stderr
    assert "sandlock: 2 network operations denied" in lines
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    lookups = [r for r in records if r.get("syscall") == "dns"]
    assert [(r["destination"], r["verdict"], r["reason"]) for r in lookups] == [
        ("files.pythonhosted.org", "deny", "no --net-allow rule"),
        ("other.test", "deny", "no --net-allow rule")]
    assert fake.asked("files.pythonhosted.org") == [] and fake.asked("other.test") == []


def test_a_denied_lookup_is_quiet_with_q(fake):
    result = sandlock("run", "-q", *dns_server(fake), "--net-allow", "web.test:80", "--",
                      PY, "-c", LOOKUPS, "other.test", cwd="/tmp")
    assert result.stderr == ""


def test_a_lookup_under_http_rules_names_both_options(fake):
    result = sandlock("run", *dns_server(fake), "--dns-allow-private", "--http-allow",
                      "GET web.test/*", "--", PY, "-c", LOOKUPS, "other.test", cwd="/tmp")
    assert "denied lookup of other.test (no --net-allow or --http-allow rule)" in result.stderr


def test_a_name_with_control_characters_cannot_forge_a_line(fake):
    """The attack: a query for a name whose label holds a newline and a forged notice.
    The notice shows it escaped, on one line."""
    script = (
        "import socket, struct\n"
        "label = b'x\\nsandlock: all clear\\x1b[2J'\n"
        "name = bytes([len(label)]) + label + b'\\x04test\\x00'\n"
        "query = struct.pack('!HHHHHH', 7, 0x100, 1, 0, 0, 0) + name + struct.pack('!HH', 1, 1)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
        "s.sendto(query, ('127.0.0.53', 53)); print(len(s.recv(512)))\n"
    )
    result = sandlock("run", *dns_server(fake), "--net-allow", "web.test:80", "--",
                      PY, "-c", script, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    assert not any(line.startswith("sandlock: all clear") for line in result.stderr.splitlines())
    assert "sandlock: denied lookup of x\\nsandlock: all clear\\x1b[2J.test (no --net-allow rule)" \
        in result.stderr.splitlines()


# --- 4. "still resolving" only when it mattered ------------------------------------------


def test_a_quick_command_with_a_prompt_dns_server_gets_no_warning(fake):
    """Before: `the command ended while sandlock was still resolving web.test (slow or
    silent DNS server?)` after `true`, which asked for nothing."""
    result = sandlock("run", *dns_server(fake), "--dns-allow-private", "--net-allow",
                      "web.test:80", "--", "true", cwd="/tmp")
    assert result.returncode == 0
    assert result.stderr == ""
