"""Per-protection degrade and opt-out (upstream Sandlock's ``Protection``, ``allow_degraded``,
``disable``) and the syscall lists (``deny_syscalls``, ``extra_deny_syscalls``,
``extra_allow_syscalls``), in the style of upstream's cases: each protection is shown in
force by default (the attack fails), off when disabled (the same attack succeeds), and a
protection the kernel lacks is an error unless that protection may degrade.

A kernel without Landlock is made for sandlock itself: it runs under a seccomp filter of
the test's that answers landlock_create_ruleset with ENOSYS, what a kernel built without
Landlock answers (docs/usage.md, "Protections")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import ATTEMPT, CHECKOUT, PYTHON, SANDLOCK, sandlock, unprivileged

import sandlock as sandlock_api
from sandlock import Policy, PolicyError, Protection, Sandbox

PY = sys.executable
PRELUDE = "import ctypes, errno, json, os, socket, sys\n" + ATTEMPT
# What a confined Python needs to start, for runs with explicit grants.
BASE_GRANTS = tuple(option for path in ("/usr", "/lib", "/lib64", "/etc", *PYTHON, CHECKOUT)
                    for option in ("-r", path))


def confined(code: str, *options: str, as_user=lambda argv: argv, cwd=None,
             **args: object) -> subprocess.CompletedProcess:
    program = [PY, "-c", PRELUDE + textwrap.dedent(code), json.dumps(args)]
    return subprocess.run(as_user([*SANDLOCK, "run", *options, "--", *program]),
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def report(done: subprocess.CompletedProcess) -> object:
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


# --- the enum and the fields ------------------------------------------------------------

def test_protection_is_upstreams_intenum_reexported_at_the_top_level():
    assert sandlock_api.Protection is Protection and "Protection" in sandlock_api.__all__
    assert [(p.name, int(p)) for p in Protection][:6] == [
        ("FS_REFER", 0), ("FS_TRUNCATE", 1), ("NET_TCP", 2), ("FS_IOCTL_DEV", 3),
        ("SIGNAL_SCOPE", 4), ("ABSTRACT_UNIX_SOCKET_SCOPE", 5)]
    assert isinstance(Protection.SIGNAL_SCOPE, int) and int(Protection.SIGNAL_SCOPE) == 4
    assert (Protection.SIGNAL_SCOPE.min_abi, Protection.FS_TRUNCATE.min_abi) == (6, 3)
    assert {Protection.LANDLOCK_FS, Protection.NAMESPACES} <= set(Protection)


def test_both_fields_default_empty_and_keep_what_they_are_given():
    assert (Policy().allow_degraded, Policy().disable) == ((), ())
    policy = Policy(allow_degraded=[Protection.SIGNAL_SCOPE, Protection.ABSTRACT_UNIX_SOCKET_SCOPE],
                    disable=[Protection.SIGNAL_SCOPE])
    assert list(policy.allow_degraded) == [Protection.SIGNAL_SCOPE,
                                           Protection.ABSTRACT_UNIX_SOCKET_SCOPE]
    assert list(policy.disable) == [Protection.SIGNAL_SCOPE]
    # a plain number in range and a name are the same protection; repeats count once
    assert Policy(allow_degraded=[4, "signal-scope", Protection.SIGNAL_SCOPE]).allow_degraded == (
        Protection.SIGNAL_SCOPE,)


@pytest.mark.parametrize("field", ["allow_degraded", "disable"])
@pytest.mark.parametrize("value", [[99], [-1], [100, 200], ["FS_NOTHING"], [True]])
def test_a_value_that_is_no_protection_is_refused_naming_the_field(field, value):
    with pytest.raises(PolicyError) as error:
        Policy(**{field: value})
    assert error.value.field == field and "is not a protection" in error.value.message


def test_what_no_run_goes_without_cannot_be_disabled():
    for protection, way in ((Protection.LANDLOCK_FS, "full-access"), (Protection.NET_TCP, "--net-allow")):
        with pytest.raises(PolicyError, match=way):
            Policy(disable=[protection])


def test_strict_is_upstreams_spelling_of_best_effort():
    assert Policy(strict=False).best_effort is True and Policy(strict=False).strict is False
    assert Policy().strict is True
    assert Policy(best_effort=True).replace(strict=True).best_effort is False
    assert Policy().replace(strict=False).best_effort is True
    with pytest.raises(PolicyError, match="strict: expected true or false"):
        Policy(strict="no")


def test_an_unknown_protection_on_the_command_line_is_one_line_exit_2():
    done = sandlock("run", "--disable", "SIGNAL_SCOOP", "--", "true")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sandlock: error: --disable: 'SIGNAL_SCOOP' is not a protection (one of: FS_REFER, "
        "FS_TRUNCATE, NET_TCP, FS_IOCTL_DEV, SIGNAL_SCOPE, ABSTRACT_UNIX_SOCKET_SCOPE, "
        "LANDLOCK_FS, NAMESPACES)"]


# --- disable: each protection really off, and in force without it ------------------------

ABSTRACT = """
s = socket.socket(socket.AF_UNIX)
print(json.dumps(attempt(s.connect, "\\0" + json.loads(sys.argv[1])["name"])))
"""


@pytest.fixture
def abstract_listener():
    name = f"sandlock-protections-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen()
    yield name
    server.close()


def test_disabling_the_abstract_socket_scope_lets_the_host_socket_be_reached(abstract_listener,
                                                                            as_nobody):
    for as_user in (lambda argv: argv, as_nobody):
        scoped = confined(ABSTRACT, as_user=as_user, name=abstract_listener)
        opened = confined(ABSTRACT, "--disable", "ABSTRACT_UNIX_SOCKET_SCOPE", as_user=as_user,
                          name=abstract_listener)
        assert report(scoped) == "EPERM"
        assert report(opened) == "ok"
        assert ("sandlock: warning: protection ABSTRACT_UNIX_SOCKET_SCOPE is DISABLED "
                "(--disable)") in opened.stderr


SIGNAL = 'print(json.dumps(attempt(os.kill, json.loads(sys.argv[1])["pid"], 0)))'


def test_disabling_the_signal_scope_lets_a_host_process_be_signalled():
    """Without namespaces (disabled too) the host's processes have their own numbers:
    the signal scope alone keeps them out."""
    with subprocess.Popen(["sleep", "30"]) as outsider:
        try:
            scoped = confined(SIGNAL, "--disable", "NAMESPACES", pid=outsider.pid)
            opened = confined(SIGNAL, "--disable", "NAMESPACES", "--disable", "SIGNAL_SCOPE",
                              pid=outsider.pid)
        finally:
            outsider.kill()
    assert report(scoped) == "EPERM"
    assert report(opened) == "ok"
    assert "protection NAMESPACES is DISABLED" in scoped.stderr


TRUNCATE = """
path = json.loads(sys.argv[1])["path"]
print(json.dumps([attempt(os.truncate, path, 0), os.stat(path).st_size]))
"""


def test_disabling_fs_truncate_lets_a_read_only_file_be_truncated(world_tmp, as_nobody):
    for as_user, owner in ((lambda argv: argv, os.getuid()), (as_nobody, 65534)):
        target = world_tmp / f"readonly-{owner}"
        target.write_text("kept\n")
        os.chown(target, owner, owner)
        grants = (*BASE_GRANTS, "-r", str(world_tmp))
        assert report(confined(TRUNCATE, *grants, as_user=as_user, path=str(target))) == [
            "EACCES", 5]
        assert report(confined(TRUNCATE, *grants, "--disable", "FS_TRUNCATE", as_user=as_user,
                               path=str(target))) == ["ok", 0]


IOCTL = """
import fcntl, termios
fd = os.open("/dev/ptmx", os.O_RDONLY)
print(json.dumps(attempt(fcntl.ioctl, fd, termios.TCGETS, bytes(64))))
"""


def test_disabling_fs_ioctl_dev_lets_a_read_only_device_take_ioctls():
    """TCGETS on a pty master (/dev/ptmx, in no grant of sandlock's own, unlike /dev/null)."""
    grants = (*BASE_GRANTS, "-r", "/dev/ptmx")
    assert report(confined(IOCTL, *grants)) == "EACCES"
    assert report(confined(IOCTL, *grants, "--disable", "FS_IOCTL_DEV")) == "ok"


RENAME = """
os.makedirs("a", exist_ok=True); os.makedirs("b", exist_ok=True)
open("a/file", "w").close()
print(json.dumps(attempt(os.rename, "a/file", "b/file")))
"""


def test_disabling_fs_refer_leaves_landlock_refusing_every_cross_directory_rename(tmp_path):
    """What upstream's FS_REFER opt-out does to the kernel: REFER unhandled is ABI 1's rule."""
    grants = (*BASE_GRANTS, "-w", str(tmp_path))
    assert report(confined(RENAME, *grants, cwd=tmp_path)) == "ok"
    assert report(confined(RENAME, *grants, "--disable", "FS_REFER", cwd=tmp_path)) == "EXDEV"


# --- allow_degraded: a kernel without Landlock ---------------------------------------------

# seccomp_data.nr == landlock_create_ruleset (444) -> ERRNO(ENOSYS), else ALLOW (x86_64 only).
NO_LANDLOCK = """
import ctypes, os, struct, sys
def insn(code, jt, jf, k): return struct.pack("HBBI", code, jt, jf, k)
program = b"".join([insn(0x20, 0, 0, 4), insn(0x15, 1, 0, 0xC000003E), insn(0x06, 0, 0, 0x7FFF0000),
                    insn(0x20, 0, 0, 0), insn(0x15, 0, 1, 444), insn(0x06, 0, 0, 0x50000 | 38),
                    insn(0x06, 0, 0, 0x7FFF0000)])
buffer = ctypes.create_string_buffer(program, len(program))
class Fprog(ctypes.Structure): _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.syscall(317, 1, 0, ctypes.byref(Fprog(len(program) // 8, ctypes.addressof(buffer)))) == 0
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
SECRET = 'print(json.dumps(attempt(lambda: open(json.loads(sys.argv[1])["path"]).read())))'


def without_landlock(*options: str, as_user=lambda argv: argv, **args: object):
    program = [PY, "-c", PRELUDE + SECRET, json.dumps(args)]
    argv = [PY, "-c", NO_LANDLOCK, "-m", "sandlock", "run", *options, "--", *program]
    return subprocess.run(as_user(argv), capture_output=True, text=True, timeout=60)


@pytest.fixture
def outside_file(world_tmp):
    (world_tmp / "outside").mkdir()
    secret = world_tmp / "outside" / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o644)
    return str(secret)


def test_a_missing_protection_fails_the_run_unless_that_one_may_degrade(outside_file, as_nobody):
    for as_user in (lambda argv: argv, as_nobody):
        strict = without_landlock(*BASE_GRANTS, as_user=as_user, path=outside_file)
        others = without_landlock(*BASE_GRANTS, "--allow-degraded", "SIGNAL_SCOPE", as_user=as_user,
                                  path=outside_file)
        degraded = without_landlock(*BASE_GRANTS, "--allow-degraded", "LANDLOCK_FS",
                                    as_user=as_user, path=outside_file)
        for refused in (strict, others):
            assert refused.returncode == 125, refused.stderr
            assert ("protection LANDLOCK_FS cannot be applied (run `sandlock check`; "
                    "--allow-degraded LANDLOCK_FS runs without it)") in refused.stderr
        # really without it: the file no grant names is read; the notice says so
        assert report(degraded) == "ok"
        assert ("Landlock (filesystem confinement) is not available in this kernel; running "
                "without protection LANDLOCK_FS (--allow-degraded LANDLOCK_FS)") in degraded.stderr
    # the control: with Landlock, the same grants keep the file out
    assert report(confined(SECRET, *BASE_GRANTS, path=outside_file)) == "EACCES"


def test_best_effort_and_strict_false_degrade_every_protection(outside_file):
    relaxed = without_landlock(*BASE_GRANTS, "--best-effort", path=outside_file)
    assert report(relaxed) == "ok"
    assert "running without protection LANDLOCK_FS (--best-effort)" in relaxed.stderr


# --- the syscall lists ------------------------------------------------------------------------

SYSCALLS = """
libc = ctypes.CDLL(None, use_errno=True)
def shm():
    ident = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if ident < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    libc.shmctl(ident, 0, None)  # IPC_RMID: nothing left behind
def unshare():
    if libc.unshare(0x10000000) < 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")
print(json.dumps({"uname": attempt(os.uname), "shmget": attempt(shm), "unshare": attempt(unshare)}))
"""


def test_extra_deny_syscalls_makes_a_call_fail_with_eperm(as_nobody):
    for as_user in (lambda argv: argv, as_nobody):
        assert report(confined(SYSCALLS, as_user=as_user)) == {
            "uname": "ok", "shmget": "EPERM", "unshare": "EPERM"}
        assert report(confined(SYSCALLS, "--extra-deny-syscall", "uname", as_user=as_user)) == {
            "uname": "EPERM", "shmget": "EPERM", "unshare": "EPERM"}


def test_deny_syscalls_replaces_the_default_list_but_never_the_mandatory_denials():
    """deny_syscalls=[...]: SysV IPC (the default list) allowed, the list denied;
    unshare, one of the denials sandlock never lifts, stays refused. The control:
    unconfined, unshare and shmget both work."""
    assert report(confined(SYSCALLS, "--deny-syscalls", "uname")) == {
        "uname": "EPERM", "shmget": "ok", "unshare": "EPERM"}
    bare = subprocess.run([PY, "-c", PRELUDE + SYSCALLS, "{}"], capture_output=True, text=True,
                          timeout=60)
    assert report(bare) == {"uname": "ok", "shmget": "ok", "unshare": "ok"}


def test_the_api_takes_upstreams_spellings():
    """extra_allow_syscalls=["sysv_ipc"] is allow_sysv_ipc; deny_syscalls=[] keeps only the
    mandatory denials; extra_deny_syscalls on top."""
    argv = [PY, "-c", PRELUDE + SYSCALLS, "{}"]
    results = {
        name: json.loads(Sandbox(Policy(**fields)).run(argv).stdout)
        for name, fields in {
            "default": {},
            "sysv_ipc": {"extra_allow_syscalls": ["sysv_ipc"]},
            "empty list": {"deny_syscalls": []},
            "extra": {"extra_deny_syscalls": ["uname"]},
        }.items()}
    assert results == {
        "default": {"uname": "ok", "shmget": "EPERM", "unshare": "EPERM"},
        "sysv_ipc": {"uname": "ok", "shmget": "ok", "unshare": "EPERM"},
        "empty list": {"uname": "ok", "shmget": "ok", "unshare": "EPERM"},
        "extra": {"uname": "EPERM", "shmget": "EPERM", "unshare": "EPERM"},
    }
    assert Policy(extra_allow_syscalls=["sysv_ipc"]).allow_sysv_ipc is True


@pytest.mark.parametrize("option", ["--extra-deny-syscall", "--deny-syscalls"])
def test_an_unknown_syscall_is_one_line_exit_2(option):
    done = sandlock("run", option, "unamee", "--", "true")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"sandlock: error: {option}: 'unamee' is not a syscall of this machine (did you mean "
        "'uname'?)"]


def test_an_unknown_syscall_in_a_policy_file_names_its_line(tmp_path):
    (tmp_path / "p.toml").write_text('[confinement]\nextra_deny_syscalls = ["nosuchcall"]\n')
    done = sandlock("run", "--policy", str(tmp_path / "p.toml"), "--", "true")
    assert done.returncode == 2
    assert done.stderr == (f"sandlock: error: {tmp_path / 'p.toml'}:2: confinement.extra_deny_syscalls: "
                           "'nosuchcall' is not a syscall of this machine\n")


# --- allow_degraded: a kernel that refuses the sandbox's namespaces -------------------------

# A container whose /proc has masked files refuses a procfs of its own (test_isolation's).
CONTAINER = ("mount --bind /dev/null /proc/keys && "
             "{sandlock} run {options} -- sh -c 'echo ran; ls /proc | grep -c ^[0-9]'")


@pytest.mark.parametrize("options, runs", [("", False), ("--allow-degraded SIGNAL_SCOPE", False),
                                           ("--allow-degraded NAMESPACES", True),
                                           ("--allow-degraded namespaces --allow-degraded 4", True)])
def test_missing_namespaces_degrade_only_when_that_protection_may(tmp_path, options, runs):
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", CONTAINER.format(
        sandlock=" ".join(SANDLOCK), options=options)], capture_output=True, text=True,
        timeout=60, cwd=tmp_path)
    if not runs:
        assert done.returncode == 125, done.stderr
        assert "--allow-degraded NAMESPACES (or --best-effort) runs without them" in done.stderr
        return
    assert done.returncode == 0 and done.stdout.split()[0] == "ran", done.stderr
    assert int(done.stdout.split()[1]) > 10  # the host's processes: really no PID namespace
    assert ("running without protection NAMESPACES (--allow-degraded NAMESPACES)"
            in done.stderr)
