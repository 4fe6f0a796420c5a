"""Reproducible runs (upstream Sandlock's deterministic execution), with real confined
programs: --time-start (date, Python, a dynamically and a statically linked C
program), --random-seed (os.urandom, /dev/urandom through head), --deterministic-dirs
(ls -f, os.listdir); each with its control, and the attacks on what they show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import SANDLOCK, sandlock

Y2K = 946684800  # 2000-01-01T00:00:00Z
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def clock_readers(tmp_path_factory):
    """The clock reader built dynamically and statically linked (skips without gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the clock reader")
    directory = tmp_path_factory.mktemp("clock")
    built = {}
    for kind, flags in (("dynamic", []), ("static", ["-static"])):
        binary = directory / f"clock-{kind}"
        made = subprocess.run(["gcc", "-O1", *flags, "-o", str(binary),
                               os.path.join(HERE, "clock_reader.c")], capture_output=True)
        if made.returncode == 0:
            built[kind] = str(binary)
    return built


def test_date_and_python_start_at_the_given_date():
    result = sandlock("run", "--time-start", "2000-01-01T00:00:00Z", "--", "sh", "-c",
                      f"date -u +%Y-%m-%dT%H:%M; {sys.executable} -c 'import time; print(time.time())'")
    lines = result.stdout.splitlines()
    assert lines[0] == "2000-01-01T00:00", result.stderr
    assert Y2K <= float(lines[1]) < Y2K + 60


def test_without_time_start_the_clock_is_the_hosts():
    result = sandlock("run", "--", sys.executable, "-c", "import time; print(time.time())")
    assert abs(float(result.stdout) - time.time()) < 60


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_every_clock_call_of_a_c_program_shows_the_date(clock_readers, kind):
    if kind not in clock_readers:
        pytest.skip(f"no {kind} build here")
    result = sandlock("run", "--time-start", str(Y2K), "--", clock_readers[kind])
    values = [int(value) for value in result.stdout.split()]
    assert len(values) == 3 and all(Y2K <= value < Y2K + 60 for value in values), result
    control = sandlock("run", "--", clock_readers[kind])
    assert all(abs(int(value) - time.time()) < 60 for value in control.stdout.split())


RUNNING = """
import time
first, start = time.time(), time.monotonic()
time.sleep(0.3)
print(round(time.time() - first, 1), start < 60, time.monotonic() - start >= 0.3)
"""


def test_the_clock_runs_and_monotonic_clocks_start_near_zero():
    result = sandlock("run", "--time-start", "2000-01-01T00:00:00Z", "--", sys.executable,
                      "-c", RUNNING)
    elapsed, near_zero, monotonic = result.stdout.split()
    assert 0.3 <= float(elapsed) < 5 and near_zero == "True" and monotonic == "True", result
    uptime = sandlock("run", "--time-start", "2000-01-01T00:00:00Z", "--", "cat", "/proc/uptime")
    assert float(uptime.stdout.split()[0]) < 60  # the time namespace's boot time
    with open("/proc/uptime") as host:  # control: the host's, which is not
        host_uptime = float(host.read().split()[0])
    control = sandlock("run", "--", sys.executable, "-c", "import time; print(time.monotonic())")
    assert float(control.stdout) >= host_uptime - 1


def test_time_start_as_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--time-start", "1999-12-31T23:59:30Z",
                                       "--", "date", "-u", "+%Y"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.strip() in ("1999", "2000"), result.stderr


@pytest.mark.parametrize("option, value, message", [
    ("--time-start", "yesterday", "--time-start: expected a date"),
    ("--time-start", "1969-12-31T00:00:00Z", "--time-start: must be from 1970-01-01"),
    ("--time-start", "2000-13-01", "--time-start: expected a date"),
    ("--random-seed", "18446744073709551616", "--random-seed: "),
    ("--random-seed", "-1", "--random-seed"),
    ("--num-cpus", "0", "--num-cpus: expected a number of CPUs from 1"),
    ("--num-cpus", "4097", "--num-cpus: expected a number of CPUs from 1"),
])
def test_bad_values_are_exit_2_naming_the_option(option, value, message):
    result = sandlock("run", option, value, "--", "true")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


RANDOM = f"""{sys.executable} -c 'import os; print(os.urandom(16).hex())'
head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo
head -c 16 /dev/random | od -An -tx1 | tr -d " \\n"; echo"""


def _random(*options: str) -> list[str]:
    result = sandlock("run", *options, "--", "sh", "-c", RANDOM)
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(len(line) == 32 for line in lines), result
    return lines


def test_the_same_seed_gives_the_same_bytes_and_another_seed_others():
    first, again, other = _random("--random-seed", "42"), _random("--random-seed", "42"), \
        _random("--random-seed", "43")
    assert first == again
    assert all(mine != theirs for mine, theirs in zip(first, other))
    assert len(set(first)) == 3  # the stream goes on: no two reads alike


def test_without_a_seed_every_run_differs():
    assert all(mine != theirs for mine, theirs in zip(_random(), _random()))


# The command tries to choose what the sandbox's later reads of /dev/urandom give:
# writing into it, changing its mode, unmounting it, mounting its own file over it.
INJECT = r"""
import ctypes, os, sys
path = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
def said(name, result):
    print(name, "ok" if result == 0 else os.strerror(ctypes.get_errno()))
try:
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"\0" * 16)
    print("write ok")
except OSError as exc:
    print("write", exc.strerror)
try:
    os.chmod(path, 0o666)
    print("chmod ok")
except OSError as exc:
    print("chmod", exc.strerror)
said("umount", libc.umount2(path.encode(), 2))
said("mount", libc.mount(b"/dev/zero", path.encode(), None, 4096, None))
with open(path, "rb") as f:
    print(f.read(16).hex())
"""


def test_the_command_cannot_feed_or_replace_the_seeded_devices():
    result = sandlock("run", "--random-seed", "7", "--", sys.executable, "-c", INJECT, "/dev/urandom")
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and not [line for line in lines[:-1] if line.endswith(" ok")], result
    clean = sandlock("run", "--random-seed", "7", "--", sys.executable, "-c",
                     "print(open('/dev/urandom', 'rb').read(16).hex())")
    assert lines[-1] == clean.stdout.strip() and lines[-1] != "00" * 16


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_control_a_writable_pipe_takes_the_injected_bytes(tmp_path):
    """Control: the same program, given a pipe it may write (what /dev/urandom is under
    --random-seed, but with a writer's mode), in user and mount namespaces of its own
    where it may mount (never the host's: its mount would outlive the test), feeds the
    pipe and then covers it with /dev/zero."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    keeper = os.open(fifo, os.O_RDWR)  # (a reader and writer: nothing blocks)
    try:
        result = subprocess.run(["unshare", "-rm", sys.executable, "-c", INJECT, str(fifo)],
                                capture_output=True, text=True, timeout=60)
    finally:
        os.close(keeper)
    lines = result.stdout.splitlines()
    assert "write ok" in lines and "mount ok" in lines, result.stdout + result.stderr
    assert lines[-1] == "00" * 16


def test_random_seed_as_an_unprivileged_user(as_nobody):
    def run() -> str:
        return subprocess.run(as_nobody([*SANDLOCK, "run", "--random-seed", "1", "--", "sh", "-c",
                                         "head -c 8 /dev/urandom | od -An -tx1"]),
                              capture_output=True, text=True, cwd=tempfile.gettempdir(),
                              timeout=60).stdout
    first = run()
    assert first.strip() and first == run()


NAMES = ["zeta", "alpha", "mu", "beta", "omega", "gamma", "delta", "kappa", "epsilon"]
LIST = f"ls -f . | tr '\\n' ' '; echo; {sys.executable} -c 'import os; print(*os.listdir(\".\"))'"


@pytest.fixture
def unsorted(tmp_path):
    directory = tmp_path / "listed"
    directory.mkdir()
    for name in NAMES:
        (directory / name).touch()
    many = tmp_path / "many"  # more entries than one getdents call returns
    many.mkdir()
    for number in range(3000):
        (many / f"{(number * 7919) % 3000:05d}").touch()
    return directory, many


def test_deterministic_dirs_lists_entries_sorted(unsorted):
    directory, many = unsorted
    result = sandlock("run", "--deterministic-dirs", "--", "sh", "-c", LIST, cwd=directory)
    shell, python = result.stdout.splitlines()
    assert shell.split() == [".", "..", *sorted(NAMES)], result.stderr
    assert python.split() == sorted(NAMES)
    listed = sandlock("run", "--deterministic-dirs", "--", sys.executable, "-c",
                      "import os; names = os.listdir('.'); print(len(names), names == sorted(names))",
                      cwd=many)
    assert listed.stdout.split() == ["3000", "True"], listed.stderr


def test_control_without_it_the_file_systems_order_shows(unsorted):
    directory, _ = unsorted
    shell, python = sandlock("run", "--", "sh", "-c", LIST, cwd=directory).stdout.splitlines()
    assert python.split() != sorted(NAMES) and sorted(python.split()) == sorted(NAMES)


# The vDSO's getrandom (Linux 6.11; glibc 2.41 and later call it instead of the
# syscall) answers without entering the kernel: under --random-seed it must say ENOSYS,
# so that the C library makes the syscall the supervisor answers. Called directly here
# (this glibc does not use it), with no state: unpatched, it makes the syscall itself.
VDSO_GETRANDOM = r"""
import ctypes
from sandlock.determinism._vdso import _own_vdso, _symbols
image = _own_vdso()
offset = _symbols(image).get("__vdso_getrandom")
if offset is None:
    print("absent")
else:
    libc = ctypes.CDLL(None)
    libc.getauxval.restype = ctypes.c_ulong
    function = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint,
                                ctypes.c_void_p, ctypes.c_size_t)(libc.getauxval(33) + offset)
    buffer = ctypes.create_string_buffer(16)
    print(function(buffer, 16, 0, None, 0))
"""


def test_the_vdso_getrandom_is_made_to_enter_the_kernel():
    result = sandlock("run", "--random-seed", "5", "--", sys.executable, "-c", VDSO_GETRANDOM)
    if result.stdout.strip() == "absent":
        pytest.skip("this kernel's vDSO has no getrandom")
    assert result.stdout.strip() == "-38", result.stderr  # -ENOSYS
    control = sandlock("run", "--", sys.executable, "-c", VDSO_GETRANDOM)
    assert control.stdout.strip() != "-38", control.stderr


def test_deterministic_dirs_as_an_unprivileged_user(as_nobody, world_tmp):
    for name in NAMES:
        (world_tmp / name).touch()
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--deterministic-dirs", "--", "ls", "-f",
                                       str(world_tmp)]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.split() == [".", "..", *sorted(NAMES)], result.stderr


def test_what_needs_the_sandboxs_namespaces_is_refused_without_them():
    result = sandlock("run", "--mode", "full-access", "--dangerously-allow-full-access",
                      "--random-seed", "1", "--", "true")
    assert result.returncode == 2 and "--random-seed would mean nothing" in result.stderr
    confined = subprocess.run([sys.executable, "-c", (  # (a process of its own: were it
        "from sandlock import Policy, confine\n"         # applied, it would stay applied)
        f"confine(Policy(fs_readable=['/usr'], time_start={Y2K}))")],
        capture_output=True, text=True, timeout=60)
    assert "PolicyError: time_start: the sandbox's own view" in confined.stderr, confined.stderr


def test_a_function_called_confined_sees_the_sandboxs_clock_and_seed():
    """Sandbox.call never execs: the function's process announces its start itself."""
    from sandlock import Policy, Sandbox

    policy = Policy(time_start=Y2K, random_seed=3)
    assert Y2K <= Sandbox(policy).call(time.time).value < Y2K + 60
    first = Sandbox(policy).call(os.urandom, (16,)).value
    assert first == Sandbox(policy).call(os.urandom, (16,)).value
    with Sandbox(policy) as live:  # a long-lived sandbox's calls are forks of its resident
        assert Y2K <= live.call(time.time).value < Y2K + 60
    assert abs(Sandbox(Policy()).call(time.time).value - time.time()) < 60  # control


def test_time_start_as_upstream_gives_it_a_datetime():
    from datetime import datetime, timezone

    from sandlock import Policy, Sandbox

    policy = Policy(time_start=datetime(2000, 6, 15, tzinfo=timezone.utc))
    assert Sandbox(policy).run(["date", "+%Y-%m"]).stdout.strip() == b"2000-06"
    assert Policy(time_start=datetime(2000, 6, 15)).time_start == policy.time_start  # naive: UTC


# init holds the seeded pipe open for writing: the command tries to reopen init's
# descriptors (through /proc/1/fd) to get a writer of its own.
REOPEN = r"""
import os, sys
holder = sys.argv[1]
opened = []
for name in os.listdir(f"/proc/{holder}/fd"):
    try:
        os.close(os.open(f"/proc/{holder}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK))
        opened.append(name)
    except OSError:
        pass
print("opened", len(opened))
"""


def test_the_command_cannot_reopen_inits_writer_of_the_pipe():
    result = sandlock("run", "--random-seed", "1", "--", sys.executable, "-c", REOPEN, "1")
    assert result.stdout.strip() == "opened 0", result.stdout + result.stderr
    # Control: the same program reopens its own descriptors (stdout among them).
    control = sandlock("run", "--random-seed", "1", "--", sys.executable, "-c", REOPEN, "self")
    assert control.stdout.strip() != "opened 0", control.stdout + control.stderr
