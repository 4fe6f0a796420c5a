"""A limit that is hit is visible: a record in the audit log (``"event": "limit"``,
named by its policy field), a notice on stderr, a line in the exit summary. Real
confined processes hit each limit; the records are read back from --audit."""

from __future__ import annotations

import json
import re
import sys
import time

from conftest import sandlock
from sandlock import Policy, Sandbox

FORKS = r"""
import os, time
children = []
for _ in range(6):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""

GROW = "x = []\nwhile True: x.append(bytearray(1 << 20))"

# CPU time, not a wall-clock window: a process that must spend 0.3 s of CPU at a 20%
# share is held back however busy the machine is (unless it gets under 20% of a CPU anyway).
BUSY = "import time\nwhile time.process_time() < 0.3: pass"


def limit_records(log) -> list[dict]:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(isinstance(record["time"], float) for record in records)
    return [record for record in records if record.get("event") == "limit"]


def test_refused_forks_are_recorded_once_and_summed_up(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "-P", "3", "--", sys.executable, "-c", FORKS,
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first, summary = limit_records(log)
    assert first["limit"] == "max_processes" and first["value"] == 3
    assert first["verdict"] == "deny" and first["pid"] > 0
    assert "a fork failed with EAGAIN" in first["reason"]
    assert summary["summary"] is True and summary["count"] == 4
    assert "sandlock: process limit 3: 4 fork(s) refused (EAGAIN)" in result.stderr


def test_a_memory_kill_is_recorded_with_what_was_in_use(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "-m", "64M", "--", sys.executable, "-c", GROW,
                      cwd=tmp_path)
    assert result.returncode == 137
    [record] = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"]) == ("max_memory", "64M", "kill")
    assert record["used"] > 64 << 20
    assert result.stderr.count("sandlock: memory limit 64M exceeded") == 1


def test_cpu_throttling_is_summed_up_at_the_end(tmp_path):
    log = tmp_path / "audit.jsonl"
    began = time.monotonic()
    result = sandlock("run", "--audit", str(log), "--max-cpu", "20", "--", sys.executable, "-c",
                      BUSY, cwd=tmp_path)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    [record] = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"]) == ("max_cpu", 20, "throttle")
    # How long it is held depends on what else the machine runs (a share of a CPU it would
    # not get anyway costs no hold): only that it was, within the run, and said the same.
    assert record["count"] >= 1 and 0 < record["held"] < took, (record, took)
    said = re.search(r"sandlock: CPU share 20%: the sandbox was held back (\d+) time\(s\), "
                     r"([\d.]+) s in all \(--max-cpu\)", result.stderr)
    assert said, result.stderr
    assert int(said[1]) == record["count"] and abs(float(said[2]) - record["held"]) <= 0.05


def test_a_short_run_under_its_share_records_nothing(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "--max-cpu", "50", "--", "true", cwd=tmp_path)
    assert result.returncode == 0 and "CPU share" not in result.stderr
    assert limit_records(log) == []


def test_dropped_output_is_recorded_per_stream(tmp_path):
    log = tmp_path / "audit.jsonl"
    sandlock("run", "--audit", str(log), "--max-output", "1K", "--", "sh", "-c",
             "head -c 3000 /dev/zero", cwd=tmp_path)
    [record] = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"]) == ("max_output", "1K", "truncate")
    assert (record["stream"], record["dropped"]) == ("stdout", 3000 - 1024)


def test_a_process_killed_for_its_file_size_is_named(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "--max-file-size", "4K", "--", "sh", "-c",
                      f"exec head -c 10000 /dev/zero > {tmp_path}/big", cwd=tmp_path)
    assert result.returncode == 128 + 25  # SIGXFSZ
    assert ("sandlock: file size limit 4K exceeded: the command was killed by SIGXFSZ "
            "(--max-file-size)") in result.stderr
    [record] = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"]) == ("max_file_size", "4K", "kill")


def test_a_timeout_is_recorded(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "--audit", str(log), "-t", "0.5", "--", "sleep", "10", cwd=tmp_path)
    assert result.returncode == 124
    [record] = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"]) == ("timeout", 0.5, "kill")


def test_the_api_records_what_it_dropped_after_the_run(tmp_path, capfd):
    log = tmp_path / "audit.jsonl"
    result = Sandbox(Policy(max_output=10), audit=str(log)).run(["sh", "-c", "echo 0123456789abc"])
    assert result.stdout == b"0123456789"
    [record] = limit_records(log)
    assert (record["stream"], record["dropped"]) == ("stdout", 4)
    assert "dropped 4 bytes of stdout" in capfd.readouterr().err


def test_quiet_runs_still_record(tmp_path):
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "-q", "--audit", str(log), "-P", "2", "--", sys.executable, "-c", FORKS,
                      cwd=tmp_path)
    assert "sandlock:" not in result.stderr
    assert [record["limit"] for record in limit_records(log)] == ["max_processes"] * 2


def test_the_default_task_cap_reached_is_recorded(tmp_path):
    """Without -P the kernel holds the cap; the keeper's count reports it reached."""
    log = tmp_path / "audit.jsonl"
    bomb = ("import os, time\n"
            "while True:\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(4)\n"
            "            os._exit(0)\n"
            "    except BlockingIOError:\n"
            "        time.sleep(3)  # (counts come at least every 2 s)\n"
            "        break")
    result = sandlock("run", "--audit", str(log), "--", sys.executable, "-c", bomb,
                      cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    (record,) = limit_records(log)
    assert (record["limit"], record["value"], record["verdict"], record["default"]) == \
        ("max_processes", 1024, "deny", True)
    assert record["tasks"] >= 1023 and "-P/--max-processes" in record["reason"]


def forks_past(count: int) -> int:
    """Forks ``count`` children (refused past the cap), reaps those made."""
    import os

    made = []
    for _ in range(count):
        try:
            pid = os.fork()
        except BlockingIOError:
            continue
        if pid == 0:
            os._exit(0)
        made.append(pid)
    for pid in made:
        os.waitpid(pid, 0)
    return len(made)


def test_every_call_of_a_running_sandbox_is_recorded(tmp_path):
    """The audit log is the sandbox's: a call ending must not close it (it did, and
    every later call of the block went unrecorded), and each process refused a fork
    is on record once (a pool scores each item by its own records)."""
    log = tmp_path / "audit.jsonl"
    with Sandbox(Policy(max_processes=3), audit=str(log), quiet=True) as sb:
        made = [sb.call(forks_past, args=(6,)).value for _ in range(3)]
    assert made == [1, 1, 1]  # the resident, the call and one child: the cap held each time
    refusals = [r for r in limit_records(log) if not r.get("summary")]
    assert len(refusals) == 3 and len({r["pid"] for r in refusals}) == 3
