"""Binding a unix socket to a path: done by sandlock's binder as the command would
(docs/architecture.md, "Socket files"), never by the kernel re-reading the call.

The attack: while one thread binds a unix socket to a path, another turns the call
into a UDP bind (the sockaddr rewritten to 127.0.0.1:PORT, the descriptor dup2'd over
by a UDP socket); a supervisor that let the kernel proceed with the call it judged
would have the kernel read those instead. Checked from outside: the host's own socket
can take the port all along, and a datagram sent there never reaches the sandbox. The
control lets the same racer bind the port (--net-bind), so the test sees it when it
happens. Then what the command sees of its binds, compared with the same code
unconfined: its exact path, its own /tmp, Landlock's word, the kernel's errors.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import PYTHON, SANDLOCK, users
from netattack_helpers import Run, bare, confined, sandlock_argv

RACE_SECONDS = 1.5  # the old tree's supervisor lost the race within milliseconds
RACER = os.path.join(os.path.dirname(__file__), "unix_bind_racer.c")


@pytest.fixture(scope="module")
def built_racer(tmp_path_factory) -> str:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the racer")
    binary = tmp_path_factory.mktemp("racer") / "racer"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), RACER], check=True)
    return str(binary)


@pytest.fixture
def racer(built_racer, world_tmp) -> str:
    """The racer, in a directory nobody can run it from (the sandbox's workspace)."""
    return shutil.copy(built_racer, world_tmp / "racer")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Outside:
    """The host's side of the race: a datagram to 127.0.0.1:port every 10 ms, and a
    bind of the port every 20 ms (which fails while anything else holds it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.held = 0  # binds that found the port taken
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Outside:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            beat = 0
            while not self._done.wait(0.01):
                sender.sendto(b"token", ("127.0.0.1", self.port))
                beat += 1
                if beat % 2:
                    continue
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host:
                    try:  # (the wildcard: taken by a bind to any 127.0.0.x, a torn read's)
                        host.bind(("0.0.0.0", self.port))
                    except OSError:
                        self.held += 1


def race(racer: str, mode: str, *options: str, wrap=None) -> tuple[subprocess.CompletedProcess, int]:
    port = free_udp_port()
    argv = [*SANDLOCK, "run", "-q", *options, "--", racer, str(port), str(RACE_SECONDS), mode, "/tmp"]
    with Outside(port) as outside:
        done = subprocess.run(wrap(argv) if wrap else argv, capture_output=True, text=True,
                              timeout=60, cwd=os.path.dirname(racer))
    assert done.returncode == 0, done.stderr
    return done, outside.held


@users
@pytest.mark.parametrize("mode", ["mem", "dup2"])
def test_a_pathname_bind_cannot_be_turned_into_a_udp_bind(racer, mode, as_nobody_or_self):
    # (in the host's namespace, where a UDP bind needs --net-bind; a default run's
    # private network lets it bind any port of its own, which no host port is)
    done, held = race(racer, mode, "--no-net-private-loopback", wrap=as_nobody_or_self)
    attempts, unix_bound = (int(word) for word in done.stdout.split()[1:4:2])
    assert "bound " not in done.stdout and "received" not in done.stdout, done.stdout
    assert held == 0  # the host could bind the port all along
    assert attempts > 100, done.stdout  # the race was run, many times
    if mode == "dup2":
        assert unix_bound > 0, done.stdout  # the unix binds themselves went through


@users
def test_control_the_racer_binds_the_port_where_it_may(racer, as_nobody_or_self):
    port = free_udp_port()
    argv = [*SANDLOCK, "run", "-q", "--net-bind", str(port), "--", racer, str(port),
            str(RACE_SECONDS), "mem", "/tmp"]
    with Outside(port) as outside:
        done = subprocess.run(as_nobody_or_self(argv) if as_nobody_or_self else argv,
                              capture_output=True, text=True, timeout=60, cwd=os.path.dirname(racer))
    assert "bound " in done.stdout, done.stdout + done.stderr
    assert outside.held > 0  # what the test looks for from outside, seen


# --- what the command sees --------------------------------------------------------

BINDS = r"""
import stat
os.chdir(WORK)
results = {}
def bound(name, path, client=True):
    s = socket.socket(socket.AF_UNIX)
    results[name] = attempt(s.bind, path)
    if results[name] == "ok":
        results[name + " name"] = s.getsockname()
        if client:
            s.listen()
            c = socket.socket(socket.AF_UNIX)
            results[name + " connect"] = attempt(c.connect, path)
    return s

keep = [bound("relative", "rel.sock"), bound("dotted", "./dot.sock"),
        bound("scratch", SCRATCH + "/abs.sock")]
results["scratch listed"] = "abs.sock" in os.listdir(SCRATCH)
results["in use"] = attempt(socket.socket(socket.AF_UNIX).bind, "rel.sock")
results["no directory"] = attempt(socket.socket(socket.AF_UNIX).bind, SCRATCH + "/none/x.sock")
results["read-only directory"] = attempt(socket.socket(socket.AF_UNIX).bind, READ_ONLY + "/x.sock")
os.symlink(SCRATCH + "/" + "n" * 300, "long")
results["name too long"] = attempt(socket.socket(socket.AF_UNIX).bind, "long/x.sock")
raw = struct.pack("=H", socket.AF_UNIX) + b"over.sock" + bytes(128 - 11)
s = socket.socket(socket.AF_UNIX)
results["sockaddr too long"] = outcome(libc.bind(s.fileno(), raw, len(raw)))
old = os.umask(0o077)
keep.append(bound("umask", "private.sock", client=False))
os.umask(old)
results["mode"] = oct(stat.S_IMODE(os.stat("private.sock").st_mode))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
raw = struct.pack("=H", socket.AF_UNIX) + SCRATCH.encode() + b"/udp.sock\0"
results["udp socket"] = outcome(libc.bind(udp.fileno(), raw, len(raw)))
results["udp file"] = os.path.exists(SCRATCH + "/udp.sock")
os.mkdir("gone")
os.chdir("gone")
os.rmdir("../gone")
results["deleted cwd"] = attempt(socket.socket(socket.AF_UNIX).bind, "x.sock")
report(**results)
"""


def _setup(base, read_only) -> tuple[str, str]:
    work = base / "work"
    work.mkdir()
    for directory in (work, read_only):
        os.chmod(directory, 0o777)  # the permissions allow it: only Landlock can refuse
    return str(work), str(read_only)


@users
def test_a_bind_is_what_it_would_be_unconfined(tmp_path, world_tmp, unscratched, as_nobody_or_self,
                                               monkeypatch):
    # The default workspace: the sandbox's own /tmp, the workspace writable, and a
    # directory anyone may write (outside the scratch directories, which are mounts of
    # their own) that the sandbox may only read.
    work, read_only = _setup(world_tmp, unscratched)
    monkeypatch.setenv("SANDLOCK_FS_READ", os.environ["SANDLOCK_FS_READ"] + ":" + read_only)
    wrap = (lambda argv: as_nobody_or_self(argv)) if as_nobody_or_self else None
    sandboxed = confined(BINDS, wrap=wrap, cwd=work, WORK=work, SCRATCH="/tmp",
                         READ_ONLY=read_only).report
    assert sandboxed["read-only directory"] == "EACCES"  # Landlock's MAKE_SOCK, as the command's
    assert sandboxed["scratch name"] == "/tmp/abs.sock" and sandboxed["scratch listed"]
    assert os.listdir(read_only) == []
    assert stat.S_ISSOCK(os.lstat(f"{work}/rel.sock").st_mode)  # where the command said
    assert sorted(os.listdir(work)) == ["dot.sock", "long", "private.sock", "rel.sock"]

    work, _ = _setup(tmp_path, unscratched)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    unconfined = bare(BINDS, cwd=work, WORK=work, SCRATCH=str(scratch), READ_ONLY=read_only).report
    assert unconfined["read-only directory"] == "ok"  # only Landlock refuses it
    assert unconfined["relative name"] == "rel.sock" and unconfined["dotted name"] == "./dot.sock"
    unconfined.update({"read-only directory": "EACCES", "scratch name": "/tmp/abs.sock"})
    assert sandboxed == unconfined


def test_without_namespaces_sandlocks_confined_worker_binds_alike(tmp_path, unscratched):
    # In a user namespace whose user.max_user_namespaces is 0, sandlock makes none of
    # its own (--best-effort): no init, the host's mount namespace; a thread of
    # sandlock's, restricted as the command is, binds for it.
    if shutil.which("unshare") is None or os.getuid() != 0:
        pytest.skip("needs unshare(1), as root")
    work, read_only = _setup(tmp_path, unscratched)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    options = ["--best-effort", "-r", "/", "-w", work, "-w", str(scratch)]
    argv = " ".join(map(shlex.quote, sandlock_argv(BINDS, *options, WORK=work, SCRATCH=str(scratch),
                                                   READ_ONLY=read_only)))
    done = subprocess.run(["unshare", "-U", "--map-user=0", "--map-group=0", "sh", "-c",
                           f"echo 0 > /proc/sys/user/max_user_namespaces && exec {argv}"],
                          capture_output=True, text=True, timeout=60, cwd=work)
    assert "namespaces are not available" in done.stderr  # (the case under test)
    sandboxed = Run(done.returncode, done.stdout, done.stderr).report
    assert sandboxed["read-only directory"] == "EACCES" and os.listdir(read_only) == []
    shutil.rmtree(work)
    shutil.rmtree(scratch)
    work, _ = _setup(tmp_path, unscratched)
    scratch.mkdir()
    unconfined = bare(BINDS, cwd=work, WORK=work, SCRATCH=str(scratch), READ_ONLY=read_only).report
    assert unconfined.pop("read-only directory") == "ok"
    sandboxed.pop("read-only directory")
    assert sandboxed == unconfined


PROC_SELF = r"""
os.chdir(WORK)
fd = os.open(WORK, os.O_RDONLY)
denied = os.open(READ_ONLY, os.O_RDONLY)
s = socket.socket(socket.AF_UNIX)
results = {"own fd": attempt(s.bind, f"/proc/self/fd/{fd}/fd.sock"),
           "own cwd": attempt(socket.socket(socket.AF_UNIX).bind, "/proc/thread-self/cwd/cwd.sock"),
           "read-only fd": attempt(socket.socket(socket.AF_UNIX).bind, f"/proc/self/fd/{denied}/x.sock")}
s.listen()
results["connect"] = attempt(socket.socket(socket.AF_UNIX).connect, "fd.sock")
report(**results)
"""


@users
def test_a_path_through_proc_self_is_the_commands_own(world_tmp, unscratched, monkeypatch,
                                                     as_nobody_or_self):
    # /proc/self of the binder is not the command's: such a path is looked up as the
    # command's own, its socket bound to the last name (docs/usage.md, "Unix sockets").
    work, read_only = _setup(world_tmp, unscratched)
    monkeypatch.setenv("SANDLOCK_FS_READ", os.environ["SANDLOCK_FS_READ"] + ":" + read_only)
    got = confined(PROC_SELF, wrap=as_nobody_or_self, cwd=work, WORK=work,
                   READ_ONLY=read_only).report
    assert got == {"own fd": "ok", "own cwd": "ok", "read-only fd": "EACCES", "connect": "ok"}
    assert sorted(os.listdir(work)) == ["cwd.sock", "fd.sock"] and os.listdir(read_only) == []


LOCKED = r"""
results = {}
for name, path in (("direct", OPEN + "/direct.sock"),
                   ("through /proc/self", "/proc/self/root" + OPEN + "/self.sock")):
    results[name] = attempt(socket.socket(socket.AF_UNIX).bind, path)
report(**results)
"""


@pytest.fixture
def short_tmp():
    """A world-usable scratch directory with a short path: a socket's path, seen through
    /proc/self/root, must stay under 108 bytes however deep pytest's own are."""
    path = tempfile.mkdtemp(prefix="ub", dir="/tmp")
    os.chmod(path, 0o777)
    yield pathlib.Path(path)
    shutil.rmtree(path)


def test_a_path_through_proc_self_is_not_looked_up_with_sandlocks_capabilities(short_tmp):
    # Root's command holds no capability: a directory it may write, beneath another
    # user's 0700 directory, is out of its reach. sandlock (root) looks such a path up
    # for it without its own capabilities too.
    if os.getuid() != 0:
        pytest.skip("root's capabilities are what is at stake")
    world_tmp = short_tmp
    locked = world_tmp / "locked"
    inside = locked / "open"
    inside.mkdir(parents=True)
    os.chmod(inside, 0o777)
    os.chown(locked, 65534, 65534)
    os.chmod(locked, 0o700)
    options = ("-r", "/", "-w", str(world_tmp))
    assert confined(LOCKED, *options, OPEN=str(inside)).report == {
        "direct": "EACCES", "through /proc/self": "EACCES"}
    assert os.listdir(inside) == []
    assert bare(LOCKED, OPEN=str(inside)).report == {  # control: with root's capabilities
        "direct": "ok", "through /proc/self": "ok"}


def _bind_relative(name: str) -> str:
    s = socket.socket(socket.AF_UNIX)
    s.bind(name)
    s.listen()
    c = socket.socket(socket.AF_UNIX)
    c.connect(name)
    return s.getsockname()


def test_a_long_lived_sandboxs_processes_bind_too(world_tmp):
    from sandlock import Policy, Sandbox

    work = world_tmp / "work"
    work.mkdir()
    code = "import socket; s = socket.socket(socket.AF_UNIX); s.bind('ran.sock'); print(s.getsockname())"
    with Sandbox(Policy(cwd=str(work)), quiet=True) as sb:
        ran = sb.exec([sys.executable, "-c", code])
        assert ran.wait() == 0
        called = sb.call(_bind_relative, ("called.sock",))
    assert called.value == "called.sock", called
    assert sorted(os.listdir(work)) == ["called.sock", "ran.sock"]


# --- nested sandboxes: their own Landlock layer decides too -----------------------

SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIND_ONE = ("import errno, socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.bind(sys.argv[1])\n"
            "    print('ok')\nexcept OSError as exc:\n    print(errno.errorcode[exc.errno])")


def _nest_dirs(tmp_path) -> tuple[str, str]:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    return str(outer), str(inner)


@pytest.mark.parametrize("network", [["*"], ["127.0.0.1:9"]], ids=["parents", "own"])
def test_a_nested_sandboxs_socket_files_are_under_its_own_rules(tmp_path, network):
    from sandlock import Policy, Sandbox

    outer, inner = _nest_dirs(tmp_path)
    readable = [*SYSTEM, *PYTHON, ROOT]
    bind = lambda sandbox, path: sandbox.run([sys.executable, "-c", BIND_ONE, path]).stdout
    with Sandbox(Policy(fs_readable=readable, fs_writable=[outer]), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=[*readable, outer], fs_writable=[inner],
                                   net_allow=network))
        assert bind(nested, f"{outer}/nested.sock") == b"EACCES\n"
        assert bind(nested, f"{inner}/nested.sock") == b"ok\n"
        assert bind(sb, f"{outer}/parent.sock") == b"ok\n"  # the parent's rules allow it
    assert sorted(os.listdir(outer)) == ["inner", "parent.sock"]
    assert os.listdir(inner) == ["nested.sock"]


@pytest.mark.parametrize("network", ["*", "127.0.0.1:9"], ids=["enclosing", "own"])
def test_a_run_inside_a_run_binds_under_its_own_rules(tmp_path, network):
    outer, inner = _nest_dirs(tmp_path)
    reads = [f"--fs-read={path}" for path in (*SYSTEM, *PYTHON, ROOT)]
    script = (f"{shlex.join([*SANDLOCK, 'run', '-q', *reads, '-r', outer, '-w', inner, '--net-allow', network, '--', sys.executable, '-c', BIND_ONE])}"
              f" {{}}/x.sock")
    commands = "; ".join([script.format(outer), script.format(inner),
                          shlex.join([sys.executable, "-c", BIND_ONE, f"{outer}/outer.sock"])])
    env = {key: value for key, value in os.environ.items() if not key.startswith("SANDLOCK_FS")}
    done = subprocess.run([*SANDLOCK, "run", "-q", *reads, "-w", outer, "--net-allow", "*", "--",
                           "sh", "-c", commands], capture_output=True, text=True, timeout=60, env=env,
                          cwd="/")
    assert done.stdout == "EACCES\nok\nok\n", done.stderr
    assert sorted(os.listdir(outer)) == ["inner", "outer.sock"] and os.listdir(inner) == ["x.sock"]


# A process of the outer sandbox registers as a run whose network is the sandbox's,
# with a ruleset that lets it make sockets anywhere (or, second, with a descriptor that
# is no ruleset), and claims every thread it is asked about: it may only narrow.
HOSTILE = """
import json, socket, sys
from sandlock.kernel import landlock
permissive = landlock.Ruleset(handled_fs=landlock.FS_MAKE_SOCK)
permissive.allow_path("/", landlock.FS_MAKE_SOCK)
probes = []
for second in (permissive.fileno(), sys.stdin.fileno()):
    theirs, mine = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    service = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    service.connect(b"\\0sandlock-nesting")
    socket.send_fds(service, [b'{"network": ["enclosing"]}'], [theirs.fileno(), second])
    print(service.recv(100).decode().split(" ")[0], flush=True)
    probes.append(mine)
while question := socket.recv_fds(probes[0], 32, 1)[0]:
    probes[0].send(question[1:] + b" 0")  # "mine", whatever the thread
"""


def test_a_hostile_registration_only_narrows_a_runs_binds(tmp_path):
    outer, inner = _nest_dirs(tmp_path)
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE)
    reads = [f"--fs-read={path}" for path in (*SYSTEM, *PYTHON, ROOT, str(tmp_path))]
    run_inside = shlex.join([*SANDLOCK, "run", "-q", *reads, "-w", inner, "--net-allow", "*", "--",
                             sys.executable, "-c", BIND_ONE, f"{outer}/x.sock"])
    env = {key: value for key, value in os.environ.items() if not key.startswith("SANDLOCK_FS")}
    done = subprocess.run([*SANDLOCK, "run", "-q", *reads, "-w", outer, "--net-allow", "*", "--",
                           "sh", "-c", f"{sys.executable} {hostile} & sleep 1; {run_inside}; kill %1"],
                          capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert done.stdout.split() == ["ok", "error", "EACCES"], done.stderr
    assert os.listdir(outer) == ["inner"]
