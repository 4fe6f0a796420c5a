"""sandlock policy test: one line per request or connection, decided by the run's own code."""

from __future__ import annotations

import pytest

from conftest import sandlock


def test(*argv: str) -> tuple[int, list[str]]:
    result = sandlock("policy", "test", *argv)
    assert result.returncode != 2, result.stderr
    return result.returncode, result.stdout.splitlines()


test.__test__ = False  # a helper, not a test


GITHUB = ("--http-allow", "GET api.github.com/repos/*", "--http-deny", "* */admin/*",
          "--net-allow", "github.com:22,443")


def test_requests_and_connections():
    code, lines = test(*GITHUB, "GET https://api.github.com/repos/x/y",
                       "post https://api.github.com/repos/x/y/issues",
                       "GET https://api.github.com/admin/x", "https://example.com/",
                       "--net", "tcp://github.com:22", "--net", "github.com:2222",
                       "--net", "udp://github.com:22")
    assert code == 1
    assert lines == [
        "ALLOW GET https://api.github.com/repos/x/y (--http-allow GET api.github.com/repos/*; "
        "HTTPS inspected)",
        "DENY  POST https://api.github.com/repos/x/y/issues (no --http-allow rule matches; HTTPS "
        "inspected)",
        "DENY  GET https://api.github.com/admin/x (--http-deny * */admin/*; HTTPS inspected)",
        "DENY  GET https://example.com/ (example.com does not resolve in the sandbox: no rule "
        "names it)",
        "ALLOW tcp://github.com:22 (--net-allow github.com:22,443)",
        "DENY  tcp://github.com:2222 (no --net-allow rule)",
        "ALLOW udp://github.com:22 (--net-allow github.com:22,443)",
    ]


def test_exit_status_is_0_when_everything_is_allowed():
    assert test(*GITHUB, "GET http://api.github.com/repos/a", "--net", "github.com:22") == (0, [
        "ALLOW GET http://api.github.com/repos/a (--http-allow GET api.github.com/repos/*)",
        "ALLOW tcp://github.com:22 (--net-allow github.com:22,443)",
    ])


def test_requests_after_options_are_tested_too():
    _, lines = test("--net", "tcp://github.com:22", "GET https://api.github.com/repos/a",
                    *GITHUB, "GET https://api.github.com/user")
    assert [line.split()[:3] for line in lines] == [
        ["ALLOW", "GET", "https://api.github.com/repos/a"],
        ["DENY", "GET", "https://api.github.com/user"],
        ["ALLOW", "tcp://github.com:22", "(--net-allow"],
    ]


def test_paths_are_matched_as_the_proxy_matches_them():
    _, lines = test("--http-allow", "GET api.test/public/*", "--http-deny", "* api.test/admin*",
                    "GET http://api.test/public/../admin",
                    "GET http://api.test/public%2F..%2Fadmin",
                    "GET http://api.test/public/%7Ex?q=/admin", "GET http://api.test/public/%zz")
    assert lines == [
        "DENY  GET http://api.test/public/../admin (--http-deny * api.test/admin*)",
        "DENY  GET http://api.test/public%2F..%2Fadmin (no --http-allow rule matches)",
        "ALLOW GET http://api.test/public/%7Ex?q=/admin (--http-allow GET api.test/public/*)",
        "DENY  GET http://api.test/public/%zz (malformed path: bad %-escape)",
    ]


def test_case_encodings_and_method_overrides_are_judged_as_the_proxy_judges_them():
    _, lines = test("--http-allow", "GET,POST api.test/public/*", "--http-deny", "* api.test/Admin/*",
                    "--http-deny", "DELETE api.test",
                    "get http://api.test/ADMIN/x", "GET http://api.test/%61dmin/x",
                    "GET http://api.test/public/%252e%252e/admin",
                    "GET http://api.test/public/%c0%ae%c0%ae/admin",
                    "GET http://api.test/public/a%20b/%C3%A9/100%25",
                    "POST http://api.test/public/x?_method=DELETE",
                    "POST http://api.test/public/x?%5FMethod=put")
    assert lines == [
        "DENY  GET http://api.test/ADMIN/x (--http-deny * api.test/Admin/*)",
        "DENY  GET http://api.test/%61dmin/x (--http-deny * api.test/Admin/*)",
        "DENY  GET http://api.test/public/%252e%252e/admin (unclear path: an escape under %25 "
        "that decoding twice makes '.', '/', '\\', ';', NUL or overlong UTF-8 (%252e and the like))",
        "DENY  GET http://api.test/public/%c0%ae%c0%ae/admin (unclear path: overlong UTF-8 "
        "(%C0%AE and the like))",
        "ALLOW GET http://api.test/public/a%20b/%C3%A9/100%25 (--http-allow GET,POST "
        "api.test/public/*)",
        "DENY  POST http://api.test/public/x?_method=DELETE (--http-deny DELETE api.test (method "
        "override ?_method=DELETE))",
        "DENY  POST http://api.test/public/x?%5FMethod=put (no --http-allow rule matches (method "
        "override ?_method=PUT))",
    ]


def test_https_inspection_consequences():
    rules = ("--http-allow", "* api.openai.com", "--http-allow", "GET api.github.com/repos/*")
    _, lines = test(*rules, "--https-inspect", "off", "POST https://api.openai.com/v1/x",
                    "GET https://api.github.com/repos/x", "GET http://api.github.com/repos/x",
                    "GET https://127.0.0.1/")
    assert lines == [
        "ALLOW POST https://api.openai.com/v1/x (--http-allow * api.openai.com; HTTPS passed "
        "through, not inspected)",
        "DENY  GET https://api.github.com/repos/x (HTTPS refused at the handshake: rules for "
        "api.github.com constrain the method or path, which needs HTTPS inspection "
        "(--https-inspect is off))",
        "ALLOW GET http://api.github.com/repos/x (--http-allow GET api.github.com/repos/*)",
        "DENY  GET https://127.0.0.1/ (no --net-allow or --http-allow rule)",
    ]
    _, lines = test(*rules, "--https-inspect", "on", "POST https://api.openai.com/v1/x")
    assert lines == ["ALLOW POST https://api.openai.com/v1/x (--http-allow * api.openai.com; "
                     "HTTPS inspected)"]


def test_an_address_url_over_https_has_no_server_name():
    _, lines = test("--http-allow", "GET 127.0.0.2", "GET https://127.0.0.2/x",
                    "GET http://127.0.0.2/x")
    assert lines == [
        "DENY  GET https://127.0.0.2/x (HTTPS refused at the handshake: TLS without SNI (server "
        "name indication))",
        "ALLOW GET http://127.0.0.2/x (--http-allow GET 127.0.0.2)",
    ]


def test_connections_through_the_proxy():
    _, lines = test("--http-allow", "GET api.github.com", "--net-allow", "github.com:443",
                    "--net", "api.github.com:443", "--net", "github.com:443")
    assert lines == [
        "ALLOW tcp://api.github.com:443 (--http-allow rules for api.github.com; through sandlock's "
        "HTTP proxy: only requests the HTTP rules allow)",
        "DENY  tcp://github.com:443 (--net-allow github.com:443, but sandlock's HTTP proxy "
        "refuses every request to github.com: no --http-allow rule names it)",
    ]


def test_a_port_that_is_not_an_http_port():
    _, lines = test("--http-allow", "GET api.test", "--net-allow", "api.test:8443",
                    "GET https://api.test:8443/x")
    assert lines == ["ALLOW GET https://api.test:8443/x (--net-allow api.test:8443; port 8443 is "
                     "not an HTTP port (--http-port): no HTTP rule applies)"]


def test_dns_and_icmp():
    _, lines = test("--net-allow", "udp://10.0.0.2:53", "--net-allow", "icmp://github.com",
                    "--net", "udp://10.0.0.2:53", "--net", "udp://8.8.8.8:53",
                    "--net", "icmp://github.com", "--net", "icmp://gitlab.com")
    assert lines == [
        "ALLOW udp://10.0.0.2:53 (--net-allow udp://10.0.0.2:53)",
        "ALLOW udp://8.8.8.8:53 (port 53: DNS goes to sandlock's resolver)",
        "ALLOW icmp://github.com (--net-allow icmp://github.com)",
        "DENY  icmp://gitlab.com (gitlab.com does not resolve in the sandbox: no rule names it)",
    ]


# --- names without DNS ----------------------------------------------------------------


@pytest.mark.parametrize("cidr", ["192.0.2.0/24", "192.0.2.1", "0.0.0.0/0:443", "[2001:db8::/32]"])
def test_an_address_rule_never_matches_a_name_by_accident(cidr):
    _, lines = test("--net-allow", cidr, "--net-allow", "github.com:22",
                    "--net", "tcp://github.com:443", "--net", "tcp://github.com:22")
    assert lines == [
        "DENY  tcp://github.com:443 (no --net-allow rule; an address rule may allow the "
        "addresses github.com resolves to: test those)",
        "ALLOW tcp://github.com:22 (--net-allow github.com:22)",
    ]


def test_resolve_pins_names_as_at_run_time():
    _, lines = test("--resolve", "api.test=127.0.0.2", "--net-allow", "127.0.0.2:80",
                    "--net-allow", "other.test:80", "--resolve", "other.test=127.0.0.3",
                    "GET http://api.test/", "--net", "127.0.0.3:80", "--net", "127.0.0.4:80")
    assert lines == [
        "ALLOW GET http://api.test/ (--net-allow 127.0.0.2:80)",
        "ALLOW tcp://127.0.0.3:80 (--net-allow other.test:80)",
        "DENY  tcp://127.0.0.4:80 (no --net-allow rule)",
    ]


def test_deny_mode_says_what_it_cannot_know():
    _, lines = test("--net-deny", "10.0.0.0/8", "--net", "example.com:443",
                    "--net", "10.1.2.3:443", "--net", "[64:ff9b::10.1.2.3]:443")
    assert lines == [
        "ALLOW tcp://example.com:443 (no --net-deny rule; --net-deny rules judge the addresses "
        "example.com resolves to: test those)",
        "DENY  tcp://10.1.2.3:443 (--net-deny 10.0.0.0/8)",
        "DENY  tcp://[64:ff9b::a01:203]:443 (--net-deny 10.0.0.0/8)",  # NAT64: the IPv4 it reaches
    ]


def test_wildcard_http_hosts_resolve_on_demand():
    _, lines = test("--http-allow", "GET *.example.com", "GET https://a.example.com/",
                    "GET https://example.com/")
    assert lines == [
        "ALLOW GET https://a.example.com/ (--http-allow GET *.example.com; HTTPS inspected)",
        "DENY  GET https://example.com/ (example.com does not resolve in the sandbox: no rule "
        "names it)",
    ]


# --- policy sources and bad input ------------------------------------------------------


def test_policy_from_a_file_and_options(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[http]\nallow = ['GET api.github.com/repos/*']\n")
    result = sandlock("policy", "test", "--policy", str(path), "--http-allow",
                      "POST api.github.com/repos/*/issues",
                      "POST https://api.github.com/repos/a/b/issues")
    assert result.returncode == 0
    assert result.stdout.startswith("ALLOW POST https://api.github.com/repos/a/b/issues "
                                    "(--http-allow POST api.github.com/repos/*/issues")


@pytest.mark.parametrize("argv, message", [
    ([], "policy test: nothing to test"),
    (["GET"], "'GET': expected an http:// or https:// URL with a host"),
    (["GET ftp://x/"], "'GET ftp://x/': expected an http:// or https:// URL with a host"),
    (["G@T https://x/"], "'G@T https://x/': 'G@T' is not an HTTP method"),
    (["GET https://x:0/"], "'GET https://x:0/': port 0 is not a port number"),
    (["GET https://x y/ z"], "'GET https://x y/ z': expected '[METHOD] URL'"),
    (["--net", "github.com"], "'github.com': name one port (tcp://HOST:PORT)"),
    (["--net", "github.com:1-2"], "'github.com:1-2': name one port"),
    (["--net", "10.0.0.0/8:1"], "'10.0.0.0/8:1': name one host or address"),
    (["--net", "*:443"], "'*:443': name one host or address"),
    (["--net", "[::ffff:10.1.2.3]:443"], "is an IPv4-mapped IPv6 address: write 10.1.2.3"),
    (["--policy", "/no/such.toml", "GET http://x/"], "/no/such.toml: no such file or directory"),
    (["--net-allow", "x:0", "GET http://x/"], "--net-allow: 'x:0'"),
])
def test_bad_input_is_exit_2(argv, message):
    result = sandlock("policy", "test", *argv)
    assert result.returncode == 2, result
    assert result.stderr.startswith("sandlock: error: ") and message in result.stderr, result.stderr
    assert result.stdout == ""
