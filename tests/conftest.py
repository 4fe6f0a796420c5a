"""Shared helpers: run the real `sandlock` CLI, and run things as an unprivileged user."""

from __future__ import annotations

import atexit
import getpass
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

UNPRIVILEGED_UID = 65534  # nobody
SANDLOCK = [sys.executable, "-m", "sandlock"]
# CI sets this so that a machine where the unprivileged cases cannot run fails loudly
# instead of skipping them.
REQUIRE_UNPRIVILEGED = os.environ.get("SANDLOCK_REQUIRE_UNPRIVILEGED") == "1"
# The tests run their confined Python programs with this interpreter (and import
# sandlock in some): a venv and a checkout wherever they are, which the default
# workspace (deny by default for $HOME, the current directory writable) may not cover.
# Widened for the whole session the way a user would (docs/usage.md); tests that show
# exact output (--print-policy) use UNWIDENED. Likewise pytest's tmp_path directories,
# where tests keep what a confined command writes for them to check: each sandbox has
# its own /tmp, and this keeps them (only them) in view, as -w would.
UNWIDENED = {name: value for name, value in os.environ.items()
             if name not in ("SANDLOCK_FS_READ", "SANDLOCK_FS_WRITE")}
# What the interpreter needs to start, wherever it lives: the venv (sys.prefix) and the
# base interpreter's prefix (sys.base_prefix: pyenv's and uv's live in a home, which
# the default workspace does not grant), as given and as real paths. Tests that choose
# their own -r paths for a confined Python add these.
PYTHON = tuple(dict.fromkeys(
    path for given in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    for path in (given, os.path.realpath(given))))
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["SANDLOCK_FS_READ"] = ":".join((*PYTHON, CHECKOUT))
PYTEST_TEMP = os.path.join(tempfile.gettempdir(), f"pytest-of-{getpass.getuser()}")
os.environ["SANDLOCK_FS_WRITE"] = PYTEST_TEMP
# The runtime directory, where inspecting runs cache their short-lived CA (docs/ca.md):
# one for the session, outside every test's workspace (a fake HOME inside a workspace
# would put the cache, denied in every policy, inside a write grant).
RUNTIME_DIR = tempfile.mkdtemp(prefix=".sandlock-test-runtime-", dir=os.path.expanduser("~"))
os.environ["XDG_RUNTIME_DIR"] = RUNTIME_DIR
atexit.register(shutil.rmtree, RUNTIME_DIR, True)


def sandlock(*args: str, **kwargs: object) -> subprocess.CompletedProcess:
    """Run the sandlock CLI (`sandlock ARGS...`), capturing text output."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 60)
    return subprocess.run([*SANDLOCK, *args], **kwargs)


def _unprivileged_problem() -> str | None:
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    # A whole confined launch: setpriv itself can start an interpreter that the user
    # could not exec again (it still holds root's capabilities while it execs).
    probe = subprocess.run(
        unprivileged([*SANDLOCK, "run", "--", sys.executable, "-c", "pass"]),
        capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )
    if probe.returncode != 0:
        blocked = _closed_to_others((sys.executable, os.path.realpath(sys.executable),
                                     *PYTHON, CHECKOUT))
        why = (f"{blocked} (mode {os.stat(blocked).st_mode & 0o777:o}) is closed to other users, "
               "and the interpreter, the venv or the checkout is beneath it"
               if blocked else probe.stderr.strip()[-200:])
        return (f"uid {UNPRIVILEGED_UID} cannot run {sys.executable} with sandlock: {why}. The "
                "unprivileged cases run this same interpreter as that user: make the venv with "
                "an interpreter and in a checkout every user can reach (e.g. `/usr/bin/python3 -m "
                "venv .venv` in a checkout outside a private home; see README.md)")
    return None


def _closed_to_others(paths: Sequence[str]) -> str | None:
    """The first directory on the way to one of ``paths`` that users other than its
    owner (and group) cannot search: pyenv's /root/.pyenv under /root, mode 700."""
    for path in paths:
        directory = "/"
        for part in os.path.dirname(os.path.abspath(path)).split("/")[1:]:
            directory = os.path.join(directory, part)
            info = os.stat(directory)
            if info.st_uid != UNPRIVILEGED_UID and not info.st_mode & 0o001:
                return directory
    return None


def unprivileged(argv: Sequence[str]) -> list[str]:
    """argv prefixed to run as nobody:nogroup with no supplementary groups."""
    return ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}",
            "--clear-groups", "--", *argv]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.alone(reason)``: the test needs the machine to itself (it times CPU
    shares against the wall clock, or watches directories every test shares), which other
    tests running beside it (pytest -n, as CI's passes do) make meaningless. Skipped
    there, saying why; the serial pass runs it."""
    marker = item.get_closest_marker("alone")
    if marker and os.environ.get("PYTEST_XDIST_WORKER"):
        reason = marker.kwargs.get("reason", "needs the machine to itself")
        pytest.skip(f"{reason}: runs in a serial pass (pytest -m alone), not under pytest -n")


@pytest.fixture(scope="module")
def upstream_ca(tmp_path_factory):
    """A trustme CA for a module's TLS upstreams, and its certificate's file (for
    --upstream-ca, or a client's trust)."""
    import trustme  # (only modules with TLS upstreams pay for it)

    ca = trustme.CA()
    path = tmp_path_factory.mktemp("upstream") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, str(path)


@pytest.fixture(scope="session")
def as_nobody():
    """Returns `unprivileged`; skips (or, in CI, fails) where uid 65534 cannot run sandlock."""
    if os.getuid() != 0:
        return lambda argv: list(argv)  # already unprivileged
    problem = _unprivileged_problem()
    if problem:
        if REQUIRE_UNPRIVILEGED:
            pytest.fail(problem)
        pytest.skip(problem)
    return unprivileged


@pytest.fixture
def as_nobody_or_self(request):
    """Parametrized (``@users``): run as the test user, or (param "nobody") as uid 65534."""
    if request.param == "nobody":
        return request.getfixturevalue("as_nobody")
    return None


users = pytest.mark.parametrize("as_nobody_or_self", ["self", "nobody"], indirect=True)


@pytest.fixture
def world_tmp(tmp_path):
    """A scratch directory an unprivileged user can use (tmp_path's parents are 0700)."""
    path = tmp_path / "shared"
    path.mkdir()
    for p in (tmp_path, path):
        os.chmod(p, 0o777)
    parent = tmp_path.parent
    while parent != parent.parent and str(parent).startswith("/tmp/"):
        os.chmod(parent, os.stat(parent).st_mode | 0o711)
        parent = parent.parent
    return path


@pytest.fixture
def unscratched():
    """An empty directory outside /tmp, /var/tmp and /dev/shm (which the default
    workspace makes writable), for a fake $HOME the default workspace must not see."""
    base = "/srv" if os.access("/srv", os.W_OK) else os.path.expanduser("~")
    path = tempfile.mkdtemp(prefix="sandlock-test-", dir=base)
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)


# Sandboxed processes live in their own PID namespace: the pid a command prints ($!,
# os.getpid()) is its pid in there. These find them from outside.

def host_pid(ns_pid: int, ancestor: int, seconds: float = 5.0) -> int:
    """The pid, as seen here, of the process that a sandbox started by ``ancestor`` (a
    sandlock process, or this one through the API) knows as ``ns_pid``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _ns_pids(entry)[-1:] == [ns_pid] and \
                    len(_ns_pids(entry)) > 1 and _descends(int(entry), ancestor):
                return int(entry)
        time.sleep(0.02)
    raise LookupError(f"no process known as {ns_pid} in a sandbox under {ancestor}")


def _ns_pids(pid: str) -> list[int]:
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next((line for line in status if line.startswith("NSpid:")), "NSpid:")
    except OSError:
        return []
    return [int(value) for value in line.split()[1:]]


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def unique_sleep() -> str:
    """A `sleep` duration no other process has: the marker of one test's process."""
    return f"{600 + random.random():.6f}"


def wait_no_process(*argv: str, seconds: float = 5.0) -> bool:
    """True once no process runs with exactly this command line."""
    wanted = b"\0".join(arg.encode() for arg in argv) + b"\0"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_cmdline(entry) == wanted for entry in os.listdir("/proc") if entry.isdigit()):
            return True
        time.sleep(0.02)
    return False


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.fixture
def upstreams():
    """Two HTTP upstreams recording what reached them: 127.0.0.2 (the one tests allow)
    and 127.0.0.3 (the one they deny)."""
    from httpservers import Upstream

    with Upstream("127.0.0.2") as allowed, Upstream("127.0.0.3") as denied:
        yield allowed, denied


# For a confined Python snippet (that imports errno): a call's outcome in a word.
ATTEMPT = '''
def attempt(function, *args):
    """"ok", or the name of the errno the call failed with."""
    try:
        function(*args)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"
'''

# The start of a confined Python snippet whose getpid32() makes the i386 getpid call
# (int 0x80) from a 64-bit process: the filter kills it with SIGSYS (and no core file).
I386_GETPID = """
import ctypes, mmap, resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (i386 getpid); int 0x80; ret
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
getpid32 = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
"""
