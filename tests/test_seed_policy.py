"""Upstream Sandlock's Policy reference (../shared/seeds/004), the fields sandlock held
another way: --max-memory-mode refuse (an allocation past -m fails, the program runs
on), sb.update() of a running sandbox's limits (the README's block, as written),
fs_isolation and BranchAction, notif_policy's denied paths, and the kernel's files
under an explicit grant of /proc and /sys. Each runs real confined programs, with a
control that shows what happens without the confinement under test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PYTHON, SANDLOCK, sandlock, users
from sandlock import (
    BranchAction,
    FsIsolation,
    NotifAction,
    NotifPolicy,
    PathRule,
    Policy,
    PolicyError,
    Sandbox,
)

SYSTEM_PYTHON = "/usr/bin/python3"  # under the README's grants (/usr, /lib, /etc)
needs_system_python = pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK),
                                         reason="needs /usr/bin/python3")

# What the README's examples expect at the limit: MemoryError, then the script goes on.
ALLOCATE = textwrap.dedent("""\
    try:
        data = bytearray(256 * 1024 * 1024)
        print("allocated")
    except MemoryError:
        print("MemoryError")
    print("continued")
""")


# --- --max-memory-mode refuse ------------------------------------------------------------

@needs_system_python
def test_refuse_fails_the_allocation_and_the_program_runs_on(tmp_path):
    script = tmp_path / "alloc.py"
    script.write_text(ALLOCATE)
    refused = sandlock("run", "-m", "128M", "--max-memory-mode", "refuse", "--",
                       SYSTEM_PYTHON, str(script), cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (0, "MemoryError\ncontinued\n"), refused.stderr
    # Controls: the default (kill) ends the sandbox at the limit; unconfined, it allocates.
    killed = sandlock("run", "-m", "128M", "--", SYSTEM_PYTHON, str(script), cwd=tmp_path)
    assert killed.returncode == 137 and "continued" not in killed.stdout
    assert "memory limit 128M exceeded" in killed.stderr
    bare = subprocess.run([SYSTEM_PYTHON, str(script)], capture_output=True, text=True, timeout=60)
    assert bare.stdout == "allocated\ncontinued\n"


@needs_system_python
def test_refuse_from_a_policy_file_and_the_api_unprivileged(tmp_path, as_nobody, world_tmp):
    script = world_tmp / "alloc.py"
    script.write_text(ALLOCATE)
    policy = world_tmp / "p.toml"
    policy.write_text('[limits]\nmax_memory = "128M"\nmax_memory_mode = "refuse"\n')
    done = subprocess.run(as_nobody([*SANDLOCK, "run", "--policy", str(policy), "--",
                                     SYSTEM_PYTHON, str(script)]),
                          capture_output=True, text=True, timeout=60, cwd=world_tmp)
    assert (done.returncode, done.stdout) == (0, "MemoryError\ncontinued\n"), done.stderr
    result = Sandbox(Policy(max_memory="128M", max_memory_mode="refuse")).run(
        [SYSTEM_PYTHON, "-c", ALLOCATE])
    assert (result.exit_code, result.stdout) == (0, b"MemoryError\ncontinued\n")


def test_refuse_needs_a_memory_limit(tmp_path):
    done = sandlock("run", "--max-memory-mode", "refuse", "--", "true", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "give --max-memory SIZE too" in done.stderr
    with pytest.raises(PolicyError):
        Policy(max_memory="64M", max_memory_mode="ask")


# --- sb.update() --------------------------------------------------------------------------

SERVER = textwrap.dedent("""\
    import time
    time.sleep(1)  # while the block pauses, resumes and updates it
    data = bytearray(200 * 1024 * 1024)
    for i in range(0, len(data), 4096):
        data[i] = 1  # resident, as the memory watch counts it
    time.sleep(0.3)
    print("served", flush=True)
""")

# The README's Policy and its block, as written (server.py in the block's directory).
README_BLOCK = textwrap.dedent("""\
    from sandlock import Sandbox, Policy
    policy = Policy(
    fs_writable=["/tmp/sandbox"],
    fs_readable=["/usr", "/lib", "/etc"],
    max_memory="256M",
    max_processes=10,
    isolate_ipc=True,
    clean_env=True,
    env={"LANG": "C.UTF-8"},
    )
    with Sandbox(policy) as sb:
        sb.exec(["python3", "server.py"])
        sb.pause() # Freeze all processes atomically
        sb.resume()
        sb.update(max_memory="128M") # Adjust limits live
        exit_code = sb.wait(timeout=30)
    print("exit", exit_code)
""")


@needs_system_python
@pytest.mark.parametrize("updated", [True, False])
def test_the_readmes_block_updates_the_memory_limit_live(updated):
    """Updated to 128M, the server's 200M kills the sandbox; the control (no update)
    serves within the starting 256M."""
    os.makedirs("/tmp/sandbox", exist_ok=True)
    work = Path(__import__("tempfile").mkdtemp(dir="/tmp/sandbox"))
    (work / "server.py").write_text(SERVER)
    block = README_BLOCK if updated else README_BLOCK.replace(
        '    sb.update(max_memory="128M") # Adjust limits live\n', "")
    done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                          timeout=60, cwd=work)
    if updated:
        assert done.stdout == "exit 137\n", done.stderr
        assert "memory limit 128M exceeded" in done.stderr
    else:
        assert done.stdout == "served\nexit 0\n", done.stderr


def test_update_is_bounded_by_what_the_sandbox_started_with(tmp_path):
    policy = Policy(max_memory="256M", max_processes=10, max_cpu=80)
    with Sandbox(policy) as sb:
        with pytest.raises(ValueError, match="more than the 256M the sandbox was started with"):
            sb.update(max_memory="512M")
        with pytest.raises(ValueError, match="more than the 10"):
            sb.update(max_processes=11)
        with pytest.raises(TypeError, match="not timeout"):
            sb.update(timeout=3)
        with pytest.raises(PolicyError):
            sb.update(max_cpu=-1)
        sb.update(max_memory="64M", max_processes=2, max_cpu=20)
        sb.update(max_memory="256M", max_processes=10, max_cpu=80)  # loosened back: allowed
    with Sandbox(Policy()) as sb, pytest.raises(ValueError, match="started without it"):
        sb.update(max_memory="128M")
    with pytest.raises(RuntimeError, match="needs a running sandbox"):
        Sandbox(policy).update(max_memory="128M")


FORKS = "for i in 1 2 3 4; do sleep 2 & done; wait; echo forked"


def test_update_tightens_and_loosens_the_process_cap(tmp_path):
    out = tmp_path / "out"
    with Sandbox(Policy(max_processes=8), quiet=True) as sb:
        sb.update(max_processes=3)
        with open(out, "wb") as file:
            sb.exec(["sh", "-c", FORKS], stdout=file.fileno(), stderr=file.fileno())
        assert sb.wait(timeout=30) != 0  # sh: a fork failed (EAGAIN), it gave up
    tight = out.read_text()
    assert "fork" in tight.lower() and "forked" not in tight, tight
    with Sandbox(Policy(max_processes=8), quiet=True) as sb:
        sb.update(max_processes=3)
        sb.update(max_processes=8)  # the control: loosened back, every fork succeeds
        with open(out, "wb") as file:
            sb.exec(["sh", "-c", FORKS], stdout=file.fileno(), stderr=file.fileno())
        assert sb.wait(timeout=30) == 0
    assert out.read_text() == "forked\n"


@needs_system_python
def test_update_in_refuse_mode_sets_the_data_limit_of_later_commands(tmp_path):
    script = tmp_path / "alloc.py"
    script.write_text(ALLOCATE.replace("256 *", "200 *"))
    out = tmp_path / "out"
    with Sandbox(Policy(max_memory="256M", max_memory_mode="refuse")) as sb:
        with open(out, "ab") as file:
            sb.exec([SYSTEM_PYTHON, str(script)], stdout=file.fileno())  # the control
            sb.wait(timeout=30)
            sb.update(max_memory="128M")
            sb.exec([SYSTEM_PYTHON, str(script)], stdout=file.fileno())
            assert sb.wait(timeout=30) == 0
    assert out.read_text() == "allocated\ncontinued\nMemoryError\ncontinued\n"


# A command already running when the block updates the limit: it allocates once told to
# ("go" appears), after raising its own soft limit as far as it may if asked ("grab").
WAITER = textwrap.dedent("""\
    import os, resource, sys, time
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    if sys.argv[2] == "grab":
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    try:
        data = bytearray(200 * 1024 * 1024)
        for i in range(0, len(data), 4096):
            data[i] = 1
        time.sleep(0.3)
        print("allocated", flush=True)
    except MemoryError:
        print("MemoryError", flush=True)
""")
UPDATING = textwrap.dedent("""\
    import os, sys
    from sandlock import Policy, Sandbox
    go, how, steps = os.path.abspath("go"), sys.argv[1], sys.argv[2:]
    with Sandbox(Policy(max_memory="256M", max_memory_mode="refuse"), quiet=True) as sb:
        sb.exec(["/usr/bin/python3", "waiter.py", go, how])
        for size in steps:
            sb.update(max_memory=size)
        open(go, "w").close()
        print("exit", sb.wait(timeout=30))
""")


@needs_system_python
@users
@pytest.mark.parametrize("how, steps, expected", [
    ("take", ["128M"], "MemoryError\nexit 0\n"),  # tightened: refused at 128M
    ("take", ["128M", "256M"], "allocated\nexit 0\n"),  # loosened back: allowed again
    ("take", [], "allocated\nexit 0\n"),  # the control: within the starting 256M
    # The attack: raise its own soft limit back after the tightening. It may (up to the
    # starting hard limit), and the sandbox's watch then kills it at 128M.
    ("grab", ["128M"], "exit 137\n"),
])
def test_update_relimits_a_running_command(world_tmp, as_nobody_or_self, how, steps, expected):
    (world_tmp / "waiter.py").write_text(WAITER)
    (world_tmp / "updating.py").write_text(UPDATING)
    argv = [sys.executable, "updating.py", how, *steps]
    if as_nobody_or_self is not None:
        argv = as_nobody_or_self(argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=world_tmp)
    assert done.stdout == expected, done.stderr


# --- fs_isolation, BranchAction -----------------------------------------------------------

def test_overlayfs_is_the_workdirs_copy_on_write_and_branch_actions_decide(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    for action, kept in ((BranchAction.ABORT, False), (BranchAction.COMMIT, True)):
        policy = Policy(workdir=str(work), fs_isolation=FsIsolation.OVERLAYFS, on_exit=action)
        assert (policy.fs_isolation, policy.on_exit) == ("overlayfs", action.value)
        result = Sandbox(policy).run(["sh", "-c", f"echo x > {action.value}.txt"])
        assert result.exit_code == 0, result.stderr
        assert (work / f"{action.value}.txt").exists() is kept
    with pytest.raises(PolicyError, match="give --workdir DIR too"):
        Policy(fs_isolation="overlayfs")


def test_branchfs_is_refused_without_a_branchfs_mount(tmp_path):
    done = sandlock("run", "--workdir", str(tmp_path), "--fs-isolation", "branchfs", "--",
                    "true", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is not on a BranchFS mount" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(PolicyError, match="BranchFS"):
        Policy(workdir=str(tmp_path), fs_isolation=FsIsolation.BRANCHFS)


def test_branchfs_detection_reads_the_mount_that_holds_the_workdir(tmp_path):
    """The control of the refusal's detection: in a mount namespace of its own, a
    tmpfs mounted over the workdir is what the refusal names (not the disk under it)."""
    if os.getuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs unshare(1), as root")
    script = (f"mount -t tmpfs branchless {tmp_path} && exec {' '.join(SANDLOCK)} run "
              f"--workdir {tmp_path} --fs-isolation branchfs -- true")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 2 and "(it is on tmpfs)" in done.stderr, done.stderr


# --- notif_policy -------------------------------------------------------------------------

READ_SECRET = "import sys\ntry: print(open(sys.argv[1]).read())\nexcept OSError as e: print(e.errno)"


def test_notif_policys_deny_rules_deny_the_paths(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    denied = NotifPolicy(rules=[PathRule(str(secret), NotifAction.DENY),
                                PathRule("*", NotifAction.ALLOW)])
    argv = [sys.executable, "-c", READ_SECRET, str(secret)]
    refused = Sandbox(Policy(notif_policy=denied)).run(argv)
    assert refused.stdout == b"13\n", refused.stderr  # EACCES, as upstream's DENY
    assert Sandbox(Policy()).run(argv).stdout == b"s3cret\n"  # the control
    by_option = sandlock("run", "--notif-deny", str(secret), "--", *argv, cwd=tmp_path)
    assert by_option.stdout == "13\n"


@pytest.mark.parametrize("rule, message", [
    (PathRule("/etc/hosts", NotifAction.VIRTUALIZE, virtual_content=b"x"), "VIRTUALIZE"),
    (PathRule("/proc/*/status", NotifAction.DENY), "patterns are not supported"),
    (PathRule("/proc/kcore", NotifAction.DENY, errno_code=1), "EACCES only"),
])
def test_notif_rules_sandlock_cannot_hold_are_refused(rule, message):
    with pytest.raises(PolicyError, match=message):
        Policy(notif_policy=NotifPolicy(rules=[rule]))


# --- -r /proc, -r /sys --------------------------------------------------------------------

KERNEL_FILES = ("/proc/kallsyms", "/proc/keys", "/sys/kernel/notes", "/sys/kernel/address_bits")
READ_KERNEL = textwrap.dedent("""\
    import json, os, sys
    out = {}
    for path in sys.argv[1:]:
        try:
            with open(path, "rb") as f:
                out[path] = "read"
        except OSError as exc:
            out[path] = type(exc).__name__
    for tree in ("/sys/kernel", "/sys/firmware"):
        try:
            out[tree] = len(os.listdir(tree))
        except OSError as exc:
            out[tree] = type(exc).__name__
    print(json.dumps(out))
""")


def _read_kernel(argv_prefix: list[str], cwd: Path) -> dict[str, object]:
    import json

    done = subprocess.run([*argv_prefix, sys.executable, "-c", READ_KERNEL, *KERNEL_FILES],
                          capture_output=True, text=True, timeout=60, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@users
def test_a_grant_of_proc_and_sys_hides_the_kernels_files(world_tmp, as_nobody_or_self):
    as_user = as_nobody_or_self or (lambda argv: argv)
    host = _read_kernel(as_user([]), world_tmp)  # the control: the host shows them
    assert {host[path] for path in KERNEL_FILES} == {"read"}
    assert host["/sys/kernel"] and host["/sys/firmware"]
    got = _read_kernel([*as_user([]), *SANDLOCK, "run", "-r", "/proc", "-r", "/sys", "-r", "/usr", "-r",
                        "/lib", "-r", "/lib64", *(f"-r{path}" for path in PYTHON), "--"],
                       world_tmp)
    assert {got[path] for path in KERNEL_FILES} == {"PermissionError"}, got
    assert got["/sys/kernel"] == got["/sys/firmware"] == "PermissionError"
