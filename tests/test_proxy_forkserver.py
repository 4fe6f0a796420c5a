"""The user's proxy fork server (proxy/_forkserver.py): runs after the first get a
proxy forked from it, mitmproxy already imported; it serves only its own user holding
its token, which no sandbox can read; it goes away by itself."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import SANDLOCK
from httpservers import Upstream, free_port_on
from proxies import forkserver_pid, proxy_of, warm_forkserver

API = "127.0.0.2"


@pytest.fixture(scope="module")
def port():
    return free_port_on(API)


@pytest.fixture
def api(port):
    with Upstream(API, port, name="api") as server:
        yield server


@pytest.fixture
def runtime():
    """A runtime directory of its own (outside every test's workspace, like conftest's),
    so that the fork server under test is this test's alone."""
    directory = tempfile.mkdtemp(prefix=".sandlock-test-fs-", dir=os.path.expanduser("~"))
    env = {**os.environ, "XDG_RUNTIME_DIR": directory}
    yield env, os.path.join(directory, "sandlock", "proxy")
    shutil.rmtree(directory, ignore_errors=True)  # its server sees its token go, and exits


def run_options(port: int) -> list[str]:
    return ["--resolve", f"api.test={API}", "--http-port", str(port), "--https-inspect", "off",
            "--http-allow", "GET api.test/*"]


def curl(port: int, path: str = "/x") -> list[str]:
    return ["curl", "-sS", "--max-time", "10", f"http://api.test:{port}{path}"]


def start_server(directory: str, *args: str, env: dict | None = None) -> int:
    subprocess.run([sys.executable, "-m", "sandlock.proxy._forkserver", directory, *args],
                   check=True, env=env, timeout=30)  # returns at once: the server detaches
    deadline = time.monotonic() + 60
    while (pid := forkserver_pid(directory)) is None or not os.path.exists(
            os.path.join(directory, "proxy.token")):
        assert time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.05)
    return pid


def wait_gone(pid: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_command_that_makes_no_request_starts_no_proxy(runtime, api, port, tmp_path):
    """The proxy starts at the first connection steered to it: a run whose command makes
    none forks nothing and starts no fork server (docs/http.md)."""
    env, directory = runtime
    ready = tmp_path / "ready"
    process = subprocess.Popen([*SANDLOCK, "run", *run_options(port), "--", "sh", "-c",
                                f"touch {ready}; read line; {' '.join(curl(port))}; sleep 30"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
        time.sleep(0.5)  # a proxy started with the command would be there by now
        before = proxy_of(process.pid, directory)
        server_before = os.path.exists(os.path.join(directory, "proxy.token"))
        process.stdin.write("go\n")
        process.stdin.flush()
        answer = process.stdout.readline()
        after = proxy_of(process.pid, directory)
    finally:
        process.kill()
        process.wait()
    assert before is None and not server_before
    assert answer == "api GET /x\n" and after is not None


def test_later_runs_get_their_proxy_from_the_fork_server(runtime, api, port, tmp_path):
    env, directory = runtime
    first = subprocess.run([*SANDLOCK, "run", *run_options(port), "--", *curl(port, "/first")],
                           capture_output=True, text=True, env=env, timeout=60)
    assert first.stdout == "api GET /first\n", first.stderr  # a fresh proxy, meanwhile
    server = warm_forkserver(directory, env)
    out = tmp_path / "out"
    process = subprocess.Popen([*SANDLOCK, "run", *run_options(port), "--", "sh", "-c",
                                f"{' '.join(curl(port, '/second'))} > {out}; sleep 30"],
                               env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, "no answer through the forked proxy"
            time.sleep(0.05)
        proxy = proxy_of(process.pid, directory)
        with open(f"/proc/{proxy}/status") as f:
            status = f.read()
    finally:
        process.kill()
        process.wait()
    assert out.read_text() == "api GET /second\n"
    assert f"PPid:\t{server}\n" in status  # forked by the server, not started by sandlock
    assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status  # and confined all the same
    assert [entry[1] for entry in api.log] == ["/first", "/second"]


def test_the_fork_server_serves_only_requests_with_its_token(runtime):
    env, directory = runtime
    server = start_server(directory, env=env)
    read_end, write_end = os.pipe()
    try:
        for request in (b"{}", json.dumps({"token": "0" * 64, "env": {}}).encode(), b"\xff"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as channel:
                channel.settimeout(10)
                channel.connect(os.path.join(directory, "proxy.sock"))
                socket.send_fds(channel, [request], [2, read_end, write_end])
                assert channel.recv(64) == b""  # hung up on, nothing forked
    finally:
        os.close(read_end)
        os.close(write_end)
    with open(f"/proc/{server}/task/{server}/children") as f:
        assert f.read().split() == []


def test_sandboxed_commands_cannot_read_the_token(runtime, tmp_path):
    env, directory = runtime
    start_server(directory, env=env)
    token = os.path.join(directory, "proxy.token")
    # Even with the whole runtime directory granted: sandlock's part of it is denied.
    result = subprocess.run([*SANDLOCK, "run", "-r", env["XDG_RUNTIME_DIR"], "--", "cat", token],
                            capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert result.returncode != 0 and "Permission denied" in result.stderr
    assert result.stdout == ""


def test_the_fork_server_goes_away_when_idle_or_told_to(runtime):
    env, directory = runtime
    idle = start_server(directory, "0.5", env=env)
    assert wait_gone(idle)
    assert not os.path.exists(os.path.join(directory, "proxy.token"))
    told = start_server(directory, env=env)
    os.unlink(os.path.join(directory, "proxy.token"))
    assert wait_gone(told)


def test_runs_can_keep_to_fresh_proxies(runtime, api, port):
    env, directory = runtime
    env = {**env, "SANDLOCK_PROXY_FORKSERVER": "0"}
    result = subprocess.run([*SANDLOCK, "run", *run_options(port), "--", *curl(port)],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.stdout == "api GET /x\n", result.stderr
    time.sleep(1)
    assert forkserver_pid(directory) is None and not os.path.exists(directory)


def test_a_changed_module_makes_the_server_stale(tmp_path):
    from sandlock.proxy._forkserver import _unchanged

    module = tmp_path / "module.py"
    module.write_text("x = 1\n")
    loaded = {str(module): module.stat().st_mtime_ns}
    assert _unchanged(loaded)
    os.utime(module, ns=(0, module.stat().st_mtime_ns + 1))
    assert not _unchanged(loaded)
    module.unlink()
    assert not _unchanged(loaded)


def test_an_unprivileged_user_gets_forked_proxies_too(as_nobody, api, port):
    runtime = tempfile.mkdtemp(prefix=".sandlock-nobody-runtime-", dir="/var/tmp")
    directory = os.path.join(runtime, "sandlock", "proxy")
    try:
        if os.getuid() == 0:
            os.chown(runtime, 65534, 65534)
        env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "HOME": runtime}
        script = f"{' '.join(curl(port))}; sleep 30"
        argv = as_nobody([*SANDLOCK, "run", *run_options(port), "--", "sh", "-c", script])
        first = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env,
                                 cwd=tempfile.gettempdir())
        try:
            assert first.stdout.readline() == "api GET /x\n"
        finally:
            first.kill()
            first.wait()
        deadline = time.monotonic() + 60
        token = os.path.join(directory, "proxy.token")  # written once it serves
        while (server := forkserver_pid(directory)) is None or not os.path.exists(token):
            assert time.monotonic() < deadline, "no fork server for the unprivileged user"
            time.sleep(0.1)
        second = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env,
                                 cwd=tempfile.gettempdir())
        try:
            assert second.stdout.readline() == "api GET /x\n"
            with open(f"/proc/{proxy_of(second.pid, directory)}/status") as f:
                status = f.read()
        finally:
            second.kill()
            second.wait()
        assert f"PPid:\t{server}\n" in status and "Uid:\t65534" in status
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
