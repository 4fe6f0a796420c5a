"""Credentials added by the proxy (``--http-auth``, proxy/_credentials): the rules, and
the real proxy process setting the header on allowed requests that match, over TLS.

The proxy is driven the way sandlock drives it (proxy/_launcher): a ProxyProcess fed a
ProxyConfig over its control channel, a route sent before each connection, then a
real client (curl, Python's http.client and urllib) connecting from the routed
address. The upstreams are loopback servers (trustme certificates) that record the
headers they received.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from httpservers import Upstream, free_port_on

from sandlock.proxy import HttpRules, header_value, parse_auth_rule
from sandlock.proxy._launcher import ProxyProcess
from sandlock.proxy._protocol import ProxyConfig, Route, config_from, config_message, from_sandlock
from sandlock.proxy._rules import INSPECT, PASS, REFUSE

API = "127.0.0.2"
SECRET, KEY, LOGIN = "s3cret", "k3y-value", "user:pa:ss"
AUTH = (
    "GET,POST api.test/v1/* bearer openai",
    "* api.test/key/* header:X-Api-Key apikey",
    "* api.test/basic/* basic login",
    "* api.test/missing/* bearer nothere",
    "* api.test/bad/* header:X-Token bad",
)
BAD = "tok\r\nX-Injected: 1"  # would end the header and add another
SECRETS = {"openai": SECRET, "apikey": KEY, "login": LOGIN, "bad": BAD}


# --- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("POST api.openai.com/* bearer openai",
     ("POST api.openai.com/* bearer openai", "bearer", "Authorization", "openai")),
    ("  get,post  API.test/v1/*   Bearer  my.key-1_x ",
     ("get,post API.test/v1/* bearer my.key-1_x", "bearer", "Authorization", "my.key-1_x")),
    ("* *.example.com basic gh", ("* *.example.com basic gh", "basic", "Authorization", "gh")),
    ("GET api.test/x Header:X-Api-Key k", ("GET api.test/x header:X-Api-Key k", "header", "X-Api-Key", "k")),
    ("GET api.test header:Authorization raw", ("GET api.test header:Authorization raw", "header",
                                               "Authorization", "raw")),
])
def test_parse_auth_rule(text, expected):
    rule = parse_auth_rule(text)
    assert (rule.text, rule.scheme, rule.header, rule.credential) == expected
    assert rule.match.host == rule.text.split()[1].split("/")[0].lower()


@pytest.mark.parametrize("text,message", [
    ("POST api.openai.com/* bearer", "expected 'METHODS HOST[/PATH] SCHEME NAME', e.g."),
    ("POST api.openai.com/* bearer a b", "expected 'METHODS HOST[/PATH] SCHEME NAME'"),
    ("POST api.openai.com/* token a", "'token': unknown scheme"),
    ("POST api.openai.com/* header: a", "'': not a valid header name"),
    ("POST api.openai.com/* header:X(y) a", "'X(y)': not a valid header name"),
    ("POST api.openai.com/* header::authority a", "pseudo-headers cannot carry a credential"),
    ("POST api.openai.com/* header:Host a", "'Host': this header cannot carry a credential"),
    ("POST api.openai.com/* header:content-length a", "this header cannot carry a credential"),
    ("POST api.openai.com/* header:Transfer-Encoding a", "this header cannot carry a credential"),
    ("POST api.openai.com/* header:CONNECTION a", "this header cannot carry a credential"),
    ("POST api.openai.com/* bearer a/b", "'a/b': a credential name is letters, digits"),
    ("POST api.openai.com:443/* bearer a", "no port here"),
    ("G/ET api.test bearer a", "not an HTTP method"),
])
def test_parse_auth_rule_errors(text, message):
    with pytest.raises(ValueError) as error:
        parse_auth_rule(text)
    assert message in str(error.value)


def test_header_values_and_what_cannot_be_sent():
    bearer, basic, header = (parse_auth_rule(f"* a.test {scheme} name")
                             for scheme in ("bearer", "basic", "header:X-Key"))
    assert header_value(bearer, "tok") == "Bearer tok"
    assert header_value(header, "tok en") == "tok en"
    assert header_value(basic, "user:pa:ss") == "Basic " + base64.b64encode(b"user:pa:ss").decode()
    assert header_value(basic, "üser:p\r\n") == "Basic " + base64.b64encode("üser:p\r\n".encode()).decode()
    for rule, secret in [(basic, "nocolon"), (bearer, ""), (bearer, "a\r\nX-Evil: 1"),
                         (header, "a\nb"), (bearer, "tok\0"), (bearer, " tok"), (header, "é")]:
        with pytest.raises(ValueError) as error:
            header_value(rule, secret)
        assert "'name'" in str(error.value)
        assert not secret or secret not in str(error.value)  # the secret is never shown


def test_auth_for_matches_every_reading_of_the_path():
    rules = HttpRules.parse(("* api.test/*",), (), AUTH)
    assert rules.auth_for("get", "API.test.", "/v1/chat?x=1").credential == "openai"
    assert rules.auth_for("DELETE", "api.test", "/v1/chat") is None  # method not covered
    assert rules.auth_for("GET", "other.test", "/v1/chat") is None
    assert rules.auth_for("GET", "api.test", "/v2/chat") is None
    assert rules.auth_for("GET", "api.test", "/v2/../v1/chat").credential == "openai"
    assert rules.auth_for("GET", "api.test", "/v1/../v2/chat") is None
    # One reading is /v1/x, another (%2F taken as '/') climbs out of /v1/: no credential.
    assert rules.auth_for("GET", "api.test", "/v1/x%2F..%2F..%2Fv2") is None
    assert rules.auth_for("GET", "api.test", "/v1/..;/v2") is None  # Tomcat's reading
    assert rules.auth_for("GET", "api.test", "/v1/%zz") is None  # malformed
    assert rules.auth_for("GET", "api.test", "/key/a").header == "X-Api-Key"
    assert HttpRules.parse(("* api.test/*",), ()).auth_for("GET", "api.test", "/v1/") is None


def test_hosts_with_credentials_are_never_passed_through():
    rules = HttpRules.parse(("* api.test", "* other.test"), (), ("GET api.test/v1/* bearer a",))
    assert not rules.passes_through("api.test") and rules.passes_through("other.test")
    assert rules.needs_inspection("auto") and not rules.needs_inspection("off")
    assert not HttpRules.parse(("* api.test",), ()).needs_inspection("auto")
    assert rules.tls_decision("api.test", "auto", True).action == INSPECT
    assert rules.tls_decision("other.test", "auto", True).action == PASS
    assert rules.tls_decision("api.test", "off", False).action == REFUSE  # never uninspected
    wildcard = HttpRules.parse(("* *.example.com",), (), ("* *.example.com basic b",))
    assert not wildcard.passes_through("a.example.com")
    # An auth rule allows nothing by itself.
    only_auth = HttpRules.parse(("GET api.test/public/*",), (), ("* api.test/v1/* bearer a",))
    assert not only_auth.decide("GET", "api.test", "/v1/x").allowed


def test_the_config_carries_secrets_but_never_shows_them():
    config = ProxyConfig(allow=("* api.test",), deny=(), inspect="auto", auth=AUTH,
                         secrets=dict(SECRETS), auth_plain=True)
    assert SECRET not in repr(config) and "s3cret" not in str(config)
    assert config_from(from_sandlock(config_message(config))) == config
    with pytest.raises(ValueError) as error:
        config_from({"config": {**_raw(config), "secrets": {"openai": 1234567}}})
    assert "1234567" not in str(error.value)
    with pytest.raises(ValueError):
        config_from({"config": {**_raw(config), "auth": "GET api.test bearer a"}})


def _raw(config: ProxyConfig) -> dict:
    return from_sandlock(config_message(config))["config"]


# --- the real proxy ----------------------------------------------------------------------


class Proxied:
    """A real proxy process, and connections steered to it as sandlock steers them."""

    def __init__(self, config: ProxyConfig) -> None:
        self.events: list[dict] = []
        self.proxy = ProxyProcess(config, self.events.append)

    def connect(self, destination: tuple[str, int]) -> socket.socket:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.proxy.route(Route(sock.getsockname()[:2], destination, ("api.test",), pid=4242))
        sock.connect(self.proxy.addresses[4])
        return sock

    def route_port(self, destination: tuple[str, int]) -> int:
        """A free local port, routed: for a client that binds it itself (curl --local-port)."""
        port = free_port_on("127.0.0.1")
        self.proxy.route(Route(("127.0.0.1", port), destination, ("api.test",), pid=4242))
        return port

    def close(self) -> None:
        self.proxy.close()


@pytest.fixture(scope="module")
def sandbox_ca(tmp_path_factory):
    from sandlock.ca import ephemeral_ca

    authority = ephemeral_ca(["api.test"])
    path = tmp_path_factory.mktemp("sandbox") / "ca.pem"
    path.write_bytes(authority.cert_pem)
    return authority, str(path)


@pytest.fixture(scope="module")
def ports():
    return free_port_on(API), free_port_on(API)


@pytest.fixture(scope="module")
def upstreams(ports, upstream_ca):
    with Upstream(API, ports[0], name="tls", tls=upstream_ca[0], tls_names=("api.test",)) as tls, \
            Upstream(API, ports[1], name="plain") as plain:
        yield tls, plain


def _config(ports, upstream_ca, sandbox_ca, **changes) -> ProxyConfig:
    authority = sandbox_ca[0]
    values = dict(allow=("* api.test/*",), deny=("* api.test/v1/forbidden",), inspect="auto",
                  upstream_ca=(upstream_ca[1],), audit_allowed=True,
                  ca={"source": "inherited", "pem": authority.mitmproxy_pem().decode()},
                  ports=ports, auth=AUTH, secrets=dict(SECRETS))
    return ProxyConfig(**{**values, **changes})


@pytest.fixture(scope="module")
def proxied(ports, upstream_ca, sandbox_ca, upstreams):
    proxied = Proxied(_config(ports, upstream_ca, sandbox_ca))
    yield proxied
    proxied.close()


@pytest.fixture
def tls_upstream(upstreams):
    upstreams[0].log.clear()
    upstreams[0].headers_log.clear()
    return upstreams[0]


class SteeredHTTPS(http.client.HTTPSConnection):
    """http.client over a connection steered to the proxy, TLS to 'api.test'."""

    def __init__(self, proxied: Proxied, port: int, sandbox_ca: str) -> None:
        super().__init__("api.test", port, context=ssl.create_default_context(cafile=sandbox_ca))
        self._proxied = proxied
        self.connections = 0

    def connect(self) -> None:
        self.connections += 1
        sock = self._proxied.connect((API, self.port))
        self.sock = self._context.wrap_socket(sock, server_hostname="api.test")


def _received(upstream: Upstream, name: str) -> list[list[str]]:
    """Per request, every value of header ``name`` the upstream got (any case)."""
    return [[v for k, v in headers if k.lower() == name.lower()] for headers in upstream.headers_log]


def _get(connection: http.client.HTTPConnection, path: str, headers: list | tuple = ()) -> tuple[int, str]:
    connection.putrequest("GET", path)
    for name, value in headers:
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    return response.status, response.read().decode()


def test_one_keep_alive_connection_gets_the_credential_only_where_a_rule_says(
        proxied, tls_upstream, ports, sandbox_ca):
    connection = SteeredHTTPS(proxied, ports[0], sandbox_ca[1])
    sent = [("Authorization", "Bearer child"), ("authorization", "Basic Y2hpbGQ6eA==")]
    statuses = [_get(connection, "/v1/chat", sent)[0], _get(connection, "/v2/other", sent)[0],
                _get(connection, "/v1/again")[0], _get(connection, "/public")[0]]
    connection.close()
    assert statuses == [200] * 4 and connection.connections == 1
    assert tls_upstream.paths() == ["/v1/chat", "/v2/other", "/v1/again", "/public"]
    assert _received(tls_upstream, "Authorization") == [
        [f"Bearer {SECRET}"],  # replaced, not added to
        ["Bearer child", "Basic Y2hpbGQ6eA=="],  # not a credential path: the command's own
        [f"Bearer {SECRET}"],  # the same connection again: each request on its own
        [],
    ]


def test_custom_header_and_basic(proxied, tls_upstream, ports, sandbox_ca):
    connection = SteeredHTTPS(proxied, ports[0], sandbox_ca[1])
    assert _get(connection, "/key/a", [("x-api-key", "mine"), ("X-API-KEY", "too")])[0] == 200
    assert _get(connection, "/basic/a")[0] == 200
    connection.close()
    assert _received(tls_upstream, "X-Api-Key") == [[KEY], []]
    basic = "Basic " + base64.b64encode(LOGIN.encode()).decode()
    assert _received(tls_upstream, "Authorization") == [[], [basic]]


def test_a_credential_missing_or_unsendable_fails_closed(proxied, tls_upstream, ports, sandbox_ca):
    connection = SteeredHTTPS(proxied, ports[0], sandbox_ca[1])
    missing = _get(connection, "/missing/a")
    connection = SteeredHTTPS(proxied, ports[0], sandbox_ca[1])  # a denial closes the connection
    bad = _get(connection, "/bad/a")
    connection.close()
    assert missing[0] == 403 and "credential 'nothere' is missing" in missing[1]
    assert bad[0] == 403 and "credential 'bad': only printable ASCII" in bad[1]
    assert "tok" not in bad[1] and "Injected" not in bad[1]
    assert tls_upstream.paths() == []


def test_urllib(proxied, tls_upstream, ports, sandbox_ca):
    class Handler(urllib.request.HTTPSHandler):
        def https_open(self, request):
            return self.do_open(lambda host, **kw: SteeredHTTPS(proxied, ports[0], sandbox_ca[1]), request)

    opener = urllib.request.build_opener(Handler())
    request = urllib.request.Request(f"https://api.test:{ports[0]}/v1/u", method="POST", data=b"{}",
                                     headers={"Authorization": "Bearer child"})
    with opener.open(request, timeout=10) as response:
        assert response.read() == b"tls POST /v1/u\n"
    with pytest.raises(urllib.error.HTTPError) as denied:
        opener.open(f"https://api.test:{ports[0]}/v1/forbidden", timeout=10)
    assert denied.value.code == 403  # the deny rules still decide first
    assert _received(tls_upstream, "Authorization") == [[f"Bearer {SECRET}"]]


@pytest.mark.parametrize("version", ["--http1.1", "--http2"])
def test_curl_on_one_connection(proxied, tls_upstream, ports, sandbox_ca, version):
    base = f"https://api.test:{ports[0]}"
    local = proxied.route_port((API, ports[0]))
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "10", version, "-w", "%{http_version}\n", "--cacert", sandbox_ca[1],
         "--local-port", str(local), "--connect-to", f"api.test:{ports[0]}:127.0.0.1:"
         f"{proxied.proxy.addresses[4][1]}", "-H", "Authorization: Bearer child",
         f"{base}/v1/a", f"{base}/other", f"{base}/key/x"],
        capture_output=True, text=True, timeout=30)
    shown = "2" if version == "--http2" else "1.1"  # to the proxy; mitmproxy speaks HTTP/1.1 upstream
    assert done.stdout.split("\n") == ["tls GET /v1/a", shown, "tls GET /other", shown,
                                       "tls GET /key/x", shown, ""], done.stderr
    assert _received(tls_upstream, "Authorization") == [[f"Bearer {SECRET}"], ["Bearer child"],
                                                       ["Bearer child"]]
    assert _received(tls_upstream, "X-Api-Key") == [[], [], [KEY]]


def test_plain_http_is_refused_a_credential(proxied, upstreams, ports):
    plain = upstreams[1]
    plain.log.clear()
    connection = http.client.HTTPConnection("api.test", ports[1])
    connection.sock = proxied.connect((API, ports[1]))
    status, body = _get(connection, "/v1/chat")
    assert status == 403
    assert ("--http-auth GET,POST api.test/v1/* bearer openai: a credential is sent over TLS "
            "only (plain HTTP refused)") in body and SECRET not in body
    connection = http.client.HTTPConnection("api.test", ports[1])
    connection.sock = proxied.connect((API, ports[1]))
    assert _get(connection, "/public")[0] == 200  # no credential: plain HTTP as before
    assert plain.paths() == ["/public"]


def test_auth_plain_lets_a_credential_go_over_plain_http(ports, upstream_ca, sandbox_ca, upstreams):
    plain = upstreams[1]
    plain.headers_log.clear()
    proxied = Proxied(_config(ports, upstream_ca, sandbox_ca, auth_plain=True))
    try:
        connection = http.client.HTTPConnection("api.test", ports[1])
        connection.sock = proxied.connect((API, ports[1]))
        assert _get(connection, "/v1/chat")[0] == 200
    finally:
        proxied.close()
    assert _received(plain, "Authorization") == [[f"Bearer {SECRET}"]]


def test_reports_name_the_credential_never_the_secret(proxied, ports, sandbox_ca, tls_upstream):
    before = len(proxied.events)
    connection = SteeredHTTPS(proxied, ports[0], sandbox_ca[1])
    _get(connection, "/v1/report")
    _get(connection, "/nothing")
    connection.close()
    _wait_for(lambda: len(proxied.events) >= before + 2)
    events = [e for e in proxied.events[before:] if e.get("path") in ("/v1/report", "/nothing")]
    assert [(e["path"], e["allowed"], e.get("credential")) for e in events] == [
        ("/v1/report", True, "openai"), ("/nothing", True, None)]
    everything = repr(proxied.events)
    for secret in (SECRET, KEY, LOGIN, base64.b64encode(LOGIN.encode()).decode(), "tok\\r"):
        assert secret not in everything


def _wait_for(condition, timeout: float = 5.0) -> None:
    """The reports come on the proxy's reader thread."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
