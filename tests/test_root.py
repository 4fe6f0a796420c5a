"""What a command started by root may still do (docs/usage.md, "Running as root"), and
the set-id bits no confined command may set, whoever runs it. Every attack runs in a
real confined process (`sandlock run`, `sandlock.confine`, a Sandbox call or resident),
each with its control: the same program unconfined, where the attack succeeds."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ATTEMPT, PYTHON, SANDLOCK, UNPRIVILEGED_UID, unprivileged

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's capabilities are the subject")

REPO = str(Path(__file__).resolve().parents[1])
NOTHING = "0000000000000000"
# securebits(7): NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each locked; KEEP_CAPS locked off
LOCKED_SECUREBITS = 0xEF

PRELUDE = r'''
import ctypes, errno, json, os, socket, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD = -100
ARGS = json.loads(sys.argv[1])


''' + ATTEMPT + r'''

def checked(result):
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def raw(number, *args):
    """Syscall ``number`` itself (not the C library's choice); an fd it opens is closed."""
    result = checked(libc.syscall(ctypes.c_long(number), *(
        ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) if isinstance(a, int)
        else a for a in args)))
    if number in (2, 85, 257, 437):
        os.close(result)


def capabilities():
    with open("/proc/self/status") as status:
        found = dict(line.split(":", 1) for line in status)
    return {key: found[key].strip() for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


if ARGS.get("confine"):  # sandlock.confine: the process confines itself, no namespaces
    sys.path.insert(0, ARGS["repo"])
    import sandlock
    sandlock.confine(sandlock.Policy(fs_readable=["/proc", "/etc"], fs_writable=[os.getcwd()]))
'''

# Every call that gives a file its mode, with modes that have a set-id bit and modes
# that do not (the sticky bit is not one). NEW: the name of a file the call makes.
SETID = r'''
NEW = None
os.close(os.open("plain", os.O_CREAT | os.O_WRONLY, 0o755))
fd = os.open("plain", os.O_RDONLY)
creating = os.O_CREAT | os.O_WRONLY
CALLS = {
    "chmod": (90, b"plain"), "fchmod": (91, fd), "fchmodat": (268, AT_FDCWD, b"plain"),
    "fchmodat2": (452, AT_FDCWD, b"plain"), "open": (2, NEW, creating), "creat": (85, NEW),
    "openat": (257, AT_FDCWD, NEW, creating),
    "O_TMPFILE": (257, AT_FDCWD, b".", os.O_TMPFILE | os.O_WRONLY),
    "mknod": (133, NEW, stat.S_IFREG), "mknodat": (259, AT_FDCWD, NEW, stat.S_IFREG),
}
results = {}
for mode in (0o4755, 0o2755, 0o6755, 0o1755, 0o755):
    for name, (number, *args) in CALLS.items():
        args = [f"{name}-{mode:o}".encode() if arg is NEW else arg for arg in args]
        if name.startswith("mknod"):  # the type and the mode in one argument
            args[-1] |= mode
            args.append(0)
        elif name == "fchmodat2":
            args += [mode, 0]
        else:
            args.append(mode)
        results.setdefault(name, []).append(attempt(raw, number, *args))
how = (ctypes.c_uint64 * 3)(creating, 0o4755, 0)  # struct open_how: flags, mode, resolve
results["openat2"] = attempt(raw, 437, AT_FDCWD, b"openat2", ctypes.byref(how), 24)
results["set-id files"] = sorted(n for n in os.listdir(".") if os.lstat(n).st_mode & 0o6000)
print(json.dumps(results))
'''
REFUSED, ALLOWED = ["EPERM"] * 3, ["ok"] * 2  # set-id modes, then the others
SETID_CONFINED = {name: REFUSED + ALLOWED for name in (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "open", "creat", "openat", "O_TMPFILE",
    "mknod", "mknodat")} | {"openat2": "ENOSYS", "set-id files": []}


def run(code: str, cwd: Path, *, how: str = "bare", as_user=lambda argv: argv,
        options: tuple[str, ...] = (), **args: object) -> dict:
    """``code`` after PRELUDE, in ``cwd``: ``how`` "run" (sandlock run), "confine"
    (sandlock.confine) or "bare" (the control); its last line of output, as JSON."""
    program = [sys.executable, "-c", PRELUDE + textwrap.dedent(code),
               json.dumps({**args, "confine": how == "confine", "repo": REPO})]
    if how == "run":
        program = [*SANDLOCK, "run", *options, "--", *program]
    done = subprocess.run(as_user(program), capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


# --- set-id bits: for every user ---------------------------------------------------------

@pytest.mark.parametrize("how", ["run", "confine"])
def test_no_call_gives_a_file_a_set_id_bit(tmp_path, how):
    assert run(SETID, tmp_path, how=how) == SETID_CONFINED


def test_without_the_sandbox_root_sets_them_all(tmp_path):
    """The control: the same program, unconfined."""
    results = run(SETID, tmp_path)
    assert {name: value for name, value in results.items() if value != ["ok"] * 5} == {
        "openat2": "ok", "set-id files": results["set-id files"]}
    assert len(results["set-id files"]) > 10


def test_nobody_cannot_set_them_either(as_nobody, world_tmp):
    """A setuid-to-nobody program in a shared directory would lend nobody's rights to
    every local user: refused too. Control: nobody may set them on its own files."""
    confined, control = world_tmp / "confined", world_tmp / "control"
    for directory in (confined, control):
        directory.mkdir(mode=0o777)
        os.chmod(directory, 0o777)
    assert run(SETID, confined, how="run", as_user=as_nobody) == SETID_CONFINED
    results = run(SETID, control, as_user=as_nobody)
    assert results["chmod"] == ["ok"] * 5
    assert {"open-4755", "creat-4755", "mknod-4755"} <= set(results["set-id files"])


PLANT = "cp /usr/bin/id ./id; chmod 4755 ./id; install -m 4755 /usr/bin/id ./id2; exit 0"


@pytest.mark.parametrize("confined", [True, False], ids=["confined", "control"])
def test_a_setuid_root_program_cannot_be_planted(world_tmp, confined):
    """Root copies `id` into its writable directory and makes it setuid: run by nobody,
    it would print uid 0 (the issue's planted setuid-root shell)."""
    argv = ["sh", "-c", PLANT]
    done = subprocess.run([*SANDLOCK, "run", "--", *argv] if confined else argv, cwd=world_tmp,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("id", "id2"):  # (install leaves a file nobody may run: 0600)
        euid = subprocess.run(unprivileged([str(world_tmp / name), "-u"]), capture_output=True,
                              text=True).stdout.strip()
        assert (euid in ("", str(UNPRIVILEGED_UID))) if confined else euid == "0"
    if confined:
        assert done.stderr.count("Operation not permitted") == 2, done.stderr


def test_files_root_may_only_read_keep_their_mode(tmp_path):
    """chmod 4755 on a root-owned file under -r, and on /etc/hostname; control: the same
    chmod by root unconfined. (Root owns them: a mode without set-id bits is its
    owner's to change until metadata changes are judged by path.)"""
    readable, work = tmp_path / "readable", tmp_path / "work"
    for directory in (readable, work):
        directory.mkdir()
    (readable / "tool").write_text("#!/bin/sh\n")
    os.chmod(readable / "tool", 0o755)
    grants = [option for path in ("/usr", "/lib", "/lib64", *PYTHON, REPO, str(readable))
              for option in ("-r", path)]
    before = os.stat("/etc/hostname").st_mode
    code = 'print(json.dumps([attempt(os.chmod, path, 0o4755) for path in ARGS["paths"]]))'
    paths = [str(readable / "tool"), "/etc/hostname"]
    try:
        assert run(code, work, how="run", options=(*grants, "-w", str(work)),
                   paths=paths) == ["EPERM", "EPERM"]
        assert os.stat(readable / "tool").st_mode & 0o7777 == 0o755
        assert os.stat("/etc/hostname").st_mode == before
    finally:  # (only if the attack worked)
        if os.stat("/etc/hostname").st_mode != before:
            os.chmod("/etc/hostname", stat.S_IMODE(before))
    assert run(code, work, paths=paths[:1]) == ["ok"]


# --- root's capabilities ----------------------------------------------------------------

CAPABILITIES = r'''
def read(path):
    with open(path, "rb") as file:
        file.read()


def append(path):
    with open(path, "ab") as file:
        file.write(b"#")


host = ARGS["hostname"].encode()
os.close(os.open("mine", os.O_CREAT | os.O_WRONLY, 0o644))
results = {
    "read a 0000 file": attempt(read, "root-0000"),
    "read another's 0600 file": attempt(read, "nobody-0600"),
    "write a 0444 file": attempt(append, "root-0444"),
    "create in a 0555 directory": attempt(os.mknod, "root-0555/new"),
    "chown to another": attempt(os.chown, "mine", 65534, 65534),
    "chown to itself": attempt(os.chown, "mine", 0, 0),
    "mknod a device": attempt(os.mknod, "null", stat.S_IFCHR | 0o666, os.makedev(1, 3)),
    # cap_net_raw=ep (VFS_CAP_REVISION_2): held on the host by whoever runs the file
    "file capabilities": attempt(os.setxattr, "mine", "security.capability",
                                 bytes.fromhex("0100000200200000") + bytes(12)),
    "sethostname": attempt(lambda: checked(libc.sethostname(host, len(host)))),
    "settimeofday": attempt(raw, 164, None, None),  # (glibc would read a NULL time)
    "raise its priority": attempt(os.setpriority, os.PRIO_PROCESS, 0, -1),
}
append("setuid-root")  # root's own file: written, its setuid bit cleared without CAP_FSETID
results["setuid bit after a write"] = bool(os.stat("setuid-root").st_mode & stat.S_ISUID)
results["capabilities"] = capabilities()
results["securebits"] = libc.prctl(27, 0, 0, 0, 0)  # PR_GET_SECUREBITS
results["chroot"] = attempt(os.chroot, ".")  # (last: the root may change)
results["setgid"] = attempt(os.setgid, 65534)
results["setuid"] = attempt(os.setuid, 65534)
print(json.dumps(results))
'''


@pytest.fixture
def owned_files(tmp_path):
    """Files root owns (and one of nobody's) whose modes only capabilities override."""
    for name, mode, owner in (("root-0000", 0o000, 0), ("nobody-0600", 0o600, UNPRIVILEGED_UID),
                              ("root-0444", 0o444, 0), ("setuid-root", 0o4755, 0)):
        (tmp_path / name).write_text("data\n")
        os.chown(tmp_path / name, owner, owner)
        os.chmod(tmp_path / name, mode)
    (tmp_path / "root-0555").mkdir(mode=0o555)
    return tmp_path


DENIED = {
    "read a 0000 file": "EACCES", "read another's 0600 file": "EACCES",
    "write a 0444 file": "EACCES", "create in a 0555 directory": "EACCES",
    "chown to itself": "ok", "file capabilities": "EPERM",
    "mknod a device": "EACCES",  # Landlock's refusal, before the kernel asks for CAP_MKNOD
    "sethostname": "EPERM", "settimeofday": "EPERM", "raise its priority": "EACCES",
    "chroot": "EPERM", "setuid bit after a write": False,
    "capabilities": dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), NOTHING),
    "securebits": LOCKED_SECUREBITS,
}


def test_root_in_a_sandbox_holds_no_capability(owned_files):
    """Its user namespace maps uid 0 alone: another uid is not even expressible (EINVAL)."""
    results = run(CAPABILITIES, owned_files, how="run", hostname=socket.gethostname())
    assert results == {**DENIED, "chown to another": "EINVAL", "setgid": "EINVAL",
                       "setuid": "EINVAL"}


def test_root_confining_itself_holds_no_capability(owned_files):
    """No user namespace: root's capabilities are the machine's, and all are gone."""
    results = run(CAPABILITIES, owned_files, how="confine", hostname=socket.gethostname())
    assert results == {**DENIED, "chown to another": "EPERM", "setgid": "EPERM",
                       "setuid": "EPERM"}


def test_root_unconfined_does_it_all(owned_files):
    """The control (the host's hostname is set to what it is, the time not at all)."""
    results = run(CAPABILITIES, owned_files, hostname=socket.gethostname())
    assert results.pop("capabilities")["CapEff"] != NOTHING and results.pop("securebits") == 0
    assert results.pop("setuid bit after a write") is True
    assert {name for name, value in results.items() if value != "ok"} == set(), results


STATUS = 'print(json.dumps(capabilities()))'


def test_no_exec_gives_a_capability_back(tmp_path):
    """Under SECBIT_NOROOT and no_new_privs, an exec as uid 0 gives nothing (the status
    read by the confined programs above), nor one of a program with file capabilities:
    asked for at once (+ep), the kernel refuses to run it without them (EPERM, exit
    126); otherwise (+p) it runs without them. Control: nobody, unconfined, gets them."""
    setcap = shutil.which("setcap", path=os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin", "/sbin")))
    if setcap is None:
        pytest.skip("setcap (libcap2-bin) is not installed")
    programs = {}
    for flags in ("ep", "p"):
        programs[flags] = str(tmp_path / f"cat-{flags}")
        shutil.copy("/usr/bin/cat", programs[flags])
        os.chmod(programs[flags], 0o755)
        subprocess.run([setcap, f"cap_dac_override+{flags}", programs[flags]], check=True)

    def status(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*argv, "/proc/self/status"], cwd=tmp_path, capture_output=True,
                              text=True)

    refused = status(*SANDLOCK, "run", "--", programs["ep"])
    assert refused.returncode == 126 and "file capabilities" in refused.stderr, refused.stderr
    assert "CapPrm:\t" + NOTHING in status(*SANDLOCK, "run", "--", programs["p"]).stdout
    assert "CapEff:\t0000000000000002" in status(*unprivileged([programs["ep"]])).stdout
    assert "CapPrm:\t0000000000000002" in status(*unprivileged([programs["p"]])).stdout


KEEPING = r'''
import sys
sys.path.insert(0, ARGS["repo"])
from sandlock.kernel import _capabilities, prctl
prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
_capabilities.drop_capabilities(tuple(ARGS["kept"]))
os.execv("/bin/grep", ["grep", "^Cap", "/proc/self/status"])
'''


@pytest.mark.parametrize("kept", [(), (10,)], ids=["nothing", "net_bind_service"])
def test_what_is_kept_survives_exec_and_nothing_else(tmp_path, kept):
    """The mechanism behind KEPT_CAPABILITIES (empty): a kept capability stays in every
    set, ambient included, the rest go."""
    argv = [sys.executable, "-c", PRELUDE + KEEPING, json.dumps({"repo": REPO, "kept": kept})]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split("\n")
    mask = f"{sum(1 << cap for cap in kept):016x}"
    assert lines[:5] == [f"{name}:\t{mask}" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd",
                                                            "CapAmb")]


def test_an_ambient_capability_does_not_reach_the_command(world_tmp):
    """A user given one capability (systemd's AmbientCapabilities=, here setpriv's) holds
    no CAP_SETPCAP to lock anything with: the capability is still taken away."""
    given = ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}",
             "--clear-groups", "--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service",
             "--"]
    control = run(STATUS, world_tmp, as_user=lambda argv: [*given, *argv])
    assert control["CapAmb"] == control["CapEff"] == "0000000000000400"
    confined = run(STATUS, world_tmp, how="confine", as_user=lambda argv: [*given, *argv])
    assert set(confined.values()) - {control["CapBnd"]} == {NOTHING}


EMBEDDING = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
from sandlock import Policy, Sandbox


def capabilities():  # [permitted, effective, bounding], from the kernel: a nested
    # sandbox's grant of /proc would name the host's, not the sandbox's own
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
    libc.capget(header, data)
    bounding = sum(1 << cap for cap in range(64) if libc.prctl(23, cap, 0, 0, 0) == 1)
    return [data[1] | data[4] << 32, data[0] | data[3] << 32, bounding]


def init():
    pass


if __name__ == "__main__":
    found = {"caller": capabilities(), "call": Sandbox(Policy()).call(capabilities).value}
    with Sandbox(Policy(), init, capabilities) as sandbox:
        found["call in a block"] = sandbox.call(capabilities).value
        clone, = sandbox.fork(1)
        clone.wait(30)
        found["clone"] = clone.value
        nested = sandbox.sandbox(Policy(fs_readable=["/usr"]))
        found["nested call"] = nested.call(capabilities).value
    print(json.dumps(found))
"""


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_functions_and_residents_hold_no_capability(world_tmp, as_nobody, user):
    """A call, a block's resident and its clones, a nested sandbox never exec: they kept
    what the fork had, for an ordinary user too (every capability of the sandbox's user
    namespace). Control: the caller's own; a user namespace's, for nobody."""
    script = world_tmp / "embedding.py"
    script.write_text(EMBEDDING)
    as_user = as_nobody if user == "nobody" else lambda argv: argv
    done = subprocess.run(as_user([sys.executable, str(script), REPO]), cwd=world_tmp,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    caller = found.pop("caller")
    assert found == dict.fromkeys(("call", "call in a block", "clone", "nested call"), [0] * 3)
    if user == "root":
        assert caller[1] != 0
    else:
        in_namespace = ("import ctypes; ctypes.CDLL(None).unshare(0x10000000); "  # CLONE_NEWUSER
                        "print(open('/proc/self/status').read())")
        namespace = subprocess.run(as_nobody([sys.executable, "-c", in_namespace]),
                                   capture_output=True, text=True, check=True).stdout
        assert caller[1] == 0 and "CapEff:\t" + NOTHING not in namespace, namespace


def test_sandlock_inside_sandlock_as_root(tmp_path):
    """The inner run's command holds nothing either, and the inner run works without."""
    done = subprocess.run([*SANDLOCK, "run", "--", *SANDLOCK, "run", "--", "grep", "^Cap",
                           "/proc/self/status"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [word for name in ("CapInh", "CapPrm", "CapEff", "CapBnd",
                                                    "CapAmb") for word in (name + ":", NOTHING)]


def test_under_policy_fn_opens_go_to_the_supervisor_and_set_id_modes_still_do_not(tmp_path):
    """Once deny_path is used, every open is judged by the supervisor (answered, not
    continued blindly): the filter's set-id refusal comes first, openat2 stays refused."""
    from sandlock import Policy, Sandbox

    secret = tmp_path / "secret"
    secret.write_text("the-key")

    def on_event(event, ctx):
        ctx.deny_path(str(secret))
        return 0

    probe = f"results = {{'secret': attempt(open, {str(secret)!r})}}\n"
    code = PRELUDE + SETID.replace("results = {}\n", probe)
    result = Sandbox(Policy(cwd=str(tmp_path)), policy_fn=on_event).run(
        [sys.executable, "-c", code, json.dumps({"repo": REPO})], timeout=60)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"secret": "EACCES", **SETID_CONFINED}


def test_allow_syscall_lifts_the_check_of_that_call_alone(tmp_path):
    """`--allow-syscall chmod`, for a build that installs setuid programs."""
    results = run(SETID, tmp_path, how="run", options=("--allow-syscall", "chmod"))
    assert results["chmod"] == ["ok"] * 5 and results["fchmod"] == SETID_CONFINED["fchmod"]
    assert results["set-id files"] == []  # (chmod 755 came last)


def test_a_privileged_port_is_bound_by_the_supervisor_not_the_command(tmp_path, as_nobody,
                                                                      world_tmp):
    """Why CAP_NET_BIND_SERVICE is not kept: sandlock binds for the command. Control:
    under an ordinary user's sandlock, the same bind is refused."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 1019))  # free now (else this test says so)
    probe.close()
    code = ('s = socket.socket()\nbound = attempt(s.bind, ("127.0.0.1", 1019))\n'
            'print(json.dumps([bound, capabilities()["CapEff"]]))')
    options = ("--net-bind", "1019")
    assert run(code, tmp_path, how="run", options=options) == ["ok", NOTHING]
    assert run(code, world_tmp, how="run", options=options, as_user=as_nobody) == ["EACCES",
                                                                                  NOTHING]


@pytest.mark.skipif(not os.path.exists("/etc/shadow"), reason="no /etc/shadow here")
def test_the_hosts_password_hashes_are_denied_to_root(tmp_path):
    """Root owns /etc/shadow, and the default workspace grants /etc: denied in every
    policy. Control: root reads it unconfined."""
    code = "import sys\ntry: open('/etc/shadow').read(); print('read')\nexcept OSError as e: print(e.strerror)"
    for options in ((), ("-r", "/")):
        done = subprocess.run([*SANDLOCK, "run", *options, "--", sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.stdout.strip() == "Permission denied", (options, done.stderr)
    unconfined = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert unconfined.stdout.strip() == "read"
