"""The process cap (-P/--max-processes) on real confined processes: a fork past it
fails with EAGAIN and the run goes on; threads are not processes; processes that left
the session still count; a fork bomb stays bounded and sandlock returns, naming it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

from conftest import SANDLOCK, sandlock

FORK_UNTIL_REFUSED = r"""
import errno, os, sys, time
children = []
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print("made", len(children), errno.errorcode[exc.errno])
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
pid = os.fork()  # room again: the run goes on
if pid == 0:
    os._exit(7)
print("after", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_past_the_cap_fails_with_eagain_and_the_run_goes_on(tmp_path):
    result = sandlock("run", "-P", "4", "--", sys.executable, "-c", FORK_UNTIL_REFUSED,
                      cwd=tmp_path)
    assert result.stdout.splitlines() == ["made 3 EAGAIN", "after 7"], result.stderr
    assert result.returncode == 0
    assert ("sandlock: process limit 4 reached: a fork failed with EAGAIN "
            "(-P/--max-processes raises it)") in result.stderr
    assert "sandlock: process limit 4: 1 fork(s) refused (EAGAIN)" in result.stderr


THREADS = r"""
import threading, time
threads = [threading.Thread(target=time.sleep, args=(0.3,)) for _ in range(50)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("50 threads")
"""


def test_threads_are_not_processes(tmp_path):
    result = sandlock("run", "-P", "2", "--", sys.executable, "-c", THREADS, cwd=tmp_path)
    assert result.stdout == "50 threads\n", result.stderr
    assert "process limit" not in result.stderr


DAEMONS = r"""
import errno, os, time
def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(30)
        os._exit(0)
for _ in range(2):
    daemon()
    os.wait()
time.sleep(0.2)
if os.fork() == 0:  # the command, 2 daemons and this one: 4
    time.sleep(30)
try:
    os.fork() or os._exit(0)
    print("forked")
except OSError as exc:
    print("refused", errno.errorcode[exc.errno])
"""


def test_processes_that_left_the_session_still_count_and_end_with_the_run(tmp_path):
    start = time.monotonic()
    result = sandlock("run", "-P", "4", "--", sys.executable, "-c", DAEMONS, cwd=tmp_path)
    assert result.stdout == "refused EAGAIN\n", result.stderr
    assert time.monotonic() - start < 20  # the daemons were killed with the run


def test_a_fork_bomb_stays_bounded_and_sandlock_returns_naming_the_limit(tmp_path):
    result = sandlock("run", "-P", "20", "-t", "3", "--", "bash", "-c",
                      "bomb() { bomb & bomb & wait; }; bomb", cwd=tmp_path, timeout=60)
    assert result.returncode in (0, 124, 126, 254), result.stderr[-500:]
    assert "sandlock: process limit 20 reached" in result.stderr


def test_without_a_cap_forks_are_not_supervised(tmp_path):
    result = sandlock("run", "--", sys.executable, "-c",
                      FORK_UNTIL_REFUSED.replace("while True", "for _ in range(30)"),
                      cwd=tmp_path)
    assert "made" not in result.stdout and "after 7" in result.stdout, result.stderr


def test_the_cap_holds_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-P", "3", "--", sys.executable, "-c",
                                       FORK_UNTIL_REFUSED]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.splitlines() == ["made 2 EAGAIN", "after 7"], result.stderr
