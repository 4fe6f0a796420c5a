"""Credentials the sandbox never holds (issue 19), end to end: `--credential` read by
sandlock, `--http-auth` rules applied by the proxy, placeholders in the command's
environment. Real clients (curl, python urllib and http.client, node fetch) inside the
sandbox, real TLS upstreams on loopback that record every header they receive; the
secret is looked for everywhere the command could find it and in every log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import SANDLOCK, sandlock
from httpservers import Upstream, free_port_on

API, OTHER = "127.0.0.2", "127.0.0.3"
SECRET = "s3cret-7f1c9a4e-never-in-the-sandbox"
SOURCE = "SANDLOCK_TEST_API_KEY"  # sandlock's variable the secret comes from


def requests(upstream: Upstream) -> list[tuple[str, dict[str, str]]]:
    """(path, headers by lower-case name) of each request ``upstream`` received."""
    return [(path, {name.lower(): value for name, value in headers})
            for path, headers in zip(upstream.paths(), upstream.headers_log)]


def authorization(upstream: Upstream) -> dict[str, str | None]:
    """path -> the Authorization header it arrived with."""
    return {path: headers.get("authorization") for path, headers in requests(upstream)}


@pytest.fixture(scope="module")
def port():
    return free_port_on(API, OTHER)


@pytest.fixture
def servers(port, upstream_ca):
    with Upstream(API, port, name="api", tls=upstream_ca[0], tls_names=("api.test",)) as api, \
            Upstream(OTHER, port, name="other", tls=upstream_ca[0], tls_names=("other.test",)) as other:
        yield api, other


@pytest.fixture
def run(port, upstream_ca, tmp_path):
    """`sandlock run` with both hosts pinned, the upstream CA trusted, the secret in
    sandlock's environment, an audit log; the usual credential rules unless replaced."""
    audit = tmp_path / "audit.jsonl"

    def run_(*options: str, cmd: list[str], rules: tuple[str, ...] | None = None,
             env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
        environment = {**os.environ, SOURCE: SECRET, "XDG_DATA_HOME": str(tmp_path / "data"),
                       **(env or {})}
        if rules is None:
            rules = ("--http-allow", "* api.test/*", "--http-allow", "* other.test/*",
                     "--https-inspect", "on",  # (other.test too: what reaches it is seen)
                     "--credential", f"api=env:{SOURCE}",
                     "--http-auth", "* api.test/v1/* bearer api",
                     "--credential-env", "OPENAI_API_KEY=api")
        result = sandlock("run", "--resolve", f"api.test={API}", "--resolve", f"other.test={OTHER}",
                          "--http-port", str(port), "--upstream-ca", upstream_ca[1], "--audit", str(audit),
                          *rules, *options, "--", *cmd, env=environment,
                          **{"cwd": tmp_path, **kwargs})
        logs = result.stdout + result.stderr + (audit.read_text() if audit.exists() else "")
        assert SECRET not in logs, "the secret reached a log or the command's output"
        return result
    run_.audit = audit
    return run_


def curl(*args: str) -> list[str]:
    return ["curl", "-sS", "--max-time", "10", *args]


# --- what reaches the upstreams ------------------------------------------------------------


def test_curl_matching_requests_carry_the_secret_others_never(run, servers, port):
    api, other = servers
    base = f"https://api.test:{port}"
    script = (f"curl -sS {base}/v1/models; curl -sS {base}/public; "
              f"curl -sS -H \"Authorization: Bearer $OPENAI_API_KEY\" https://other.test:{port}/v1/x; "
              f"curl -sS -H 'Authorization: Bearer forged' {base}/v1/forged")
    result = run(cmd=["sh", "-c", script])
    assert result.returncode == 0, result.stderr
    assert authorization(api) == {"/v1/models": f"Bearer {SECRET}", "/public": None,
                                   "/v1/forged": f"Bearer {SECRET}"}  # replaced, not added
    (path, headers), = requests(other)
    assert headers["authorization"].startswith("Bearer sandlock-placeholder-api-")
    assert SECRET not in json.dumps(requests(other))
    records = [json.loads(line) for line in run.audit.read_text().splitlines()]
    carried = [r for r in records if r.get("credential") == "api"]
    assert [r["path"] for r in carried] == ["/v1/models", "/v1/forged"]


PY_CLIENT = """
import http.client, json, os, ssl, sys, urllib.request
port = int(sys.argv[1])
print(urllib.request.urlopen(f"https://api.test:{port}/v1/a").read().decode().strip())
connection = http.client.HTTPSConnection("api.test", port, context=ssl.create_default_context())
for path in ("/v1/keep-1", "/public/keep-2", "/v1/keep-3"):  # one keep-alive connection
    connection.request("GET", path, headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    print(connection.getresponse().read().decode().strip())
"""


def test_python_urllib_and_one_keep_alive_connection(run, servers, port):
    api, _ = servers
    result = run(cmd=[sys.executable, "-c", PY_CLIENT, str(port)])
    assert result.returncode == 0, result.stderr
    seen = authorization(api)
    assert seen["/v1/a"] == seen["/v1/keep-1"] == seen["/v1/keep-3"] == f"Bearer {SECRET}"
    assert seen["/public/keep-2"].startswith("Bearer sandlock-placeholder-")  # the child's own


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fetch(run, servers, port):
    api, _ = servers
    code = (f"(async () => {{ for (const p of ['/v1/n1', '/n2']) {{"
            f" const r = await fetch('https://api.test:{port}' + p,"
            " {headers: {authorization: 'Bearer ' + process.env.OPENAI_API_KEY}});"
            " console.log(await r.text()); } })()")
    result = run(cmd=["node", "-e", code])
    assert result.returncode == 0, result.stderr
    seen = authorization(api)
    assert seen["/v1/n1"] == f"Bearer {SECRET}"
    assert seen["/n2"].startswith("Bearer sandlock-placeholder-")


def test_http2_requests_on_one_connection_each_decided(run, servers, port):
    api, _ = servers
    base = f"https://api.test:{port}"
    result = run(cmd=curl("--http2", f"{base}/v1/h1", f"{base}/h2", f"{base}/v1/h3"))
    assert result.returncode == 0, result.stderr
    assert authorization(api) == {"/v1/h1": f"Bearer {SECRET}", "/h2": None,
                                   "/v1/h3": f"Bearer {SECRET}"}


def test_a_redirect_to_another_host_never_carries_the_secret(run, servers, port):
    api, other = servers
    target = f"https://other.test:{port}/v1/landing"
    result = run(cmd=curl("-L", "--location-trusted", "-H", "Authorization: Bearer child",
                          f"https://api.test:{port}/v1/redirect?to={target}"))
    assert result.returncode == 0, result.stderr
    assert requests(api)[0][1]["authorization"] == f"Bearer {SECRET}"
    assert authorization(other) == {"/v1/landing": "Bearer child"}  # what curl itself sent


def test_denied_requests_never_reach_the_upstream_and_carry_nothing(run, servers, port):
    api, _ = servers
    rules = ("--http-allow", "GET api.test/v1/*", "--credential", f"api=env:{SOURCE}",
             "--http-auth", "* api.test/v1/* bearer api")
    result = run(cmd=curl("-i", "-X", "POST", f"https://api.test:{port}/v1/write"), rules=rules)
    assert "403" in result.stdout.splitlines()[0]
    assert requests(api) == []


def test_basic_and_custom_header_schemes(run, servers, port, tmp_path):
    api, _ = servers
    key = tmp_path / "key"
    key.write_text("user:pa55\n")
    rules = ("--http-allow", "* api.test/*", "--credential", f"login=file:{key}",
             "--credential", f"token=env:{SOURCE}",
             "--http-auth", "GET api.test/basic/* basic login",
             "--http-auth", "GET api.test/custom/* header:X-Api-Key token")
    script = (f"curl -sS https://api.test:{port}/basic/x; "
              f"curl -sS -H 'x-api-key: mine' https://api.test:{port}/custom/y; cat {key} || true")
    result = run(cmd=["sh", "-c", script], rules=rules)
    assert "user:pa55" not in result.stdout  # the file source is denied to the command
    import base64

    headers = dict(requests(api))
    assert headers["/basic/x"]["authorization"] == "Basic " + base64.b64encode(b"user:pa55").decode()
    assert headers["/custom/y"]["x-api-key"] == SECRET


def test_plain_http_is_refused_unless_allowed(run):
    """On a plain-HTTP port a matching request is refused: it must not even leave."""
    with Upstream(API, 0, name="api") as upstream:
        rules = ("--http-allow", "* api.test/*", "--credential", f"api=env:{SOURCE}",
                 "--http-auth", "* api.test/v1/* bearer api", "--http-port", str(upstream.port))
        refused = run(cmd=curl("-i", f"http://api.test:{upstream.port}/v1/plain"), rules=rules)
        assert " 403" in refused.stdout.splitlines()[0]
        assert "TLS" in refused.stdout
        assert upstream.log == []
        allowed = run("--http-auth-plain", cmd=curl(f"http://api.test:{upstream.port}/v1/plain"),
                      rules=rules)
        assert allowed.stdout == "api GET /v1/plain\n"


# --- where the command might look for it -------------------------------------------------


HUNT = f"""
import os, sys
# The secret's two halves, never joined (the hunt must not hold what it looks for),
# given reversed (the command line must not hold them either).
first, second = (half[::-1].encode() for half in sys.argv[1:3])


def holds(data):
    at = data.find(first)
    while at >= 0:
        if data[at + len(first):at + len(first) + len(second)] == second:
            return True
        at = data.find(first, at + 1)
    return False


found = []
if holds(open("/proc/self/environ", "rb").read()):
    found.append("environ")
if {SOURCE!r} in os.environ:
    found.append("source variable")
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:  # every readable mapping of this process's memory
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if perms.startswith("r") and end - start < (1 << 28):
            try:
                mem.seek(start)
                if holds(mem.read(end - start)):
                    found.append("memory")
            except OSError:
                pass
for pid in filter(str.isdigit, os.listdir("/proc")):
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{{pid}}/{{name}}", "rb") as f:
                if holds(f.read(1 << 20)):
                    found.append(f"/proc/{{pid}}/{{name}}")
        except OSError:
            pass
for top in ("/tmp", os.getcwd()):
    for root, dirs, files in os.walk(top):
        for file in files:
            path = os.path.join(root, file)
            try:  # (regular files: another test's FIFO in the shared temp tree would block)
                if os.path.isfile(path) and not os.path.islink(path) and holds(open(path, "rb").read()):
                    found.append(path)
            except OSError:
                pass
print("found:", found)
print("placeholder:", os.environ["OPENAI_API_KEY"].startswith("sandlock-placeholder-api-"))
"""


def test_the_command_cannot_find_the_secret(run, tmp_path):
    half = len(SECRET) // 2
    result = run(cmd=[sys.executable, "-c", HUNT, SECRET[:half][::-1], SECRET[half:][::-1]],
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["found: []", "placeholder: True"]


def test_the_source_variable_is_removed_even_when_passed_explicitly(run):
    result = run("--env", SOURCE, cmd=["sh", "-c", f"echo ${{{SOURCE}:-absent}}"])
    assert result.stdout == "absent\n"


# --- the policy side -------------------------------------------------------------------


def test_bad_credentials_are_usage_errors_naming_what_is_wrong(tmp_path):
    base = ["--http-allow", "GET api.test/*"]
    cases = [
        (["--credential", "api=env:SANDLOCK_TEST_UNSET", "--http-auth", "GET api.test/* bearer api"],
         "SANDLOCK_TEST_UNSET is not set"),
        (["--credential", f"api=file:{tmp_path}/missing", "--http-auth", "GET api.test/* bearer api"],
         "No such file"),
        (["--credential", "api=sk-literal-secret"], "expected env:VAR or file:PATH"),
        (["--credential", f"api=env:{SOURCE}", "--http-auth", "GET api.test/* bearer other"],
         "no credential 'other'"),
        (["--credential", f"api=env:{SOURCE}", "--http-auth", "GET api.test/* magic api"],
         "--http-auth"),
        (["--credential", f"api=env:{SOURCE}", "--http-auth", "GET api.test/* bearer api",
          "--https-inspect", "off"], "needs inspection"),
        (["--credential-env", "KEY=nope"], "no credential 'nope'"),
        (["--credential", f"api=env:{SOURCE}", "--http-auth", "GET api.test/* basic api"],
         "user:password"),
    ]
    for options, message in cases:
        result = sandlock("run", *base, *options, "--", "true", env={**os.environ, SOURCE: SECRET})
        assert result.returncode == 2, (options, result.stderr)
        assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        assert SECRET not in result.stderr
    no_rules = sandlock("run", "--credential", f"api=env:{SOURCE}", "--http-auth",
                        "GET api.test/* bearer api", "--", "true", env={**os.environ, SOURCE: SECRET})
    assert no_rules.returncode == 2 and "--http-allow" in no_rules.stderr


def test_print_policy_and_policy_test_show_sources_and_names_never_values(tmp_path):
    env = {**os.environ, SOURCE: SECRET}
    options = ["--http-allow", "* api.test/*", "--credential", f"api=env:{SOURCE}",
               "--http-auth", "POST api.test/v1/* bearer api", "--credential-env", "OPENAI_API_KEY=api"]
    printed = sandlock("run", *options, "--print-policy", "--", "true", env=env)
    assert printed.returncode == 0, printed.stderr
    assert f'[credentials]\napi = "env:{SOURCE}"' in printed.stdout
    assert 'auth = ["POST api.test/v1/* bearer api"]' in printed.stdout
    assert SECRET not in printed.stdout
    policy = tmp_path / "policy.toml"
    policy.write_text(printed.stdout)
    again = sandlock("run", "--policy", str(policy), "--print-policy", "--", "true", env=env)
    assert again.stdout == printed.stdout  # the file loads back into the same policy
    tested = sandlock("policy", "test", "--policy", str(policy), "POST https://api.test/v1/chat",
                      "GET https://api.test/v1/chat", "POST http://api.test/v1/chat", env=env)
    lines = tested.stdout.splitlines()
    assert "carries credential 'api' in Authorization" in lines[0]
    assert "credential" not in lines[1]
    assert "TLS only" in lines[2]
    assert SECRET not in tested.stdout + tested.stderr


def test_unprivileged(as_nobody, servers, port, upstream_ca, world_tmp):
    api, _ = servers
    trusted = world_tmp / "ca.pem"
    shutil.copy(upstream_ca[1], trusted)
    os.chmod(trusted, 0o644)
    argv = as_nobody([*SANDLOCK, "run", "--resolve", f"api.test={API}", "--http-port", str(port),
                      "--upstream-ca", str(trusted), "--http-allow", "* api.test/*",
                      "--credential", f"api=env:{SOURCE}", "--http-auth", "* api.test/v1/* bearer api",
                      "--", *curl(f"https://api.test:{port}/v1/nobody")])
    completed = subprocess.run(argv, capture_output=True, text=True, cwd=world_tmp, timeout=60,
                               env={**os.environ, SOURCE: SECRET, "XDG_DATA_HOME": str(world_tmp)})
    assert completed.returncode == 0, completed.stderr
    assert authorization(api) == {"/v1/nobody": f"Bearer {SECRET}"}
    assert SECRET not in completed.stdout + completed.stderr


def test_no_proxy_or_fork_server_inherits_the_source_variable(servers, port, upstream_ca,
                                                               tmp_path):
    """The proxy gets the secret in its configuration only; the fork server, which
    outlives the run, never holds it. Looked at from outside, as root, mid-run."""
    api, _ = servers
    command = [*SANDLOCK, "run", "--resolve", f"api.test={API}", "--http-port", str(port),
               "--upstream-ca", upstream_ca[1], "--http-allow", "* api.test/*",
               "--credential", f"api=env:{SOURCE}", "--http-auth", "* api.test/v1/* bearer api",
               "--", "sh", "-c", f"curl -sS https://api.test:{port}/v1/mid; sleep 3"]
    env = {**os.environ, SOURCE: SECRET, "XDG_DATA_HOME": str(tmp_path / "data")}
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not api.log:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        proxies = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"sandlock.proxy" not in f.read():
                        continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    proxies.append((pid, SECRET.encode() in f.read()))
            except OSError:
                continue
    finally:
        process.wait(30)
    assert proxies and not any(holds for _, holds in proxies), proxies
    assert authorization(api) == {"/v1/mid": f"Bearer {SECRET}"}
