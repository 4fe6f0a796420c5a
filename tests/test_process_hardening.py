"""Upstream Sandlock's process-level controls, in the style of its cases, with real
confined processes: the ids inside the user namespace (--user, --privileged: root in
name only), no core dumps, no ASLR, no transparent huge pages, --max-open-files never
raising what the command inherited, and --status-fd's line."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess

import pytest

from conftest import SANDLOCK
from test_root import CAPABILITIES, DENIED, owned_files, run  # noqa: F401 - owned_files: a fixture

SH_IDS = "id -u; id -g; touch made; grep CapEff /proc/self/status"
NONE = "0000000000000000"


def sandboxed(*args: str, as_user=lambda argv: argv, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 60)
    return subprocess.run(as_user([*SANDLOCK, "run", *args]), capture_output=True, text=True,
                          **kwargs)


def ids_inside(*options: str, cwd, as_user=lambda argv: argv) -> list[str]:
    done = sandboxed(*options, "--", "sh", "-c", SH_IDS, cwd=cwd, as_user=as_user)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


# --- the ids inside -----------------------------------------------------------------------

@pytest.mark.parametrize("who", ["self", "nobody"])
def test_user_gives_the_command_these_ids_inside_and_its_own_outside(who, world_tmp, request):
    as_user = request.getfixturevalue("as_nobody") if who == "nobody" else (lambda argv: argv)
    outside = 65534 if who == "nobody" else os.getuid()
    assert ids_inside("--user", "1234:5678", cwd=world_tmp, as_user=as_user) == [
        "1234", "5678", "CapEff:", NONE]
    assert os.stat(world_tmp / "made").st_uid == outside  # on the host, still the user's file
    os.unlink(world_tmp / "made")
    # the control: without --user, the command's own ids
    assert ids_inside(cwd=world_tmp, as_user=as_user)[:2] == [str(outside), str(outside)]


def test_privileged_is_uid_0_inside_and_nothing_of_root_outside(world_tmp, as_nobody):
    """nobody as "root" in its sandbox: no capability, the host's root-owned files and
    the machine's settings still out of reach (the attacks), another uid not even
    expressible (one id mapped)."""
    secret = world_tmp / "root-only"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    attacks = (
        "id -u; grep CapEff /proc/self/status; "
        f"cat {secret} >/dev/null 2>&1; echo read=$?; "
        "echo x >> /etc/hostname 2>/dev/null; echo write-etc=$?; "
        "chown 1:1 . 2>/dev/null; echo chown=$?; "
        "hostname sandboxed 2>/dev/null; echo hostname=$?; "
        "mount -t tmpfs none /mnt 2>/dev/null; echo mount=$?")
    done = sandboxed("--privileged", "--", "sh", "-c", attacks, cwd=world_tmp, as_user=as_nobody)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "CapEff:", NONE, "read=1", "write-etc=2", "chown=1",
                                   "hostname=1", "mount=32"]
    assert secret.read_text() == "root's\n" and os.stat(world_tmp).st_uid == 0
    # the control: unprivileged, the same command is nobody
    assert ids_inside(cwd=world_tmp, as_user=as_nobody)[:1] == ["65534"]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's capabilities are the subject")
def test_privileged_root_holds_no_capability_either(owned_files):  # noqa: F811
    """The root-capabilities hardening of test_root, with --privileged: the same."""
    results = run(CAPABILITIES, owned_files, how="run", options=("--privileged",),
                  hostname=socket.gethostname())
    assert results == {**DENIED, "chown to another": "EINVAL", "setgid": "EINVAL",
                       "setuid": "EINVAL"}


def test_user_and_privileged_are_checked():
    for argv, message in (
        (["--user", "root"], "--user: expected UID:GID (e.g. 0:0 or 1000:1000), got 'root'"),
        (["--user", "1:4294967295"], "--user: '4294967295' is not a user or group id"),
        (["--user", "5:5", "--privileged"], "--privileged: is uid 0 in the sandbox: --user 5:5"),
    ):
        done = sandboxed(*argv, "--", "true")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
        assert done.stderr.startswith(f"sandlock: error: {message}"), done.stderr


# --- process attributes -----------------------------------------------------------------------

CRASH = "ulimit -c unlimited 2>/dev/null; echo raised=$?; sleep 5 & kill -SEGV $!; wait $!; echo $?"


@pytest.mark.skipif(open("/proc/sys/kernel/core_pattern").read().startswith("|"),
                    reason="a core dump handler, not a file, takes the dumps here")
@pytest.mark.parametrize("who", ["self", "nobody"])
def test_no_coredump_writes_no_core_even_when_the_command_raises_its_limit(who, world_tmp,
                                                                          request):
    as_user = request.getfixturevalue("as_nobody") if who == "nobody" else (lambda argv: argv)
    dumped = sandboxed("--", "sh", "-c", CRASH, cwd=world_tmp, as_user=as_user)
    cores = [name for name in os.listdir(world_tmp) if name.startswith("core")]
    assert dumped.stdout.split() == ["raised=0", "139"] and cores  # the control
    for name in cores:
        os.unlink(world_tmp / name)
    kept = sandboxed("--no-coredump", "--", "sh", "-c", CRASH, cwd=world_tmp, as_user=as_user)
    assert kept.stdout.split() == ["raised=2", "139"], kept.stderr  # the hard limit is 0 too
    assert [name for name in os.listdir(world_tmp) if name.startswith("core")] == []


def stack_of_two_runs(*options: str) -> list[str]:
    lines = []
    for _ in range(2):
        done = sandboxed(*options, "--", "grep", "-m1", r"\[stack\]", "/proc/self/maps")
        assert done.returncode == 0, done.stderr
        lines.append(done.stdout.split()[0])
    return lines


def test_no_randomize_memory_gives_two_runs_the_same_addresses():
    first, second = stack_of_two_runs("--no-randomize-memory")
    assert first == second
    assert len(set(stack_of_two_runs())) == 2  # the control: randomised


def test_no_huge_pages_turns_transparent_huge_pages_off(as_nobody):
    for as_user in (lambda argv: argv, as_nobody):
        for options, expected in (((), "1"), (("--no-huge-pages",), "0")):
            done = sandboxed(*options, "--", "grep", "THP_enabled", "/proc/self/status",
                             as_user=as_user)
            assert done.stdout.split() == ["THP_enabled:", expected], done.stderr


def test_the_command_cannot_undo_what_the_seccomp_filter_keeps():
    """ADDR_NO_RANDOMIZE may only be cleared (personality(PER_LINUX)); setting another
    persona flag stays refused."""
    code = ("import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
            "print(libc.personality(0x0400000), ctypes.get_errno())")  # READ_IMPLIES_EXEC
    done = sandboxed("--no-randomize-memory", "--", "python3", "-c", code)
    assert done.stdout.split() == ["-1", "1"], done.stderr


# --- max_open_files ----------------------------------------------------------------------------

def limits_inside(*options: str, inherited: tuple[int, int], as_user=lambda argv: argv) -> list[str]:
    done = sandboxed(*options, "--", "sh", "-c", "ulimit -Sn; ulimit -Hn", as_user=as_user,
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, inherited))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_max_open_files_lowers_and_never_raises_the_inherited_limit(as_nobody):
    for as_user in (lambda argv: argv, as_nobody):
        # higher than the inherited soft limit: the soft limit stays, the hard one comes down
        assert limits_inside("--max-open-files", "1024", inherited=(256, 4096),
                             as_user=as_user) == ["256", "1024"]
        # lower: both come down to it
        assert limits_inside("--max-open-files", "100", inherited=(256, 4096),
                             as_user=as_user) == ["100", "100"]
        # the control: what the command inherits without it
        assert limits_inside(inherited=(256, 4096), as_user=as_user) == ["256", "4096"]


# --- --status-fd ------------------------------------------------------------------------------

def status_of(*args: str, command: str) -> tuple[dict, subprocess.CompletedProcess]:
    read, write = os.pipe()
    try:
        done = subprocess.run([*SANDLOCK, "run", "--status-fd", str(write), *args, "--", "sh",
                               "-c", command], capture_output=True, text=True, timeout=60,
                              pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read) as status:
        lines = status.read().splitlines()
    assert len(lines) == 1, (lines, done.stderr)
    return json.loads(lines[0]), done


def test_status_fd_says_how_the_run_ended():
    cases = {
        "exited": ((), "exit 3"),
        "signaled": ((), "kill -TERM $$"),
        "timeout": (("-t", "0.5"), "sleep 10"),
        "limit": (("-m", "64M"), "python3 -c 'b = bytearray(400 << 20); import time; time.sleep(5)'"),
        "start_failed": ((), "exec /nonexistent/program"),
        "truncated": (("--max-output", "1K"), "head -c 5000 /dev/zero"),
        "refused": (("-P", "2"), "sleep 2 & sleep 2 & sleep 2 & wait"),
    }
    found = {reason: status_of(*options, command=command)[0] for reason, (options, command)
             in cases.items()}
    assert found["exited"] == {"exit_code": 3, "reason": "exited", "signal": None, "limits": [],
                               "start_error": None}
    assert found["signaled"] == {"exit_code": 143, "reason": "signaled", "signal": 15,
                                 "limits": [], "start_error": None}
    assert found["timeout"] == {"exit_code": 124, "reason": "timeout", "signal": None,
                                "limits": ["timeout"], "start_error": None}
    assert (found["limit"]["exit_code"], found["limit"]["reason"], found["limit"]["limits"]) == (
        137, "limit", ["max_memory"])
    assert found["start_failed"]["exit_code"] == 127  # (sh's exec: the shell itself started)
    # limits that truncate or refuse: said, though the command ends as it would
    assert (found["truncated"]["reason"], found["truncated"]["limits"]) == ("exited", ["max_output"])
    assert (found["refused"]["reason"], found["refused"]["limits"]) == ("exited", ["max_processes"])


def test_a_command_that_never_starts_is_start_failed():
    read, write = os.pipe()
    done = subprocess.run([*SANDLOCK, "run", "--status-fd", str(write), "--",
                           "/nonexistent/program"], capture_output=True, text=True, timeout=60,
                          pass_fds=(write,))
    os.close(write)
    with os.fdopen(read) as status:
        line = json.loads(status.read())
    assert done.returncode == 127
    assert (line["reason"], line["exit_code"]) == ("start_failed", 127)
    assert re.search("nonexistent", line["start_error"])


def test_the_command_cannot_write_to_the_status_fd():
    """The descriptor is sandlock's: a forged line from the command fails (EBADF) and
    the one line written is sandlock's."""
    read, write = os.pipe()
    try:
        forge = ("import os, sys\ntry: os.write(int(sys.argv[1]), b'{}\\n'); print('written')\n"
                 "except OSError as e: print(e.strerror)")
        forged = subprocess.run([*SANDLOCK, "run", "--status-fd", str(write), "--", "python3", "-c",
                                 forge, str(write)], capture_output=True, text=True, timeout=60,
                                pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read) as status:
        lines = status.read().splitlines()
    assert forged.stdout.strip() == "Bad file descriptor", forged.stderr
    assert [json.loads(x)["reason"] for x in lines] == ["exited"]


def test_a_status_fd_that_cannot_be_written_is_one_line_exit_2():
    read, write = os.pipe()
    try:
        for fd, message in ((99, "99 is not an open descriptor"),
                            (read, f"descriptor {read} is open for reading only")):
            done = subprocess.run([*SANDLOCK, "run", "--status-fd", str(fd), "--", "true"],
                                  capture_output=True, text=True, timeout=60, pass_fds=(read,))
            assert done.returncode == 2
            assert done.stderr == f"sandlock: error: --status-fd: {message}\n"
    finally:
        os.close(read)
        os.close(write)
