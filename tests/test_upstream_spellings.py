"""Upstream Sandlock's spellings of what sandlock has (docs/api.md, "Coming from upstream
Sandlock"), in the style of upstream's own cases: a user's upstream code runs unchanged.
Each runs real confined processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import sandlock
from sandlock import (ByteSize, Change, ExitReason, Policy, PolicyError, Sandbox, SyscallEvent)
from conftest import SANDLOCK, sandlock as run_cli

PY = sys.executable
GRANTS = ["-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/etc", "-r", "/bin"]


# --- Result: success, code(), reason, ExitReason ------------------------------------

def test_result_success_and_code():
    ok = Sandbox().run(["true"])
    assert ok.success and ok.code() == 0 and ok.reason is ExitReason.EXITED and ok.error is None
    failed = Sandbox().run(["sh", "-c", "exit 3"])
    assert not failed.success and failed.code() == 3 and failed.reason == ExitReason.EXITED


@pytest.mark.parametrize("sig, reason", [(signal.SIGTERM, ExitReason.SIGNALED),
                                         (signal.SIGKILL, ExitReason.KILLED)])
def test_result_reason_of_a_signal(sig, reason):
    result = Sandbox().run(["sh", "-c", f"kill -{int(sig)} $$"])
    assert (result.success, result.code(), result.reason, result.signal) == (False, None, reason, sig)


def test_result_reason_of_a_timeout():
    result = Sandbox().run(["sleep", "30"], timeout=0.5)
    assert not result.success and result.code() is None
    assert result.reason is ExitReason.TIMEOUT is ExitReason.TIMED_OUT
    assert result.exit_code == 124


def test_result_of_a_command_that_never_started():
    result = Sandbox().run(["/no/such/program"])
    assert not result.success and result.reason is None and result.code() is None
    assert result.error == result.start_error and "no/such/program" in result.error


def test_a_live_process_wait_says_success():
    with Sandbox() as sb:
        ok, bad = sb.exec(["true"]), sb.exec(["sh", "-c", "exit 5"])
        assert ok.wait(10).success and ok.wait(10) == 0
        status = bad.wait(10)
        assert not status.success and status == 5 and status.code() == 5


# --- ByteSize.parse -------------------------------------------------------------------

def test_bytesize_parse():
    assert ByteSize.parse("512M") == 512 << 20 and str(ByteSize.parse("512M")) == "512M"
    assert ByteSize.parse("1.5G") == 3 << 29 and ByteSize.parse(4096) == 4096
    assert ByteSize.parse("8388607T") == 8388607 << 40  # the largest whole-T size in 63 bits
    for bad in ("8388608T", "99999999999999999999", "16E", "", "-1M", "1X", True):
        with pytest.raises(ValueError):
            ByteSize.parse(bad)


# --- SyscallEvent ---------------------------------------------------------------------

def test_syscall_event_is_what_policy_fn_hears():
    assert SyscallEvent is sandlock.Event
    made = SyscallEvent(syscall="execve", category="process", pid=1)
    assert made.port == 0 and made.parent_pid == 0 and made.argv is None and not made.denied
    heard = []
    Sandbox(policy_fn=lambda event, ctx: heard.append(event)).run(["sh", "-c", "true"])
    assert heard and all(isinstance(event, SyscallEvent) for event in heard)
    assert all(event.port == 0 for event in heard if event.category == "process")


# --- dry_run's Change -----------------------------------------------------------------

def test_dry_run_changes_are_named_tuples(tmp_path):
    (tmp_path / "kept.txt").write_text("old")
    (tmp_path / "gone.txt").write_text("x")
    result = Sandbox(Policy(workdir=str(tmp_path))).dry_run(
        ["sh", "-c", "echo new > kept.txt; rm gone.txt; echo a > added.txt"])
    assert result.success
    changes = sorted(result.changes)
    assert changes == [Change("A", "added.txt"), Change("D", "gone.txt"), Change("M", "kept.txt")]
    assert [(c.kind, c.path) for c in changes] == [tuple(c) for c in changes]
    assert (tmp_path / "kept.txt").read_text() == "old" and not (tmp_path / "added.txt").exists()


# --- Sandbox(policy, init_fn, work_fn).fork(n), reducer.reduce ------------------------

STATE: dict = {}


def load() -> None:
    STATE["base"] = 1000


def square(clone_id: int) -> int:
    print(clone_id * clone_id)
    return STATE["base"] + clone_id


def test_fork_outside_a_block_and_reduce():
    mapper = Sandbox(Policy(), init_fn=load, work_fn=square)
    clones = mapper.fork(8)
    assert len(clones) == 8 and len(clones.pids) == 8 and all(clones.pids)
    assert all(clone.wait().success for clone in clones)
    assert [clone.value for clone in clones] == [1000 + n for n in range(8)]
    assert [clone.stdout for clone in clones] == [f"{n * n}\n".encode() for n in range(8)]
    reducer = Sandbox(Policy())
    total = reducer.reduce([PY, "-c", "import sys; print(sum(int(x) for x in sys.stdin))"], clones)
    assert total.success and total.stdout == b"140\n"


def flaky(clone_id: int) -> int:
    print(f"clone {clone_id} was here")
    if clone_id == 1:
        raise ValueError("one fails")
    if clone_id == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return clone_id


def test_a_forked_clones_failure_is_its_own():
    zero, one, two = Sandbox(Policy(), init_fn=load, work_fn=flaky).fork(3)
    assert zero.success and zero.value == 0 and zero.stdout == b"clone 0 was here\n"
    assert not one.success and str(one.error) == "ValueError: one fails"
    assert one.stdout == b"clone 1 was here\n" and one.wait() == 1  # its output kept
    assert not two.success and two.wait().reason is ExitReason.KILLED and two.stdout == b""


def forger(clone_id: int) -> None:
    print(f"mine {clone_id}", flush=True)
    if clone_id == 0:  # writes to everything it finds open, its results socket included
        for fd in range(64):
            try:
                os.write(fd, b"forged\n")
            except OSError:
                pass


def test_clones_cannot_write_into_each_others_output():
    """Each clone's stdout is a memfd of its own: what one clone writes, wherever it
    writes it, reaches no other clone's output (it can spoil only its own result)."""
    clones = Sandbox(Policy(), init_fn=load, work_fn=forger).fork(4)
    assert [clone.stdout for clone in clones[1:]] == [f"mine {n}\n".encode() for n in (1, 2, 3)]
    assert all(clone.success for clone in clones[1:])
    assert b"forged" not in b"".join(clone.stdout for clone in clones[1:])


def test_fork_spellings_are_checked():
    with pytest.raises(TypeError):
        Sandbox(Policy(), init=load, init_fn=load)
    with pytest.raises(RuntimeError):
        Sandbox(Policy()).fork(2)
    with pytest.raises(TypeError), Sandbox(Policy(), None, lambda: 1) as sb:
        Sandbox(Policy()).reduce(["cat"], sb.fork(1))  # clones of a block print to the sandbox's stdout


# --- Stage.args, Stage.run(), PipelineResult.error ------------------------------------

def test_stage_and_pipeline_spellings():
    stage = Sandbox().cmd(["echo", "one"])
    assert stage.args == ("echo", "one") and stage.run().stdout == b"one\n"
    ok = (stage | Sandbox().cmd(["cat"])).run()
    assert ok.success and ok.error is None
    slow = (Sandbox().cmd(["sleep", "30"]) | Sandbox().cmd(["cat"])).run(timeout=0.5)
    assert slow.error == "Pipeline timed out"
    unstarted = (Sandbox().cmd(["/no/such"]) | Sandbox().cmd(["cat"])).run()
    assert unstarted.error.startswith("stage 1: ") and "/no/such" in unstarted.error


# --- fs_storage -----------------------------------------------------------------------

def test_fs_storage_keeps_the_workspace_where_asked(tmp_path):
    project, store = tmp_path / "project", tmp_path / "store"
    project.mkdir(), store.mkdir()
    result = Sandbox(Policy(workdir=str(project), fs_storage=str(store), on_exit="keep")).run(
        ["sh", "-c", "echo draft > notes.txt"])
    assert result.success and not (project / "notes.txt").exists()
    kept = [entry for entry in os.listdir(store)]
    assert len(kept) == 1, kept
    listed = run_cli("workspace", "--fs-storage", str(store), "list")
    assert listed.returncode == 0 and kept[0] in listed.stdout and str(project) in listed.stdout
    committed = run_cli("workspace", "--fs-storage", str(store), "commit", kept[0])
    assert committed.returncode == 0, committed.stderr
    assert (project / "notes.txt").read_text() == "draft\n"


def test_fs_storage_is_out_of_the_commands_reach(tmp_path):
    """The store holds every run's captured writes: a command granted the directory
    around it still cannot write (or read) there. Control: the same grant without
    fs_storage writes there."""
    project, store = tmp_path / "project", tmp_path / "store"
    project.mkdir(), store.mkdir()
    attack = f"echo planted > {store}/planted; ls {store}"
    policy = Policy(fs_readable=["/usr", "/lib", "/lib64", "/etc", "/bin"], fs_writable=[str(tmp_path)],
                    workdir=str(project))
    refused = Sandbox(policy.replace(fs_storage=str(store))).run(["sh", "-c", attack])
    assert refused.exit_code != 0 and not (store / "planted").exists()
    control = Sandbox(policy).run(["sh", "-c", attack])
    assert control.success and (store / "planted").exists()


def test_fs_storage_needs_a_workdir_and_a_directory(tmp_path):
    with pytest.raises(PolicyError) as info:
        Policy(fs_storage=str(tmp_path))
    assert info.value.field == "fs_storage" and "--workdir" in info.value.message
    with pytest.raises(PolicyError):
        Policy(workdir=str(tmp_path), fs_storage=str(tmp_path / "missing"))
    result = run_cli("run", "--fs-storage", str(tmp_path), "--", "true")
    assert result.returncode == 2 and result.stderr.startswith("sandlock: error: --fs-storage")
    inside = tmp_path / "project"
    inside.mkdir()
    result = run_cli("run", "--workdir", str(inside), "--fs-storage", str(tmp_path), "--", "true")
    assert result.returncode != 0 and "inside the workspace store" in result.stderr


# --- sandlock run --no-supervisor -----------------------------------------------------

def test_no_supervisor_confines_then_execs(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    script = f"cat {secret} || echo refused; echo $PPID; ls /proc/self/fd | wc -l"
    result = run_cli("run", "--no-supervisor", *GRANTS, "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "refused" and "s3cret" not in result.stdout
    # Nothing stays around it: the shell is sandlock's process itself, its parent the test's.
    assert int(lines[1]) == os.getpid()
    control = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert control.stdout.startswith("s3cret")


@pytest.mark.parametrize("option, named", [
    (["--net-allow", "example.test:443"], "--net-allow"),
    (["--timeout", "5"], "--timeout"),
    (["--max-memory", "64M"], "--max-memory"),
    (["--audit", "/tmp/never-written.jsonl"], "--audit"),
])
def test_no_supervisor_refuses_what_needs_one(option, named):
    result = run_cli("run", "--no-supervisor", *GRANTS, *option, "--", "true")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"sandlock: error: --no-supervisor: {named}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_no_supervisor_as_an_unprivileged_user(as_nobody, world_tmp):
    secret = world_tmp / "secret"
    secret.write_text("s3cret")
    os.chmod(secret, 0o644)
    script = f"cat {secret} 2>/dev/null || echo refused"
    argv = as_nobody([*SANDLOCK, "run", "--no-supervisor", *GRANTS, "--", "sh", "-c", script])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "refused\n"), result.stderr
    control = subprocess.run(as_nobody(["sh", "-c", script]), capture_output=True, text=True)
    assert control.stdout == "s3cret"
