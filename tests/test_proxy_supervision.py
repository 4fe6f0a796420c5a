"""The HTTP proxy under supervision: killed mid-run, it is reported and replaced, and
the run goes on under its rules (HTTP refused meanwhile, never let through)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import trustme

from conftest import SANDLOCK
from httpservers import Upstream, free_port_on
from proxies import MODES, proxy_of, warm_forkserver

API = "127.0.0.2"
MAX_RESTARTS = 3

CLIENT = r"""
import sys, time, urllib.request
def get(path):
    try:
        with urllib.request.urlopen(f"{sys.argv[2]}://api.test:{sys.argv[1]}{path}",
                                    timeout=5) as r:
            return str(r.status)
    except Exception as exc:
        return getattr(exc, "code", None) and str(exc.code) or type(exc).__name__
print("first", get("/allowed/1"), flush=True)
sys.stdin.readline()  # the proxy is killed meanwhile
outcomes = []
for _ in range(40):
    outcomes.append(get("/allowed/2"))
    if outcomes[-1] == "200":
        break
    time.sleep(0.1)
print("then", outcomes[0] != "200", outcomes[-1], get("/denied"), flush=True)
"""


@pytest.fixture(scope="module")
def port():
    return free_port_on(API)


def _proxy_of(sandlock_pid: int) -> int:
    pid = proxy_of(sandlock_pid)
    if pid is None:
        raise LookupError("no proxy process")
    return pid


def _run_and_kill_the_proxy(port: int, audit: str, kills: int, tls: tuple | None = None,
                            data_home: str = "", mode: str = "forked") -> tuple[str, str]:
    """``tls``: (trustme CA, its PEM file) for an HTTPS upstream, inspected with an
    ephemeral sandbox CA (``data_home`` holds no persistent one)."""
    scheme, options = ("https", ["--upstream-ca", tls[1]]) if tls else ("http", [
        "--https-inspect", "off"])
    argv = [*SANDLOCK, "run", "--resolve", f"api.test={API}", "--http-port", str(port),
            *options, "--http-allow", "GET api.test/allowed/*",
            "--audit", audit, "--", "python3", "-c", CLIENT, str(port), scheme]
    env = {**os.environ, **MODES[mode], **({"XDG_DATA_HOME": data_home} if data_home else {})}
    if mode == "forked":
        warm_forkserver()
    server = Upstream(API, port, name="api", tls=tls[0], tls_names=("api.test",)) if tls \
        else Upstream(API, port, name="api")
    with server:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
        try:
            first = process.stdout.readline()
            for kill in range(kills):
                proxy = _proxy_of(process.pid)
                os.kill(proxy, signal.SIGKILL)
                if kill == MAX_RESTARTS:
                    break  # no replacement this time
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:  # until its replacement runs
                    try:
                        if _proxy_of(process.pid) != proxy:
                            break
                    except LookupError:
                        pass
                    time.sleep(0.05)
            out, err = process.communicate("go\n", timeout=60)
        finally:
            process.kill()
    return first + out, err


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_proxy_is_reported_and_replaced(port, tmp_path, mode):
    audit = tmp_path / "audit.jsonl"
    out, err = _run_and_kill_the_proxy(port, str(audit), kills=1, mode=mode)
    assert out.split() == ["first", "200", "then", "False", "200", "403"], err
    assert "sandlock: the HTTP proxy was killed by SIGKILL; restarting it" in err
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert {"syscall": "proxy", "verdict": "restart"}.items() <= \
        next(r for r in records if r.get("syscall") == "proxy").items()


def test_a_proxy_that_keeps_dying_stays_down_and_http_stays_refused(port, tmp_path):
    audit = tmp_path / "audit.jsonl"
    out, err = _run_and_kill_the_proxy(port, str(audit), kills=MAX_RESTARTS + 1)
    words = out.split()
    assert words[:2] == ["first", "200"] and words[2:4] == ["then", "True"], err
    assert words[4] != "200" and words[5] != "200"  # refused, never let through
    assert "4 times in 60 s: HTTP stays refused for the rest of the run" in err
    verdicts = [json.loads(line)["verdict"] for line in audit.read_text().splitlines()
                if json.loads(line).get("syscall") == "proxy"]
    assert verdicts == ["restart"] * MAX_RESTARTS + ["down"]


def test_a_replaced_proxy_serves_the_ca_the_command_trusts(port, tmp_path):
    """HTTPS inspection with the run's ephemeral CA: the replacement must present
    certificates from the same CA (handed back to sandlock, never written to disk)."""
    ca = trustme.CA()
    ca_file = tmp_path / "upstream-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    out, err = _run_and_kill_the_proxy(port, str(tmp_path / "audit.jsonl"), kills=1,
                                       tls=(ca, str(ca_file)), data_home=str(tmp_path / "data"))
    assert out.split() == ["first", "200", "then", "False", "200", "403"], err


def test_what_a_compromised_proxy_sends_is_skipped_not_fatal():
    """sandlock parses its proxy's messages as JSON (plain values only); anything else,
    nesting past the interpreter's limit included, is refused as malformed."""
    from sandlock.proxy._protocol import from_proxy, from_sandlock, to_proxy

    for data in (b"[" * 200_000, b"{}", b'{"kind": 1}', b"\xff", to_proxy("audit")):
        with pytest.raises(ValueError):
            from_proxy(data)
    assert from_proxy(b'{"kind": "audit", "x": [1]}') == {"kind": "audit", "x": [1]}
    assert from_sandlock(to_proxy("route", peer=("127.0.0.1", 5))) == {
        "kind": "route", "peer": ("127.0.0.1", 5)}
    with pytest.raises(ValueError):
        from_sandlock(b"\x00garbage")
