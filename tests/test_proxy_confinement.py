"""The HTTP proxy confines itself (Landlock, seccomp, no new privileges): what a hole
in mitmproxy would give is little. Checked on the real proxy process, and by running
the same confinement in a process that then tries what an exploit would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import SANDLOCK
from proxies import MODES, connecting, proxy_of, warm_forkserver

PROBE = r"""
import json, os, socket, subprocess, sys
from sandlock.proxy._confine import confine_proxy
from sandlock.proxy._protocol import ProxyConfig
secret, run_dir, allowed_port, other_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
confine_proxy(ProxyConfig(allow=(), deny=(), inspect="off", run_dir=run_dir, ports=(allowed_port,)))
def attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return type(exc).__name__
def connect(port):
    with socket.socket() as s:
        s.connect(("127.0.0.1", port))
out = {
    "read home": attempt(lambda: open(secret).read()),
    "write tmp": attempt(lambda: open("/tmp/proxy-was-here", "w")),
    "write run dir": attempt(lambda: open(os.path.join(run_dir, "bundle.pem"), "w").close()),
    "exec": attempt(lambda: subprocess.run(["/bin/true"])),
    "import later": attempt(lambda: __import__("email.mime.text")),
    "connect other port": attempt(lambda: connect(other_port)),
    "connect its port": attempt(lambda: connect(allowed_port)),
}
print(json.dumps(out))
"""


def _listening_port() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_the_confined_proxy_cannot_reach_what_it_does_not_need(tmp_path):
    secret = Path.home() / f".sandlock-proxy-test-{uuid.uuid4().hex[:8]}"
    secret.write_text("token")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    allowed, other = _listening_port(), _listening_port()
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(secret), str(run_dir),
             str(allowed.getsockname()[1]), str(other.getsockname()[1])],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    finally:
        secret.unlink()
        allowed.close()
        other.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "read home": "PermissionError", "write tmp": "PermissionError", "write run dir": "ok",
        "exec": "PermissionError", "import later": "ok",
        "connect other port": "PermissionError", "connect its port": "ok",
    }


@pytest.mark.parametrize("mode", MODES)
def test_the_real_proxy_process_runs_confined(tmp_path, mode):
    env = {**os.environ, **MODES[mode]}
    if mode == "forked":
        warm_forkserver()
    process = subprocess.Popen([*SANDLOCK, "run", "-q", "--http-allow", "GET example.test/*",
                                "--resolve", "example.test=127.0.0.1", "--",
                                *connecting("time.sleep(30)")], cwd=tmp_path, env=env)
    try:
        status = None
        for _ in range(200):
            status = _status(proxy_of(process.pid))
            if status and "Seccomp:\t2" in status:
                break
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    assert status is not None and "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status


def _status(pid: int | None) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return f.read()
    except (OSError, TypeError):
        return None
