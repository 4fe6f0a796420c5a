"""The signal dispositions confined code starts with. A Python function (a call, init,
a clone) runs on in the interpreter, and finds what the interpreter sets at its own
start: SIGPIPE and SIGXFSZ ignored (a write to a closed pipe raises BrokenPipeError),
SIGINT raising KeyboardInterrupt. Before, they were reset as for an exec: a function
that wrote to a closed pipe or socket was killed by SIGPIPE, with nothing to catch. A
command exec'd in the sandbox, from wherever (a run, a running sandbox's resident),
starts with them at their default, as after any exec. Real confined processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import SANDLOCK, users
from sandlock import Policy, Sandbox

SIGPIPE_AND_SIGXFSZ = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


def dispositions() -> tuple[str, str, str, str]:
    """SIGINT's handler, whether SIGPIPE and SIGXFSZ are ignored, and what a write to a
    pipe with no reader does."""
    read, write = os.pipe()
    os.close(read)
    try:
        os.write(write, b"x")
        wrote = "written"
    except BrokenPipeError:
        wrote = "BrokenPipeError"
    finally:
        os.close(write)
    interrupt = "KeyboardInterrupt" if signal.getsignal(signal.SIGINT) is \
        signal.default_int_handler else str(signal.getsignal(signal.SIGINT))
    return (interrupt, str(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN),
            str(signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN), wrote)


PYTHONS = ("KeyboardInterrupt", "True", "True", "BrokenPipeError")


def remember_init() -> None:
    import builtins

    builtins.INIT_DISPOSITIONS = dispositions()


def init_saw() -> tuple:
    import builtins

    return builtins.INIT_DISPOSITIONS


def test_a_function_finds_the_interpreters_dispositions():
    assert Sandbox(Policy()).call(dispositions).value == PYTHONS
    with Sandbox(Policy(), remember_init) as sandbox:
        assert sandbox.call(dispositions).value == PYTHONS
        assert sandbox.call(init_saw).value == PYTHONS
    [clone] = Sandbox(Policy(), None, dispositions).fork(1)
    assert clone.value == PYTHONS


def test_a_function_catches_a_closed_pipe():
    def write_to_closed() -> str:
        read, write = os.pipe()
        os.close(read)
        try:
            os.write(write, b"x")
        except BrokenPipeError:
            return "caught"
        return "written"

    result = Sandbox(Policy()).call(write_to_closed)
    assert (result.value, result.exit_code) == ("caught", 0), result


def test_an_ignored_sigint_stays_ignored_in_a_function():
    """When the embedding program ignores SIGINT (nohup, a background job), so does the
    function, as Python keeps an inherited SIG_IGN."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert Sandbox(Policy()).call(dispositions).value[0] == str(signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGINT, previous)


def ignored_mask(status: bytes) -> int:
    line = next(line for line in status.splitlines() if line.startswith(b"SigIgn:"))
    return int(line.split()[1], 16)


STATUS = ["cat", "/proc/self/status"]


def test_a_command_execd_in_a_running_sandbox_starts_with_them_at_default():
    """The resident is a Python process that ignores SIGPIPE and SIGXFSZ: an ignored
    signal outlives an exec, and a command would find them ignored (`yes | head`
    would print "Broken pipe" errors) but for the reset before it."""
    read, write = os.pipe()
    with Sandbox(Policy()) as sandbox:
        process = sandbox.exec(STATUS, stdout=write)
        os.close(write)
        assert process.wait(30) == 0
    with os.fdopen(read, "rb") as output:
        status = output.read()
    assert ignored_mask(status) & SIGPIPE_AND_SIGXFSZ == 0
    # The control: the mask is read as the kernel shows it (a process that ignores them).
    ignoring = subprocess.run(STATUS, capture_output=True, check=True, restore_signals=False)
    assert ignored_mask(ignoring.stdout) & SIGPIPE_AND_SIGXFSZ == SIGPIPE_AND_SIGXFSZ


@pytest.mark.parametrize("how", ["run", "cli"])
def test_a_command_run_starts_with_them_at_default(how):
    if how == "run":
        status = Sandbox(Policy()).run(STATUS).stdout
    else:
        status = subprocess.run([*SANDLOCK, "run", "--", *STATUS], capture_output=True,
                                check=True, timeout=60).stdout
    assert ignored_mask(status) & SIGPIPE_AND_SIGXFSZ == 0


def test_yes_into_head_ends_quietly_in_a_running_sandbox():
    read, write = os.pipe()
    with Sandbox(Policy()) as sandbox:
        process = sandbox.exec(["sh", "-c", "yes | head -n 1"], stdout=write, stderr=write)
        os.close(write)
        assert process.wait(30) == 0
    with os.fdopen(read, "rb") as output:
        assert output.read() == b"y\n"


def test_a_function_writing_past_the_file_size_limit_gets_efbig(tmp_path):
    """SIGXFSZ is ignored as in any Python program: the write raises (EFBIG). The
    control: at its default (as functions had it before), the signal kills the call."""
    target = tmp_path / "big"

    def write_big(default: bool) -> str:
        if default:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        try:
            with open(target, "wb") as file:
                file.write(b"x" * 4096)
        except OSError as exc:
            return f"OSError {exc.errno}"
        return "written"

    sandbox = Sandbox(Policy(max_file_size="1K", fs_writable=[str(tmp_path)]))
    assert sandbox.call(write_big, (False,)).value == "OSError 27"
    assert sandbox.call(write_big, (True,)).exit_code == 128 + signal.SIGXFSZ


# What a call sees, and what a command exec'd in a running sandbox starts with, from an
# interpreter of its own (so that it can run as another user).
AS_A_PROGRAM = r"""
import os, signal
from sandlock import Policy, Sandbox

def closed_pipe():
    read, write = os.pipe()
    os.close(read)
    try:
        os.write(write, b"x")
    except BrokenPipeError:
        return "BrokenPipeError"
    return "written"

read, write = os.pipe()
with Sandbox(Policy()) as sandbox:
    print(sandbox.call(closed_pipe).value)
    status = sandbox.exec(["cat", "/proc/self/status"], stdout=write)
    os.close(write)
    status.wait(30)
print(next(line for line in os.fdopen(read).read().splitlines() if line.startswith("SigIgn:")))
"""


@users
def test_the_dispositions_hold_for_an_unprivileged_user(world_tmp, as_nobody_or_self):
    wrap = as_nobody_or_self or (lambda argv: argv)
    run = subprocess.run(wrap([sys.executable, "-c", AS_A_PROGRAM]), capture_output=True,
                         text=True, timeout=120, cwd=world_tmp)
    called, ignored = run.stdout.splitlines()
    assert called == "BrokenPipeError", run.stderr
    assert int(ignored.split()[1], 16) & SIGPIPE_AND_SIGXFSZ == 0
