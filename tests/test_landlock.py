"""Landlock interface and filesystem policy, checked on real confined processes.

Each process test builds a Ruleset here, forks, and in the child sets
no_new_privs and restricts itself before exec'ing a small Python probe that
attempts file operations and prints "ok" or the errno name for each.
"""

from __future__ import annotations

import ctypes
import os
import pty
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest
from conftest import PYTHON, REQUIRE_UNPRIVILEGED, unprivileged

from sandlock.kernel import _libc
from sandlock._errors import SetupError
from sandlock.confinement._confinement import level_access
from sandlock.confinement._workspace import default_workspace
from sandlock.confinement._fspolicy import (
    CREDENTIAL_STORES,
    LIST,
    READ,
    WRITE,
    PathRule,
    compile_grants,
    sandlock_ca_cache_dir,
    sandlock_runtime_dir,
    sandlock_ca_dir,
    workspace_store,
)
from sandlock.kernel._landlock import (
    FS_FILE_ACCESS,
    FS_IOCTL_DEV,
    FS_REFER,
    FS_TRUNCATE,
    SCOPE_ABSTRACT_UNIX_SOCKET,
    SCOPE_SIGNAL,
    Ruleset,
    _PathBeneathAttr,
    _ruleset_attr_size,
    abi_version,
    fs_handled,
    fs_read_access,
    fs_write_access,
    scopes_supported,
)
from sandlock.kernel._syscalls import nr

ABI = abi_version()
ROOT = str(Path(__file__).resolve().parent.parent)
pytestmark = pytest.mark.skipif(ABI < 1, reason="Landlock is not available")
needs_abi = {level: pytest.mark.skipif(ABI < level, reason=f"needs Landlock ABI {level}")
             for level in (3, 5, 6)}

# The child program: one operation per argument ("name|arg|arg"), one result line each.
PROBE = r"""
import errno, os, signal, socket, sys, termios

def read(path):
    if os.path.isdir(path):
        os.listdir(path)
    else:
        with open(path, "rb") as f:
            f.read(1)

def opener(flags):
    return lambda path: os.close(os.open(path, flags, 0o644))

def append(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"x")
    os.close(fd)

def run(path):
    pid = os.posix_spawn(path, [path], {})
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return None if status == 0 else f"exit {status}"

def kill_own_child():
    pid = os.posix_spawn("/bin/sleep", ["sleep", "5"], {})
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)

def connect_abstract(name):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0" + name)

def fd_targets():
    links = [f"/proc/self/fd/{fd}" for fd in os.listdir("/proc/self/fd")]
    return " ".join(os.readlink(link) for link in links if os.path.exists(link))

def pty():
    master, slave = os.openpty()
    termios.tcgetattr(slave)

def tty():
    termios.tcgetattr(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))

OPS = {
    "read": read,
    "create": opener(os.O_WRONLY | os.O_CREAT | os.O_EXCL),
    "otrunc": opener(os.O_WRONLY | os.O_TRUNC),
    "append": append,
    "truncate": lambda path: os.truncate(path, 0),
    "mkdir": os.mkdir,
    "rename": os.rename,
    "link": os.link,
    "run": run,
    "kill": lambda pid: os.kill(int(pid), 0),
    "kill_own_child": kill_own_child,
    "connect": connect_abstract,
    "fds": fd_targets,
    "pty": pty,
    "tty": tty,
}

for op in sys.argv[1:]:
    name, *args = op.split("|")
    try:
        result = OPS[name](*args)
    except OSError as exc:
        result = errno.errorcode.get(exc.errno, repr(exc))
    print("ok" if result is None else result, flush=True)
"""


def _runtime_dirs() -> tuple[str, ...]:
    """What the probe interpreter needs to start: its prefix, the system libraries."""
    candidates = {*PYTHON, "/usr", "/lib", "/lib64", "/etc"}
    return tuple(sorted(path for path in candidates if os.path.exists(path)))


RUNTIME = _runtime_dirs()


def build_ruleset(read: Iterable[str] = RUNTIME, write: Iterable[str] = (),
                  deny: Iterable[str] = (), scoped: int = 0,
                  write_mask: int | None = None) -> Ruleset:
    """A Ruleset for compile_grants(read, write, deny); write_mask overrides write rights."""
    access = level_access(ABI)
    if write_mask is not None:
        access[WRITE] = write_mask
    ruleset = Ruleset(fs_handled(ABI), scoped=scoped)
    try:
        for rule in compile_grants(read, write, deny):
            try:
                ruleset.allow_path(rule.path, access[rule.level])
            except FileNotFoundError:
                # Gone since it was listed, as sandlock's own compile skips it: an
                # expanded "/" lists /tmp, where the other tests' files come and go.
                continue
    except BaseException:
        ruleset.close()
        raise
    return ruleset


def _confiner(ruleset: Ruleset):
    def confine() -> None:  # runs in the forked child, right before exec
        _libc.prctl(_libc.PR_SET_NO_NEW_PRIVS, 1)
        ruleset.restrict_self()
    return confine


def run_confined(ruleset: Ruleset, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, preexec_fn=_confiner(ruleset), capture_output=True, text=True,
                          timeout=30, **kwargs)


def run_probe(ruleset: Ruleset, *ops: str, **kwargs) -> list[str]:
    done = run_confined(ruleset, [sys.executable, "-I", "-S", "-c", PROBE, *ops], **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def probe(*ops: str, **policy) -> list[str]:
    """Results of ``ops`` in a child confined by ``build_ruleset(**policy)``."""
    with build_ruleset(**policy) as ruleset:
        return run_probe(ruleset, *ops)


def op(name: str, *args: object) -> str:
    return "|".join([name, *map(str, args)])


def make(path: Path, text: str = "data") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- kernel interface ----------------------------------------------------------------


def test_abi_masks_grow_with_the_abi():
    assert fs_read_access(ABI) & ~fs_write_access(ABI) == 0
    assert fs_handled(1) & (FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV) == 0
    assert fs_handled(2) & FS_REFER and not fs_handled(2) & FS_TRUNCATE
    newer = FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV
    assert fs_write_access(5) & newer == newer
    assert scopes_supported(5) == 0
    assert scopes_supported(6) == SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET
    assert [_ruleset_attr_size(abi) for abi in (1, 3, 4, 5, 6, 7)] == [8, 8, 16, 16, 24, 24]
    assert ctypes.sizeof(_PathBeneathAttr) == 12  # packed, as in the uapi header


def test_ruleset_refuses_what_the_kernel_cannot_enforce():
    with pytest.raises(SetupError, match="newer Landlock ABI"):
        Ruleset(fs_handled(ABI) | 1 << 40)
    with pytest.raises(SetupError, match="cannot create a Landlock ruleset"):
        Ruleset(0)  # nothing handled: ENOMSG


def test_kernel_creates_the_ruleset_close_on_exec():
    attr = ctypes.c_uint64(fs_handled(1))
    fd = _libc.syscall(nr("landlock_create_ruleset"), ctypes.byref(attr), 8, 0)
    try:
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_allow_path_masks_directory_rights_on_files(tmp_path):
    with Ruleset(fs_handled(ABI)) as ruleset:
        ruleset.allow_path(str(make(tmp_path / "f")), fs_write_access(ABI))  # EINVAL if unmasked
        ruleset.allow_path(str(tmp_path), fs_write_access(ABI))
        with pytest.raises(FileNotFoundError):
            ruleset.allow_path(str(tmp_path / "missing"), fs_read_access(ABI))
    assert fs_write_access(ABI) & ~FS_FILE_ACCESS  # the masking above was needed


def test_ruleset_fd_is_not_inherited_by_the_program():
    with build_ruleset(read=["/"]) as ruleset:
        targets = run_probe(ruleset, "fds", close_fds=False)[0]
        assert "landlock" not in targets
        os.set_inheritable(ruleset.fileno(), True)  # control: the probe would see it
        assert "landlock" in run_probe(ruleset, "fds", close_fds=False)[0]


# --- compilation ---------------------------------------------------------------------


def test_write_implies_read_and_nested_rules_only_add(tmp_path):
    a, b = tmp_path / "a", tmp_path / "a" / "b"
    b.mkdir(parents=True)
    assert compile_grants([a], [a], []) == [PathRule(str(a), WRITE)]
    assert compile_grants([a, b], [], []) == [PathRule(str(a), READ)]
    assert compile_grants([b], [a], []) == [PathRule(str(a), WRITE)]
    assert compile_grants([a], [b], []) == [PathRule(str(a), READ), PathRule(str(b), WRITE)]
    assert compile_grants([a / "missing"], [], []) == []


def _deny_tree(root: Path) -> Path:
    """root/a/{secret/key, other/f, sib.txt, x, y, z} and root/outside/f."""
    a = root / "a"
    for name in ("secret/key", "other/f", "sib.txt", "x", "y", "z"):
        make(a / name)
    make(root / "outside" / "f")
    return a


def test_deny_expands_every_directory_on_the_way(tmp_path):
    a = _deny_tree(tmp_path)
    rules = compile_grants([tmp_path], [], [a / "secret"])
    expected = ["outside", "a/other", "a/sib.txt", "a/x", "a/y", "a/z"]
    listed = [PathRule(str(tmp_path), LIST)]  # covers a's own LIST rule
    assert rules == sorted([*listed, *(PathRule(str(tmp_path / name), READ) for name in expected)])


def test_two_denies_in_one_directory_expand_it_once(tmp_path):
    a = _deny_tree(tmp_path)
    rules = compile_grants([], [a], [a / "x", a / "secret" / ".." / "y"])  # normalised
    expected = [str(a / name) for name in ("other", "secret", "sib.txt", "z")]
    assert rules[0] == PathRule(str(a), LIST)
    assert [rule.path for rule in rules[1:]] == expected
    assert all(rule.level == WRITE for rule in rules[1:])


def test_deny_equal_to_or_enclosing_a_grant_removes_it(tmp_path):
    a = _deny_tree(tmp_path)
    assert compile_grants([a], [a / "other"], [a]) == []
    assert compile_grants([], [a / "other"], [tmp_path]) == []


def test_missing_deny_is_ignored(tmp_path):
    a = _deny_tree(tmp_path)
    assert compile_grants([], [a], [a / "nope"]) == [PathRule(str(a), WRITE)]


def test_paths_are_resolved_and_symlinks_get_no_rule(tmp_path):
    a = _deny_tree(tmp_path)
    (a / "to_secret").symlink_to(a / "secret")
    (tmp_path / "alias").symlink_to(a)
    rules = compile_grants([tmp_path / "alias"], [], [tmp_path / "alias" / "secret"])
    paths = [rule.path for rule in rules]
    assert str(a / "other") in paths
    assert not any("to_secret" in path or "alias" in path for path in paths)


def test_default_workspace_lists_the_credential_stores_and_ca():
    read, write, deny = default_workspace("/h", "/w", {}, widen={})
    assert "/" not in read and "/h" not in read + write  # deny by default for $HOME
    assert {"/usr", "/etc", "/proc", "/h/.local/bin", "/h/.cargo/bin", "/h/.gitconfig"} <= set(read)
    assert {"/w", "/tmp", "/var/tmp", "/dev/shm", "/dev/null", "/dev/pts", "/h/.cache",
            "/h/.npm", "/h/.cargo/registry"} <= set(write)
    stores = {f"/h/{store}" for store in CREDENTIAL_STORES}
    runtime = {sandlock_runtime_dir({}, "/h"), sandlock_runtime_dir(os.environ, "/h")}
    assert set(deny) == stores | {"/h/.local/share/sandlock/ca",
                                  "/h/.local/state/sandlock/workspaces",
                                  "/h/.local/state/sandlock/images"} | runtime
    assert {".ssh", ".aws", ".gnupg", ".netrc", ".config/gcloud", ".config/gh",
            ".local/share/keyrings", ".bash_history", ".cargo/credentials.toml",
            ".vault-token", ".pgpass", ".mozilla"} <= set(CREDENTIAL_STORES)


def test_workspace_store_follows_xdg_state_home():
    assert workspace_store({"XDG_STATE_HOME": "/s"}, "/h") == "/s/sandlock/workspaces"
    assert workspace_store({"XDG_STATE_HOME": "rel"}, "/h") == "/h/.local/state/sandlock/workspaces"


def test_ca_dir_follows_xdg_data_home():
    assert sandlock_ca_dir({"XDG_DATA_HOME": "/d"}, "/h") == "/d/sandlock/ca"
    assert sandlock_ca_dir({"XDG_DATA_HOME": "rel"}, "/h") == "/h/.local/share/sandlock/ca"


def test_ca_cache_dir_is_in_the_runtime_directory_or_beside_the_ca(tmp_path):
    runtime = {"XDG_RUNTIME_DIR": str(tmp_path), "XDG_DATA_HOME": "/d"}
    assert sandlock_ca_cache_dir(runtime, "/h") == f"{tmp_path}/sandlock/ca-cache"
    missing = {"XDG_RUNTIME_DIR": str(tmp_path / "gone"), "XDG_DATA_HOME": "/d"}
    if not os.path.isdir(f"/run/user/{os.getuid()}"):
        assert sandlock_ca_cache_dir(missing, "/h") == "/d/sandlock/runtime/ca-cache"


# --- confined processes: grants ------------------------------------------------------


@pytest.fixture
def dirs(tmp_path):
    """tmp/r (read grant), tmp/w and tmp/w2 (write grants), tmp/o (nothing)."""
    for name in ("r/file", "r/ro", "w/f1", "w/f2", "w/f3", "o/file"):
        make(tmp_path / name)
    script = make(tmp_path / "r" / "script", "#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    shutil.copy(script, tmp_path / "o" / "script")
    (tmp_path / "w2").mkdir()
    return tmp_path


def _grants(d: Path) -> dict:
    return {"read": [*RUNTIME, d / "r"], "write": [d / "w", d / "w2"]}


def test_read_write_and_outside(dirs):
    r, w, o = dirs / "r", dirs / "w", dirs / "o"
    results = probe(
        op("read", r / "file"), op("read", r), op("run", r / "script"),
        op("create", r / "new"), op("append", r / "file"), op("mkdir", r / "d"),
        op("create", w / "new"), op("append", w / "f1"), op("mkdir", w / "d"),
        op("read", o / "file"), op("read", o), op("run", o / "script"), op("create", o / "new"),
        **_grants(dirs),
    )
    assert results == ["ok"] * 3 + ["EACCES"] * 3 + ["ok"] * 3 + ["EACCES"] * 4


def test_rename_and_link_across_write_dirs(dirs):
    w, w2, r = dirs / "w", dirs / "w2", dirs / "r"
    results = probe(
        op("rename", w / "f1", w2 / "f1"), op("link", w / "f2", w2 / "f2"),
        op("rename", w / "f3", r / "f3"), op("rename", r / "ro", w / "ro"),
        **_grants(dirs),
    )
    assert results == ["ok", "ok", "EACCES", "EACCES"]
    assert (w2 / "f1").exists() and (w2 / "f2").exists() and (w / "f3").exists()


@needs_abi[3]
def test_truncate(dirs):
    w, r = dirs / "w", dirs / "r"
    results = probe(op("truncate", w / "f1"), op("otrunc", w / "f2"), op("truncate", r / "file"),
                    **_grants(dirs))
    assert results == ["ok", "ok", "EACCES"]
    # Without TRUNCATE in the write rights, writing works but truncating does not.
    results = probe(op("append", w / "f3"), op("truncate", w / "f3"), op("otrunc", w / "f3"),
                    write_mask=fs_write_access(ABI) & ~FS_TRUNCATE, **_grants(dirs))
    assert results == ["ok", "EACCES", "EACCES"]


# --- confined processes: denies ------------------------------------------------------


def test_deny_inside_a_read_grant_of_root(tmp_path):
    a = _deny_tree(tmp_path)
    paths = [a / "other" / "f", a / "sib.txt", a / "secret" / "key", a / "secret", "/etc/passwd"]
    results = probe(*(op("read", path) for path in paths), read=["/"], deny=[a / "secret"])
    # The denied directory's names can be listed (its parent keeps LIST), not its files.
    assert results == ["ok", "ok", "EACCES", "ok", "ok"]


def test_deny_inside_a_write_grant(tmp_path):
    a = _deny_tree(tmp_path)
    results = probe(op("create", a / "other" / "new"), op("append", a / "sib.txt"),
                    op("read", a / "secret" / "key"), op("create", a / "secret" / "new"),
                    op("create", a / "new"),  # an expanded directory keeps no rights of its own
                    write=[a], deny=[a / "secret"])
    assert results == ["ok", "ok", "EACCES", "EACCES", "EACCES"]


def test_deny_single_file_and_two_denies(tmp_path):
    a = _deny_tree(tmp_path)
    reads = [op("read", a / name) for name in ("x", "y", "z", "sib.txt")]
    assert probe(*reads, read=["/"], deny=[a / "x"]) == ["EACCES", "ok", "ok", "ok"]
    assert probe(*reads, read=["/"], deny=[a / "x", a / "y"]) == ["EACCES", "EACCES", "ok", "ok"]


def test_deny_equal_to_or_above_a_grant(tmp_path):
    a = _deny_tree(tmp_path)
    results = probe(op("create", a / "new"), op("read", a / "x"), write=[a], deny=[a])
    assert results == ["EACCES"] * 2
    assert probe(op("create", a / "other" / "new"), write=[a / "other"], deny=[a]) == ["EACCES"]


def test_missing_deny_changes_nothing(tmp_path):
    a = _deny_tree(tmp_path)
    assert probe(op("create", a / "new"), write=[a], deny=[a / "nope"]) == ["ok"]


def test_symlinks_in_an_expanded_directory_do_not_reopen_access(tmp_path):
    a = _deny_tree(tmp_path)
    (a / "to_secret").symlink_to(a / "secret")
    (a / "to_key").symlink_to(a / "secret" / "key")
    (a / "to_other").symlink_to(a / "other" / "f")
    (a / "to_outside").symlink_to(tmp_path / "outside")
    results = probe(op("read", a / "to_secret" / "key"), op("read", a / "to_key"),
                    op("read", a / "to_other"), op("read", a / "to_outside" / "f"),
                    read=[*RUNTIME, a], deny=[a / "secret"])
    # A rule on to_outside would have granted tmp/outside, which was never granted.
    assert results == ["EACCES", "EACCES", "ok", "EACCES"]


# --- the default workspace -----------------------------------------------------------


@pytest.fixture
def workspace(unscratched):
    """A fake HOME with credentials, a cwd, and the default-workspace rules for them."""
    home, cwd = unscratched / "home", unscratched / "proj"
    for name in (".ssh/id_rsa", ".aws/credentials", ".config/gcloud/x", ".config/other",
                 ".netrc", ".local/share/sandlock/ca/ca.key", "notes.txt", ".local/bin/tool",
                 ".cache/pip/x"):
        make(home / name)
    cwd.mkdir()
    read, write, deny = default_workspace(str(home), str(cwd), {}, widen={})
    return home, cwd, ([*read, *RUNTIME], write, deny)  # (the probe's interpreter too)


def test_default_workspace_confines(workspace):
    home, cwd, (read, write, deny) = workspace
    secrets = [".ssh/id_rsa", ".aws/credentials", ".config/gcloud/x", ".netrc",
               ".local/share/sandlock/ca/ca.key"]
    probe_file = f"/etc/sandlock-probe-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        try:
            results = probe(
                *(op("read", home / name) for name in secrets),
                op("read", home / "notes.txt"), op("read", home / ".config" / "other"),
                op("create", cwd / "new"), op("create", Path(scratch) / "new"),
                op("read", "/etc/passwd"), op("read", home / ".local/bin/tool"),
                op("create", home / ".cache/pip/y"),
                op("create", probe_file), op("append", "/dev/null"), op("create", home / "new"),
                read=read, write=write, deny=deny,
            )
        finally:
            Path(probe_file).unlink(missing_ok=True)
    # Nothing of $HOME but its tools and caches: notes.txt and .config/other too.
    assert results == (["EACCES"] * len(secrets) + ["EACCES", "EACCES"] + ["ok"] * 5
                       + ["EACCES", "ok", "EACCES"])


def _pty_available() -> bool:
    try:
        master, slave = os.openpty()
    except OSError:
        return False
    os.close(master)
    os.close(slave)
    return True


@needs_abi[5]
@pytest.mark.skipif(not _pty_available(), reason="no pseudo-terminals here")
def test_terminal_ioctl_on_a_new_pty(workspace):
    _, _, (read, write, deny) = workspace
    assert probe("pty", read=read, write=write, deny=deny) == ["ok"]
    # The same policy without IOCTL_DEV cannot drive the terminal it opened.
    mask = fs_write_access(ABI) & ~FS_IOCTL_DEV
    assert probe("pty", read=read, write=write, deny=deny, write_mask=mask) == ["EACCES"]


def _controlling_tty() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


@needs_abi[5]
def test_terminal_ioctl_on_dev_tty(workspace):
    _, _, (read, write, deny) = workspace
    if _controlling_tty():
        assert probe("tty", read=read, write=write, deny=deny) == ["ok"]
        return
    # No terminal here (CI): run the probe in a session whose controlling terminal is
    # a fresh pty, and read its verdict back over a pipe.
    verdict_r, verdict_w = os.pipe()
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.write(verdict_w, ",".join(probe("tty", read=read, write=write, deny=deny)).encode())
        finally:
            os._exit(0)
    os.close(verdict_w)
    with os.fdopen(verdict_r, "rb") as verdict:
        result = verdict.read().decode()
    os.waitpid(pid, 0)
    os.close(master)
    assert result == "ok"


# --- IPC scopes ----------------------------------------------------------------------


@needs_abi[6]
def test_signal_scope():
    outsider = subprocess.Popen(["sleep", "30"])
    try:
        kill = op("kill", outsider.pid)
        assert probe(kill, "kill_own_child", read=["/"], scoped=SCOPE_SIGNAL) == ["EPERM", "ok"]
        assert probe(kill, read=["/"]) == ["ok"]
    finally:
        outsider.kill()
        outsider.wait()


@needs_abi[6]
def test_abstract_unix_socket_scope():
    name = f"sandlock-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0" + name)
        server.listen()
        connect = op("connect", name)
        assert probe(connect, read=["/"], scoped=SCOPE_ABSTRACT_UNIX_SOCKET) == ["EPERM"]
        assert probe(connect, read=["/"]) == ["ok"]


# --- unprivileged --------------------------------------------------------------------

# Run by uid 65534: compile and build the ruleset, then run the probe twice: with the
# operations before "--" unconfined (what DAC allows), with those after it confined.
DRIVER = r"""
import subprocess, sys
root, work, probe, *ops = sys.argv[1:]
sys.path.insert(0, root)
from sandlock.confinement import _confinement as _confine, _fspolicy
from sandlock.kernel import _landlock, _libc

abi = _landlock.abi_version()
access = _confine.level_access(abi)
with _landlock.Ruleset(_landlock.fs_handled(abi)) as ruleset:
    for rule in _fspolicy.compile_grants(["/"], [work + "/w"], [work + "/secret"]):
        ruleset.allow_path(rule.path, access[rule.level])

    def confine():
        _libc.prctl(_libc.PR_SET_NO_NEW_PRIVS, 1)
        ruleset.restrict_self()

    split = ops.index("--")
    for preexec, batch in ((None, ops[:split]), (confine, ops[split + 1:])):
        argv = [sys.executable, "-I", "-S", "-c", probe, *batch]
        subprocess.run(argv, preexec_fn=preexec, check=True)
"""


@cache
def _unprivileged_python() -> str | None:
    """An interpreter uid 65534 can run (sys.executable may live under a private HOME)."""
    if shutil.which("setpriv") is None:
        return None
    for python in (sys.executable, "/usr/bin/python3"):
        # The probe re-executes the interpreter as that user, hence os.access.
        check = [python, "-c", "import os, sys; "
                 "sys.exit(sys.version_info < (3, 11) or not os.access(sys.executable, os.X_OK))"]
        if subprocess.run(unprivileged(check), capture_output=True).returncode == 0:
            return python
    return None


@pytest.fixture
def nobody_python():
    if os.getuid() != 0:
        return sys.executable  # already unprivileged
    python = _unprivileged_python()
    if python is None:
        message = "uid 65534 cannot run a Python >= 3.11 here (or setpriv is missing)"
        if REQUIRE_UNPRIVILEGED:
            pytest.fail(message)
        pytest.skip(message)
    return python


@pytest.fixture
def shared_dir():
    """A directory under /tmp that uid 65534 can list (tmp_path's parents are private).

    Listable matters: compiling a deny expands every directory above it, and a
    directory that cannot be listed is expanded to nothing (fail closed).
    """
    path = Path(tempfile.mkdtemp(prefix="sandlock-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_unprivileged_user(nobody_python, shared_dir):
    for name in ("secret/key", "pub.txt", "w/f"):
        make(shared_dir / name)
    for name in ("w", "o"):
        (shared_dir / name).mkdir(exist_ok=True)
        (shared_dir / name).chmod(0o777)
    secret = op("read", shared_dir / "secret" / "key")
    confined = [secret, op("read", shared_dir / "secret"), op("read", shared_dir / "pub.txt"),
                op("read", shared_dir / "w" / "f"), op("create", shared_dir / "w" / "new"),
                op("create", shared_dir / "o" / "new")]
    done = subprocess.run(
        unprivileged([nobody_python, "-c", DRIVER, ROOT, str(shared_dir), PROBE,
                      secret, op("create", shared_dir / "o" / "baseline"), "--", *confined]),
        capture_output=True, text=True, timeout=30, cwd="/",
    )
    assert done.returncode == 0, done.stderr
    unconfined = ["ok", "ok"]
    # The denied directory can be listed (names only); its file cannot be read.
    assert done.stdout.splitlines() == unconfined + ["EACCES", "ok", "ok", "ok", "ok", "EACCES"]
    assert (shared_dir / "w" / "new").stat().st_uid == 65534
