"""Named sandboxes (issue 37, upstream Sandlock's --name, ps, inspect, kill): the name as
the sandbox's hostname, the per-user registry, and what a sandboxed command can do to
it (nothing). Every sandbox here is a real one; each test has a registry of its own
(XDG_RUNTIME_DIR outside /tmp, where sandlock keeps it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import SANDLOCK, UNPRIVILEGED_UID, sandlock

READ = ["-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin", "-r", "/etc"]


@pytest.fixture
def runtime(monkeypatch):
    """A fresh runtime directory (the registry's parent), 0700, outside /tmp."""
    path = tempfile.mkdtemp(prefix=".sandlock-names-", dir=os.path.expanduser("~"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def registry_of(runtime: str) -> str:
    return os.path.join(runtime, "sandlock", "sandboxes")


def start(name: str, *command: str, options: tuple[str, ...] = (), **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*SANDLOCK, "run", *READ, *options, "--name", name, "--", *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def ps(env: dict | None = None) -> list[dict]:
    listed = sandlock("ps", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def wait_listed(*names: str, seconds: float = 20.0) -> dict[str, dict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = {entry["name"]: entry for entry in ps()}
        if all(name in found and found[name]["pid"] for name in names):
            return found
        time.sleep(0.05)
    raise AssertionError(f"{names} never listed: {ps()}")


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (the sandbox's processes below its sandlock)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, pending = set(), [root]
    while pending:
        kids = children.get(pending.pop(), [])
        found.update(kids)
        pending.extend(kids)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def gone(pids: set[int], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(map(alive, pids)):
            return True
        time.sleep(0.05)
    return False


def stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


# --- two sandboxes: ps, inspect, kill ---------------------------------------------------

def test_ps_lists_two_named_sandboxes_and_kill_ends_one_with_its_whole_tree(runtime):
    tree = ("sh", "-c", "sleep 300 & sleep 300 & wait")
    first, second = start("alpha", *tree), start("beta", *tree)
    try:
        listed = wait_listed("alpha", "beta")
        assert listed["alpha"]["command"] == list(tree)
        assert listed["alpha"]["pid"] != listed["beta"]["pid"]
        table = sandlock("ps").stdout.splitlines()
        assert table[0].split() == ["NAME", "PID", "UPTIME", "COMMAND", "POLICY"]
        assert {line.split()[0] for line in table[1:]} == {"alpha", "beta"}
        # Both trees: the shell and its two sleeps, each under its sandlock.
        deadline = time.monotonic() + 10
        while min(len(descendants(first.pid)), len(descendants(second.pid))) < 5 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        alpha, beta = descendants(first.pid), descendants(second.pid)
        killed = sandlock("kill", "alpha")
        assert killed.returncode == 0, killed.stderr
        assert gone(alpha), "a process of the killed sandbox survived"
        assert first.wait(timeout=10) == 128 + signal.SIGKILL
        assert all(map(alive, beta)), "killing alpha touched beta"
        assert [entry["name"] for entry in ps()] == ["beta"]
    finally:
        stop(first, second)
    assert ps() == []  # each sandlock removed its entry as it ended


def test_kill_with_another_signal_ends_the_sandbox_when_its_command_exits(runtime):
    process = start("termed", "sleep", "300")
    try:
        wait_listed("termed")
        assert sandlock("kill", "termed", "--signal", "TERM").returncode == 0
        assert process.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        stop(process)


def test_inspect_shows_the_policy_and_its_toml_runs_under_run_policy(runtime, tmp_path):
    options = ("--net-allow", "127.0.0.1:9", "--max-memory", "64M", "--clean-env")
    process = start("inspected", "sleep", "300", options=options)
    try:
        wait_listed("inspected")
        shown = sandlock("inspect", "inspected")
        assert shown.returncode == 0, shown.stderr
        record = json.loads(shown.stdout)
        assert record["name"] == "inspected" and record["command"] == ["sleep", "300"]
        assert 'max_memory = "64M"' in record["policy"] and "127.0.0.1:9" in record["policy"]
        assert record["summary"] == "filesystem.read, network.allow, process.clean_env, limits.max_memory"
        as_toml = sandlock("inspect", "inspected", "--toml")
        assert as_toml.returncode == 0, as_toml.stderr
        policy = tmp_path / "inspected.toml"
        policy.write_text(as_toml.stdout)
        # The same policy, read back from the file: printed identically, and it runs.
        printed = sandlock("run", "--policy", str(policy), "--print-policy")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == record["policy"]
        ran = sandlock("run", "--policy", str(policy), "--", "/bin/sh", "-c", "echo ran")
        assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    finally:
        stop(process)


# --- the name inside: hostname ----------------------------------------------------------

def test_the_name_is_the_hostname_inside_and_the_hosts_is_untouched(runtime):
    before = open("/etc/hostname").read()
    shown = sandlock("run", *READ, "--name", "box-1", "--", "sh", "-c",
                     "hostname; uname -n; cat /etc/hostname")
    assert (shown.returncode, shown.stdout) == (0, "box-1\nbox-1\nbox-1\n"), shown.stderr
    # Control: without a name, the host's.
    unnamed = sandlock("run", *READ, "--", "sh", "-c", "hostname; uname -n")
    assert unnamed.stdout == f"{socket.gethostname()}\n" * 2
    # Attack: rewrite it with /etc writable. The file is the sandbox's, read-only.
    written = sandlock("run", "-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin",
                       "-w", "/etc", "--name", "box-2", "--", "sh", "-c",
                       "echo evil > /etc/hostname; cat /etc/hostname")
    assert "Read-only file system" in written.stderr and written.stdout == "box-2\n"
    assert open("/etc/hostname").read() == before
    # Without a grant over /etc, the sandbox's file is as unreadable as the host's.
    hidden = sandlock("run", "-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin",
                      "--name", "box-3", "--", "cat", "/etc/hostname")
    assert hidden.returncode != 0 and "Permission denied" in hidden.stderr
    # Nor when the policy denies it inside a grant (control: the first run, which read it).
    denied = sandlock("run", *READ, "--fs-deny", "/etc/hostname", "--name", "box-4", "--",
                      "sh", "-c", "hostname; cat /etc/hostname")
    assert denied.stdout == "box-4\n" and "Permission denied" in denied.stderr


def test_the_api_names_a_run_and_a_block(runtime):
    from sandlock import Policy, Sandbox

    policy = Policy(fs_readable=READ[1::2])
    sandbox = Sandbox(policy, name="api-box")
    assert (sandbox.name, sandbox.named) == ("api-box", True)
    assert sandbox.run(["hostname"]).stdout == b"api-box\n"
    with Sandbox(policy, name="api-block") as block:
        handle = block.exec(["sleep", "300"])
        assert [entry["name"] for entry in ps()] == ["api-block"]
        handle.kill()
    assert ps() == []
    unnamed = Sandbox(policy)
    assert unnamed.name.startswith(f"sandbox-{os.getpid()}-") and not unnamed.named
    assert unnamed.name != Sandbox(policy).name


# --- names refused ------------------------------------------------------------------

BAD_NAMES = [
    ("", "must not be empty"),
    ("x" * 65, "at most 64 bytes (this one: 65)"),
    ("é" * 33, "at most 64 bytes (this one: 66)"),
    ("a/b", "must not contain '/'"),
    ("/", "must not contain '/'"),
    (".", "must not be '.' or '..'"),
    ("..", "must not be '.' or '..'"),
]


@pytest.mark.parametrize("name, why", BAD_NAMES)
def test_a_bad_name_is_one_line_and_exit_2(runtime, name, why):
    refused = sandlock("run", "--name", name, "--", "true")
    assert refused.returncode == 2
    assert refused.stderr.startswith("sandlock: error: --name: ") and why in refused.stderr
    assert refused.stderr.count("\n") == 1
    for command in (("inspect", name), ("kill", name)):
        other = sandlock(*command)
        assert other.returncode == 2 and other.stderr.count("\n") == 1 and why in other.stderr
    assert not os.path.exists(registry_of(runtime))


@pytest.mark.parametrize("name, why", [*BAD_NAMES, ("a\0b", "NUL")])
def test_a_bad_name_is_a_policy_error_from_the_api(name, why):
    from sandlock import PolicyError, Sandbox

    with pytest.raises(PolicyError) as raised:
        Sandbox(name=name)
    assert raised.value.field == "name" and why in raised.value.message


def test_the_longest_name_is_64_bytes(runtime):
    name = "n" * 64
    shown = sandlock("run", *READ, "--name", name, "--", "hostname")
    assert (shown.returncode, shown.stdout) == (0, name + "\n"), shown.stderr


def test_a_running_name_is_refused_and_free_again_once_it_ends(runtime):
    process = start("twice", "sleep", "300")
    try:
        wait_listed("twice")
        again = sandlock("run", "--name", "twice", "--", "true")
        assert again.returncode == 2
        assert again.stderr == (f"sandlock: error: --name: a sandbox named 'twice' is already "
                                f"running (pid {ps()[0]['pid']}): names are unique per user\n")
    finally:
        stop(process)
    assert sandlock("run", "--name", "twice", "--", "true").returncode == 0


def test_no_such_sandbox_is_exit_1_and_a_bad_signal_exit_2(runtime):
    for command in (("inspect", "nobody-here"), ("kill", "nobody-here")):
        missing = sandlock(*command)
        assert (missing.returncode, missing.stderr) == (
            1, "sandlock: error: no running sandbox is named 'nobody-here' (`sandlock ps` lists them)\n")
    process = start("signalled", "sleep", "300")
    try:
        wait_listed("signalled")
        bad = sandlock("kill", "signalled", "--signal", "NOPE")
        assert (bad.returncode, bad.stderr) == (
            2, "sandlock: error: --signal: unknown signal 'NOPE' (a name like TERM, or a number)\n")
        assert process.poll() is None
    finally:
        stop(process)


# --- stale entries --------------------------------------------------------------------

def test_the_entry_of_a_sandlock_killed_by_sigkill_is_pruned(runtime):
    process = start("orphaned", "sleep", "300")
    wait_listed("orphaned")
    entry = os.path.join(registry_of(runtime), "orphaned.json")
    assert os.path.exists(entry)
    process.kill()  # sandlock itself: no exit hook runs, its entry stays behind
    process.communicate(timeout=30)
    assert os.path.exists(entry)
    deadline = time.monotonic() + 10
    while ps() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ps() == [] and not os.path.exists(entry)
    assert sandlock("run", "--name", "orphaned", "--", "true").returncode == 0


def forge(runtime: str, name: str, command: list[int], sandlock_identity: list[int]) -> None:
    """An entry written by the user outside any sandbox, as sandlock writes them."""
    directory = registry_of(runtime)
    os.makedirs(directory, 0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    with open(os.path.join(directory, f"{name}.json"), "w") as f:
        json.dump({"name": name, "uid": os.getuid(), "sandlock": sandlock_identity, "keeper": None,
                   "command": command, "argv": ["sleep"], "started": time.time(),
                   "policy": "", "summary": "default", "token": "t"}, f)


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def test_a_live_pid_with_another_start_time_is_not_the_sandbox(runtime):
    """Attack: an entry whose pids are alive but are other processes now (pid reuse):
    it is neither listed nor signalled. Control: the same entry with the right start
    times is listed, and kill reaches the process."""
    victim = subprocess.Popen(["sleep", "300"])
    try:
        me = [os.getpid(), start_time(os.getpid())]
        forge(runtime, "reused", [victim.pid, start_time(victim.pid) + 1], me)
        killed = sandlock("kill", "reused")
        assert killed.returncode == 1 and "already ended" in killed.stderr
        assert victim.poll() is None
        forge(runtime, "stale", [victim.pid, start_time(victim.pid)], [me[0], me[1] + 1])
        assert "stale" not in {entry["name"] for entry in ps()}
        assert not os.path.exists(os.path.join(registry_of(runtime), "stale.json"))
        forge(runtime, "control", [victim.pid, start_time(victim.pid)], me)
        assert sandlock("kill", "control").returncode == 0
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()


def test_entries_not_the_users_alone_are_refused(runtime):
    forge(runtime, "theirs", [os.getpid(), start_time(os.getpid())],
          [os.getpid(), start_time(os.getpid())])
    entry = os.path.join(registry_of(runtime), "theirs.json")
    assert [e["name"] for e in ps()] == ["theirs"]  # control: the user's own file is read
    os.chown(entry, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    assert ps() == []  # another user's file in the registry is not an entry
    os.chown(entry, os.getuid(), os.getgid())
    os.chmod(registry_of(runtime), 0o755)  # a registry others can enter is refused
    refused = sandlock("ps")
    assert refused.returncode == 125 and refused.stderr.count("\n") == 1
    assert "that no one else can enter (mode 0700)" in refused.stderr


# --- the sandboxed command and the registry -------------------------------------------

PROBE = r"""
import errno, os, sys
def attempt(function, *args):
    try:
        function(*args)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"
def forge(directory):
    with open(os.path.join(directory, "evil.json"), "w") as f:
        f.write("{}")
for root in sys.argv[1:]:
    top = os.path.join(root, "sandlock")
    registry = os.path.join(top, "sandboxes")
    print(attempt(os.listdir, registry), attempt(forge, registry),
          attempt(os.rename, os.path.join(registry, "victim.json"), os.path.join(registry, "x.json")),
          attempt(os.rename, registry, registry + ".moved"), attempt(os.rename, top, top + ".moved"))
"""


def control_tree(owner: int | None = None) -> str:
    """A tree laid out as a runtime directory (sandlock/sandboxes/victim.json), granted
    like it: the probe's control, where every attempt must succeed."""
    root = tempfile.mkdtemp(prefix=".sandlock-control-", dir=os.path.expanduser("~")
                            if owner is None else "/srv")
    registry = os.path.join(root, "sandlock", "sandboxes")
    os.makedirs(registry, 0o700)
    open(os.path.join(registry, "victim.json"), "w").close()
    if owner is not None:
        for directory, names, files in os.walk(root):
            for path in (directory, *(os.path.join(directory, f) for f in files)):
                os.chown(path, owner, owner)
    return root


def probe_argv(runtime: str, control: str) -> list[str]:
    """The probe in a sandbox named victim, the runtime directory and the control tree
    both writable (a grant that encloses the registry, as -w ~ would)."""
    return [*SANDLOCK, "run", *READ, "-r", sys.prefix, "-r", os.path.realpath(sys.base_prefix),
            "-w", runtime, "-w", control, "--name", "victim", "--", sys.executable, "-c", PROBE,
            runtime, control]


def test_the_command_can_neither_see_nor_change_the_registry(runtime):
    control = control_tree()
    try:
        probed = subprocess.run(probe_argv(runtime, control), capture_output=True, text=True,
                                timeout=60)
    finally:
        shutil.rmtree(control)
    assert probed.returncode == 0, probed.stderr
    denied, allowed = probed.stdout.splitlines()
    # list it, forge an entry, rename one, move the registry, move sandlock's directory
    assert denied.split() == ["EACCES"] * 5
    assert allowed.split() == ["ok"] * 5  # the same tree elsewhere: the test sees success
    assert ps() == []  # its entry went with it, untouched; nothing forged
    assert os.listdir(registry_of(runtime)) == [".lock"]


def test_the_command_cannot_reach_the_registry_as_nobody(as_nobody):
    """The key case as an unprivileged user: their own registry (in their runtime
    directory, made 0700 and theirs), their named sandbox listed and killed by name,
    and a command of theirs in a sandbox unable to touch it (control: the same tree
    elsewhere)."""
    runtime, control = control_tree(UNPRIVILEGED_UID), control_tree(UNPRIVILEGED_UID)
    shutil.rmtree(os.path.join(runtime, "sandlock"))
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "HOME": runtime}

    def as_them(*argv: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(as_nobody(argv), env=env, capture_output=True, text=True,
                              cwd="/", timeout=60, **kwargs)

    sleeper = subprocess.Popen(as_nobody([*SANDLOCK, "run", *READ, "--name", "nobodys", "--",
                                          "sleep", "300"]), env=env, cwd="/")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            listed = as_them(*SANDLOCK, "ps", "--json")
            if listed.stdout.strip() not in ("", "[]"):
                break
            time.sleep(0.05)
        assert [e["name"] for e in json.loads(listed.stdout)] == ["nobodys"], listed.stderr
        info = os.stat(registry_of(runtime))
        assert (info.st_uid, info.st_mode & 0o777) == (UNPRIVILEGED_UID, 0o700)
        probed = as_them(*probe_argv(runtime, control))
        denied, allowed = probed.stdout.splitlines()
        assert (denied.split(), allowed.split()) == (["EACCES"] * 5, ["ok"] * 5), probed.stderr
        killed = as_them(*SANDLOCK, "kill", "nobodys")
        assert killed.returncode == 0, killed.stderr
        assert sleeper.wait(timeout=10) == 128 + signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        sleeper.wait()
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(control, ignore_errors=True)


def test_sandlock_inside_a_sandbox_can_neither_name_list_nor_kill(runtime):
    """Attack: a sandboxed command runs sandlock itself to register a name, list the
    user's sandboxes and kill one. Control: the same `kill` from outside ends it."""
    victim = start("outside", "sleep", "300")
    try:
        wait_listed("outside")
        inner = sandlock("run", "--", *SANDLOCK, "run", "--name", "inner", "--", "true")
        assert inner.returncode == 125
        assert "--name: a sandbox in a sandbox cannot be named" in inner.stderr
        listed = sandlock("run", "--", *SANDLOCK, "ps")
        assert listed.returncode == 125 and "Permission denied" in listed.stderr
        assert "outside" not in listed.stdout
        killed = sandlock("run", "--", *SANDLOCK, "kill", "outside")
        assert killed.returncode == 125 and "Permission denied" in killed.stderr
        assert victim.poll() is None and [e["name"] for e in ps()] == ["outside"]
        assert sandlock("kill", "outside").returncode == 0  # control
        assert victim.wait(timeout=10) == 128 + signal.SIGKILL
    finally:
        stop(victim)


def test_entries_are_json_whatever_the_name_and_command_hold():
    """The registry writes its entries without the json module (a named run's start does
    not import it): whatever a name or an argv holds reads back the same. That is any
    character but a surrogate (a name must be UTF-8), and for an argv the low surrogates
    Python decodes undecodable bytes to (surrogateescape). Not a high surrogate then a
    low one: JSON spells a character beyond the BMP so, and reads it back as that
    character (json.dumps too); such an argv could not be exec'd anyway."""
    import random

    from sandlock.registry._registry import _json

    def character() -> str:
        code = random.choice((random.randrange(0, 128), random.randrange(128, 0x110000),
                              random.randrange(0xDC80, 0xDD00)))
        return chr(code) if not 0xD800 <= code < 0xDC80 and not 0xDD00 <= code < 0xE000 \
            else character()

    assert _json([os.fsdecode(b"\xff\x80")]) == '["\\udcff\\udc80"]'  # (surrogateescape)
    for _ in range(2000):
        text = "".join(character() for _ in range(16))
        entry = {"name": text, "argv": [text, "x"], "started": random.random() * 2e9,
                 "command": [random.randrange(1, 2**22), random.randrange(2**40)], "keeper": None}
        written = _json(entry)
        assert written.isascii() and json.loads(written) == entry
