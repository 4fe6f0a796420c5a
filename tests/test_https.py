"""HTTPS through the proxy: inspection with the sandbox CA, pass-through, refusals.

The upstream servers have trustme certificates (for api.test / other.test) and the
runs trust that CA for upstream connections with --upstream-ca. Clients inside the
sandbox get nothing but the environment sandlock sets: no --cacert, no -k.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import trustme

from conftest import sandlock
from httpservers import Upstream, free_port_on, served_repository

API, OTHER = "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def port():
    return free_port_on(API, OTHER)


@pytest.fixture
def api(port, upstream_ca):
    with Upstream(API, port, name="api", tls=upstream_ca[0], tls_names=("api.test",)) as server:
        yield server


@pytest.fixture
def other(port, upstream_ca):
    with Upstream(OTHER, port, name="other", tls=upstream_ca[0], tls_names=("other.test",)) as server:
        yield server


@pytest.fixture
def https(port, upstream_ca, tmp_path):
    def run(*options: str, cmd: list[str], env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
        import os

        environment = dict(os.environ if env is None else env)
        environment.setdefault("XDG_DATA_HOME", str(tmp_path / "data"))  # no persistent CA
        return sandlock("run", "--resolve", f"api.test={API}", "--resolve", f"other.test={OTHER}",
                        "--http-port", str(port), "--upstream-ca", upstream_ca[1], *options, "--",
                        *cmd, env=environment, **kwargs)
    return run


ALLOW = ("--http-allow", "GET api.test/repos/*")


def curl(*args: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "10", *args]


# --- inspection with the clients people run -------------------------------------------


def test_curl_allowed_and_denied_inside_tls(https, api, port):
    url = f"https://api.test:{port}"
    result = https(*ALLOW, cmd=["sh", "-c", f"curl -sS {url}/repos/x; curl -sS -i {url}/admin"])
    assert result.stdout.startswith("api GET /repos/x\n"), result
    assert "HTTP/2 403" in result.stdout or "HTTP/1.1 403" in result.stdout
    assert "x-sandlock-denied: no --http-allow rule matches" in result.stdout.lower()
    assert api.paths() == ["/repos/x"]


PY_CLIENTS = """
import http.client, ssl, sys, urllib.request, urllib.error
url = sys.argv[1]
print(urllib.request.urlopen(url + "/repos/a").read().decode().strip())
try:
    urllib.request.urlopen(url + "/admin")
except urllib.error.HTTPError as e:
    print(e.code)
c = http.client.HTTPSConnection("api.test", int(sys.argv[2]), context=ssl.create_default_context())
c.request("GET", "/repos/b")
print(c.getresponse().read().decode().strip())
"""


def test_python_ssl_urllib_http_client(https, api, port):
    result = https(*ALLOW, cmd=[sys.executable, "-c", PY_CLIENTS, f"https://api.test:{port}", str(port)])
    assert result.stdout.splitlines() == ["api GET /repos/a", "403", "api GET /repos/b"], result


def test_python_requests_if_installed(https, api, port):
    probe = subprocess.run([sys.executable, "-c", "import requests"], capture_output=True)
    if probe.returncode:
        pytest.skip("requests is not installed")
    code = f"""
import requests
print(requests.get("https://api.test:{port}/repos/a").text.strip())
print(requests.get("https://api.test:{port}/admin").status_code)
"""
    result = https(*ALLOW, cmd=[sys.executable, "-c", code])
    assert result.stdout.splitlines() == ["api GET /repos/a", "403"], result


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fetch_and_https(https, api, port):
    code = f"""
const https = require('https');
(async () => {{
  let r = await fetch('https://api.test:{port}/repos/a');
  console.log(r.status, (await r.text()).trim());
  r = await fetch('https://api.test:{port}/admin');
  console.log(r.status);
  https.get('https://api.test:{port}/repos/b', res => {{
    let b = ''; res.on('data', d => b += d); res.on('end', () => console.log(res.statusCode, b.trim()));
  }});
}})();
"""
    result = https(*ALLOW, cmd=["node", "-e", code])
    assert result.stdout.splitlines() == ["200 api GET /repos/a", "403", "200 api GET /repos/b"], result


@pytest.mark.skipif(shutil.which("wget") is None, reason="wget is not installed")
def test_wget(https, api, port):
    result = https(*ALLOW, cmd=["sh", "-c", f"wget -q -O - https://api.test:{port}/repos/a; "
                                            f"wget -q -O - https://api.test:{port}/admin; echo $?"])
    assert result.stdout.splitlines() == ["api GET /repos/a", "8"], result


def test_openssl_s_client(https, api, port):
    request = f"GET /repos/a HTTP/1.1\\r\\nHost: api.test:{port}\\r\\nConnection: close\\r\\n\\r\\n"
    result = https(*ALLOW, cmd=["sh", "-c",
                                f"printf '{request}' | openssl s_client -quiet -verify_return_error "
                                f"-servername api.test -connect api.test:{port} 2>/dev/null"])
    assert "api GET /repos/a" in result.stdout, result


def test_git_clone_over_https(https, port, upstream_ca, tmp_path):
    with Upstream(API, port, files=served_repository(tmp_path), tls=upstream_ca[0],
                  tls_names=("api.test",)):
        result = https("--http-allow", "GET api.test/files/repo.git/*",
                       cmd=["git", "clone", "-q", f"https://api.test:{port}/files/repo.git",
                            str(tmp_path / "clone")])
        assert result.returncode == 0, result.stderr


def test_client_ignoring_the_environment_fails_closed(https, api, port):
    # Trusts only the distribution's store: the sandbox CA is not in it.
    result = https(*ALLOW, cmd=curl("--cacert", "/etc/ssl/certs/ca-certificates.crt",
                                    f"https://api.test:{port}/repos/a"))
    assert result.returncode != 0
    assert "certificate" in result.stderr.lower()
    assert api.log == []


def test_no_ca_env_leaves_clients_alone(https, api, port):
    result = https("--no-ca-env", *ALLOW, cmd=["sh", "-c", "env | grep -c '=.*/sandlock-'; "
                                                           f"curl -sS https://api.test:{port}/repos/a"])
    assert result.stdout.startswith("0\n"), result  # no variable names a sandlock run's file
    assert api.log == []


def test_http_ca_out_writes_the_certificate_only(https, api, port, tmp_path):
    out = tmp_path / "ca.pem"
    result = https("--no-ca-env", "--http-ca-out", str(out), *ALLOW,
                   cmd=curl("--cacert", str(out), f"https://api.test:{port}/repos/a"))
    assert result.stdout == "api GET /repos/a\n", result
    text = out.read_text()
    assert "BEGIN CERTIFICATE" in text and "PRIVATE KEY" not in text


# --- host and server-name checks ----------------------------------------------------------


def test_sni_of_allowed_host_with_host_header_of_another(https, api, other, port):
    result = https(*ALLOW, "--http-allow", "GET other.test/repos/*",
                   cmd=curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: other.test",
                            f"https://api.test:{port}/repos/a"))
    assert result.stdout == "421", result
    assert api.log == [] and other.log == []


def test_http2_coalescing_is_refused(https, api, other, port):
    # One HTTP/2 connection to api.test, then a stream whose :authority is other.test.
    code = f"""
import socket, ssl, h2.connection, h2.events
ctx = ssl.create_default_context(); ctx.set_alpn_protocols(["h2"])
s = ctx.wrap_socket(socket.create_connection(("api.test", {port})), server_hostname="api.test")
assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
c = h2.connection.H2Connection(); c.initiate_connection(); s.sendall(c.data_to_send())
for stream, authority in ((1, "api.test"), (3, "other.test")):
    c.send_headers(stream, [(":method", "GET"), (":path", "/repos/x"), (":scheme", "https"),
                            (":authority", authority)], end_stream=True)
    s.sendall(c.data_to_send())
statuses, ended = {{}}, 0
while ended < 2:
    data = s.recv(65536)
    if not data:
        break
    for e in c.receive_data(data):
        if isinstance(e, h2.events.ResponseReceived):
            statuses[e.stream_id] = dict(e.headers)[b":status"].decode()
        if isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
            ended += 1
    s.sendall(c.data_to_send())
print(statuses.get(1), statuses.get(3))
"""
    result = https(*ALLOW, "--http-allow", "GET other.test/repos/*", cmd=[sys.executable, "-c", code])
    assert result.stdout.split() == ["200", "421"], result
    assert other.log == []


def test_missing_sni_is_refused(https, api, port):
    result = https(*ALLOW, cmd=["sh", "-c", f"echo | openssl s_client -noservername "
                                            f"-connect api.test:{port} 2>&1 | head -5"])
    assert "BEGIN CERTIFICATE" not in result.stdout
    # The notice names where the connection went (it named an empty host before).
    assert f"sandlock: denied TLS {API}:{port} (TLS without SNI" in result.stderr
    assert api.log == []


def test_host_without_rule_refused_at_client_hello(https, api, other, port):
    result = https(*ALLOW, "--net-allow", f"other.test:{port}",
                   cmd=curl(f"https://other.test:{port}/repos/a"))
    assert result.returncode != 0
    assert "no --http-allow rule for other.test" in result.stderr
    assert other.log == []


def test_upstream_certificate_is_verified(port, api, tmp_path):
    # Without --upstream-ca the trustme certificate is not trusted: nothing is served.
    result = sandlock("run", "--resolve", f"api.test={API}", "--http-port", str(port), *ALLOW, "--",
                      *curl("-o", "/dev/null", "-w", "%{http_code}", f"https://api.test:{port}/repos/a"),
                      env={**__import__("os").environ, "XDG_DATA_HOME": str(tmp_path)})
    assert result.stdout in ("502", "000"), result
    assert api.log == []


# --- pass-through and --https-inspect ---------------------------------------------------


def test_pass_through_shows_the_real_server(https, api, port, upstream_ca):
    result = https("--http-allow", "* api.test",
                   cmd=["sh", "-c", f"env | grep -c '=.*/sandlock-'; curl -sS --cacert {upstream_ca[1]} "
                                    f"https://api.test:{port}/anything"])
    assert result.stdout == "0\napi GET /anything\n", result  # no CA needed, none injected


def test_inspect_off_refuses_hosts_that_need_it(https, api, port, upstream_ca):
    result = https("--https-inspect", "off", *ALLOW,
                   cmd=curl("--cacert", upstream_ca[1], f"https://api.test:{port}/repos/a"))
    assert result.returncode != 0
    assert "needs HTTPS inspection" in result.stderr
    assert api.log == []


def test_inspect_on_checks_pass_through_hosts_too(https, api, port, tmp_path):
    log = tmp_path / "audit"
    result = https("--https-inspect", "on", "--audit", str(log), "--http-allow", "* api.test",
                   cmd=curl(f"https://api.test:{port}/seen"))
    assert result.stdout == "api GET /seen\n", result
    assert '"path": "/seen"' in log.read_text()


# --- the CA the run uses ---------------------------------------------------------------------


def test_persistent_ca_is_used_when_it_exists(https, api, port, tmp_path):
    import os

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    assert sandlock("ca", "init", env=env).returncode == 0
    exported = tmp_path / "persistent.pem"
    assert sandlock("ca", "export", str(exported), env=env).returncode == 0
    result = https(*ALLOW, "--no-ca-env", env=env,
                   cmd=curl("--cacert", str(exported), f"https://api.test:{port}/repos/a"))
    assert result.stdout == "api GET /repos/a\n", result


def test_user_ca_and_its_key_stays_unreadable(https, api, port, tmp_path):
    ca = trustme.CA()
    cert, key = tmp_path / "user-ca.pem", tmp_path / "user-ca.key"
    ca.cert_pem.write_to_path(str(cert))
    ca.private_key_pem.write_to_path(str(key))
    result = https("--http-ca", str(cert), "--http-key", str(key), *ALLOW, cmd=["sh", "-c", f"""
        cat {key} > /dev/null 2>&1 && echo key-readable
        curl -sS --cacert {cert} https://api.test:{port}/repos/a
    """])
    assert result.stdout == "api GET /repos/a\n", result


@pytest.mark.parametrize("options, message", [
    (("--http-ca", "/etc/hostname"), "--http-ca and --http-key go together"),
    (("--http-key", "/etc/hostname"), "--http-ca and --http-key go together"),
])
def test_http_ca_flags_are_checked(options, message):
    result = sandlock("run", *options, *ALLOW, "--", "true")
    assert result.returncode == 2 and message in result.stderr


def test_mismatched_user_ca_is_exit_2(tmp_path):
    one, two = trustme.CA(), trustme.CA()
    cert, key = tmp_path / "one.pem", tmp_path / "two.key"
    one.cert_pem.write_to_path(str(cert))
    two.private_key_pem.write_to_path(str(key))
    result = sandlock("run", "--http-ca", str(cert), "--http-key", str(key), *ALLOW, "--", "true")
    assert result.returncode == 2, result
    assert result.stderr.startswith("sandlock: error: --http-ca: "), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_pip_install_over_inspected_https_with_the_example_policy(port, upstream_ca, tmp_path):
    """The pip example as it is meant to run: HTTPS, inspected, pip trusting the sandbox
    CA through the variables sandlock sets (no --cert, no --trusted-host)."""
    from pathlib import Path

    from test_policy_docs import EXAMPLES, wheel

    simple, packages = tmp_path / "simple", tmp_path / "packages"
    (simple / "tinypkg").mkdir(parents=True)
    packages.mkdir()
    name = wheel(packages)
    ca = upstream_ca[0]
    with Upstream(API, port, name="pypi", files=str(simple), files_at="/simple/", tls=ca,
                  tls_names=("pypi.org",)), \
            Upstream(OTHER, port, name="files", files=str(packages), files_at="/packages/", tls=ca,
                     tls_names=("files.pythonhosted.org",)) as files:
        link = f"https://files.pythonhosted.org:{port}/packages/{name}"
        (simple / "tinypkg" / "index.html").write_text(f'<a href="{link}">{name}</a>\n')
        target = tmp_path / "target"
        result = sandlock(
            "run", "--policy", str(Path(EXAMPLES) / "pip-install.toml"),
            "--resolve", f"pypi.org={API}", "--resolve", f"files.pythonhosted.org={OTHER}",
            "--http-port", str(port), "--upstream-ca", upstream_ca[1], "--",
            sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-cache-dir", "--no-deps",
            "--target", str(target), "--index-url", f"https://pypi.org:{port}/simple", "tinypkg",
            timeout=120, cwd=tmp_path, env={**__import__("os").environ,
                                            "XDG_DATA_HOME": str(tmp_path / "data")})
        assert result.returncode == 0, result.stderr
        assert (target / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
        assert [path for _, path, _, _ in files.log] == [f"/packages/{name}"]


def test_a_client_that_refuses_the_ca_is_named(https, api, port, tmp_path):
    """A client whose own CA setting overrides the variables sandlock sets (here curl's
    --cacert, as npm's --cafile would): before, only the client's certificate error; now
    sandlock says which host and where the fix is, once per host, and records it."""
    bundle = tmp_path / "system-only.pem"  # a store without sandlock's CA
    bundle.write_bytes(open("/etc/ssl/certs/ca-certificates.crt", "rb").read())
    fetch = " ; ".join([f"curl -sS --max-time 10 --cacert {bundle} https://api.test:{port}/repos/a"] * 2)
    audit = tmp_path / "audit.jsonl"
    result = https(*ALLOW, "--audit", str(audit), cmd=["sh", "-c", fetch])
    assert "certificate" in result.stderr  # the client's own error
    notice = (f"sandlock: api.test: the client refused sandlock's CA (a CA setting of its own, "
              f"e.g. curl's --cacert or npm's --cafile, overrides the variables sandlock sets; "
              f'see docs/ca.md, "When a client refuses the CA")')
    assert result.stderr.count(notice) == 1, result.stderr  # (lines may interleave with curl's)
    assert "network operation" not in result.stderr  # not a denial
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["hostname"], r["destination"]) for r in records if r.get("event") == "untrusted-ca"] \
        == [("api.test", f"{API}:{port}")]
    assert api.log == []
    # Control: the same client, trusting what sandlock sets, succeeds and is told nothing.
    trusted = https(*ALLOW, cmd=curl(f"https://api.test:{port}/repos/a"))
    assert "refused sandlock's CA" not in trusted.stderr and trusted.returncode == 0
