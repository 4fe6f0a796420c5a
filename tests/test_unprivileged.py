"""Key cases again as an ordinary user (nobody:nogroup): users are not root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import SANDLOCK, host_pid
from test_cli import wait_gone


def run_as(as_nobody, *args: str, cwd=None, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(as_nobody([*SANDLOCK, *args]), capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def test_runs_unprivileged_and_reports_identity(as_nobody):
    result = run_as(as_nobody, "run", "--", "id", "-u")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("65534" if os.getuid() == 0 else str(os.getuid()))


def test_exit_statuses_unprivileged(as_nobody):
    assert run_as(as_nobody, "run", "--", "sh", "-c", "exit 7").returncode == 7
    assert run_as(as_nobody, "run", "--", "sh", "-c", "kill -TERM $$").returncode == 143
    assert run_as(as_nobody, "run", "--", "no-such-command-x").returncode == 127


def test_allowlist_unprivileged(as_nobody, world_tmp):
    inside, outside = world_tmp / "in", world_tmp / "out"
    for d in (inside, outside):
        d.mkdir()
        d.chmod(0o777)
    ok = run_as(as_nobody, "run", "-r", "/", "-w", str(inside), "--", "sh", "-c",
                f"echo x > {inside}/f && echo y > {outside}/f")
    assert (inside / "f").exists()
    assert not (outside / "f").exists()
    assert "Permission denied" in ok.stderr


def test_default_workspace_credentials_unprivileged(as_nobody, unscratched):
    home = unscratched / "home"  # outside /tmp, which the default workspace may write
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("secret")
    (home / "notes.txt").write_text("notes")
    (home / "proj").mkdir()
    for path in (home, home / ".ssh", home / "proj"):
        path.chmod(0o777)
    for path in (home / ".ssh" / "id_rsa", home / "notes.txt"):
        path.chmod(0o666)
    env = {**os.environ, "HOME": str(home)}
    result = run_as(as_nobody, "run", "--cwd", str(home / "proj"), "--", "sh", "-c",
                    "cat ~/.ssh/id_rsa; cat ~/notes.txt; echo done > out; cat out", env=env)
    assert result.stdout == "done\n"  # the workspace is writable, nothing of $HOME readable
    assert result.stderr.count("Permission denied") == 2
    refused = run_as(as_nobody, "run", "--cwd", str(home), "--", "true", env=env)
    assert refused.returncode == 2 and "your home directory" in refused.stderr


def test_syscall_filter_unprivileged(as_nobody):
    code = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(ctypes.c_long(425), ctypes.c_long(8), ctypes.c_long(0)),"
        " os.strerror(ctypes.get_errno()))"
    )
    result = run_as(as_nobody, "run", "--", sys.executable, "-c", code)
    assert result.stdout.strip() == "-1 Operation not permitted"


def test_dies_with_sandlock_unprivileged(as_nobody):
    with subprocess.Popen(as_nobody([*SANDLOCK, "run", "--", "sh", "-c",
                                     "setsid sleep 60 & echo $!; wait"]),
                          stdout=subprocess.PIPE, text=True) as proc:
        pid = host_pid(int(proc.stdout.readline()), proc.pid)
        # setpriv execs, so proc.pid is sandlock itself
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert wait_gone(pid)


def test_selftest_unprivileged(as_nobody):
    result = run_as(as_nobody, "selftest", cwd="/tmp", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_network_policy_unprivileged(as_nobody):
    """The supervisor's on-behalf path as an ordinary user: pidfd_getfd, process_vm_readv
    and the listener handoff all need same-user access, without any capability."""
    from netattack_helpers import TcpServer

    script = (
        "import socket, sys\n"
        "for host in ('pinned.test', '127.0.0.3'):\n"
        "    try:\n"
        "        socket.create_connection((host, int(sys.argv[1])), timeout=5); print('ok')\n"
        "    except OSError as e: print(e.errno)\n"
    )
    with TcpServer("127.0.0.2") as server:
        result = run_as(as_nobody, "run", "--resolve", "pinned.test=127.0.0.2",
                        "--net-allow", f"pinned.test:{server.port}", "--", sys.executable, "-c",
                        script, str(server.port), cwd="/tmp")
        assert result.stdout.split() == ["ok", "13"], result.stderr
        assert server.accepted == 1


def test_http_rules_unprivileged(as_nobody):
    """The proxy process, the route handoff and the 403 path as an ordinary user."""
    from httpservers import Upstream

    with Upstream("127.0.0.2") as server:
        url = f"http://api.test:{server.port}"
        result = run_as(as_nobody, "run", "--resolve", "api.test=127.0.0.2", "--https-inspect", "off",
                        "--http-port", str(server.port), "--http-allow", "GET api.test/ok/*", "--",
                        "sh", "-c", f"curl -sS {url}/ok/1; curl -sS -o /dev/null -w '%{{http_code}}' {url}/no",
                        cwd="/tmp")
        assert result.stdout == "127.0.0.2 GET /ok/1\n403", result.stderr
        assert server.paths() == ["/ok/1"]


def test_learn_then_run_unprivileged(as_nobody, world_tmp):
    """Learn mode's observed run (proxy with inspection, audit log) as an ordinary user."""
    from httpservers import Upstream

    with Upstream("127.0.0.2") as server:
        url = f"http://api.test:{server.port}"
        policy = world_tmp / "learned.toml"
        common = ["--resolve", "api.test=127.0.0.2", "--http-port", str(server.port)]
        learned = run_as(as_nobody, "learn", "-o", str(policy), *common, "--", "curl", "-sS",
                         f"{url}/a/b", cwd=str(world_tmp))
        assert learned.returncode == 0, learned.stderr
        again = run_as(as_nobody, "run", "--policy", str(policy), "--", "sh", "-c",
                       f"curl -sS {url}/a/b; curl -sS -o /dev/null -w '%{{http_code}}' {url}/c",
                       cwd=str(world_tmp))
        assert again.stdout == "127.0.0.2 GET /a/b\n403", again.stderr
