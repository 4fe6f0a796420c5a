"""--port-remap (upstream Sandlock's port_remap) and --net-deny-bind, with real confined
servers and clients on loopback: two sandboxes serving on the same virtual port at once,
each reached by its own client; the virtual port in getsockname/getpeername; the host
reaching a sandbox's server through Sandbox.ports(); a denied bind port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import sys

import pytest

from conftest import SANDLOCK, sandlock
from httpservers import free_port_on
from sandlock import Policy, PolicyError, Sandbox

PY = sys.executable

# Serves on the virtual port: its own client (in the sandbox) first, then one connection
# from the host; holds the port until its stdin ends. Says what it saw as one JSON line.
SERVER = """
import json, socket, sys
tag, port = sys.argv[1], int(sys.argv[2])
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError as e:
    print(json.dumps({"tag": tag, "bind_errno": e.errno}), flush=True); sys.exit(3)
s.listen()
client = socket.create_connection(("127.0.0.1", port), timeout=10)
served, _ = s.accept()
served.sendall(tag.encode())
got = client.recv(100).decode()
print(json.dumps({"tag": tag, "got": got, "sockname": s.getsockname()[1],
                  "client_peer": client.getpeername()[1],
                  "served_name": served.getsockname()[1]}), flush=True)
if len(sys.argv) < 4:  # (no third argument: the host connects once)
    host, _ = s.accept()
    host.sendall(tag.encode()); host.close()
sys.stdin.read()
"""


class Served:
    """SERVER started in a sandbox of ``policy``; ``said``: its JSON line."""

    def __init__(self, policy: Policy, tag: str, port: int) -> None:
        self.sandbox = Sandbox(policy, quiet=True)
        stdin_r, self._stdin = os.pipe()
        stdout_r, stdout_w = os.pipe()
        self.process = self.sandbox.start([PY, "-c", SERVER, tag, str(port)],
                                          stdin=stdin_r, stdout=stdout_w)
        os.close(stdin_r)
        os.close(stdout_w)
        with os.fdopen(stdout_r) as out:
            self.said = json.loads(out.readline() or "{}")

    def end(self) -> int:
        os.close(self._stdin)
        try:
            return self.process.wait(20)
        except Exception:  # (waiting for the host after a failed assertion)
            self.process.kill()
            return -1


def _from_host(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as host:
        return host.recv(100).decode()


def test_two_sandboxes_serve_on_the_same_virtual_port_at_once():
    port = free_port_on("127.0.0.1")
    policy = Policy(port_remap=True, net_bind=[port])
    first = Served(policy, "first", port)
    try:
        second = Served(policy, "second", port)  # while the first holds the port
        try:
            for served in (first, second):  # each client reached its own server, at V
                assert served.said == {"tag": served.said["tag"], "got": served.said["tag"],
                                       "sockname": port, "client_peer": port,
                                       "served_name": port}, served.said
            first_ports, second_ports = first.sandbox.ports(), second.sandbox.ports()
            assert first_ports == {port: port}  # free: bound where the command said
            assert set(second_ports) == {port} and second_ports[port] != port
            assert first.sandbox.pid == first.process.pid > 0
            # The host reaches each server at its real port.
            assert _from_host(second_ports[port]) == "second"
            assert _from_host(first_ports[port]) == "first"
        finally:
            assert second.end() == 0
        assert second.sandbox.pid is None and second.sandbox.ports() == {}
    finally:
        assert first.end() == 0


def test_without_port_remap_the_second_sandbox_cannot_bind_the_port():
    """Control: the same two sandboxes without --port-remap collide (EADDRINUSE)."""
    port = free_port_on("127.0.0.1")
    policy = Policy(net_bind=[port])
    first = Served(policy, "first", port)
    try:
        assert first.said["sockname"] == port
        assert first.sandbox.ports() == {}  # nothing remapped
        second = Served(policy, "second", port)
        assert second.said == {"tag": "second", "bind_errno": 98}
        assert second.end() == 3
        _from_host(port)
    finally:
        assert first.end() == 0


def _hold_then_run(argv_of, port: int) -> tuple[dict, dict]:
    """The host holds ``port``; two CLI runs of SERVER, one after the other, each
    serving its own client while the host's socket is there."""
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
    results = []
    try:
        for tag in ("a", "b"):
            with subprocess.Popen(argv_of(tag), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, cwd="/tmp") as run:
                said = json.loads(run.stdout.readline() or "{}")
                run.stdin.close()
                run.wait(30)
            results.append(said)
    finally:
        held.close()
    return results[0], results[1]


def _cli(port: int, *options: str, wrap=lambda argv: argv):
    return lambda tag: wrap([*SANDLOCK, "run", "--net-bind", str(port), *options, "--",
                             PY, "-c", SERVER, tag, str(port), "alone"])


def test_a_port_the_host_holds_is_the_sandboxs_own_virtual_port(as_nobody):
    """As an unprivileged user: the host listens on V; the sandbox binds V all the
    same, sees V in getsockname and getpeername, and its client reaches its own server."""
    port = free_port_on("127.0.0.1")
    a, b = _hold_then_run(_cli(port, "--port-remap", wrap=as_nobody), port)
    for said in (a, b):
        assert said == {"tag": said["tag"], "got": said["tag"], "sockname": port,
                        "client_peer": port, "served_name": port}, said


def test_without_port_remap_a_port_the_host_holds_cannot_be_bound(as_nobody):
    """Control, also unprivileged: EADDRINUSE, the host's listener is the port's."""
    port = free_port_on("127.0.0.1")
    a, b = _hold_then_run(_cli(port, wrap=as_nobody), port)
    assert a == {"tag": "a", "bind_errno": 98} and b == {"tag": "b", "bind_errno": 98}


def test_the_name_calls_reach_the_supervisor_only_with_port_remap():
    """getsockname costs a run without --port-remap nothing: not in its filter."""
    from sandlock.confinement._filter import seccomp_program as _seccomp_program
    from sandlock.kernel import native_arch
    from sandlock.kernel._seccomp import SECCOMP_RET_USER_NOTIF
    from test_seccomp import evaluate

    numbers = native_arch().numbers
    plain, remapped = _seccomp_program(Policy(), False), _seccomp_program(Policy(port_remap=True), False)
    for name in ("getsockname", "getpeername"):
        assert evaluate(plain, numbers[name]) != SECCOMP_RET_USER_NOTIF
        assert evaluate(remapped, numbers[name]) == SECCOMP_RET_USER_NOTIF


# --- --net-deny-bind ------------------------------------------------------------------

BINDER = """
import socket, sys
for port in map(int, sys.argv[1:]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port)); s.listen(); print(port, "bound")
    except OSError as e:
        print(port, "errno", e.errno)
"""


def test_net_deny_bind_refuses_its_ports_and_binds_the_others(tmp_path):
    denied, other = free_port_on("127.0.0.1"), free_port_on("127.0.0.1")
    audit = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(audit), "--net-deny-bind", str(denied), "--",
                      PY, "-c", BINDER, str(denied), str(other))
    assert result.stdout.splitlines() == [f"{denied} errno 13", f"{other} bound"], result.stderr
    assert result.stderr.splitlines() == [
        f"sandlock: denied bind on 127.0.0.1:{denied} (port {denied} in --net-deny-bind {denied})",
        "sandlock: 1 network operation denied"]
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["syscall"], r["destination"], r["verdict"]) for r in records
            if r.get("verdict") == "deny"] == [("bind", f"127.0.0.1:{denied}", "deny")]


def test_without_the_denylist_both_ports_bind():
    """Control: the same binds with both ports allowed."""
    denied, other = free_port_on("127.0.0.1"), free_port_on("127.0.0.1")
    result = sandlock("run", "--net-bind", f"{denied},{other}", "--",
                      PY, "-c", BINDER, str(denied), str(other))
    assert result.stdout.splitlines() == [f"{denied} bound", f"{other} bound"], result.stderr


@pytest.mark.parametrize(("options", "message"), [
    (["--net-deny-bind", "22", "--net-bind", "8080"],
     "sandlock: error: --net-deny-bind: cannot be combined with --net-bind (choose the ports "
     "to allow or the ports to deny)"),
    (["--net-deny-bind", "*", "--net-deny-bind", "22"],
     "sandlock: error: --net-deny-bind: '*' cannot be mixed with ports (it denies every port)"),
    (["--net-deny-bind", "*,22"],
     "sandlock: error: --net-deny-bind: '*,22': '*' cannot be combined with other ports in '*,22'"),
    (["--net-deny-bind", "70000"],
     "sandlock: error: --net-deny-bind: '70000': port 70000 is out of range (1 to 65535)"),
])
def test_the_denylists_bad_input_is_one_line_and_exit_2(options, message):
    result = sandlock("run", *options, "--", "true")
    assert (result.returncode, result.stderr.splitlines()) == (2, [message])


def test_the_policy_checks_upstreams_rules():
    with pytest.raises(PolicyError, match="cannot be combined with --net-bind"):
        Policy(net_deny_bind=[22], net_allow_bind=[8080])
    with pytest.raises(PolicyError, match="cannot be mixed with ports"):
        Policy(net_deny_bind=["*", 22])
    with pytest.raises(PolicyError, match="give one of them"):
        Policy(net_bind=[80], net_allow_bind=[81])
    with pytest.raises(PolicyError, match="expected true or false"):
        Policy(port_remap="yes")
    assert Policy(net_deny_bind=["*"]).net_deny_bind == ("*",)


def test_net_allow_bind_is_net_bind():
    policy = Policy(net_allow_bind=[8080, "9000-9001"])
    assert policy.net_bind == policy.net_allow_bind == ("8080", "9000-9001")
    assert policy == Policy(net_bind=[8080, "9000-9001"])
    assert policy.replace(net_allow_bind=[1]).net_bind == ("1",)


# --- a virtual port's real one, reached only while it is the sandbox's ------------------

# Listens on the virtual port, closes it when told, then connects to it when told.
RELEASER = """
import socket, sys
port = int(sys.argv[1])
s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen()
print("listening", flush=True); sys.stdin.readline()
s.close()
print("closed", flush=True); sys.stdin.readline()
try:
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    print("reached", c.recv(100).decode(), flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
"""


def _answer_one(listeners: dict[str, socket.socket]) -> None:
    """Answer the first connection on any of ``listeners`` with that listener's name."""
    import select

    ready, _, _ = select.select(list(listeners.values()), [], [], 15)
    for name, listener in listeners.items():
        if listener in ready:
            conn, _ = listener.accept()
            conn.sendall(name.encode())
            conn.close()
            return


def _after_release(*options: str) -> tuple[str, dict[int, int]]:
    """The host holds V; the sandbox binds V (remapped to R), closes it; a host service
    then takes R; the sandbox connects to V. What it reached, and its ports while it
    listened."""
    port = free_port_on("127.0.0.1")
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
    sandbox = Sandbox(Policy(port_remap=True, net_bind=[port], **dict(options)), quiet=True)
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    process = sandbox.start([PY, "-c", RELEASER, str(port)], stdin=stdin_r, stdout=stdout_w)
    os.close(stdin_r)
    os.close(stdout_w)
    taker = socket.socket()
    try:
        with os.fdopen(stdout_r) as out, os.fdopen(stdin_w, "w") as to_it:
            assert out.readline() == "listening\n"
            ports = sandbox.ports()
            to_it.write("close\n")
            to_it.flush()
            assert out.readline() == "closed\n"
            taker.bind(("127.0.0.1", ports[port]))  # the host's service, on R now
            taker.listen()
            to_it.write("connect\n")
            to_it.flush()
            answering = threading.Thread(target=_answer_one, args=({"held": held, "taker": taker},))
            answering.start()
            said = out.readline().strip()
            if said.startswith("errno"):  # nothing connected: let the thread go
                socket.create_connection(("127.0.0.1", port)).close()
            answering.join(20)
        assert process.wait(20) == 0
    finally:
        held.close()
        taker.close()
    return said, ports


def test_a_released_virtual_port_never_leads_to_the_hosts_service_on_its_real_one():
    """Allowed to reach 127.0.0.1:V, the sandbox reaches the host's V (what the rule
    says), never the host service that took V's former real port R."""
    said, ports = _after_release(("net_allow", ["tcp://127.0.0.1:*"]))
    assert said == "reached held", (said, ports)


def test_without_a_rule_the_released_virtual_port_is_denied():
    """The same without a rule for 127.0.0.1: refused (the host's V is not the sandbox's)."""
    said, ports = _after_release()
    assert said == "errno 13", (said, ports)


# A second bind to a virtual port the sandbox holds: the kernel's own answer; once the
# first socket is closed, the port is the sandbox's again. On both families.
REBINDER = """
import socket, sys
port, family, host = int(sys.argv[1]), getattr(socket, sys.argv[2]), sys.argv[3]
first = socket.socket(family); first.bind((host, port)); first.listen()
second = socket.socket(family)
try:
    second.bind((host, port)); print("second bound")
except OSError as e:
    print("second errno", e.errno)
first.close()
third = socket.socket(family); third.bind((host, port)); third.listen()
client = socket.create_connection((host, port), timeout=10)
print("third", third.getsockname()[1] == port, client.getpeername()[1] == port)
"""


@pytest.mark.parametrize(("family", "host"), [("AF_INET", "127.0.0.1"), ("AF_INET6", "::1")])
def test_rebinding_a_held_virtual_port_is_answered_as_the_kernel_would(family, host):
    port = free_port_on("127.0.0.1")
    held = socket.socket(getattr(socket, family))
    held.bind((host, port))  # the host's: the sandbox's port is remapped
    held.listen()
    try:
        result = sandlock("run", "--port-remap", "--net-bind", str(port), "--",
                          PY, "-c", REBINDER, str(port), family, host)
    finally:
        held.close()
    assert result.stdout.splitlines() == ["second errno 98", "third True True"], result.stderr


PRIVILEGED = """
import socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", 80)); s.listen()
    client = socket.create_connection(("127.0.0.1", 80), timeout=10)
    print("bound", s.getsockname()[1], client.getpeername()[1])
except OSError as e:
    print("errno", e.errno)
"""


def test_an_unprivileged_users_sandbox_serves_on_its_own_port_80(as_nobody):
    """Port 80 is privileged for nobody: with --port-remap the sandbox has its port 80
    all the same (on a free real port), and its client reaches it there."""
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--port-remap", "--net-bind", "80",
                                       "--", PY, "-c", PRIVILEGED]),
                            capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert result.stdout.strip() == "bound 80 80", result.stderr


def test_without_port_remap_port_80_is_refused_to_an_unprivileged_user(as_nobody):
    """Control: the kernel's EACCES, as without sandlock."""
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--net-bind", "80",
                                       "--", PY, "-c", PRIVILEGED]),
                            capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert result.stdout.strip() == "errno 13", result.stderr


def test_a_long_lived_sandboxs_ports_and_pid():
    """In a block: ports() holds what the processes exec'd in it bound; pid is its
    resident's while the block runs."""
    port = free_port_on("127.0.0.1")
    held = socket.socket()
    held.bind(("127.0.0.1", port))
    held.listen()
    read_end, write_end = os.pipe()
    try:
        with Sandbox(Policy(port_remap=True, net_bind=[port]), quiet=True) as sandbox:
            assert sandbox.pid and sandbox.ports() == {}
            server = sandbox.exec([PY, "-c", SERVER, "block", str(port)], stdout=write_end)
            os.close(write_end)
            with os.fdopen(read_end) as out:
                said = json.loads(out.readline())
            real = sandbox.ports()[port]
            assert real != port and said["sockname"] == port
            assert _from_host(real) == "block"
            server.kill()
        assert sandbox.pid is None
    finally:
        held.close()


def test_learn_keeps_a_bind_denylist(tmp_path):
    """learn observes with every other port open, and writes the denylist back as given."""
    out = tmp_path / "learned.toml"
    result = sandlock("learn", "-o", str(out), "--net-deny-bind", "22", "--", PY, "-c",
                      "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()")
    assert result.returncode == 0, result.stderr
    assert 'deny_bind = ["22"]' in out.read_text() and "allow_bind" not in out.read_text()
