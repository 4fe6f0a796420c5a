"""zkit's default: a default-workspace run that allows no network gets a network
namespace of its own (only `lo`), with no option given; explicit choices win, and a
run that names anything of the host's network (or -r/-w paths, or --allow-ipc) keeps
the host's namespace (docs/usage.md "A private loopback").

Real confined processes against real servers on the host's loopback; every attack
has its control (the same client where the host's namespace is kept, or where a rule
allows it), so that a broken client cannot make a test pass.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest

from conftest import SANDLOCK, sandlock, users
from test_private_loopback import SERVER_AND_CLIENT, _connect, _Recording

PY = sys.executable
# What -r/-w runs (upstream Sandlock's style) need to run these commands at all.
EXPLICIT_PATHS = ["-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/etc", "-r", "/proc", "-r", sys.prefix,
                  "-r", os.path.dirname(os.path.dirname(os.path.realpath(PY)))]


@pytest.fixture
def host_server():
    server = _Recording()
    yield server
    server.close()


@pytest.fixture
def workspace(tmp_path):
    """The default workspace's directory: one nobody can use (tmp_path's parents are 0700)."""
    path = f"/tmp/sandlock-privnet-{uuid.uuid4().hex}"
    os.mkdir(path)
    os.chmod(path, 0o777)
    yield path
    os.rmdir(path)


def _run(argv: list[str], cwd: str, wrap=None) -> subprocess.CompletedProcess:
    argv = [*SANDLOCK, "run", *argv]
    return subprocess.run(wrap(argv) if wrap else argv, capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def _namespace(options: list[str], cwd: str, wrap=None) -> str:
    """The network namespace a run's command is in (its /proc/self/ns/net link)."""
    result = _run([*options, "--", PY, "-c", "import os; print(os.readlink('/proc/self/ns/net'))"],
                  cwd, wrap)
    assert result.returncode == 0 and result.stdout.startswith("net:["), result.stdout + result.stderr
    return result.stdout.strip()


HOST = os.readlink("/proc/self/ns/net")


# --- the default: a private network ---------------------------------------------------


@users
def test_a_server_and_a_client_inside_a_default_run_talk_on_loopback(host_server, workspace,
                                                                      as_nobody_or_self):
    """No option: a server and a client inside meet on 127.0.0.1, on the very port a
    host service holds (no --net-bind needed), and the host's service hears nothing."""
    port = str(host_server.port)
    client_server = ["sh", "-c", f'{PY} -c "$1" {port}', "sh", SERVER_AND_CLIENT]
    result = _run(["--", *client_server], workspace, as_nobody_or_self)
    assert result.stdout.strip() == "inside", result.stdout + result.stderr
    assert host_server.reached == 0
    # Control: with -r paths (the host's namespace, as before), the bind is denied.
    result = _run([*EXPLICIT_PATHS, "--", *client_server], workspace, as_nobody_or_self)
    assert "denied bind on 127.0.0.1:" + port in result.stderr, result.stdout + result.stderr


@users
def test_a_host_loopback_service_is_out_of_reach_and_the_user_is_told(host_server, workspace,
                                                                      as_nobody_or_self):
    """The attack: a default run connects to a host service on loopback. Refused by the
    empty namespace, never reached; sandlock says why (once per destination)."""
    client = _connect("127.0.0.1", "localhost", port=host_server.port)
    result = _run(["--", *client], workspace, as_nobody_or_self)
    assert result.stdout.split() == ["127.0.0.1", "ECONNREFUSED", "localhost", "ECONNREFUSED"], \
        result.stdout + result.stderr
    assert host_server.reached == 0
    assert f"connect to 127.0.0.1:{host_server.port} refused: nothing listens there in the " \
           "sandbox's private network" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # Controls: where the host's namespace is kept, the same connect is sandlock's
    # denial (EACCES and its notice); with a rule naming it, the service is reached.
    for options in ([*EXPLICIT_PATHS], ["--no-net-private-loopback"]):
        result = _run([*options, "--", *_connect("127.0.0.1", port=host_server.port)],
                      workspace, as_nobody_or_self)
        assert result.stdout.split() == ["127.0.0.1", "EACCES"], (options, result.stdout, result.stderr)
        assert f"denied connect to 127.0.0.1:{host_server.port}" in result.stderr, result.stderr
    result = _run(["--net-allow", f"127.0.0.1:{host_server.port}", "--",
                   *_connect("127.0.0.1", port=host_server.port)], workspace, as_nobody_or_self)
    assert result.stdout.split() == ["127.0.0.1", "host"], result.stdout + result.stderr
    assert host_server.reached == 1


def test_a_non_blocking_connect_refused_is_said_too(host_server, workspace):
    """asyncio's way (EINPROGRESS, then the error on the socket): said all the same,
    and the command still reads its ECONNREFUSED (sandlock never consumes it)."""
    code = ("import socket, select, sys\n"
            "s = socket.socket(); s.setblocking(False)\n"
            "print(s.connect_ex(('127.0.0.1', int(sys.argv[1]))))\n"
            "select.select([], [s], [], 5)\n"
            "print(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))\n")
    result = _run(["--", PY, "-c", code, str(host_server.port)], workspace)
    assert result.stdout.split() == ["115", "111"], result.stdout + result.stderr  # EINPROGRESS, ECONNREFUSED
    assert f"connect to 127.0.0.1:{host_server.port} refused" in result.stderr, result.stderr
    assert host_server.reached == 0


ABSTRACT_CONNECT = """
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(b"\\0" + sys.argv[1].encode())
    print("connected", s.recv(10).decode())
except OSError as e:
    print(errno.errorcode.get(e.errno, e))
"""


def test_a_host_abstract_socket_is_out_of_reach(workspace):
    """A host's abstract unix socket: refused in a default run (the IPC scope: EPERM).
    --allow-ipc grants the host's abstract sockets, so it keeps the host's namespace
    (control: reached); with the private network asked for as well, the namespace
    hides them (ECONNREFUSED: the name does not exist there)."""
    name = f"sandlock-privnet-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(b"\0" + name.encode())
    server.listen(8)
    server.settimeout(0.1)
    reached = []

    def accept_all():
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            reached.append(1)
            conn.sendall(b"host")
            conn.close()

    import threading

    threading.Thread(target=accept_all, daemon=True).start()
    try:
        client = ["--", PY, "-c", ABSTRACT_CONNECT, name]
        assert _run(client, workspace).stdout.strip() == "EPERM"
        result = _run(["--allow-ipc", "--net-private-loopback", *client], workspace)
        assert result.stdout.strip() == "ECONNREFUSED", result.stdout + result.stderr
        assert reached == []
        result = _run(["--allow-ipc", *client], workspace)
        assert result.stdout.strip() == "connected host", result.stdout + result.stderr
        assert reached == [1]
    finally:
        server.close()


# --- who gets it --------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    [], ["--unix-allow", "/run/nonexistent.sock"], ["--mode", "read-only"],
    ["--net-private-loopback"], ["--resolve", "example.test=192.0.2.1"],
])
def test_these_runs_have_a_network_namespace_of_their_own(options, workspace):
    assert _namespace(options, workspace) != HOST


@pytest.mark.parametrize("options", [
    ["--net-allow", "192.0.2.1:443"], ["--net-allow-host", "192.0.2.1"], ["--net-connect", "443"],
    ["--net-deny", "192.0.2.1"], ["--net-bind", "8080"], ["--net-deny-bind", "22"],
    ["--port-remap"], ["--http-allow", "GET example.test/*"], EXPLICIT_PATHS,
    ["-w", "."] + EXPLICIT_PATHS, ["--allow-ipc"], ["--disable", "ABSTRACT_UNIX_SOCKET_SCOPE"],
    ["--no-net-private-loopback"],
])
def test_runs_that_name_the_hosts_network_or_paths_keep_the_hosts(options, workspace):
    """Any network rule, -r/-w paths, host IPC, or the explicit no: the host's namespace
    (today's behaviour, nothing more to pay)."""
    assert _namespace(options, workspace) == HOST


@users
def test_explicit_false_is_honoured_from_a_policy_file_and_the_api(workspace, as_nobody_or_self):
    policy = os.path.join(workspace, "policy.toml")
    with open(policy, "w") as file:
        file.write("[network]\nprivate_loopback = false\n")
    os.chmod(policy, 0o644)
    try:
        assert _namespace(["--policy", policy], workspace, as_nobody_or_self) == HOST
        # (an explicit -- option on top wins over the file)
        assert _namespace(["--policy", policy, "--net-private-loopback"], workspace,
                          as_nobody_or_self) != HOST
    finally:
        os.unlink(policy)


API = """
import os, sys
from sandlock import Policy, Sandbox
for value in (None, False, True):
    result = Sandbox(Policy(net_private_loopback=value)).run(
        [sys.executable, "-c", "import os; print(os.readlink('/proc/self/ns/net'))"])
    print(result.stdout.decode().strip() == os.readlink("/proc/self/ns/net"))
"""


def test_the_api_default_and_false(workspace):
    result = subprocess.run([PY, "-c", API], capture_output=True, text=True, cwd=workspace,
                            timeout=60)
    assert result.stdout.split() == ["False", "True", "False"], result.stdout + result.stderr


# --- what the user sees ---------------------------------------------------------------


def test_print_policy_and_dry_run_say_so(workspace):
    printed = sandlock("run", "--print-policy", "--", "true", cwd=workspace)
    assert "a private network" in printed.stdout, printed.stdout + printed.stderr
    printed = sandlock("run", "--print-policy", "--net-allow", "192.0.2.1:443", "--", "true",
                       cwd=workspace)
    assert "private network" not in printed.stdout
    printed = sandlock("run", "--print-policy", "--no-net-private-loopback", "--", "true",
                       cwd=workspace)
    assert "private_loopback = false" in printed.stdout and "a private network" not in printed.stdout


def test_policy_test_says_a_loopback_destination_is_the_sandboxs_own(workspace):
    said = sandlock("policy", "test", "--net", "127.0.0.1:5432", cwd=workspace)
    assert said.returncode == 1 and "a private network: the sandbox's own loopback" in said.stdout
    said = sandlock("policy", "test", "--no-net-private-loopback", "--net", "127.0.0.1:5432",
                    cwd=workspace)
    assert said.returncode == 1 and "private network" not in said.stdout, said.stdout
