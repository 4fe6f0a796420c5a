"""Abstract and unnamed unix socket addresses: what the sandbox may reach, and how.

Every attack runs in a real confined process against real listeners of the host (this
process) and fails if a listener saw anything; its control shows the same code reaching
them where it should (with --allow-ipc, or unconfined). Abstract names are unique per
test (uuid), and only this machine's network namespace is touched.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import time
import uuid

import pytest

from conftest import PYTHON, users
from netattack_helpers import UnixServer, bare, confined, sandlock_argv, snippet, wait_until


def unique_name() -> bytes:
    return b"sl-" + uuid.uuid4().hex[:16].encode()  # short: a forged line must fit in sun_path


def quiet(server: UnixServer) -> bool:
    """Nothing reached ``server`` (given the time to arrive)."""
    time.sleep(0.1)
    return server.accepted == 0 and server.datagrams == []


# --- a host's abstract socket, named by a forged /proc/net/unix line --------------------

FORGED_LINES = r"""
def claimed(target, inodes):
    # /proc/net/unix, read the way sandlock once read it: does a line say that one of
    # ``inodes`` holds @target? (The kernel prints names raw, NUL as '@'.)
    wanted = b"@" + target.replace(b"\0", b"@")
    with open("/proc/net/unix", "rb") as table:
        lines = table.read().splitlines()[1:]
    return any(len(f) == 8 and f[7] == wanted and int(f[6]) in inodes
               for f in (line.split(None, 7) for line in lines))

forgers = {}
for target in (NAME, NAME + b"-dgram"):
    for i in range(16):
        # A name holding a newline: the table shows a line of its choosing, saying this
        # socket (bound inside the sandbox: its own) holds @target.
        s = socket.socket(socket.AF_UNIX)
        inode = os.fstat(s.fileno()).st_ino
        s.bind(b"\0x%d\n0000000000000000: 00000002 00000000 00010000 0001 01 %5d @%s"
               % (len(forgers), inode, target))
        forgers[inode] = s
# And the NUL/'@' ambiguity: the table shows this name and the host's "...-nul\0" alike.
alike = socket.socket(socket.AF_UNIX)
alike.bind(b"\0" + NAME + b"-nul@")
alike.listen()
s, n = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
report(forged=[claimed(t, forgers) for t in (NAME, NAME + b"-dgram")],
       connect=attempt(s.connect, b"\0" + NAME),
       sendto=attempt(d.sendto, b"hello", b"\0" + NAME + b"-dgram"),
       alike=attempt(n.connect, b"\0" + NAME + b"-nul\0"),
       notice=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME + b"\nsandlock: forged"))
"""


@users
def test_a_forged_proc_net_unix_line_does_not_open_a_host_abstract_socket(as_nobody_or_self):
    name = unique_name()
    with UnixServer(b"\0" + name) as stream, \
            UnixServer(b"\0" + name + b"-dgram", socket.SOCK_DGRAM) as dgram, \
            UnixServer(b"\0" + name + b"-nul\0") as alike:
        run = confined(FORGED_LINES, wrap=as_nobody_or_self, NAME=name)
        got = run.report
        # The forgery is real: the table says the sandbox's sockets hold the host's names.
        assert got.pop("forged") == [True, True]
        assert got == {"connect": "EPERM", "sendto": "EPERM", "alike": "EPERM", "notice": "EPERM"}
        assert quiet(stream) and quiet(dgram) and quiet(alike)
        # Each denial is one line: a name's newline is shown escaped, never a line of its own.
        assert "\\nsandlock: forged" in run.stderr
        assert not any(line.startswith("sandlock: forged") for line in run.stderr.splitlines())

        # Control: the same program with --allow-ipc reaches all three.
        opened = confined(FORGED_LINES, "--allow-ipc", wrap=as_nobody_or_self, NAME=name).report
        assert opened.pop("forged") == [True, True]
        assert opened == {"connect": "ok", "sendto": "ok", "alike": "ok", "notice": "ECONNREFUSED"}
        assert wait_until(lambda: stream.accepted == 1 and alike.accepted == 1
                          and dgram.datagrams == [b"hello"], 5)


# --- the sandbox's own abstract sockets ----------------------------------------------

OWN_SOCKETS = r"""
results = {}
# Exact names: any byte, a newline and NULs included.
for label, name in (("plain", NAME), ("odd", NAME + b"\n\0@x\0")):
    server = socket.socket(socket.AF_UNIX)
    server.bind(b"\0" + name)
    server.listen()
    results[label] = attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + name)
# Connections kept open: their sockets carry the listener's name as well (in
# /proc/net/unix too, where one could come first), yet the name is still the listener's.
server = socket.socket(socket.AF_UNIX)
server.bind(b"\0" + NAME + b"-many")
server.listen()
kept = []
for _ in range(3):
    client = socket.socket(socket.AF_UNIX)
    results.setdefault("repeated", []).append(attempt(client.connect, b"\0" + NAME + b"-many"))
    kept += [client, server.accept()[0]]
# A datagram server answers its clients at the names the kernel chose for them: by
# bind() with the family alone (autobind), or on their first send (SO_PASSCRED).
server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
server.bind(b"\0" + NAME + b"-dgram")
explicit = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
explicit.bind(b"")
implicit = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
implicit.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
for label, client in (("explicit", explicit), ("implicit", implicit)):
    client.settimeout(5)
    client.sendto(label.encode(), b"\0" + NAME + b"-dgram")
    data, peer = server.recvfrom(64)
    results[label] = attempt(server.sendto, b"re:" + data, peer)
    if results[label] == "ok":
        results[label] = client.recv(64).decode()
report(**results)
"""


@users
def test_the_sandbox_reaches_its_own_abstract_sockets(as_nobody_or_self):
    got = confined(OWN_SOCKETS, wrap=as_nobody_or_self, NAME=unique_name()).report
    assert got == {"plain": "ok", "odd": "ok", "repeated": ["ok", "ok", "ok"], "explicit": "re:explicit",
                   "implicit": "re:implicit"}
    assert bare(OWN_SOCKETS, NAME=unique_name()).report == got  # as natively


CLOSED_THEN_TAKEN = r"""
own = socket.socket(socket.AF_UNIX)
own.bind(b"\0" + NAME)
own.listen()
first = attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME)
own.close()
print("closed", flush=True)
sys.stdin.readline()  # the host has taken the name
report(own=first, after=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME))
"""


def closed_then_taken(name: bytes, *options: str, wrap=None) -> tuple[dict, int]:
    """The sandbox binds @name, closes it, and a host listener takes the name: what the
    sandbox's connect to @name then got, and how many connections the host accepted."""
    argv = sandlock_argv(CLOSED_THEN_TAKEN, *options, NAME=name)
    with subprocess.Popen(wrap(argv) if wrap else argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, cwd="/tmp") as run:
        assert run.stdout.readline().strip() == "closed"
        with UnixServer(b"\0" + name) as host:
            run.stdin.write("go\n")
            run.stdin.flush()
            got = json.loads(run.stdout.readline())
            run.wait(30)
            time.sleep(0.1)
            return got, host.accepted


@users
def test_a_name_the_sandbox_let_go_of_is_not_its_own(as_nobody_or_self):
    got, reached = closed_then_taken(unique_name(), wrap=as_nobody_or_self)
    assert got == {"own": "ok", "after": "EPERM"} and reached == 0
    # Control: the name was the host's listener's, which --allow-ipc reaches.
    got, reached = closed_then_taken(unique_name(), "--allow-ipc", wrap=as_nobody_or_self)
    assert got == {"own": "ok", "after": "ok"} and reached == 1


def test_a_name_taken_during_the_operation_is_undone():
    """The window between the check and the connect, made to happen: the sandbox's
    socket is closed and a host socket takes its name just before sandlock connects.
    The check after the connect sees the socket gone: the connection is shut down
    before anything passes, the datagram association dissolved, the call fails."""
    from sandlock.netcall._execute import connect
    from sandlock.netcall._materialize import Socket
    from sandlock.net._ownsockets import SandboxSockets
    from sandlock.netcall._sockaddr import UnixAddress

    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        for race in (False, True):
            name = unique_name()
            own = SandboxSockets()
            sandboxes = socket.socket(socket.AF_UNIX, kind)
            sandboxes.bind(b"\0" + name)
            own.add_abstract(sandboxes.fileno())
            target = own.identify(UnixAddress(name, True))
            assert target in own
            client = socket.socket(socket.AF_UNIX, kind)
            host = socket.socket(socket.AF_UNIX, kind)
            if kind == socket.SOCK_STREAM:
                sandboxes.listen()

            def operation():
                if race:
                    sandboxes.close()
                    host.bind(b"\0" + name)
                    if kind == socket.SOCK_STREAM:
                        host.listen()
                return connect(Socket(client.fileno(), socket.AF_UNIX, kind, 0, False), target)

            said = []
            outcome = own.perform(Socket(client.fileno(), socket.AF_UNIX, kind, 0, False), target,
                                  True, True, operation, (), lambda: said.append("taken"))
            if not race:  # the control: the same connect, to the sandbox's own socket
                assert outcome == (0, 0) and said == []
            else:
                assert outcome == (-1, errno.ECONNREFUSED) and said == ["taken"]
                if kind == socket.SOCK_STREAM:
                    connection, _ = host.accept()  # it did reach the host's queue, shut down:
                    assert connection.recv(1) == b""
                    with pytest.raises(BrokenPipeError):
                        client.send(b"x")
                    connection.close()
                else:
                    with pytest.raises(OSError) as raised:
                        client.send(b"x")
                    assert raised.value.errno == errno.ENOTCONN
            for s in (sandboxes, client, host):
                s.close()


def test_the_names_of_closed_sockets_are_swept_out():
    from sandlock.net._ownsockets import SandboxSockets

    own = SandboxSockets()
    kept = []
    for i in range(3 * SandboxSockets.SWEEP_AT):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(b"")  # a name of the kernel's choosing
        own.add_abstract(s.fileno())
        if i % 100 == 0:
            kept.append(s)
        else:
            s.close()
        assert len(own.abstract) <= SandboxSockets.SWEEP_AT
    assert all(s.getsockname()[1:] in own.abstract for s in kept)
    for s in kept:
        s.close()


# --- unnamed addresses: the family alone -----------------------------------------------

UNNAMED = r"""
a, b = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
got = dict(
    connect=attempt(socket.socket(socket.AF_UNIX).connect, b""),
    sendto=attempt(d.sendto, b"hello", b""),
    sendmsg=attempt(d.sendmsg, [b"hello"], [], 0, b""),
    bind_a=attempt(a.bind, b""),
    bind_b=attempt(b.bind, b""),
    listen_unbound=attempt(socket.socket(socket.AF_UNIX).listen),
)
names = [a.getsockname(), b.getsockname()]  # five hex digits of the kernel's choosing
got["autobound"] = names[0] != names[1] and all(
    len(n) == 6 and n[:1] == b"\0" and set(n[1:]) <= set(b"0123456789abcdef") for n in names)
report(**got)
"""
NATIVE = {"connect": "EINVAL", "sendto": "EINVAL", "sendmsg": "EINVAL", "bind_a": "ok", "bind_b": "ok",
          "listen_unbound": "EINVAL", "autobound": True}


def empty_name_servers() -> tuple[UnixServer, UnixServer]:
    """Host listeners on the abstract name "" (sun_path one NUL): what an unnamed
    address re-encoded as a name would reach. (The name is the machine's only one:
    another test run may hold it for a moment.)"""
    for _ in range(50):
        try:
            stream = UnixServer(b"\0")
            try:
                return stream, UnixServer(b"\0", socket.SOCK_DGRAM)
            except OSError:
                stream.close()
                raise
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            time.sleep(0.1)
    pytest.fail("the abstract name \"\" stays taken")


@users
def test_an_unnamed_address_gets_the_kernels_answer(as_nobody_or_self):
    stream, dgram = empty_name_servers()
    try:
        for options in ((), ("--allow-ipc",)):
            got = confined(UNNAMED, *options, wrap=as_nobody_or_self).report
            assert got == NATIVE, options
        assert quiet(stream) and quiet(dgram)
        # Control: the same program unconfined, next to the same listeners.
        assert bare(UNNAMED).report == NATIVE
        # And those listeners are reachable, by their name: what the old encoding reached.
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(b"\0")
        assert wait_until(lambda: stream.accepted == 1, 5)
    finally:
        stream.close()
        dgram.close()


# --- nested runs: the enclosing supervisor connects for them --------------------------

INNER_RUN = r"""
own = socket.socket(socket.AF_UNIX)
own.bind(b"\0" + NAME + b"-inner")
own.listen()
report(host=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME),
       outer=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME + b"-outer"),
       own=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME + b"-inner"))
"""
OUTER_RUN = r"""
import subprocess
outer = socket.socket(socket.AF_UNIX)
outer.bind(b"\0" + NAME + b"-outer")
outer.listen()
inner = subprocess.run([sys.executable, "-m", "sandlock", "run", "-q", "--net-allow", "127.0.0.1",
                        "--", sys.executable, "-c", INNER], capture_output=True, text=True)
report(inner=json.loads(inner.stdout.splitlines()[-1]) if inner.returncode == 0 else inner.stderr,
       host=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME),
       outer=attempt(socket.socket(socket.AF_UNIX).connect, b"\0" + NAME + b"-outer"))
"""


@pytest.mark.parametrize("outer_ipc", ["scoped", "--allow-ipc"])
def test_a_nested_run_reaches_no_abstract_socket_bound_outside_it(outer_ipc):
    """A run inside with rules of its own is IPC-scoped (it cannot --allow-ipc): the
    enclosing supervisor, connecting in its stead, keeps it to the sockets bound inside
    it, whether or not the enclosing sandbox itself is scoped."""
    name = unique_name()
    options = () if outer_ipc == "scoped" else (outer_ipc,)
    with UnixServer(b"\0" + name) as host:
        got = confined(OUTER_RUN, *options, timeout=60, NAME=name,
                       INNER=snippet(INNER_RUN, NAME=name)).report
        assert got["inner"] == {"host": "EPERM", "outer": "EPERM", "own": "ok"}, got
        # Control: the enclosing sandbox's own program reaches its socket, and the host's
        # with --allow-ipc.
        assert got["outer"] == "ok"
        assert got["host"] == ("EPERM" if outer_ipc == "scoped" else "ok")
        assert wait_until(lambda: host.accepted == (0 if outer_ipc == "scoped" else 1), 5)


def test_a_nested_sandbox_keeps_its_ipc_scope():
    """``sb.sandbox(Policy(net_allow=...))`` in a sandbox with --allow-ipc: the nested
    one is scoped unless it says allow_ipc too (the control)."""
    from sandlock import Policy, Sandbox

    system = ["/usr", "/lib", "/lib64", "/bin", "/etc", *PYTHON]
    name = b"\0" + unique_name()
    code = snippet('report(host=attempt(socket.socket(socket.AF_UNIX).connect, NAME))', NAME=name)
    with UnixServer(name) as host, \
            Sandbox(Policy(fs_readable=system, allow_ipc=True, net_allow=["127.0.0.1"]), quiet=True) as sb:
        nested = {ipc: sb.sandbox(Policy(fs_readable=system, allow_ipc=ipc, net_allow=["127.0.0.1"]))
                  for ipc in (False, True)}
        assert json.loads(nested[False].run([sys.executable, "-c", code]).stdout) == {"host": "EPERM"}
        assert quiet(host)
        assert json.loads(nested[True].run([sys.executable, "-c", code]).stdout) == {"host": "ok"}
        assert wait_until(lambda: host.accepted == 1, 5)


def test_a_kernel_that_cannot_name_the_socket_is_said(capsys, monkeypatch):
    """Without unix_diag (CONFIG_UNIX_DIAG) nothing is known as the sandbox's: said
    once, and nothing is reached on a guess."""
    from sandlock.net import _ownsockets
    from sandlock.netcall._sockaddr import UnixAddress

    def refused(*args, **kwargs):
        raise OSError(errno.EPROTONOSUPPORT, "Protocol not supported")

    monkeypatch.setattr(_ownsockets, "unix_socket_name", refused)
    own = _ownsockets.SandboxSockets()
    for _ in range(2):
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(b"\0" + unique_name())
            own.add_abstract(bound.fileno())
            assert own.identify(UnixAddress(bound.getsockname()[1:], True)) not in own
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "sock_diag" in said[0] and "--allow-ipc" in said[0]


# --- sendto with an address of length 0: no address at all ---------------------------

EMPTY_ADDRESS = r"""
def sendto_empty(sock):
    name = ctypes.create_string_buffer(16)  # a pointer, and a length of 0
    return outcome(libc.sendto(sock.fileno(), b"x", 1, 0, ctypes.addressof(name), 0))

got = {}
for kind in ("DGRAM", "STREAM", "SEQPACKET"):
    a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, "SOCK_" + kind))
    got[kind] = sendto_empty(a)
    b.setblocking(False)
    got[kind + " received"] = attempt(b.recv, 1)
got["unconnected"] = sendto_empty(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 0))
udp.connect(udp.getsockname())
got["udp"] = sendto_empty(udp)  # the kernel refuses it on an IP datagram socket
report(**got)
"""


def test_an_address_of_length_0_is_a_plain_send_as_the_kernel_says():
    got = confined(EMPTY_ADDRESS, "--net-allow", "*").report
    assert got == bare(EMPTY_ADDRESS).report
    assert got["DGRAM"] == got["STREAM"] == got["SEQPACKET"] == 1 and got["udp"] == "EINVAL"
