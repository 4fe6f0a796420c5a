"""`sandlock selftest`: run real confined programs and show that each protection holds.

Offline and unprivileged: everything happens in a scratch directory under /tmp, with
the running Python as the confined program.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from ..api import Result, Sandbox
from ..confinement import SCRATCH, within
from ..policy import Policy
from . import _probes as probes
from ._probes import HttpServer, LocalServer

PY = sys.executable
# The interpreter itself, not a venv's link to it: the default workspace need not cover
# the venv (its pyvenv.cfg), wherever it is.
BASE_PY = os.path.realpath(sys.executable)

# Snippets run inside the sandbox; each prints what happened for the check to judge.
PTRACE, IO_URING_SETUP, UNSHARE = 101, 425, 272
CLONE_NEWUSER = 0x10000000


class Selftest:
    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.inside = _mkdir(scratch, "inside")
        self.outside = _mkdir(scratch, "outside")
        self.other = _mkdir(scratch, "other")
        self.home = _mkdir(scratch, "home")
        _mkdir(self.home, ".ssh")
        _write(os.path.join(self.home, ".ssh", "id_selftest"), "not a real key\n")
        _write(os.path.join(self.home, "notes.txt"), "hello\n")
        _write(os.path.join(self.inside, "moved"), "x")
        _write(os.path.join(self.outside, "kept"), "x")
        _write(os.path.join(self.inside, "own"), "x")

    def allowlist(self, **extra: object) -> Sandbox:
        return Sandbox(Policy(fs_readable=("/",), fs_writable=(self.inside, self.other), **extra), quiet=True)

    def python(self, sandbox: Sandbox, snippet: str, *args: str) -> str:
        result = sandbox.run([BASE_PY, "-c", snippet, *args], timeout=30)
        return _output(result)

    # Each check returns (passed, what was observed).
    def write_inside(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.TRY_WRITE, os.path.join(self.inside, "f"))
        return out == "written", out

    def write_outside(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.TRY_WRITE, os.path.join(self.outside, "f"))
        return out == "Permission denied", out

    def rename_across(self) -> tuple[bool, str]:
        snippet = "import os, sys; os.rename(sys.argv[1], sys.argv[2]); print('renamed')"
        out = self.python(self.allowlist(), snippet, os.path.join(self.inside, "moved"),
                          os.path.join(self.other, "moved"))
        return out == "renamed", out

    def credentials(self) -> tuple[bool, str]:
        # Under a grant of everything (the default workspace would not even show this home:
        # it is in /tmp, of which each sandbox sees only its workspace and its own files).
        sandbox = Sandbox(Policy(fs_readable=("/",), env={"HOME": self.home},
                                 cwd=self.home), quiet=True)
        key = self.python(sandbox, probes.TRY_READ, os.path.join(self.home, ".ssh", "id_selftest"))
        # (masked in the sandbox: a command that may search any directory finds nothing there)
        return key in ("Permission denied", "No such file or directory"), f"~/.ssh: {key}"

    def metadata(self) -> tuple[bool, str]:
        """chmod (Landlock does not judge it) of a read-only file and of a denied key."""
        sandbox = Sandbox(Policy(fs_readable=("/",), fs_writable=(self.inside,),
                                 env={"HOME": self.home}), quiet=True)
        kept, key, own = self.python(sandbox, probes.TRY_CHMOD, os.path.join(self.outside, "kept"),
                                     os.path.join(self.home, ".ssh", "id_selftest"),
                                     os.path.join(self.inside, "own")).split("\n")
        passed = (kept, own) == ("Permission denied", "changed") and \
            key in ("Permission denied", "No such file or directory")  # (masked: see credentials)
        return passed, f"read-only: {kept}; ~/.ssh: {key}; writable: {own}"

    def home_closed(self) -> tuple[bool, str]:
        """The default workspace reads nothing of the real $HOME but its tools and caches.
        A home under /tmp (/var/tmp, /dev/shm) is in the sandbox's own, which holds only
        what the workspace grants of it: listing it shows those, and nothing else."""
        home = os.path.expanduser("~")
        sandbox = Sandbox(Policy(cwd=self.inside), quiet=True)
        out = self.python(sandbox, probes.TRY_LIST, home)
        if out == "Permission denied" or not out.startswith("listed"):
            return out == "Permission denied", f"{home}: {out}"
        shown = set(out.split("\n")[1:])
        extra = sorted(shown - _granted_names(home, self.inside))
        private = any(within(os.path.realpath(home), scratch) for scratch in SCRATCH)
        if private and not extra:
            return True, f"{home}: the sandbox's own, with only what it grants"
        return False, f"{home}: listed, with {', '.join(extra) or 'nothing granted'}"

    def ptrace(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.TRY_SYSCALL, str(PTRACE), "0", "0", "0", "0")
        return out == "Operation not permitted", out

    def io_uring(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.TRY_SYSCALL, str(IO_URING_SETUP), "8", "0")
        return out == "Operation not permitted", out

    def namespaces(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.TRY_SYSCALL, str(UNSHARE), str(CLONE_NEWUSER))
        return out == "Operation not permitted", out

    def i386_syscalls(self) -> tuple[bool, str]:
        result = self.allowlist().run([BASE_PY, "-c", probes.INT80], timeout=30)
        killed = result.signal == signal.SIGSYS
        return killed, "killed by SIGSYS" if killed else _output(result)

    def raw_socket(self) -> tuple[bool, str]:
        out = self.python(self.allowlist(), probes.RAW_SOCKET)
        return out == "Operation not permitted", out

    def signal_outside(self) -> tuple[bool, str]:
        with subprocess.Popen(["sleep", "30"]) as outsider:
            try:
                out = self.python(self.allowlist(), probes.SIGNAL_OUTSIDE, str(outsider.pid))
            finally:
                outsider.kill()
        # Not even there, in the sandbox's PID namespace (or refused, without one).
        return out in ("No such process", "Operation not permitted"), out

    def network_denied(self) -> tuple[bool, str]:
        with LocalServer() as port:
            out = self.python(self.allowlist(), probes.CONNECT, "127.0.0.1", str(port))
        return out == "Permission denied", out

    def network_allowed(self) -> tuple[bool, str]:
        with LocalServer() as port:
            sandbox = self.allowlist(net_allow=(f"127.0.0.1:{port}",))
            allowed = self.python(sandbox, probes.CONNECT, "127.0.0.1", str(port))
            other = self.python(sandbox, probes.CONNECT, "127.0.0.1", str(port + 1 if port < 65535 else 1))
        return (allowed, other) == ("connected", "Permission denied"), f"{allowed}; other port: {other}"

    def dns_pinned(self) -> tuple[bool, str]:
        sandbox = self.allowlist(resolve=("selftest.sandlock.test=127.0.0.1",),
                                 net_allow=("selftest.sandlock.test:1",))
        out = self.python(sandbox, probes.RESOLVE, "selftest.sandlock.test", "unlisted.sandlock.test")
        return out.split() == ["127.0.0.1", "unresolved"], out.replace("\n", ", ")

    def unix_daemon(self) -> tuple[bool, str]:
        import socket

        path = os.path.join(self.outside, "daemon.sock")
        with socket.socket(socket.AF_UNIX) as daemon:
            daemon.bind(path)
            daemon.listen()
            denied = self.python(Sandbox(Policy(cwd=self.scratch), quiet=True), probes.CONNECT, path)
            allowed = self.python(Sandbox(Policy(cwd=self.scratch, unix_allow=(path,)), quiet=True),
                                  probes.CONNECT, path)
        return (denied, allowed) == ("Permission denied", "connected"), f"{denied}; with --unix-allow: {allowed}"

    def abstract_socket(self) -> tuple[bool, str]:
        import socket
        import uuid

        name = f"sandlock-selftest-{uuid.uuid4().hex[:12]}"
        with socket.socket(socket.AF_UNIX) as host:
            host.bind(b"\0" + name.encode())
            host.listen()
            denied = self.python(self.allowlist(), probes.ABSTRACT_CONNECT, name).splitlines()
            allowed = self.python(self.allowlist(allow_ipc=True), probes.ABSTRACT_CONNECT, name).splitlines()
        unnamed = "Invalid argument"
        passed = denied == ["Operation not permitted", unnamed] and allowed == ["connected", unnamed]
        return passed, f"{'; '.join(denied)}; with --allow-ipc: {'; '.join(allowed)}"

    def http_rules(self) -> tuple[bool, str]:
        with HttpServer() as port:
            name = "selftest.sandlock.test"
            sandbox = self.allowlist(resolve=(f"{name}=127.0.0.1",), http_ports=(port,),
                                     http_allow=(f"GET {name}/allowed/*",), https_inspect="off")
            out = self.python(sandbox, probes.HTTP_GET, f"http://{name}:{port}/allowed/x",
                              f"http://{name}:{port}/other", f"http://127.0.0.1:{port + 1}/")
        lines = out.splitlines()
        passed = (len(lines) == 3 and lines[0] == "200" and lines[1].startswith("403 ")
                  and "Permission denied" in lines[2])
        return passed, out.replace("\n", "; ")

    def https_rules(self) -> tuple[bool, str]:
        name = "selftest.sandlock.test"
        with HttpServer(tls_name=name) as (port, upstream_ca):
            ca_file = os.path.join(self.scratch, "upstream-ca.pem")
            _write(ca_file, upstream_ca.decode())
            sandbox = self.allowlist(resolve=(f"{name}=127.0.0.1",), http_ports=(port,),
                                     http_allow=(f"GET {name}/allowed/*",), upstream_ca=(ca_file,))
            out = self.python(sandbox, probes.HTTP_GET, f"https://{name}:{port}/allowed/x",
                              f"https://{name}:{port}/other")
        lines = out.splitlines()
        passed = len(lines) == 2 and lines[0] == "200" and lines[1].startswith("403 ")
        return passed, out.replace("\n", "; ")

    def dies_with_sandlock(self) -> tuple[bool, str]:
        marker = _unique_seconds()  # its pid inside is not ours: its argv
        script = f"sleep {marker} & echo started; wait"
        cli = [PY, "-m", "sandlock", "run", "-q", "--", "sh", "-c", script]
        with subprocess.Popen(cli, stdout=subprocess.PIPE, text=True) as sandlock:
            sandlock.stdout.readline()
            sandlock.kill()
            sandlock.wait()
        gone = _wait_gone(b"sleep\0%s\0" % marker.encode(), 5)
        return gone, "background process gone" if gone else f"sleep {marker} still alive"

    def timeout(self) -> tuple[bool, str]:
        """LocalGPT's "timeout enforcement": killed at the limit, its children with it."""
        marker = _unique_seconds()
        began = time.monotonic()
        result = self.allowlist(timeout=0.5).run(["sh", "-c", f"sleep {marker} & sleep 30"])
        took = time.monotonic() - began
        gone = _wait_gone(b"sleep\0%s\0" % marker.encode(), 5)
        passed = result.exit_code == 124 and took < 10 and gone
        return passed, (f"exit status {result.exit_code} after {took:.1f}s"
                        + ("" if gone else f"; sleep {marker} still alive"))

    def child_inherits(self) -> tuple[bool, str]:
        """LocalGPT's "child process inherits": a grandchild is confined as its parent."""
        out = self.python(self.allowlist(), probes.GRANDCHILD_WRITES, probes.TRY_WRITE,
                          os.path.join(self.inside, "grandchild"),
                          os.path.join(self.outside, "grandchild"))
        return out.split("\n") == ["written", "Permission denied"], out.replace("\n", "; ")


CHECKS: list[tuple[str, Callable[[Selftest], tuple[bool, str]]]] = [
    ("write inside an allowed directory works", Selftest.write_inside),
    ("write outside the allowed directories is denied", Selftest.write_outside),
    ("rename across two writable directories works", Selftest.rename_across),
    ("credential stores are unreadable by default", Selftest.credentials),
    ("the rest of $HOME is unreadable by default", Selftest.home_closed),
    ("files it may not write keep their mode (chmod denied)", Selftest.metadata),
    ("ptrace is denied", Selftest.ptrace),
    ("io_uring is denied", Selftest.io_uring),
    ("namespaces cannot be created", Selftest.namespaces),
    ("i386 (int 0x80) syscalls kill the process", Selftest.i386_syscalls),
    ("raw sockets are refused", Selftest.raw_socket),
    ("signals to processes outside are blocked", Selftest.signal_outside),
    ("timeout kills the command and its children at the limit", Selftest.timeout),
    ("a child's child is confined as the command is", Selftest.child_inherits),
    ("the sandbox dies with sandlock", Selftest.dies_with_sandlock),
    ("network is closed by default", Selftest.network_denied),
    ("--net-allow opens exactly one host and port", Selftest.network_allowed),
    ("DNS answers pinned names only", Selftest.dns_pinned),
    ("a host daemon's unix socket needs --unix-allow", Selftest.unix_daemon),
    ("a host's abstract unix socket needs --allow-ipc", Selftest.abstract_socket),
    ("--http-allow allows one path, denies others with 403", Selftest.http_rules),
    ("HTTPS is inspected with the sandbox CA, denied paths get 403", Selftest.https_rules),
]


def main() -> int:
    # The probes are Python programs: the default workspace's checks need this
    # interpreter readable wherever it lives (pyenv's, uv's: not a system tree), the
    # way a user grants it. That is the checks' precondition, not what they check.
    readable = [path for path in os.environ.get("SANDLOCK_FS_READ", "").split(":") if path]
    os.environ["SANDLOCK_FS_READ"] = ":".join([*readable, os.path.realpath(sys.base_prefix)])
    scratch = tempfile.mkdtemp(prefix="sandlock-selftest-")
    failures = 0
    try:
        test = Selftest(scratch)
        for title, check in CHECKS:
            try:
                passed, observed = check(test)
            except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
                passed, observed = False, f"{type(exc).__name__}: {exc}"
            failures += not passed
            mark = "\N{CHECK MARK}" if passed else "\N{BALLOT X}"
            print(f"{mark} {title}" + ("" if passed else f"  ({observed})"), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = len(CHECKS)
    print(f"\n{total - failures} passed, {failures} failed")
    return 1 if failures else 0


def _granted_names(home: str, cwd: str) -> set[str]:
    """The names in ``home`` of what the default workspace grants beneath it."""
    from ..confinement import default_workspace

    read, write, _ = default_workspace(home, cwd, os.environ)
    real = os.path.realpath(home)
    return {os.path.relpath(path, real).split("/")[0] for path in map(os.path.realpath, (*read, *write))
            if within(path, real) and path != real}


def _mkdir(parent: str, name: str) -> str:
    path = os.path.join(parent, name)
    os.mkdir(path)
    return path


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _output(result: Result) -> str:
    if result.start_error:
        return result.start_error
    text = (result.stdout or b"").decode(errors="replace").strip()
    return text or (result.stderr or b"").decode(errors="replace").strip()[-200:]


def _unique_seconds() -> str:
    """A sleep's argument no other process has: how a check finds its sleep in /proc."""
    return f"{300 + time.monotonic() % 1:.6f}"


def _wait_gone(cmdline: bytes, seconds: float) -> bool:
    """True once no process runs with this command line."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_cmdline(entry) == cmdline for entry in os.listdir("/proc") if entry.isdigit()):
            return True
        time.sleep(0.05)
    return False


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
