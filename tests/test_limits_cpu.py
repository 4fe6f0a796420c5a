"""The CPU share (--max-cpu) on real confined processes: the sandbox as a whole gets
at most that share of one CPU, one busy process or several together."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock

pytestmark = pytest.mark.alone(reason="measures CPU time against the wall clock")

BUSY = r"""
import os, sys, time
n, seconds = int(sys.argv[1]), float(sys.argv[2])
def spin():
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return time.process_time()
start = time.monotonic()
if n == 1:
    used = spin()
else:
    r, w = os.pipe()
    for _ in range(n):
        if os.fork() == 0:
            os.write(w, f"{spin()}\n".encode())
            os._exit(0)
    for _ in range(n):
        os.wait()
    os.close(w)
    used = sum(float(x) for x in os.read(r, 4096).split())
print(f"{used / (time.monotonic() - start):.3f}")
"""


@pytest.mark.parametrize("processes", [1, 4])
def test_the_sandbox_gets_its_share_of_one_cpu(processes, tmp_path):
    result = sandlock("run", "--max-cpu", "25", "--", sys.executable, "-c", BUSY,
                      str(processes), "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 0.20 <= float(result.stdout) <= 0.30, result.stdout


def test_without_a_share_a_busy_loop_has_its_cpu(tmp_path):
    result = sandlock("run", "--", sys.executable, "-c", BUSY, "1", "1", cwd=tmp_path)
    assert float(result.stdout) > 0.6, result.stdout


def test_the_share_holds_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--max-cpu", "25", "--", sys.executable,
                                       "-c", BUSY, "1", "3"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert 0.15 <= float(result.stdout) <= 0.35, result.stdout
