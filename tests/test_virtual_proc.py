"""/proc as the sandbox's own machine (upstream Sandlock's /proc virtualisation):
/proc/meminfo sized by --max-memory, --num-cpus in /proc/cpuinfo, nproc and
os.cpu_count(); the files mounted over the kernel's, which the command can neither
unmount, overwrite nor cover (each attack with its control)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock


def _mem_total(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise AssertionError(f"no MemTotal in {text!r}")


def test_meminfo_shows_the_memory_limit():
    result = sandlock("run", "-m", "256M", "--", "sh", "-c", "cat /proc/meminfo; free -k")
    assert result.returncode == 0, result.stderr
    assert _mem_total(result.stdout) == 256 * 1024
    fields = {line.split(":")[0]: int(line.split()[1]) for line in result.stdout.splitlines()
              if line.startswith("Mem")}
    assert fields["MemFree"] <= fields["MemTotal"] and fields["MemAvailable"] <= fields["MemTotal"]
    free = next(line for line in result.stdout.splitlines() if line.startswith("Mem:"))
    assert free.split()[1] == str(256 * 1024)  # free(1) reads the same file


def test_without_a_limit_meminfo_is_the_hosts():
    result = sandlock("run", "--", "cat", "/proc/meminfo")
    with open("/proc/meminfo") as host:
        assert _mem_total(result.stdout) == _mem_total(host.read())


CPUS = """
import os
print(os.cpu_count(), len(os.sched_getaffinity(0)))
print(sum(line.startswith("processor") for line in open("/proc/cpuinfo")))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to show one")
def test_num_cpus_is_what_nproc_cpuinfo_and_python_see():
    result = sandlock("run", "--num-cpus", "1", "--", "sh", "-c",
                      f"nproc; {sys.executable} -c '{CPUS}'")
    assert result.stdout.split() == ["1", "1", "1", "1"], result.stderr
    host = sandlock("run", "--", "sh", "-c", f"nproc; {sys.executable} -c '{CPUS}'")
    count = str(len(os.sched_getaffinity(0)))
    assert host.stdout.split()[:3] == [count, os.cpu_count() and str(os.cpu_count()), count]


def test_num_cpus_takes_the_first_of_cpu_cores():
    last = max(os.sched_getaffinity(0))
    result = sandlock("run", "--cpu-cores", str(last), "--num-cpus", "1", "--", sys.executable,
                      "-c", "import os; print(sorted(os.sched_getaffinity(0)))")
    assert result.stdout.strip() == f"[{last}]", result.stderr
    refused = sandlock("run", "--cpu-cores", str(last), "--num-cpus", "2", "--", "true")
    assert refused.returncode == 2 and "--num-cpus" in refused.stderr


# The command's attacks on the file shown to it: unmount it (to see the host's), mount
# something else over it, write it, change its mode; each line says what happened.
ATTACKS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def said(name, result):
    print(name, "ok" if result == 0 else os.strerror(ctypes.get_errno()))
said("umount", libc.umount2(b"/proc/meminfo", 2))
said("umount-proc", libc.umount2(b"/proc", 2))
import tempfile
fake = tempfile.NamedTemporaryFile("w", suffix=".meminfo")  # (removed when the program ends)
fake.write("MemTotal: 1 kB\n")
fake.flush()
said("mount", libc.mount(fake.name.encode(), b"/proc/meminfo", None, 4096, None))
try:
    with open("/proc/meminfo", "w") as f:
        f.write("MemTotal: 1 kB\n")
    print("write ok")
except OSError as exc:
    print("write", exc.strerror)
try:
    os.chmod("/proc/meminfo", 0o666)
    print("chmod ok")
except OSError as exc:
    print("chmod", exc.strerror)
print(open("/proc/meminfo").readline().split()[1])
"""


def test_the_command_cannot_unmount_cover_or_write_the_shown_file():
    result = sandlock("run", "-m", "256M", "--", sys.executable, "-c", ATTACKS)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr
    assert not [line for line in lines[:-1] if line.endswith(" ok")], lines
    assert lines[-1] == str(256 * 1024)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_control_the_attacks_succeed_where_the_process_may_mount():
    """Control: in a user and mount namespace of its own with its capabilities (what
    the command is refused), the same program unmounts a file mounted over meminfo and
    mounts its own forgery there."""
    with tempfile.TemporaryDirectory() as scratch:
        fake = os.path.join(scratch, "meminfo")
        with open(fake, "w") as f:
            f.write("MemTotal: 7 kB\n")
        result = subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount --bind {fake} /proc/meminfo && "
             f"exec {sys.executable} -c '{ATTACKS}'"],
            capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert "umount ok" in lines and "mount ok" in lines, result.stdout + result.stderr
    assert lines[-1] == "1"  # the file it mounted: forged


def test_meminfo_as_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "128M", "--num-cpus", "1", "--",
                                       "sh", "-c", "head -1 /proc/meminfo; nproc"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.split() == ["MemTotal:", str(128 * 1024), "kB", "1"], result.stderr
