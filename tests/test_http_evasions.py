"""Evading HTTP rules through the real proxy: the path's case and escapes, the README's
own rule pair, method-override headers and parameters, double-encoded and overlong
dot segments, a method in lower case. Each attack is made by a confined client against
a real upstream on loopback, with a control in which the same requests reach the
upstream (rules that allow them, or no sandbox), so the test sees what gets through.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SANDLOCK
from httpservers import Upstream
from test_http import API, run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def api():
    """The upstream (api.test), on a free port: the runs' HTTP port."""
    with Upstream(API, name="api") as server:
        yield server

# One request per connection (a 403 closes it); prints "STATUS X-Sandlock-Denied".
# http.client sends the method and path exactly as given.
CLIENT = r"""
import http.client, json, sys
host, port = sys.argv[1], int(sys.argv[2])
for method, path, headers in json.loads(sys.argv[3]):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    r.read()
    print(r.status, r.getheader("X-Sandlock-Denied") or "")
    c.close()
"""

Request = tuple[str, str, dict[str, str]]


def get(path: str) -> Request:
    return ("GET", path, {})


def sent(api: Upstream, *rules: str, requests: list[Request]) -> list[str]:
    """Make ``requests`` from a confined client under ``rules``: one status line each."""
    port = api.port
    result = run(port, *rules, cmd=[sys.executable, "-c", CLIENT, "api.test", str(port),
                                    json.dumps(requests)])
    lines = result.stdout.splitlines()
    assert len(lines) == len(requests), result
    return lines


def sent_directly(api: Upstream, requests: list[Request]) -> list[str]:
    """The same requests without sandlock (the control: what a server gets)."""
    result = subprocess.run([sys.executable, "-c", CLIENT, API, str(api.port), json.dumps(requests)],
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.splitlines()


# --- the path's case and escapes ---------------------------------------------------------

SPELLINGS = ["/Admin/x", "/admin/x", "/ADMIN/x", "/%61dmin/x", "/%41DMIN/x", "/public/../aDmIn/x"]


def test_a_deny_rule_catches_every_case_and_spelling_of_its_path(api):
    lines = sent(api, "--http-allow", "* api.test", "--http-deny", "GET */Admin/*",
                 requests=[get(path) for path in SPELLINGS] + [get("/public/x")])
    assert lines == ["403 --http-deny GET */Admin/*"] * len(SPELLINGS) + ["200 "]
    assert api.paths() == ["/public/x"]


def test_control_every_spelling_reaches_the_upstream_as_sent(api):
    lines = sent(api, "--http-allow", "* api.test", requests=[get(path) for path in SPELLINGS])
    assert lines == ["200 "] * len(SPELLINGS)
    assert api.paths() == SPELLINGS  # forwarded verbatim: the proxy judged, not rewrote


# --- the README's example ------------------------------------------------------------------


def readme_rules() -> list[str]:
    """The options of the README's allow/deny example, api.openai.com played by api.test."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if "--http-deny" in line and "api.openai.com" in line)
    assert line in (ROOT / "docs" / "http.md").read_text()  # the same example in both
    argv = shlex.split(line)
    return [arg.replace("api.openai.com", "api.test") for arg in argv[argv.index("run") + 1:argv.index("--")]]


README_REQUESTS = [get("/v1/models"), ("POST", "/v1/chat/completions", {}),
                   get("/v1/organization/admin_api_keys"), ("DELETE", "/v1/organization/users/u1", {}),
                   get("/v1/Organization/users"), get("/v1/%6frganization/projects"),
                   get("/v1/models/../organization/invites"), get("/v2/models")]


def test_the_readme_pair_does_what_the_readme_says(api):
    rules = readme_rules()
    deny = rules[rules.index("--http-deny") + 1]
    lines = sent(api, *rules, requests=README_REQUESTS)
    assert lines == ["200 ", "200 "] + [f"403 --http-deny {deny}"] * 5 + [
        "403 no --http-allow rule matches"]
    assert api.paths() == ["/v1/models", "/v1/chat/completions"]


def test_control_the_readme_allow_alone_lets_the_admin_requests_through(api):
    rules = readme_rules()
    lines = sent(api, *rules[:rules.index("--http-deny")], requests=README_REQUESTS)
    assert lines == ["200 "] * 7 + ["403 no --http-allow rule matches"]
    assert len(api.log) == 7


# --- method overrides ------------------------------------------------------------------------

OVERRIDES = [("POST", "/x", {"X-HTTP-Method-Override": "DELETE"}),
             ("POST", "/x", {"X-HTTP-Method": "DELETE"}),
             ("POST", "/x", {"X-Method-Override": "delete"}),
             ("POST", "/x?_method=DELETE", {}), ("POST", "/x?a=1&%5Fmethod=delete", {}),
             ("POST", "/x", {"X-HTTP-Method-Override": "GET"}), get("/y")]


def test_a_method_override_cannot_carry_a_denied_method(api):
    lines = sent(api, "--http-allow", "GET,POST api.test", "--http-deny", "DELETE api.test",
                 requests=OVERRIDES)
    assert lines == [
        "403 --http-deny DELETE api.test (method override X-HTTP-Method-Override: DELETE)",
        "403 --http-deny DELETE api.test (method override X-HTTP-Method: DELETE)",
        "403 --http-deny DELETE api.test (method override X-Method-Override: DELETE)",
        "403 --http-deny DELETE api.test (method override ?_method=DELETE)",
        "403 --http-deny DELETE api.test (method override ?_method=DELETE)",
        "200 ", "200 "]
    assert [(method, path) for method, path, _, _ in api.log] == [("POST", "/x"), ("GET", "/y")]
    assert ("X-HTTP-Method-Override", "GET") in api.headers_log[0]  # allowed: kept as sent


def test_control_overrides_reach_the_upstream_when_allowed(api):
    lines = sent(api, "--http-allow", "* api.test", requests=OVERRIDES)
    assert lines == ["200 "] * len(OVERRIDES)
    assert api.paths()[3:5] == ["/x?_method=DELETE", "/x?a=1&%5Fmethod=delete"]
    assert ("X-HTTP-Method-Override", "DELETE") in api.headers_log[0]
    assert ("X-Method-Override", "delete") in api.headers_log[2]


# --- double encoding, overlong UTF-8 -----------------------------------------------------------

HIDDEN_DOTS = ["/public/%252e%252e/admin", "/public/%c0%ae%c0%ae/admin",
               "/public/%25%32%65%25%32%65/admin", "/public/%252F..%252Fadmin",
               "/public/%e0%80%ae%e0%80%ae/admin", "/public/%25c0%25ae%25c0%25ae/admin"]
ORDINARY = ["/public/a%20b", "/public/caf%C3%A9", "/public/group%2Fname", "/public/100%25",
            "/public/%E2%82%AC%21", "/public/50%25off"]


def test_double_encoded_and_overlong_dots_are_refused(api):
    lines = sent(api, "--http-allow", "GET api.test/public/*",
                 requests=[get(path) for path in HIDDEN_DOTS + ORDINARY])
    denied, passed = lines[:len(HIDDEN_DOTS)], lines[len(HIDDEN_DOTS):]
    assert all(line.startswith("403 unclear path: ") for line in denied), denied
    assert "overlong UTF-8" in denied[1] and "decoding twice" in denied[0]
    assert passed == ["200 "] * len(ORDINARY)
    assert api.paths() == ORDINARY  # ordinary escapes pass, verbatim


def test_control_unconfined_the_upstream_gets_the_hidden_dots_verbatim(api):
    assert sent_directly(api, [get(path) for path in HIDDEN_DOTS]) == ["200 "] * len(HIDDEN_DOTS)
    assert api.paths() == HIDDEN_DOTS


# --- the method's case -----------------------------------------------------------------------


def test_the_method_is_forwarded_as_the_rules_judged_it(api):
    lines = sent(api, "--http-allow", "GET api.test", "--http-allow", "POST api.test/p",
                 requests=[get("/a"), ("get", "/b", {}), ("GeT", "/c", {}), ("post", "/p", {}),
                           ("pOsT", "/q", {})])
    assert lines == ["200 "] * 4 + ["403 no --http-allow rule matches"]
    assert [(method, path) for method, path, _, _ in api.log] == [
        ("GET", "/a"), ("GET", "/b"), ("GET", "/c"), ("POST", "/p")]


def test_control_unconfined_the_upstream_gets_the_method_as_written(api):
    # http.server has no do_get: 'get' is an unknown method to it (501), not GET.
    assert sent_directly(api, [("get", "/b", {}), get("/a")]) == ["501 ", "200 "]
    assert api.paths() == ["/a"]


# --- as an ordinary user ---------------------------------------------------------------------


def test_key_evasions_unprivileged(as_nobody, api):
    requests = [get("/%61dmin/x"), ("POST", "/x", {"X-HTTP-Method-Override": "DELETE"}),
                get("/public/%252e%252e/admin"), ("get", "/public/ok", {})]
    port = api.port
    argv = as_nobody([*SANDLOCK, "run", "--resolve", f"api.test={API}", "--http-port", str(port),
                      "--https-inspect", "off", "--http-allow", "GET,POST api.test",
                      "--http-deny", "* api.test/Admin/*", "--http-deny", "DELETE api.test", "--",
                      sys.executable, "-c", CLIENT, "api.test", str(port), json.dumps(requests)])
    result = subprocess.run(argv, capture_output=True, text=True, cwd="/tmp", timeout=60, check=False)
    statuses = [line.split()[0] for line in result.stdout.splitlines()]
    assert statuses == ["403", "403", "403", "200"], result
    assert [(method, path) for method, path, _, _ in api.log] == [("GET", "/public/ok")]
