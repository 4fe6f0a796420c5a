"""The values the fuzzing run found, performed against real confined processes: what
the command could do, or whether it started at all, when a value reads as another
than the one written (docs/usage.md, "Values"). Each with its control: the value as
it should be written does what the test looks for, so the test can see it happen.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest
from conftest import SANDLOCK, sandlock, users

CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.fixture
def listener():
    """A TCP listener on loopback that counts the connections it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(connection)
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def _connect(rule: str, port: int, as_user=None, cwd=None) -> subprocess.CompletedProcess:
    argv = [*SANDLOCK, "run", "--net-allow", rule, "--", sys.executable, "-c", CONNECT, str(port)]
    return subprocess.run(as_user(argv) if as_user else argv, capture_output=True, text=True,
                          timeout=60, cwd=cwd)


@users
@pytest.mark.parametrize("invisible", ["\u2028", "\u00a0", "\u200b", "\u3000", "\x85"])
def test_an_invisible_character_around_a_rule_opens_nothing(listener, invisible,
                                                            as_nobody_or_self, world_tmp):
    """Before: str.strip() dropped U+2028 (and the other Unicode blanks), so
    `--net-allow $'\\u2028*'` was `*`: everything open, by a rule a reviewer, a
    shell-quoting tool or another parser reads as something else."""
    port, accepted = listener
    done = _connect(f"{invisible}*", port, as_nobody_or_self, cwd=world_tmp)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == (f"sandlock: error: --net-allow: {f'{invisible}*'!r}: invisible "
                           f"character U+{ord(invisible):04X} (write rules in printable text, "
                           "words separated by spaces)\n")
    assert accepted == []
    # Control: written as meant, the same command connects (so the test can see it).
    control = _connect("*", port, as_nobody_or_self, cwd=world_tmp)
    assert control.stdout == "connected\n", control
    assert len(accepted) == 1
    # Spaces and tabs around a rule are still what they always were: nothing.
    spaced = _connect(" \t127.0.0.1 ", port, as_nobody_or_self, cwd=world_tmp)
    assert spaced.stdout == "connected\n", spaced


def test_the_same_rule_in_a_policy_file_opens_nothing(listener, tmp_path):
    port, accepted = listener
    policy = tmp_path / "p.toml"
    policy.write_text('[network]\nallow = [\n  "127.0.0.2",\n  "\\u2028*",\n]\n')
    os.chmod(policy, 0o600)
    argv = ["run", "--policy", str(policy), "--", sys.executable, "-c", CONNECT, str(port)]
    done = sandlock(*argv)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"sandlock: error: {policy}:4: network.allow: '\\u2028*': invisible "
                           "character U+2028 (write rules in printable text, words separated "
                           "by spaces)\n")
    assert accepted == []
    policy.write_text('[network]\nallow = ["*"]\n')
    assert sandlock(*argv).stdout == "connected\n" and len(accepted) == 1


@pytest.mark.parametrize("option, value, control", [
    ("--timeout", "1e10", "600"),  # before: the command ran, then select() raised OverflowError
    ("--timeout", "1000000001", "1000000000"),
    ("--max-file-size", "99999999999T", "8388607T"),  # before: exit 125, setrlimit's C long
    ("--max-file-size", "8388608T", "8388607T"),
    ("--pass-fd", "9223372036854775807", None),  # before: OverflowError from os.fstat
])
def test_a_value_past_its_bound_never_starts_the_command(tmp_path, option, value, control):
    marker = tmp_path / "started"
    argv = ["--", "sh", "-c", f"touch {marker}"]
    done = sandlock("run", option, value, *argv)
    assert done.returncode == 2 and done.stderr.startswith(f"sandlock: error: {option}"), done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not marker.exists()
    if control is not None:
        ran = sandlock("run", option, control, *argv)
        assert ran.returncode == 0, ran.stderr
        assert marker.exists()


@users
def test_a_huge_cpu_range_is_refused_at_once(as_nobody_or_self, world_tmp):
    """Before: 0-1111111111 built a billion CPUs' set (a hang; MemoryError under a
    ulimit). Now its ends are checked first: well under a second of CPU."""
    argv = [*SANDLOCK, "run", "--cpu-cores", "0-1111111111", "--", "true"]
    before = os.times()
    done = subprocess.run(as_nobody_or_self(argv) if as_nobody_or_self else argv,
                          capture_output=True, text=True, timeout=60, cwd=world_tmp)
    after = os.times()
    assert done.returncode == 2, done
    last = max(os.sched_getaffinity(0))
    assert done.stderr.startswith(f"sandlock: error: --cpu-cores: CPU {last + 1}-1111111111 is "
                                  "not one sandlock may run on")
    assert (after.children_user + after.children_system
            - before.children_user - before.children_system) < 2


@pytest.mark.parametrize("option, value, meant", [
    ("--http-port", "٣٤٣", "343"),  # before: port 343
    ("-m", "２G", "2G"),  # before: 2G
    ("-t", "1_0", "10"),  # before: 10 s
    ("--max-cpu", "５0", "50"),
    ("-P", "٣", "3"),
])
def test_digits_of_other_scripts_are_refused_not_read(option, value, meant):
    refused = sandlock("run", "--print-policy", option, value)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused
    assert refused.stderr.startswith("sandlock: error: ") and repr(value) in refused.stderr
    assert sandlock("run", "--print-policy", option, meant).returncode == 0


def test_profile_list_and_errors_do_not_write_into_the_terminal(tmp_path):
    """A profile's description and a file's key are text someone else may have written:
    an escape sequence in them (set the window title, clear the screen) is shown, not
    sent to the terminal."""
    profiles = tmp_path / "sandlock" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "t.toml").write_text('description = "ok\\u001b]0;pwned\\u0007\\u001b[2J"\n')
    (profiles / "bad.toml").write_text('"x\\u001b[2J" = 1\n')
    for path in profiles.iterdir():
        os.chmod(path, 0o600)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    listed = sandlock("profile", "list", env=env)
    assert "\x1b" not in listed.stdout and listed.stdout.count("\n") == 3  # (and agent, built in)
    assert "unknown top-level key 'x\\x1b[2J'" in listed.stdout
    assert listed.stdout.endswith("\nt      ok\\x1b]0;pwned\\x07\\x1b[2J\n")
    shown = sandlock("run", "-p", "bad", "--", "true", env=env)
    assert "\x1b" not in shown.stderr and "'x\\x1b[2J'" in shown.stderr
    assert shown.stderr.count("\n") == 1
