"""Learn mode's derivation (audit records -> rules): pure, checked on records as the
audit log writes them. The end-to-end learn -> run round trip is in test_policy_learn."""

from __future__ import annotations

import pytest

from sandlock._learn import learn, looks_secret


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
    assert learned.net_allow_bind == ("8080",)


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
])
def test_looks_secret(segment, secret):
    assert looks_secret(segment) is secret


def test_denied_and_tls_records_are_not_learned():
    learned = learn([http("GET", "api.test", "/x", verdict="deny"),
                     {"protocol": "http", "method": "TLS", "hostname": "api.test", "path": "",
                      "verdict": "allow"}])
    assert learned.http_allow == ()
