"""--max-output holds for everything the command writes to the terminal, not only its
stdout and stderr: under it the command has no controlling terminal (/dev/tty), its
terminal stdin is read-only, and the terminal devices are not writable. sandlock runs
with a real pty as its terminal (pty.fork); what reached the terminal is read from the
master side."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK

WRITES = r"""
import os, sys
print("read:", sys.stdin.readline().strip(), flush=True)
def write_all(fd, letter):
    data = letter * 200000
    while data:
        data = data[os.write(fd, data):]
def attempt(name, how):
    try:
        how()
        print(name, "wrote", flush=True)
    except OSError as exc:
        print(name, "refused", exc.errno, flush=True)
def tty():
    fd = os.open("/dev/tty", os.O_WRONLY)
    write_all(fd, b"T")
def stdin():
    write_all(0, b"Z")
def device():
    fd = os.open(os.ttyname(0), os.O_WRONLY | os.O_NOCTTY)
    write_all(fd, b"P")
attempt("/dev/tty", tty)
attempt("fd 0", stdin)
attempt("the pts", device)
"""


def _on_a_terminal(argv: list[str], typed: bytes = b"hi\n", timeout: float = 60,
                   owner: int | None = None) -> tuple[int, bytes]:
    """Run ``argv`` with a new pty (``owner``'s, as a login would make it) as its
    controlling terminal and stdio; type ``typed``; (exit status, everything that
    reached the terminal)."""
    pid, master = pty.fork()
    if pid == 0:
        try:
            if owner is not None:
                os.fchown(0, owner, owner)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    os.write(master, typed)
    transcript = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal has no process left
            break
        if not chunk:
            break
        transcript += chunk
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(master)
    return os.waitstatus_to_exitcode(status), transcript


def _command(*options: str) -> list[str]:
    # -q: on a terminal, the run indicator would show the command line, letters and all
    # (tests/test_indicator.py); what is counted here is what the command wrote.
    return [*SANDLOCK, "run", "-q", *options, "--", sys.executable, "-c", WRITES]


def test_the_terminal_is_reached_only_through_the_count():
    code, transcript = _on_a_terminal(_command("--max-output", "1K"))
    text = transcript.decode(errors="replace")
    assert code == 0, text
    assert "read: hi" in text  # the terminal is still its input
    assert "/dev/tty refused" in text  # not granted (EACCES), and no controlling terminal
    assert "fd 0 refused 9" in text  # EBADF: stdin is read-only
    assert "the pts refused 13" in text  # EACCES: not granted for writing
    assert (text.count("T"), text.count("Z"), text.count("P")) == (0, 0, 0)
    assert len(transcript) < 4096


def test_the_command_has_no_controlling_terminal_under_max_output():
    """Whatever the policy grants of /dev: /dev/tty names no terminal (ENXIO)."""
    script = ("import os\n"
              "try:\n"
              "    os.open('/dev/tty', os.O_RDONLY)\n"
              "except OSError as exc:\n"
              "    print('no terminal', exc.errno)\n"
              "print('session leader', os.getsid(0) == os.getpid())\n")
    code, transcript = _on_a_terminal([*SANDLOCK, "run", "--max-output", "1K", "--",
                                       sys.executable, "-c", script])
    assert code == 0 and b"no terminal" in transcript and b"session leader True" in transcript, \
        transcript


def test_without_max_output_the_terminal_is_the_commands():
    """Control: the same writes reach the terminal (the test sees them)."""
    code, transcript = _on_a_terminal(_command())
    text = transcript.decode(errors="replace")
    assert code == 0, text
    assert "/dev/tty wrote" in text and "fd 0 wrote" in text and "the pts wrote" in text
    assert (text.count("T"), text.count("Z"), text.count("P")) == (200000, 200000, 200000)


def test_the_terminal_is_counted_for_an_unprivileged_user(as_nobody):
    code, transcript = _on_a_terminal(as_nobody(_command("--max-output", "1K")),
                                      owner=65534 if os.getuid() == 0 else None)
    text = transcript.decode(errors="replace")
    assert code == 0, text
    assert (text.count("T"), text.count("Z"), text.count("P")) == (0, 0, 0)
    assert "/dev/tty refused" in text and "fd 0 refused 9" in text


@pytest.mark.parametrize("stdin", ["terminal", "pipe"])
def test_what_the_command_prints_is_still_shown_up_to_the_limit(stdin):
    argv = [*SANDLOCK, "run", "--max-output", "1K", "--", sys.executable, "-c",
            "print('x' * 5000)"]
    if stdin == "terminal":  # (the run indicator's command line holds an x too)
        argv.insert(argv.index("run") + 1, "-q")
    if stdin == "pipe":
        result = subprocess.run(argv, input="", capture_output=True, text=True, timeout=60)
        assert result.stdout == "x" * 1024, result.stderr
        return
    code, transcript = _on_a_terminal(argv)
    assert code == 0 and transcript.split(b"sandlock:")[0].count(b"x") == 1024, transcript
