"""The process cap (-P/--max-processes) on real confined processes: a fork past it
fails with EAGAIN and the run goes on; threads are not processes; processes that left
the session still count; a fork bomb stays bounded and sandlock returns, naming it."""

from __future__ import annotations

import os
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


FORKS_FROM_THREADS = r"""
import os, threading
def forks():
    for _ in range(60):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
threads = [threading.Thread(target=forks) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("all forked")
"""

SUPERVISOR_SWITCHING_OFTEN = r"""
import sys
from sandlock import Policy, Sandbox
sys.setswitchinterval(1e-6)  # the receivers switch between any two bytecodes
result = Sandbox(Policy(max_processes=64)).run([sys.executable, "-c", sys.argv[1]], timeout=60)
print(result.exit_code, result.stdout.decode().strip(), result.stderr.decode()[-500:])
"""


def test_forks_from_many_threads_at_once_are_each_answered(tmp_path):
    # Calls arriving together at the three receivers: none is lost (its caller would
    # wait forever) nor answered twice, with the supervisor's threads switching often.
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", SUPERVISOR_SWITCHING_OFTEN,
                                 FORKS_FROM_THREADS], capture_output=True, text=True,
                                timeout=120, cwd=tmp_path)
        assert result.stdout.startswith("0 all forked"), result.stdout + result.stderr


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


# Without -P: the kernel's RLIMIT_NPROC in the sandbox's user namespace (docs/usage.md).
FORK_SLEEPERS = r"""
import os, sys, time
made = 0
try:
    for _ in range(int(sys.argv[1])):
        if os.fork() == 0:
            time.sleep(4)  # at the cap for longer than the keeper's counts are apart (2 s)
            os._exit(0)
        made += 1
except BlockingIOError:
    print("refused after", made)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print("made", made)
"""


def test_by_default_a_fork_bomb_meets_the_task_cap_of_an_ordinary_user(as_nobody):
    """Linear, not a real bomb: bounded even if the cap were gone."""
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--", sys.executable, "-c",
                                       FORK_SLEEPERS, "1500"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=120)
    refused, made = result.stdout.splitlines()
    # The sandbox's tasks: its keeper, its init and init's binder thread, the
    # interpreter, its children.
    assert refused == "refused after 1020" and made == "made 1020", result.stderr
    assert_task_cap_said(result.stderr)


def assert_task_cap_said(stderr: str) -> None:
    """Said once as it happens, naming the option, and once in the exit summary."""
    assert stderr.count("sandlock: task cap 1024 reached (threads included): forks and new "
                        "threads fail with EAGAIN (-P/--max-processes sets another cap)") == 1, stderr
    assert stderr.count("sandlock: task cap 1024: reached during the run "
                        "(-P/--max-processes sets another cap)") == 1, stderr


def test_for_root_too_the_task_cap_holds(tmp_path):
    """RLIMIT_NPROC exempts root: the PID namespace's own pid_max bounds its tasks, at
    the cap or up to RESERVED_PIDS above it (pids wrap from there)."""
    assert os.geteuid() == 0  # (the machines that run the suite run it as root)
    result = sandlock("run", "--", sys.executable, "-c", FORK_SLEEPERS, "1500", cwd=tmp_path,
                      timeout=120)
    refused, made = result.stdout.splitlines()
    assert refused.startswith("refused after ") and made == "made " + refused.split()[-1]
    assert 1020 <= int(made.split()[-1]) <= 1024 + 300 - 4, result.stdout
    assert_task_cap_said(result.stderr)


def test_root_in_the_sandbox_cannot_raise_its_pid_max(tmp_path):
    """Root in the sandbox's user namespace may write the namespace's pid_max whatever
    its capabilities: /proc/sys is read-only there, even under a write grant on /proc."""
    result = sandlock("run", "-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin",
                      "-w", "/proc", "--", "/bin/sh", "-c",
                      "echo 99999 > /proc/sys/kernel/pid_max; cat /proc/sys/kernel/pid_max",
                      cwd=tmp_path)
    assert result.stdout == "1324\n", result.stderr
    assert "Read-only file system" in result.stderr


def test_the_task_cap_leaves_threaded_programs_alone(as_nobody):
    script = ("import threading, time\n"
              "threads = [threading.Thread(target=time.sleep, args=(0.5,)) for _ in range(300)]\n"
              "for t in threads: t.start()\n"
              "for t in threads: t.join()\n"
              "print('threads', len(threads))")
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--", sys.executable, "-c", script]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert (result.returncode, result.stdout) == (0, "threads 300\n"), result.stderr
    assert "task cap" not in result.stderr


def test_max_processes_replaces_the_task_cap(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-P", "1200", "--", sys.executable, "-c",
                                       FORK_SLEEPERS, "1100"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=120)
    assert result.stdout == "made 1100\n", result.stderr[-500:]
