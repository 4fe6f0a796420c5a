"""Issue 13's attacks, each run in a real confined process: SysV IPC as a channel out of
the sandbox, and persona flags that weaken what the command runs next."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK, sandlock

IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, QUERY = 0x0040000, 0x0400000, 0xFFFFFFFF

# Reaches for a segment by key, then makes its own objects of each kind.
SYSV = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, *args, remove=None):
    result = getattr(libc, name)(*args)
    if result < 0:
        return os.strerror(ctypes.get_errno())
    if remove:  # made here: leave nothing behind in the machine-wide namespace
        remove(result)
    return "ok"
key = int(sys.argv[1])
print(attempt("shmget", key, 0, 0),
      attempt("shmget", 0, 4096, 0o1600, remove=lambda i: libc.shmctl(i, 0, None)),
      attempt("msgget", 0, 0o1600, remove=lambda i: libc.msgctl(i, 0, None)),
      attempt("semget", 0, 1, 0o1600, remove=lambda i: libc.semctl(i, 0, 0)))
"""
PERSONA = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for persona in map(int, sys.argv[1:]):
    result = libc.personality(ctypes.c_ulong(persona))
    print("ok" if result >= 0 else os.strerror(ctypes.get_errno()))
"""


@pytest.fixture
def host_segment():
    """A world-accessible shared memory segment of a host process, by key."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5A4D0000 | (id(libc) & 0xFFFF)
    segment = libc.shmget(key, 4096, IPC_CREAT | 0o666)
    assert segment >= 0
    yield key
    libc.shmctl(segment, IPC_RMID, None)


def run_python(*options: str, code: str, args: list[str], as_user=lambda argv: argv):
    argv = as_user([*SANDLOCK, "run", *options, "--", sys.executable, "-c", code, *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_sysv_ipc_is_denied_by_default(host_segment):
    result = run_python(code=SYSV, args=[str(host_segment)])
    assert result.stdout.count("Operation not permitted") == 4, result.stderr


def test_allow_sysv_ipc_opens_it(host_segment):
    result = run_python("--allow-sysv-ipc", code=SYSV, args=[str(host_segment)])
    assert result.stdout.split() == ["ok"] * 4, result.stderr


def test_one_sysv_call_can_be_waived_alone(host_segment):
    result = run_python("--allow-syscall", "shmget", "--allow-syscall", "shmctl", code=SYSV,
                        args=[str(host_segment)])
    assert result.stdout.startswith("ok ok Operation not permitted"), result.stdout


def test_only_harmless_personas_pass():
    result = run_python(code=PERSONA, args=[str(QUERY), "0", str(ADDR_NO_RANDOMIZE),
                                            str(READ_IMPLIES_EXEC)])
    assert result.stdout.split("\n")[:4] == ["ok", "ok", "Operation not permitted",
                                             "Operation not permitted"], result.stderr
    setarch = sandlock("run", "--", "setarch", "-R", "true")
    assert setarch.returncode != 0 and "Operation not permitted" in setarch.stderr


def test_sysv_ipc_and_personality_unprivileged(as_nobody, host_segment):
    result = run_python(code=SYSV, args=[str(host_segment)], as_user=as_nobody)
    assert result.stdout.count("Operation not permitted") == 4, result.stderr
    persona = run_python(code=PERSONA, args=[str(ADDR_NO_RANDOMIZE)], as_user=as_nobody)
    assert persona.stdout.strip() == "Operation not permitted"


def test_env_name_passes_a_secret_without_putting_it_in_argv(tmp_path):
    """--env NAME: the value comes from sandlock's environment, never from its command
    line (readable by every process through /proc) or a printed policy."""
    env = {**os.environ, "API_TOKEN": "s3cret-value"}
    marker = tmp_path / "started"
    sandbox = subprocess.Popen([*SANDLOCK, "run", "--clean-env", "--env", "API_TOKEN", "--",
                                "sh", "-c", f'echo "$API_TOKEN" > {marker}; sleep 30'],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "s3cret-value\n"
        with open(f"/proc/{sandbox.pid}/cmdline", "rb") as cmdline:
            assert b"s3cret" not in cmdline.read()
    finally:
        sandbox.kill()
        sandbox.wait()
    printed = subprocess.run([*SANDLOCK, "run", "--env", "API_TOKEN", "--print-policy"],
                             env=env, capture_output=True, text=True)
    assert 'env = ["API_TOKEN"]' in printed.stdout and "s3cret" not in printed.stdout
    unset = sandlock("run", "--env", "SANDLOCK_TEST_UNSET_X", "--", "true")
    assert unset.returncode == 2
    assert unset.stderr.strip() == ("sandlock: error: --env: SANDLOCK_TEST_UNSET_X: not set "
                                    "in sandlock's environment (--env NAME passes it from there)")
