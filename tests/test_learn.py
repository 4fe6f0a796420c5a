"""Learn mode: the derivation (audit records -> rules, pure, on records as the audit
log writes them), then `sandlock learn` -> `sandlock run --policy` with real clients."""

from __future__ import annotations

import sys

import pytest
from conftest import sandlock
from httpservers import Upstream, free_port_on
from netattack_helpers import TcpServer

from sandlock.policyfiles._learn import learn, looks_secret


def http(method, host, path, verdict="allow"):
    return {"protocol": "http", "syscall": "http", "method": method, "hostname": host,
            "path": path, "verdict": verdict}


def connect(protocol, destination, hostname=None, verdict="allow", syscall="connect"):
    return {"protocol": protocol, "syscall": syscall, "destination": destination,
            "hostname": hostname, "verdict": verdict}


def test_network_rules_by_name_ports_merged():
    learned = learn([
        connect("tcp", "140.82.112.3:22", "github.com"),
        connect("tcp", "140.82.112.3:9418", "github.com"),
        connect("udp", "10.0.0.2:53", verdict="redirect"),  # DNS: never a rule
        connect("tcp", "10.1.2.3:5432"),
        connect("tcp", "[2001:db8::1]:8080"),
        connect("tcp", "10.9.9.9:443", "x.test", verdict="redirect"),  # through the proxy
        connect("tcp", "10.9.9.8:25", verdict="deny"),
    ])
    assert learned.net_allow == ("tcp://10.1.2.3:5432", "tcp://[2001:db8::1]:8080",
                                 "tcp://github.com:22,9418")


def test_bind_ports():
    learned = learn([connect("tcp", "0.0.0.0:8080", syscall="bind"),
                     connect("tcp", "0.0.0.0:0", syscall="bind"),
                     connect("tcp", "0.0.0.0:8080", syscall="listen")])
    assert learned.net_bind == ("8080",)


def test_http_paths_collapse_where_siblings_share_a_parent():
    records = [http("GET", "api.test", f"/repos/o/{name}") for name in ("a", "b", "c")]
    records += [http("GET", "api.test", "/user"), http("POST", "api.test", "/repos/o/a"),
                http("GET", "api.test", "/rate_limit?x=1"), http("GET", "other.test", "/")]
    learned = learn(records, collapse=3)
    assert learned.http_allow == (
        "GET api.test/rate_limit", "GET,POST api.test/repos/o/*", "GET api.test/user",
        "GET other.test/",
    )


def test_collapse_threshold():
    records = [http("GET", "api.test", f"/v1/{name}") for name in ("a", "b")]
    assert learn(records, collapse=3).http_allow == ("GET api.test/v1/a", "GET api.test/v1/b")
    assert learn(records, collapse=2).http_allow == ("GET api.test/v1/*",)


def test_secrets_never_reach_the_policy():
    token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    learned = learn([
        http("GET", "api.test", f"/hooks/{token}/deliver?key=supersecret"),
        http("GET", "api.test", "/files/0f8e1c2b9a7d6e5f4c3b2a1908f7e6d5/raw"),
        http("GET", "api.test", "/u/3fa85f64-5717-4562-b3fc-2c963f66afa6"),
    ], collapse=0)
    text = " ".join(learned.http_allow)
    assert token not in text and "supersecret" not in text and "0f8e1c2b" not in text
    assert "3fa85f64" not in text
    assert "GET api.test/hooks/*" in learned.http_allow


@pytest.mark.parametrize("segment, secret", [
    ("repos", False), ("index.html", False), ("v1", False), ("12345678901234567890", False),
    ("flask-3.0.3-py3-none-any.whl", False), ("completions", False),
    ("deadbeefdeadbeefdeadbeef", True), ("sk-proj-4fG7hJ9kL2mN5pQ8rS1tU3vW6xY", True),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", True),
    ("bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", True), ("p4ssw0rd!Secret99", True),
    ("sk-ant-api03-abcdEFGH1234", True), ("AKIAIOSFODNN7EXAMPLE", True),
    ("key=0123456789abcdef0123", True), ("user@example.com", False),
    ("2024-01-15", False), ("README.md", False), ("v2;jsessionid=1", False),
])
def test_looks_secret(segment, secret):
    assert looks_secret(segment) is secret


def test_denied_and_tls_records_are_not_learned():
    learned = learn([http("GET", "api.test", "/x", verdict="deny"),
                     {"protocol": "http", "method": "TLS", "hostname": "api.test", "path": "",
                      "verdict": "allow"}])
    assert learned.http_allow == ()


# --- learn -> run, with real clients and servers ---------------------------------------------


TOKEN = "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close(); print("connected")
except OSError as e:
    print("refused", e.errno)
"""


@pytest.fixture
def servers(tmp_path):
    port = free_port_on("127.0.0.2")
    with Upstream("127.0.0.2", port, name="api") as api, TcpServer("127.0.0.3") as db:
        yield api, port, db


def _what_it_does(port: int, db_port: int) -> str:
    url = f"http://api.test:{port}"
    return (f"for r in a b c; do curl -sS {url}/repos/o/$r; done; "
            f"curl -sS -X POST -d x {url}/issues; "
            f"curl -sS -o /dev/null {url}/hooks/{TOKEN}/x?key=sEcReT; "
            f"{sys.executable} -c '{CONNECT}' db.test {db_port}")


def test_learn_then_run_allows_what_it_did_and_nothing_else(servers, tmp_path):
    api, port, db = servers
    names = ["--resolve", "api.test=127.0.0.2", "--resolve", "db.test=127.0.0.3",
             "--http-port", str(port)]
    policy = tmp_path / "learned.toml"
    learned = sandlock("learn", "-o", str(policy), *names, "--", "sh", "-c", _what_it_does(port, db.port))
    assert learned.returncode == 0, learned.stderr
    assert "connected" in learned.stdout
    text = policy.read_text()
    assert TOKEN not in text and "sEcReT" not in text
    assert '"GET api.test/repos/o/*"' in text and '"POST api.test/issues"' in text
    assert f'"tcp://db.test:{db.port}"' in text

    again = sandlock("run", "--policy", str(policy), "--", "sh", "-c", _what_it_does(port, db.port))
    assert again.returncode == 0, again.stderr
    assert again.stdout == learned.stdout
    assert "denied" not in again.stderr

    other = sandlock("run", "--policy", str(policy), "--", "sh", "-c",
                     f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://api.test:{port}/admin; "
                     f"curl -sS -o /dev/null -w '%{{http_code}}\\n' -X DELETE http://api.test:{port}/issues; "
                     f"{sys.executable} -c '{CONNECT}' db.test {db.port + 1}")
    assert other.stdout.splitlines() == ["403", "403", "refused 13"], other


def test_learn_python_client_and_collapse_option(servers, tmp_path):
    api, port, _ = servers
    code = f"""
import urllib.request
for name in ("a", "b"):
    urllib.request.urlopen("http://api.test:{port}/v1/models/" + name).read()
"""
    policy = tmp_path / "p.toml"
    result = sandlock("learn", "-o", str(policy), "--collapse", "2", "--resolve", "api.test=127.0.0.2",
                      "--http-port", str(port), "--", sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert '"GET api.test/v1/models/*"' in policy.read_text()


def test_learn_output_errors_before_running(tmp_path):
    result = sandlock("learn", "-o", str(tmp_path / "missing" / "p.toml"), "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("sandlock: error: --output: ")
    result = sandlock("learn", "--", "true")
    assert result.returncode == 2 and "give -o FILE" in result.stderr and "--merge FILE" in result.stderr


def test_learn_keeps_the_base_policy(servers, tmp_path):
    api, port, _ = servers
    base = tmp_path / "base.toml"
    base.write_text(f'[network]\nresolve = ["api.test=127.0.0.2"]\n[http]\nports = [{port}]\n'
                    '[process]\ntimeout = 30\n')
    policy = tmp_path / "p.toml"
    result = sandlock("learn", "-o", str(policy), "--policy", str(base), "--", "curl", "-sS",
                      f"http://api.test:{port}/x")
    assert result.returncode == 0, result.stderr
    text = policy.read_text()
    assert "timeout = 30" in text and '"GET api.test/x"' in text
    shown = sandlock("policy", "test", "--policy", str(policy), f"GET http://api.test:{port}/x",
                     f"GET http://api.test:{port}/y")
    assert shown.returncode == 1
    assert shown.stdout.splitlines()[0].startswith("ALLOW")
    assert shown.stdout.splitlines()[1].startswith("DENY")


def test_learn_merge_grows_a_policy_file(servers, tmp_path):
    """upstream's `learn --merge FILE`: a second command's needs are added to the file,
    the first's stay; `run --policy FILE` hints at it after a failure."""
    api, port, db = servers
    policy = tmp_path / "grown.toml"
    policy.write_text('description = "mine"\n[network]\nresolve = ["api.test=127.0.0.2", '
                      f'"db.test=127.0.0.3"]\n[http]\nports = [{port}]\n')
    fetch = f"curl -sS http://api.test:{port}/repos/o/a"
    reach = f"{sys.executable} -c '{CONNECT}' db.test {db.port}"

    denied = sandlock("run", "--policy", str(policy), "--", "sh", "-c", f"{fetch} -f")
    assert denied.returncode != 0
    hint = f"sandlock learn --merge {policy} -- sh -c "
    assert f"sandlock: hint: if a denial caused this, `{hint}" in denied.stderr, denied.stderr

    first = sandlock("learn", "--merge", str(policy), "--", "sh", "-c", fetch)
    assert first.returncode == 0, first.stderr
    second = sandlock("learn", "--merge", str(policy), "--", "sh", "-c", reach)
    assert second.returncode == 0 and "connected" in second.stdout, second.stderr
    text = policy.read_text()
    assert '"GET api.test/repos/o/a"' in text and f'"tcp://db.test:{db.port}"' in text
    assert "api.test=127.0.0.2" in text  # what the file held stays
    both = sandlock("run", "--policy", str(policy), "--", "sh", "-c", f"{fetch} -f; {reach}")
    assert both.returncode == 0 and "connected" in both.stdout, both.stderr
    assert "hint" not in both.stderr

    elsewhere = tmp_path / "copy.toml"
    before = policy.read_text()
    moved = sandlock("learn", "--merge", str(policy), "-o", str(elsewhere), "--", "true")
    assert moved.returncode == 0 and policy.read_text() == before and elsewhere.exists()


def test_learn_needs_somewhere_to_write():
    result = sandlock("learn", "--", "true")
    assert result.returncode == 2 and result.stderr.startswith("sandlock: error: learn: give -o FILE")
