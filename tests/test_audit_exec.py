"""Every execution leaves an audit record (LocalGPT's audit logging): ``"event": "exec"``
with its argv, pid, exit status, duration and the limits it hit, as the run's last
record; from the command line and from the API. Real confined commands, records read
back from --audit."""

from __future__ import annotations

import json
import os
import stat
import sys

from conftest import sandlock
from sandlock import Sandbox


def records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def executions(log) -> list[dict]:
    return [record for record in records(log) if record.get("event") == "exec"]


def test_a_run_is_recorded_with_its_argv_pid_status_and_duration(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "--", "sh", "-c", "sleep 0.2; exit 3",
                      cwd=tmp_path)
    assert result.returncode == 3
    [record] = records(log)
    assert record["event"] == "exec"
    assert record["argv"] == ["sh", "-c", "sleep 0.2; exit 3"]
    assert isinstance(record["pid"], int) and record["pid"] > 1
    assert record["exit_status"] == 3 and record["limits"] == []
    assert 0.2 <= record["duration"] < 30
    assert record["sandbox"] == "full" and isinstance(record["time"], float)


def test_the_log_is_created_readable_by_its_owner_only(tmp_path):
    """It holds the commands' arguments (which may be tokens)."""
    log = tmp_path / "audit.jsonl"
    sandlock("run", "--audit", str(log), "--", "true", cwd=tmp_path)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_timeout_is_recorded_as_the_limit_it_hit(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "-t", "0.5", "--", "sleep", "30", cwd=tmp_path)
    assert result.returncode == 124
    limit, execution = records(log)
    assert (limit["event"], limit["limit"]) == ("limit", "timeout")
    assert execution["event"] == "exec" and execution["exit_status"] == 124
    assert execution["limits"] == ["timeout"] and execution["duration"] < 30


def test_the_record_comes_after_what_max_output_dropped(tmp_path):
    """The output's drops are known once the pipes are drained: still before it."""
    log = tmp_path / "audit.jsonl"
    sandlock("run", "--audit", str(log), "--max-output", "1K", "--", sys.executable, "-c",
             "print('x' * 5000)", cwd=tmp_path)
    *limits, execution = records(log)
    assert [record["limit"] for record in limits] == ["max_output"]
    assert execution["event"] == "exec" and execution["limits"] == ["max_output"]


def test_a_file_size_kill_is_in_the_record(tmp_path):
    log = tmp_path / "audit.jsonl"
    script = ("import os, signal; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
              "open('big', 'wb').write(b'x' * 4096)")
    result = sandlock("run", "--audit", str(log), "--max-file-size", "1K", "--", sys.executable,
                      "-c", script, cwd=tmp_path)
    assert result.returncode == 128 + 25
    [execution] = executions(log)
    assert execution["exit_status"] == 153 and execution["limits"] == ["max_file_size"]


def test_a_command_that_cannot_start_is_recorded_too(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "--", "./no-such-program", cwd=tmp_path)
    assert result.returncode == 127
    [execution] = executions(log)
    assert execution["argv"] == ["./no-such-program"] and execution["exit_status"] == 127


def test_each_api_run_is_recorded(tmp_path):
    log = tmp_path / "audit.jsonl"
    sandbox = Sandbox(audit=str(log), cwd=str(tmp_path), quiet=True)
    assert sandbox.run(["true"]).exit_code == 0
    assert sandbox.run(["sh", "-c", "exit 5"]).exit_code == 5
    assert sandbox.run(["sleep", "30"], timeout=0.5).exit_code == 124
    found = [(record["argv"], record["exit_status"], record["limits"]) for record in executions(log)]
    assert found == [(["true"], 0, []), (["sh", "-c", "exit 5"], 5, []),
                     (["sleep", "30"], 124, ["timeout"])]


def test_recorded_for_an_unprivileged_user(as_nobody, world_tmp):
    import subprocess

    from conftest import SANDLOCK

    log = world_tmp / "audit.jsonl"
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--audit", str(log), "--", "sh", "-c",
                                       "exit 4"]), capture_output=True, text=True, cwd=world_tmp,
                            timeout=60)
    assert result.returncode == 4, result.stderr
    [execution] = executions(log)
    assert execution["argv"] == ["sh", "-c", "exit 4"] and execution["exit_status"] == 4
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    if os.getuid() == 0:
        assert log.stat().st_uid == 65534


def test_a_long_lived_sandbox_is_one_record_for_its_block(tmp_path):
    """Its resident stands for the block: 0, or 1 when the block raised."""
    log = tmp_path / "audit.jsonl"
    with Sandbox(audit=str(log), cwd=str(tmp_path), quiet=True) as sandbox:
        sandbox.exec(["true"]).wait()
    try:
        with Sandbox(audit=str(log), cwd=str(tmp_path), quiet=True):
            raise KeyError("the block failed")
    except KeyError:
        pass
    found = [(record["argv"], record["exit_status"]) for record in executions(log)]
    assert found == [(["<sandbox>"], 0), (["<sandbox>"], 1)]
