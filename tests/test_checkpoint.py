"""Checkpoints (``sb.checkpoint(save_fn)``, ``cp.save``, ``Checkpoint.load``,
``Sandbox.restore``): the policy and the application's state, taken while the
sandbox's processes are stopped, written without following links and read back with a
policy file's checks. Upstream Sandlock's scenarios (its test_checkpoint), with real
confined processes; its process-image restore is out of scope (docs/api.md)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from sandlock import Checkpoint, Policy, Sandbox, StdioMode
from sandlock._errors import SandlockError

POLICY = Policy(fs_readable=["/usr", "/lib", "/bin"], net_connect=[443], max_memory="256M",
                env={"MODE": "test"})


def state(pid: int) -> str:
    with open(f"/proc/{pid}/status") as file:
        return next(line.split()[1] for line in file if line.startswith("State:"))


@pytest.fixture
def running():
    """A sandbox running a long command (popen), ended after the test."""
    sandbox = Sandbox(POLICY)
    process = sandbox.popen(["sleep", "60"])
    yield sandbox
    process.kill()
    process.wait()


def test_a_basic_checkpoint_has_no_name_and_no_state(running):
    checkpoint = running.checkpoint()
    assert checkpoint.name == "" and checkpoint.app_state is None
    assert checkpoint.policy == POLICY and checkpoint.argv == ("sleep", "60")


def test_save_fn_runs_while_every_process_of_the_sandbox_is_stopped():
    sandbox = Sandbox(POLICY)
    with sandbox.popen(["sh", "-c", "sleep 60 & sleep 60"], stdout=StdioMode.NULL) as process:
        seen = {}

        def save() -> bytes:
            seen["states"] = [_stopped_state(int(pid)) for pid in _tree(process.pid)]
            return json.dumps({"key": "value", "count": 42}).encode()

        checkpoint = sandbox.checkpoint(save_fn=save)
        # all of them stopped (a shell's vfork parent waits in 'D' with SIGSTOP pending:
        # it runs nothing of its own until resumed, as pause() counts it)
        assert seen["states"] and set(seen["states"]) == {"T"}
        assert "T" not in {state(int(pid)) for pid in _tree(process.pid)}  # control: resumed
    assert checkpoint.app_state == b'{"key": "value", "count": 42}'


def _tree(pid: int) -> list[str]:
    """``pid`` and its children (the sandbox's processes)."""
    with open(f"/proc/{pid}/task/{pid}/children") as file:
        return [str(pid), *file.read().split()]


def test_a_long_lived_sandbox_is_checkpointed_likewise():
    with Sandbox(POLICY) as sb:
        sb.exec(["sleep", "60"])
        checkpoint = sb.checkpoint(lambda: b"state")
    assert checkpoint.app_state == b"state" and checkpoint.argv is None


def test_checkpoint_needs_a_running_sandbox_and_bytes():
    with pytest.raises(RuntimeError, match="not running"):
        Sandbox(POLICY).checkpoint()
    sandbox = Sandbox(POLICY)
    with sandbox.popen(["sleep", "60"]):
        with pytest.raises(TypeError, match="bytes"):
            sandbox.checkpoint(save_fn=lambda: {"not": "bytes"})


def test_save_load_round_trip(running, tmp_path):
    checkpoint = running.checkpoint(save_fn=lambda: b"binary app state \x00\xff")
    path = checkpoint.save("test-ckpt", store=tmp_path)
    assert path == tmp_path / "test-ckpt" and (path / "meta.json").exists()
    assert checkpoint.name == "test-ckpt"
    loaded = Checkpoint.load("test-ckpt", store=tmp_path)
    assert loaded.name == "test-ckpt" and loaded.app_state == b"binary app state \x00\xff"
    assert loaded.policy == POLICY and loaded.argv == ("sleep", "60")
    assert oct(os.stat(path / "app_state.bin").st_mode & 0o777) == "0o600"


def test_no_state_no_file_and_list_and_delete(running, tmp_path):
    assert Checkpoint.list(store=tmp_path) == []
    checkpoint = running.checkpoint()
    checkpoint.save("beta", store=tmp_path)
    checkpoint.save("alpha", store=tmp_path)
    assert not (tmp_path / "alpha" / "app_state.bin").exists()
    assert Checkpoint.list(store=tmp_path) == ["alpha", "beta"]
    Checkpoint.delete("beta", store=tmp_path)
    assert Checkpoint.list(store=tmp_path) == ["alpha"] and not (tmp_path / "beta").exists()
    with pytest.raises(FileNotFoundError):
        Checkpoint.load("nope", store=tmp_path)
    with pytest.raises(FileNotFoundError):
        Checkpoint.delete("nope", store=tmp_path)


def test_names_are_one_file_name(running, tmp_path):
    checkpoint = running.checkpoint()
    for name in ("", ".", "..", "a/b", "../escape", "x\0y", "n" * 256):
        with pytest.raises(ValueError, match="name"):
            checkpoint.save(name, store=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_load_calls_restore_fn_only_with_state(running, tmp_path):
    original = {"model": "m", "tokens": 99}
    running.checkpoint(save_fn=lambda: json.dumps(original).encode()).save("with", store=tmp_path)
    running.checkpoint().save("without", store=tmp_path)
    restored: dict = {}
    loaded = Checkpoint.load("with", store=tmp_path,
                             restore_fn=lambda data: restored.update(json.loads(data)))
    assert restored == original and loaded.name == "with"
    calls: list = []
    assert Checkpoint.load("without", store=tmp_path, restore_fn=calls.append).app_state is None
    assert calls == []


def test_restore_runs_under_the_checkpoints_policy(running, tmp_path, private_dir):
    """The restored sandbox is confined as the checkpointed one was: a file it was not
    granted stays unreadable (control: one with the grant reads it)."""
    running.checkpoint(save_fn=lambda: b"s").save("env", store=tmp_path)
    seen: list = []
    sandbox = Sandbox.restore(Checkpoint.load("env", store=tmp_path), restore_fn=seen.append)
    assert seen == [b"s"] and sandbox.policy == POLICY
    secret = str(private_dir / "secret")
    denied = sandbox.run(["cat", secret])
    assert denied.exit_code == 1 and b"Permission denied" in denied.stderr
    granted = Sandbox(POLICY.replace(fs_readable=[*POLICY.fs_readable, str(private_dir)]))
    assert granted.run(["cat", secret]).stdout == b"private\n"


@pytest.fixture
def private_dir(tmp_path):
    path = tmp_path / "private"
    path.mkdir()
    (path / "secret").write_text("private\n")
    return path


# --- the files, never written through a link -------------------------------------------------


def test_save_never_writes_through_a_link_left_at_a_files_name(running, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    store = tmp_path / "store"
    running.checkpoint().save("cp", store=store)
    for name in ("policy.toml", "meta.json", "app_state.bin"):
        target = store / "cp" / name
        target.unlink(missing_ok=True)
        target.symlink_to(victim)
        with pytest.raises(OSError, match="symbolic link"):
            running.checkpoint(save_fn=lambda: b"state").save("cp", store=store)
        assert victim.read_text() == "untouched\n"
        target.unlink()  # control: without the link, the file is written
        running.checkpoint(save_fn=lambda: b"state").save("cp", store=store)
        assert target.is_file() and not target.is_symlink()


def test_save_refuses_a_link_at_the_checkpoints_directory(running, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = tmp_path / "store"
    store.mkdir()
    (store / "cp").symlink_to(elsewhere)
    with pytest.raises(OSError):
        running.checkpoint().save("cp", store=store)
    assert list(elsewhere.iterdir()) == []
    running.checkpoint().save("control", store=store)  # control: a plain name is written
    assert (store / "control" / "policy.toml").is_file()


def test_load_refuses_a_policy_others_could_have_widened(running, tmp_path):
    running.checkpoint().save("cp", store=tmp_path)
    os.chmod(tmp_path / "cp" / "policy.toml", 0o666)
    with pytest.raises(SandlockError, match="policy.toml"):
        Checkpoint.load("cp", store=tmp_path)
    os.chmod(tmp_path / "cp" / "policy.toml", 0o600)  # control: its owner's alone, read
    assert Checkpoint.load("cp", store=tmp_path).policy == POLICY


def _stopped_state(pid: int) -> str | None:
    """'T' for a stopped process, or one in 'D' with SIGSTOP pending; else its state."""
    found = state(pid)
    if found != "D":
        return found
    with open(f"/proc/{pid}/status") as status:
        pending = [int(line.split()[1], 16) for line in status
                   if line.startswith(("SigPnd:", "ShdPnd:"))]
    return "T" if any(mask & (1 << (signal.SIGSTOP - 1)) for mask in pending) else "D"
