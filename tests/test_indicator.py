"""The run indicator (LocalGPT's spec): said on stderr when it is a terminal (a real
pty here), and with --announce or -p agent; never when stderr is not a terminal
otherwise; never in the command's stdout; names with control characters escaped."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from conftest import SANDLOCK, sandlock


def _stderr_on_a_terminal(argv: list[str], cwd) -> tuple[int, bytes, bytes]:
    """Run ``argv`` with stdout a pipe and stderr a pty: (status, stdout, terminal)."""
    master, slave = os.openpty()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                          cwd=cwd) as process:
        os.close(slave)
        terminal = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1)[0]:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: nothing holds the terminal any more
                break
            if not chunk:
                break
            terminal += chunk
        stdout = process.stdout.read()
        code = process.wait(10)
    os.close(master)
    return code, stdout, terminal.replace(b"\r\n", b"\n")


def _run(*args: str) -> list[str]:
    return [*SANDLOCK, "run", *args]


def test_on_a_terminal_the_run_is_announced_and_stdout_stays_clean(tmp_path):
    code, stdout, terminal = _stderr_on_a_terminal(
        _run("--", "sh", "-c", "echo out; echo err >&2"), tmp_path)
    assert code == 0 and stdout == b"out\n"
    text = terminal.decode()
    lines = text.splitlines()
    assert lines[0] == "\N{LOCK} Running sandboxed: sh -c 'echo out; echo err >&2'", text
    assert lines[1:3] == [f"  Workspace: {tmp_path}", "  Network: denied; a private network, only lo"]
    assert lines[3] == "err"  # the indicator before the command, its end after
    assert lines[4].startswith("\N{CHECK MARK} Completed in ")
    assert lines[4].endswith("s (sandbox: full)") and len(lines) == 5


def test_a_whole_session_on_a_terminal(tmp_path):
    """As `script` would run it: stdin, stdout and stderr the terminal."""
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.chdir(tmp_path)
            os.execvp(SANDLOCK[0], _run("--", "sh", "-c", "echo out; exit 3"))
        finally:
            os._exit(127)
    transcript = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        transcript += chunk
    _, status = os.waitpid(pid, 0)
    os.close(master)
    text = transcript.decode().replace("\r\n", "\n")
    assert os.waitstatus_to_exitcode(status) == 3
    assert text.index("Running sandboxed: sh -c 'echo out; exit 3'") < text.index("out\n\N{BALLOT X}")
    assert "Completed in" in text and "(sandbox: full; exit status 3)" in text


def test_not_said_when_stderr_is_not_a_terminal(tmp_path):
    """Control for the two above: pipes, no option: nothing but the command's output."""
    result = sandlock("run", "--", "sh", "-c", "echo out; echo err >&2", cwd=tmp_path)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")


def test_quiet_silences_it_on_a_terminal(tmp_path):
    code, stdout, terminal = _stderr_on_a_terminal(_run("-q", "--", "true"), tmp_path)
    assert (code, stdout, terminal) == (0, b"", b"")


def test_announce_says_it_on_a_pipe_and_not_in_stdout(tmp_path):
    result = sandlock("run", "--announce", "--net-allow", "127.0.0.1:9", "--", "echo", "out",
                      cwd=tmp_path)
    assert result.stdout == "out\n"
    assert result.stderr.splitlines()[:3] == ["\N{LOCK} Running sandboxed: echo out",
                                              f"  Workspace: {tmp_path}",
                                              "  Network: 127.0.0.1:9"]
    assert "Completed in" in result.stderr


def test_announce_wins_over_quiet(tmp_path):
    result = sandlock("run", "-q", "--announce", "--", "true", cwd=tmp_path)
    assert "Running sandboxed: true" in result.stderr


def test_the_agent_profile_always_announces(tmp_path):
    result = sandlock("run", "-p", "agent", "--", "echo", "out", cwd=tmp_path)
    assert result.stdout == "out\n"
    assert "Running sandboxed: echo out" in result.stderr and "Completed in" in result.stderr


def test_control_characters_in_names_are_escaped(tmp_path):
    """A command (or a directory) named to rewrite the terminal shows its escapes as text."""
    directory = tmp_path / "work\x1b[2J\nNetwork: open"
    directory.mkdir()
    code, stdout, terminal = _stderr_on_a_terminal(
        _run("--", "sh", "-c", "true", "\x1b]0;owned\x07\rRunning sandboxed: nothing"), directory)
    assert code == 0 and stdout == b""
    assert b"\x1b" not in terminal and b"\x07" not in terminal
    lines = terminal.decode().splitlines()
    assert len(lines) == 4, lines  # three lines before, one after: none added
    assert lines[0] == ("\N{LOCK} Running sandboxed: sh -c true "
                        "'\\x1b]0;owned\\x07\\rRunning sandboxed: nothing'")
    assert lines[1] == f"  Workspace: {tmp_path}/work\\x1b[2J\\nNetwork: open"
    assert lines[2] == "  Network: denied; a private network, only lo"


def test_the_network_line_names_the_rules(tmp_path):
    socket = tmp_path / "daemon.sock"
    socket.touch()
    result = sandlock("run", "--announce", "--net-allow", "10.0.0.1:443", "--http-allow",
                      "GET example.com/api/*", "--net-bind", "8080", "--unix-allow", str(socket),
                      "--", "true", cwd=tmp_path)
    network = [line for line in result.stderr.splitlines() if "Network:" in line]
    assert network == ["  Network: 10.0.0.1:443; HTTP GET example.com/api/*; listen on 8080; "
                       f"unix {socket}"], result.stderr


def test_without_a_utf8_stderr_the_marks_are_left_out(tmp_path):
    result = sandlock("run", "--announce", "--", "true", cwd=tmp_path,
                      env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.stderr.splitlines()[0] == "Running sandboxed: true", result.stderr
    assert result.stderr.splitlines()[-1].startswith("Completed in ")


def test_said_for_an_unprivileged_user(as_nobody, world_tmp):
    code, stdout, terminal = _stderr_on_a_terminal(as_nobody(_run("--", "echo", "out")), world_tmp)
    assert code == 0 and stdout == b"out\n"
    assert b"Running sandboxed: echo out" in terminal and b"(sandbox: full)" in terminal
