"""Inherited descriptors: the command gets 0-2 and what is passed explicitly, nothing
else of sandlock's process (seeds: "close fds 3+" before exec). A leaked writable
descriptor would be a way out of the sandbox: a file outside its policy, a socket to
a host process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import PolicyError, Sandbox

# What the command sees open: /proc/self/fd of a fresh python, minus the one listdir
# itself opens (always the lowest free number, so 3 when nothing else is open).
OPEN_FDS = ("import os; fds = sorted(int(f) for f in os.listdir('/proc/self/fd')); "
            "print(' '.join(map(str, fds[:-1])))")
WRITE_FD = "import os, sys; os.write(int(sys.argv[1]), b'escaped\\n')"


def run_with_fd(fd: int, *args: str) -> subprocess.CompletedProcess:
    """sandlock ARGS with ``fd`` inherited from its parent (as a shell's `7>file`)."""
    return subprocess.run([*SANDLOCK, *args], pass_fds=(fd,), capture_output=True, text=True,
                          timeout=60, cwd="/")


@pytest.fixture
def outside_file(tmp_path):
    """A writable descriptor on a file the sandbox may not write."""
    path = tmp_path / "outside.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    yield fd, path
    os.close(fd)


def test_an_inherited_descriptor_is_closed_in_the_command(outside_file):
    fd, path = outside_file
    listed = run_with_fd(fd, "run", "-r", "/", "--", sys.executable, "-c", OPEN_FDS)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["0", "1", "2"]
    wrote = run_with_fd(fd, "run", "-r", "/", "--", sys.executable, "-c", WRITE_FD, str(fd))
    assert wrote.returncode != 0 and "Bad file descriptor" in wrote.stderr
    assert path.read_bytes() == b""


def test_pass_fd_keeps_it_under_the_same_number(outside_file):
    fd, path = outside_file
    wrote = run_with_fd(fd, "run", "-r", "/", "--pass-fd", str(fd), "--",
                        sys.executable, "-c", WRITE_FD, str(fd))
    assert wrote.returncode == 0, wrote.stderr
    assert path.read_bytes() == b"escaped\n"  # passed on purpose: the user's choice


def test_a_shell_redirection_reaches_the_command_only_when_passed(tmp_path):
    out = tmp_path / "out"
    shell = f"{' '.join(SANDLOCK)} run {{}} -- sh -c 'echo hi >&7' 7>{out}"
    closed = subprocess.run(["sh", "-c", shell.format("")], capture_output=True, text=True)
    assert closed.returncode != 0 and out.read_text() == ""
    passed = subprocess.run(["sh", "-c", shell.format("--pass-fd 7")], capture_output=True,
                            text=True)
    assert passed.returncode == 0, passed.stderr
    assert out.read_text() == "hi\n"


def test_an_inherited_socket_is_closed_too():
    """A host socket (here one end of a pair) is not reachable from the command."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        code = "import socket, sys; socket.socket(fileno=int(sys.argv[1])).send(b'x')"
        result = run_with_fd(theirs.fileno(), "run", "--", sys.executable, "-c", code,
                             str(theirs.fileno()))
        assert result.returncode != 0
        ours.setblocking(False)
        with pytest.raises(BlockingIOError):
            ours.recv(1)


def test_api_closes_the_callers_descriptors_and_passes_chosen_ones(outside_file):
    fd, path = outside_file
    os.set_inheritable(fd, True)  # even one the caller made inheritable
    result = Sandbox().run([sys.executable, "-c", OPEN_FDS])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == [b"0", b"1", b"2"]
    passed = Sandbox().run([sys.executable, "-c", WRITE_FD, str(fd)], pass_fds=[fd])
    assert passed.exit_code == 0, passed.stderr
    assert path.read_bytes() == b"escaped\n"


@pytest.mark.parametrize(("value", "message"), [
    (1, "descriptors 0-2 are the command's stdio"),
    (-1, "is not a file descriptor number"),
    ("3", "is not a file descriptor number"),
    (999, "999: not an open file descriptor"),
])
def test_bad_pass_fds_are_policy_errors(value, message):
    with pytest.raises(PolicyError, match=message):
        Sandbox().run(["true"], pass_fds=[value])


def test_bad_pass_fd_option_is_exit_2_naming_it():
    result = sandlock("run", "--pass-fd", "999", "--", "true")
    assert result.returncode == 2
    assert result.stderr.strip() == "sandlock: error: --pass-fd: 999: not an open file descriptor"
    assert sandlock("run", "--pass-fd", "x", "--", "true").returncode == 2


def test_descriptors_are_closed_unprivileged_too(as_nobody, tmp_path):
    path = tmp_path / "outside.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        result = subprocess.run(as_nobody([*SANDLOCK, "run", "--", sys.executable, "-c", OPEN_FDS]),
                                pass_fds=(fd,), capture_output=True, text=True, timeout=60,
                                cwd=tempfile.gettempdir())
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "2"]
