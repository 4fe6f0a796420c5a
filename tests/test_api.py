"""The Python API: Policy validation, Sandbox.run/start, Result, best-effort mode."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

import pytest

from sandlock import Policy, PolicyError, Result, Sandbox, SetupError, TimeoutExpired
from sandlock.confinement import _filter
from sandlock.kernel import _landlock
from sandlock.cli._main import main as cli_main
from conftest import host_pid, unique_sleep, wait_no_process
from test_cli import wait_gone

PY = sys.executable


def test_policy_is_frozen_and_normalised(tmp_path):
    policy = Policy(fs_readable=[str(tmp_path), str(tmp_path / ".")], env={"A": "1"}, timeout=2)
    assert policy.fs_readable == (str(tmp_path),)
    assert policy.env == {"A": "1"} and policy.env["A"] == "1"
    assert policy.timeout == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.timeout = 3  # type: ignore[misc]
    assert dataclasses.replace(policy, clean_env=True).clean_env is True
    assert hash(policy) == hash(Policy(fs_readable=(str(tmp_path),), env=("A=1",), timeout=2.0))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"fs_readable": ("/no/such",)}, "fs_readable"),
        ({"fs_writable": "/tmp"}, "fs_writable"),  # a string, not a list
        ({"fs_denied": ("",)}, "fs_denied"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": ["=novalue"]}, "env"),
        ({"cwd": "/etc/passwd"}, "cwd"),
        ({"allow_syscalls": ("no_such_syscall",)}, "allow_syscalls"),
        ({"allow_ipc": "yes"}, "allow_ipc"),
    ],
)
def test_policy_validation_names_the_field(kwargs, field):
    with pytest.raises(PolicyError) as info:
        Policy(**kwargs)
    assert info.value.field == field


def test_run_captures_output_and_feeds_input():
    result = Sandbox().run(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"in\n")
    assert result == Result(exit_code=3, stdout=b"in\n", stderr=b"err\n")
    assert result.signal is None


def test_run_reports_signal_and_start_error():
    killed = Sandbox().run(["sh", "-c", "kill -KILL $$"])
    assert killed.exit_code == 128 + signal.SIGKILL and killed.signal == signal.SIGKILL
    missing = Sandbox().run(["no-such-command-sandlock"])
    assert missing.exit_code == 127
    assert "no-such-command-sandlock" in missing.start_error


def test_run_timeout_kills_the_tree():
    start = time.monotonic()
    marker = unique_sleep()
    result = Sandbox(Policy(timeout=0.5)).run(["sh", "-c", f"sleep {marker} & sleep 60"])
    assert result.timed_out and result.exit_code == 124 and result.signal is None
    assert time.monotonic() - start < 10
    assert wait_no_process("sleep", marker)


def test_start_wait_signal_kill():
    read_end, write_end = os.pipe()
    process = Sandbox().start(["sh", "-c", "sleep 60 & echo $!; exec sleep 60"], stdout=write_end)
    os.close(write_end)
    with os.fdopen(read_end) as out:
        background = host_pid(int(out.readline()), os.getpid())
    with pytest.raises(TimeoutExpired):
        process.wait(0.2)
    process.send_signal(signal.SIGTERM)  # the group: the foreground sleep dies
    assert process.wait(10) == 128 + signal.SIGTERM
    assert wait_gone(background)  # and the keeper cleaned up the rest


def test_kill_kills_everything():
    process = Sandbox().start(["sh", "-c", "setsid sleep 60 & sleep 60"])
    process.kill()
    assert process.wait(10) == 128 + signal.SIGKILL


def test_invalid_argv():
    with pytest.raises(PolicyError):
        Sandbox().run("echo hi")  # type: ignore[arg-type]
    with pytest.raises(PolicyError):
        Sandbox().run([])


# --- missing kernel features ---------------------------------------------------------


@pytest.fixture
def no_landlock(monkeypatch):
    monkeypatch.setattr(_landlock, "abi_version", lambda: 0)


@pytest.fixture
def no_seccomp(monkeypatch):
    monkeypatch.setattr(_filter, "action_available", lambda action: False)  # (the rule choice asks it)


def test_missing_landlock_is_a_setup_error(no_landlock):
    with pytest.raises(SetupError, match="Landlock"):
        Sandbox().run(["true"])


def test_missing_seccomp_is_a_setup_error(no_seccomp):
    with pytest.raises(SetupError, match="seccomp"):
        Sandbox().run(["true"])


def test_missing_feature_is_exit_125_naming_it(no_landlock, capfd):
    with pytest.raises(SystemExit) as exited:
        cli_main(["run", "--", "true"])
    assert exited.value.code == 125
    assert "Landlock (filesystem confinement) is not available" in capfd.readouterr().err


def test_best_effort_runs_without_landlock_and_warns(no_landlock, capfd, tmp_path):
    code = cli_main(["run", "--best-effort", "-r", "/", "--", "sh", "-c", f"echo x > {tmp_path}/f"])
    assert code == 0
    assert "warning: Landlock" in capfd.readouterr().err
    assert (tmp_path / "f").exists()  # truly unconfined: the warning is not a lie
    quiet = cli_main(["run", "-q", "--best-effort", "--", "true"])
    assert quiet == 0 and "warning" not in capfd.readouterr().err


def test_best_effort_never_runs_without_seccomp(no_seccomp):
    """Without seccomp there is no network policy at all: never a silent downgrade."""
    with pytest.raises(SetupError, match="network policy cannot be enforced"):
        Sandbox(Policy(best_effort=True)).run(["true"])


def test_a_supervisor_bug_refuses_the_call_and_keeps_serving(monkeypatch, capfd):
    from sandlock.net import _verdicts

    def broken(*args, **kwargs):
        raise RuntimeError("verdict exploded")

    monkeypatch.setattr(_verdicts, "judge_destination", broken)
    script = (
        "import socket\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        socket.socket().connect(('127.0.0.1', 9)); print('connected')\n"
        "    except OSError as e: print(e.errno)\n"
    )
    result = Sandbox(Policy(net_allow=("127.0.0.1:9",)), quiet=True).run([PY, "-c", script], timeout=20)
    assert result.stdout.split() == [b"13", b"13"]  # refused twice: the loop survived the first
    assert "internal error in the network supervisor" in capfd.readouterr().err


def test_a_default_socket_timeout_in_sandlock_does_not_reach_the_commands_sockets():
    """The supervisor looks at the command's socket through its own duplicate: a socket
    object made of it under socket.setdefaulttimeout() would make the command's socket
    non-blocking, and its blocking connect would fail with EINPROGRESS."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        socket.setdefaulttimeout(5)
        try:
            script = (
                "import os, socket\n"
                "s = socket.socket()\n"
                f"s.connect(('127.0.0.1', {port}))\n"
                "print(os.get_blocking(s.fileno()))\n"
            )
            result = Sandbox(Policy(net_allow=(f"127.0.0.1:{port}",)), quiet=True).run(
                [PY, "-c", script], timeout=20)
        finally:
            socket.setdefaulttimeout(None)
    assert (result.exit_code, result.stdout) == (0, b"True\n")


def test_runs_leak_no_descriptors():
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(10):
        Sandbox(quiet=True).run(["true"])
    time.sleep(0.2)  # supervisor threads release their fds as they end
    assert len(os.listdir("/proc/self/fd")) <= before + 1


def test_confined_worker_hands_back_exceptions():
    from sandlock.netcall._execute import ConfinedWorker

    worker = ConfinedWorker(None)
    try:
        with pytest.raises(ZeroDivisionError):
            worker.call(lambda: 1 / 0)
        assert worker.call(lambda: (0, 0)) == (0, 0)  # and it still serves
    finally:
        worker.stop()


def test_started_from_a_thread_that_ends():
    """A thread pool's worker starts the sandbox and exits: the sandbox lives on."""
    import threading

    started = []
    thread = threading.Thread(target=lambda: started.append(Sandbox().start(["sleep", "0.5"])))
    thread.start()
    thread.join()
    begin = time.monotonic()
    assert started[0].wait(10) == 0
    assert time.monotonic() - begin > 0.3  # it really ran, it was not killed at once


def test_short_runs_end_cleanly_while_the_engine_starts():
    """A command that exits while the network engine is still starting on its thread:
    closing must wait for neither, and race with neither (it once joined an unstarted
    supervisor thread, about one run in 60)."""
    for _ in range(60):
        assert Sandbox(quiet=True).run(["true"]).exit_code == 0
