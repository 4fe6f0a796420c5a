"""COW clones (``Sandbox(policy, init, work)`` and ``sb.fork(n)``): init() runs once in
the sandbox, each clone runs work() with its own CLONE_ID, shares init's memory
copy-on-write, and is waited on for its exit status and work's value. Real forks."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest

from sandlock import Policy, Sandbox

MODEL: bytearray | None = None
HELD = 200 << 20


def load_model() -> None:
    global MODEL
    MODEL = bytearray(os.urandom(1 << 20)) * (HELD >> 20)  # 200 MB, every page touched


def clone_id() -> int:
    return int(os.environ["CLONE_ID"])


def rollout() -> tuple[int, int]:
    return clone_id(), MODEL[clone_id() * 4096]


def test_clones_get_distinct_ids_and_return_their_values():
    with Sandbox(Policy(), None, clone_id) as sb:
        clones = sb.fork(50)
        assert [clone.wait(30) for clone in clones] == [0] * 50
        assert [clone.value for clone in clones] == list(range(50))
        assert [clone.clone_id for clone in clones] == list(range(50))
        assert all(clone.success and clone.error is None for clone in clones)
        again = sb.fork(3)  # another batch: ids from 0 again
        assert [clone.wait(30) for clone in again] == [0] * 3 and [c.value for c in again] == [0, 1, 2]


def fails() -> None:
    if clone_id() == 1:
        raise ValueError("clone one fails")
    os._exit(7 if clone_id() == 2 else 0)


def test_a_clones_failure_is_its_own():
    with Sandbox(Policy(), None, fails) as sb:
        zero, one, two = sb.fork(3)
        assert (zero.wait(30), one.wait(30), two.wait(30)) == (0, 1, 7)
        assert str(one.error) == "ValueError: clone one fails" and not one.success
        assert not two.success and two.error.type == "SystemExit"


def clones_pss(clones: list) -> int:
    """The clones' PSS (kB) together."""
    total = 0
    for pid in (clone.pid for clone in clones):
        with open(f"/proc/{pid}/smaps_rollup") as file:
            total += next(int(line.split()[1]) for line in file if line.startswith("Pss:"))
    return total


def wait_for_signal() -> int:
    time.sleep(3)
    return len(MODEL)


def load_model_held() -> None:
    """init: the model, and SIGUSR1 blocked (so in every clone): one sent before a clone
    waits for it stays pending."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    load_model()


def until_released() -> int:
    signal.sigtimedwait({signal.SIGUSR1}, 60)
    return len(MODEL)


def test_clones_share_inits_memory():
    """100 clones of a process holding 200 MB: together far less than 100 x 200 MB.
    Measured with all 100 alive: a page's PSS is its size over the processes that map
    it, so clones read while others were still forked, or had already ended, would
    each count a larger share of the model (a fixed sleep did that under load)."""
    with Sandbox(Policy(), load_model_held, until_released) as sb:
        clones = sb.fork(100)
        deadline = time.monotonic() + 60
        while not all(clone.pid for clone in clones) and time.monotonic() < deadline:
            time.sleep(0.05)  # a clone's pid is known once it is forked
        pss_kb = clones_pss(clones)
        for clone in clones:
            clone.send_signal(signal.SIGUSR1)
        assert [clone.wait(60) for clone in clones] == [0] * 100
        assert {clone.value for clone in clones} == {HELD}
    # (~300-370 MB here, the machine busy or not: each clone's own pages, ~1 MB)
    assert pss_kb < 4 * (HELD >> 10), f"{pss_kb} kB of PSS for 100 clones"


def spoof() -> str:
    """Clone 0 tries to send a value as another process: the kernel refuses."""
    if clone_id() != 0:
        time.sleep(0.5)
        return "own value"
    results = next(fd for fd in range(3, 256) if _is_socket(fd))
    other = os.getpid() + 1
    credentials = struct.pack("3i", other, os.getuid(), os.getgid())
    sock = socket.socket(fileno=os.dup(results))
    try:
        sock.sendmsg([b"forged"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials)])
    except OSError as exc:
        return f"refused {exc.errno}"
    return "sent"


def _is_socket(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        return False


def test_a_clone_speaks_only_for_itself():
    with Sandbox(Policy(), None, spoof) as sb:
        clones = sb.fork(3)
        for clone in clones:
            clone.wait(30)
        assert clones[0].value == "refused 1"  # EPERM: no forging another pid
        assert [clone.value for clone in clones[1:]] == ["own value", "own value"]


def test_fork_needs_work_and_a_count():
    with Sandbox(Policy()) as sb:
        with pytest.raises(RuntimeError, match="needs work"):
            sb.fork(2)
    with Sandbox(Policy(), None, clone_id) as sb:
        assert sb.fork(0) == []
        with pytest.raises(TypeError, match="^n:"):
            sb.fork(-1)


def test_a_value_asked_for_before_the_clone_ends():
    with Sandbox(Policy(), None, wait_for_signal) as sb:
        clone = sb.fork(1)[0]
        with pytest.raises(RuntimeError, match="still running"):
            clone.value
        sb.kill()
        assert clone.returncode == 137 and not clone.success


def too_large() -> bytes:
    return b"x" * (1 << 20)


def test_a_value_too_large_for_the_results_socket_is_an_error():
    with Sandbox(Policy(), None, too_large) as sb:
        clone = sb.fork(1)[0]
        assert clone.wait(30) == 0
        assert not clone.success and "too large" in clone.error.message


def floods() -> int:
    """Clone 0's children all send values as themselves: none is a clone."""
    if clone_id() == 0:
        import pickle

        results = next(fd for fd in range(3, 256) if _is_socket(fd))
        for _ in range(50):
            if os.fork() == 0:
                os.write(results, pickle.dumps(("value", "x" * 100_000)))
                os._exit(0)
        for _ in range(50):
            os.wait()
    return clone_id()


def test_values_from_processes_that_are_no_clones_are_not_kept():
    with Sandbox(Policy(), None, floods) as sb:
        clones = sb.fork(3)
        assert [clone.wait(30) for clone in clones] == [0, 0, 0]
        assert [clone.value for clone in clones] == [0, 1, 2]
        assert len(sb._live._unclaimed) <= 3  # bounded by the clones awaited, not the senders


PRINTING = """
import os, sys
from sandlock import Policy, Sandbox

def init():
    print("init ran", end="")  # buffered: stdout is a pipe

def work():
    print(f"clone {os.environ['CLONE_ID']} ran")

def called():
    print("the call ran")

with Sandbox(Policy(), init, work) as sb:
    assert [clone.wait(30) for clone in sb.fork(3)] == [0, 0, 0]
    print(sb.call(called).stdout.decode(), end="", file=sys.stderr)
"""


def test_what_init_and_the_clones_print_comes_out_once_each(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "printing.py"
    script.write_text(PRINTING)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.replace("init ran", "init ran\n").splitlines()
    assert sorted(lines) == ["clone 0 ran", "clone 1 ran", "clone 2 ran", "init ran"]
    assert done.stderr == "the call ran\n"


READING = """
import sys
from sandlock import Policy, Sandbox

def init():
    sys.stdin.readline()  # reads ahead: the rest of the input sits in its buffer

def work():
    return sys.stdin.read()

def read_stdin():
    return sys.stdin.read()

with Sandbox(Policy(), init, work) as sb:
    print(repr(sb.call(read_stdin).value))
    [clone] = sb.fork(1)
    clone.wait(30)
    print(repr(clone.value))
"""


def test_what_init_read_ahead_is_read_by_no_call_nor_clone(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "reading.py"
    script.write_text(READING)
    done = subprocess.run([sys.executable, str(script)], input="first\nsecond\nthird\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "''\n''\n"  # a call's stdin is /dev/null; a clone's, what is left
