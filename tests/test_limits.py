"""Resource limits on real confined processes: the values and their errors, the
per-process kernel limits (open files, file size, CPUs) that nothing inside can undo,
and the output cap. (Processes: test_limits_processes.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import Policy, Sandbox
from sandlock.limits import Size, format_cpu_list, parse_size


@pytest.mark.parametrize("text,size", [
    ("512M", 512 << 20), ("1.5G", 3 << 29), ("64k", 64 << 10), ("100", 100), ("256MiB", 256 << 20),
    ("1T", 1 << 40), (4096, 4096),
])
def test_sizes_are_read_as_the_seeds_write_them(text, size):
    assert parse_size(text) == size


def test_sizes_print_back_as_written():
    assert [str(Size(n)) for n in (512 << 20, 3 << 29, 1000, 1 << 40)] == ["512M", "1536M", "1000", "1T"]
    assert repr(Policy(max_memory="256M")).count("max_memory='256M'") == 1
    assert Policy(max_memory="256M") == Policy(max_memory=256 << 20)
    assert format_cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"


@pytest.mark.parametrize("option,value,message", [
    ("-m", "0", "--max-memory: must be more than 0 bytes"),
    ("-m", "12Q", "--max-memory: expected a size such as 512M"),
    ("--max-file-size", "-3", "--max-file-size"),
    ("-P", "-1", "--max-processes"),
    ("-P", "many", "--max-processes: expected a whole number, got 'many'"),
    ("--max-cpu", "0", "--max-cpu: must be more than 0"),
    ("--max-cpu", str(100 * len(os.sched_getaffinity(0)) + 1), "--max-cpu: must be more than 0"),
    ("--cpu-cores", "4096", "--cpu-cores: CPU 4096 is not one sandlock may run on"),
    ("--cpu-cores", "1-0", "--cpu-cores: '1-0' is not a CPU range"),
    ("--max-open-files", "0", "--max-open-files: expected a number of descriptors"),
    ("--max-output", "lots", "--max-output: expected a size"),
])
def test_bad_values_are_exit_2_naming_the_option(option, value, message):
    result = sandlock("run", option, value, "--", "true")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) <= 2


OPEN_FILES = r"""
import os, resource, sys
opened = []
try:
    while True:
        opened.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    print("opened", len(opened), exc.errno == 24)
for limits in ((64, 64), (8, 16)):
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
        print("set", limits)
    except (OSError, ValueError) as exc:
        print("refused", limits)
try:
    resource.prlimit(1, resource.RLIMIT_NOFILE, (1, 1))
    print("set another's")
except OSError as exc:
    print("another's refused", exc.errno)
print("read another's", resource.prlimit(1, resource.RLIMIT_NOFILE) is not None)
"""


def test_open_files_are_capped_and_cannot_be_raised(tmp_path):
    result = sandlock("run", "--max-open-files", "16", "--", sys.executable, "-c", OPEN_FILES,
                      cwd=tmp_path)
    assert result.stdout.splitlines() == [
        "opened 13 True",  # 16 minus stdin, stdout, stderr
        "refused (64, 64)",  # a hard limit is never raised
        "set (8, 16)",  # lowering is the process's own business
        "another's refused 1",  # EPERM: no process sets another's limits
        "read another's True",
    ], result.stderr


def test_a_write_past_the_file_size_limit_fails_as_the_kernel_makes_it(tmp_path):
    script = f"""
head -c 3000000 /dev/zero > {tmp_path}/big; echo "head: $?"
python3 -c 'import sys
try:
    open("{tmp_path}/big2", "wb").write(b"x" * 3000000)
except OSError as exc: print("python:", exc.strerror)'
stat -c %s {tmp_path}/big {tmp_path}/big2
"""
    result = sandlock("run", "--max-file-size", "1M", "--", "sh", "-c", script, cwd=tmp_path)
    assert result.stdout.split("\n")[:4] == [
        "head: 153",  # SIGXFSZ (128 + 25): head does not ignore it
        "python: File too large",  # EFBIG: the interpreter ignores SIGXFSZ
        "1048576", "1048576"], result.stderr


AFFINITY = r"""
import os
print(sorted(os.sched_getaffinity(0)))
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
    print("widened")
except OSError as exc:
    print("refused", exc.errno)
"""


def test_cpu_cores_pin_the_sandbox_and_cannot_be_widened(tmp_path):
    result = sandlock("run", "--cpu-cores", "0", "--", sys.executable, "-c", AFFINITY, cwd=tmp_path)
    assert result.stdout.splitlines() == ["[0]", "refused 1"], result.stderr
    free = sandlock("run", "--", sys.executable, "-c", AFFINITY, cwd=tmp_path)
    assert free.stdout.splitlines()[0] == str(sorted(os.sched_getaffinity(0)))


def test_limits_apply_to_an_unprivileged_user_too(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--max-open-files", "16", "--cpu-cores",
                                       "0", "--", sys.executable, "-c", OPEN_FILES + AFFINITY]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    lines = result.stdout.splitlines()
    assert lines[0] == "opened 13 True" and lines[-2:] == ["[0]", "refused 1"], result.stderr


def test_output_beyond_the_limit_is_dropped_and_said():
    result = sandlock("run", "--max-output", "1K", "--", "sh", "-c",
                      "head -c 5000 /dev/zero | tr '\\0' o; echo; head -c 3000 /dev/zero | tr '\\0' e >&2")
    assert result.returncode == 0
    assert result.stdout == "o" * 1024
    assert result.stderr.startswith("e" * 1024)
    assert "sandlock: output limit 1K reached: dropped 3977 bytes of stdout (--max-output)" \
        in result.stderr
    assert "dropped 1976 bytes of stderr" in result.stderr


def test_the_api_keeps_at_most_the_limit_of_each_output(capfd):
    result = Sandbox(Policy(max_output=100)).run(
        [sys.executable, "-c", "import sys; print('x' * 500); sys.stderr.write('y' * 50)"])
    assert (result.stdout, result.stderr, result.exit_code) == (b"x" * 100, b"y" * 50, 0)
    assert "dropped 401 bytes of stdout" in capfd.readouterr().err
