"""The memory limit (-m/--max-memory) on real confined processes: what the sandbox's
processes really use together (not address space) is held under the limit; past it
the sandbox is killed (137) and sandlock says so."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

from conftest import SANDLOCK, sandlock

GROW = r"""
import sys, time
kind = sys.argv[1]
held = []
def grow(step):
    for _ in range(400):
        held.append(step())
        time.sleep(0.002)
if kind == "heap":
    grow(lambda: bytearray(1 << 20))
elif kind == "mmap":
    import mmap
    def page():
        m = mmap.mmap(-1, 1 << 20)
        m.write(b"x" * (1 << 20))
        return m
    grow(page)
elif kind == "threads":
    import threading
    def worker():
        mine = [bytearray(1 << 20) for _ in range(40)]
        time.sleep(5)
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
elif kind in ("shm", "memfd"):
    import mmap, os
    fd = os.memfd_create("grow") if kind == "memfd" else os.open(
        "/dev/shm/grow", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 400 << 20)
    m = mmap.mmap(fd, 400 << 20)
    for i in range(400):
        m[i << 20:(i + 1) << 20] = b"y" * (1 << 20)
        time.sleep(0.002)
elif kind == "memfd_written":  # never mapped: reached only through its descriptor
    import os
    fd = os.memfd_create("grow")
    for _ in range(400):
        os.write(fd, b"z" * (1 << 20))
        time.sleep(0.002)
elif kind == "processes":
    import os
    for _ in range(10):
        if os.fork() == 0:
            block = bytearray(20 << 20)
            time.sleep(5)
            os._exit(0)
    time.sleep(5)
print("survived")
"""


@pytest.mark.parametrize("kind", ["heap", "mmap", "threads", "shm", "memfd", "memfd_written",
                                  "processes"])
def test_memory_past_the_limit_kills_the_sandbox(kind, tmp_path):
    result = sandlock("run", "-m", "64M", "--", sys.executable, "-c", GROW, kind, cwd=tmp_path)
    assert result.returncode == 137, (result.stdout, result.stderr)
    assert "survived" not in result.stdout
    assert "sandlock: memory limit 64M exceeded (" in result.stderr
    assert "killed the sandbox (--max-memory)" in result.stderr


SHARED_AFTER_FORK = r"""
import os, time
block = bytearray(os.urandom(40 << 20))  # 40 MiB, then shared with 4 children
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)  # reads nothing, writes nothing: the pages stay shared
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("shared")
"""


def test_pages_shared_after_a_fork_count_once(tmp_path):
    """Five processes each show 40 MiB resident; together they use 40."""
    result = sandlock("run", "-m", "100M", "--", sys.executable, "-c", SHARED_AFTER_FORK,
                      cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "shared\n"), result.stderr


def test_reserved_address_space_is_not_memory(tmp_path):
    """node reserves far more address space than it touches."""
    script = "const a = []; for (let i = 0; i < 20; i++) a.push(Buffer.alloc(1 << 20, 1)); " \
             "console.log('node', a.length)"
    result = sandlock("run", "-m", "256M", "--", "node", "-e", script, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "node 20\n"), result.stderr


def test_memory_limit_holds_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "64M", "--", sys.executable, "-c",
                                       GROW, "heap"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.returncode == 137, result.stderr
    assert "sandlock: memory limit 64M exceeded" in result.stderr


def test_the_api_says_it_too(capfd, tmp_path):
    from sandlock import Policy, Sandbox

    result = Sandbox(Policy(max_memory="64M", cwd=str(tmp_path))).run(
        [sys.executable, "-c", GROW, "heap"])
    assert result.exit_code == 137
    assert "sandlock: memory limit 64M exceeded" in capfd.readouterr().err


def test_a_memory_watch_that_cannot_start_kills_the_sandbox(capfd, monkeypatch, tmp_path):
    # Fail closed: the watch starts on its own thread once the command runs; if it
    # cannot, the command must not run on unwatched.
    import sandlock.limits
    from sandlock import Policy, Sandbox

    def cannot_start(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(sandlock.limits, "MemoryWatch", cannot_start)
    result = Sandbox(Policy(max_memory="64M", cwd=str(tmp_path))).run(
        [sys.executable, "-c", "import time; time.sleep(20); print('survived')"], timeout=30)
    assert result.exit_code == 137
    assert b"survived" not in result.stdout
    assert ("sandlock: the memory watch could not start ([Errno 24] Too many open files): "
            "killed the sandbox (--max-memory)") in capfd.readouterr().err


# The sandbox's private /tmp, /var/tmp and /dev/shm are tmpfs: their files are memory.
FILL = r"""
import sys, time
chunk = b"x" * (1 << 20)
try:
    with open(sys.argv[1], "wb") as f:
        for _ in range(int(sys.argv[2])):
            f.write(chunk)
except OSError as exc:
    print("refused:", exc.strerror, flush=True)
    raise SystemExit(0)
print("wrote", sys.argv[2], flush=True)
if len(sys.argv) > 3:  # then this much memory of its own
    block = bytearray(int(sys.argv[3]) << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(0.5)
    print("survived")
"""


@pytest.mark.parametrize("directory", ["/tmp", "/var/tmp", "/dev/shm"])
def test_files_in_the_private_scratch_directories_count_as_memory(directory, tmp_path):
    result = sandlock("run", "-m", "128M", "--", sys.executable, "-c", FILL,
                      f"{directory}/file", "90", "60", cwd=tmp_path)
    assert result.stdout == "wrote 90\n" and result.returncode == 137, result.stderr
    assert "sandlock: memory limit 128M exceeded (" in result.stderr


def test_a_scratch_directory_is_bounded_even_before_the_watch_looks(tmp_path):
    """Filled at once, far past the limit: the watch kills the sandbox, or the tmpfs
    (twice the limit) refuses the write first; it never holds it all."""
    result = sandlock("run", "-m", "64M", "--", sys.executable, "-c", FILL, "/var/tmp/big",
                      "400", cwd=tmp_path)
    assert "wrote" not in result.stdout, result.stderr
    assert result.stdout == "refused: No space left on device\n" or result.returncode == 137


def test_scratch_files_and_memory_count_together(tmp_path):
    """Three directories, each under the limit; together over it."""
    result = sandlock("run", "-m", "96M", "--", "sh", "-c",
                      f"{sys.executable} -c '{FILL}' /tmp/a 40 && "
                      f"{sys.executable} -c '{FILL}' /dev/shm/b 40 && "
                      f"{sys.executable} -c '{FILL}' /var/tmp/c 40 && sleep 1 && echo survived",
                      cwd=tmp_path)
    assert "survived" not in result.stdout and result.returncode == 137, \
        (result.stdout, result.stderr)


@pytest.mark.parametrize("opening", ["os.open('/dev/shm/segment', os.O_RDWR | os.O_CREAT, 0o600)",
                                     "os.memfd_create('segment')"])
def test_a_mapped_scratch_file_or_memfd_counts_once(opening, tmp_path):
    """100 MiB, mapped and touched: shared memory and a file, 100 MiB."""
    script = ("import mmap, os, time\n"
              f"fd = {opening}\n"
              "os.ftruncate(fd, 100 << 20)\n"
              "m = mmap.mmap(fd, 100 << 20)\n"
              "for i in range(0, 100 << 20, 4096): m[i] = 1\n"
              "time.sleep(0.3)\n"
              "print('mapped')\n")
    result = sandlock("run", "-m", "150M", "--", sys.executable, "-c", script, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "mapped\n"), result.stderr


def test_scratch_files_count_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "128M", "--", sys.executable,
                                       "-c", FILL, "/tmp/file", "90", "60"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout == "wrote 90\n" and result.returncode == 137, result.stderr


def test_memfds_count_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "64M", "--", sys.executable, "-c",
                                       GROW, "memfd_written"]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.returncode == 137 and "survived" not in result.stdout, result.stderr


def test_memfd_create_is_supervised_only_under_a_memory_limit_and_goes_on(tmp_path):
    """It tells the memory watch that memfds exist (then looked for at every sample,
    not every tenth); the call itself goes on untouched, with or without policy_fn."""
    from sandlock import Policy, Sandbox
    from sandlock.confinement import Confinement

    def watched(policy: Policy, observed: bool = False) -> bool:
        confinement = Confinement.prepare(policy, str(tmp_path), {}, observed=observed)
        confinement.close()
        return confinement.memory_watched

    assert not watched(Policy()) and watched(Policy(max_memory="64M"))
    assert watched(Policy(), observed=True)  # policy_fn may set a limit later
    script = "import os; fd = os.memfd_create('a'); os.write(fd, b'x'); print('made', fd > 2)"
    for policy, policy_fn in ((Policy(max_memory="64M"), None), (Policy(), lambda e, c: 0)):
        result = Sandbox(policy.replace(cwd=str(tmp_path)), policy_fn=policy_fn).run(
            [sys.executable, "-c", script])
        assert (result.exit_code, result.stdout) == (0, b"made True\n"), result.stderr


# Kernel memory no process's counters show: socket buffers, memfds in flight.
SOCKET_BUFFERS = r"""
import os, socket, sys, time
procs = 3
probe = socket.socket(socket.AF_UNIX)
probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)  # as much as the host allows
pairs = (200 << 20) // procs // probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + 1
children = []
for _ in range(procs - 1):
    pid = os.fork()
    if pid == 0:
        children = None
        break
    children.append(pid)
keep = []
for _ in range(pairs):  # ~200 MiB in all, never read
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    try:
        while True:
            a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    keep.append((a, b))
time.sleep(1)
print("survived", flush=True)
for pid in children or ():  # (the sandbox ends with its command)
    os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("network", [[], ["--no-net-private-loopback"]], ids=["private", "host"])
def test_socket_buffers_count_as_memory(tmp_path, network):
    """Unread messages in unix sockets' buffers are the kernel's memory, charged to
    no process: under -m 64M, ~200 MiB of them end in the kill, in the default run's
    private network (asked through its own sock_diag socket) as in the host's. Control:
    without a limit, the buffers hold it all and the command survives."""
    control = sandlock("run", *network, "--", sys.executable, "-c", SOCKET_BUFFERS, cwd=tmp_path)
    # (three processes print at once: their words and newlines may interleave)
    assert (control.returncode, control.stdout.count("survived")) == (0, 3), control.stderr
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", *network, "-m", "64M", "--audit", str(log), "--", sys.executable,
                      "-c", SOCKET_BUFFERS, cwd=tmp_path)
    assert result.returncode == 137 and "survived" not in result.stdout, result.stderr
    assert "sandlock: memory limit 64M exceeded (" in result.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r.get("limit") == "max_memory" and r.get("verdict") == "kill" for r in records)


def test_socket_buffers_count_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "64M", "--", sys.executable,
                                       "-c", SOCKET_BUFFERS]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.returncode == 137 and "survived" not in result.stdout, result.stderr


MEMFDS_IN_FLIGHT = r"""
import os, socket, time
a, b = socket.socketpair()
for _ in range(8):  # 128 MiB whose only descriptors are in flight
    fd = os.memfd_create("m")
    os.write(fd, b"z" * (16 << 20))
    try:
        socket.send_fds(a, [b"x"], [fd])
    except OSError as exc:
        print("refused", exc.strerror, flush=True)
        raise SystemExit(3)
    os.close(fd)
time.sleep(0.5)
print("in flight, survived", flush=True)
"""


def test_a_memfd_cannot_be_put_in_flight_under_a_memory_limit(tmp_path):
    """In a socket's queue, a memfd is in no descriptor table: its pages would escape
    the count. Passing one is refused (EPERM), said once and audited. Control:
    without a limit it goes, and 128 MiB sit in flight."""
    control = sandlock("run", "--", sys.executable, "-c", MEMFDS_IN_FLIGHT, cwd=tmp_path)
    assert (control.returncode, control.stdout) == (0, "in flight, survived\n"), control.stderr
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "-m", "64M", "--audit", str(log), "--", sys.executable, "-c",
                      MEMFDS_IN_FLIGHT, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (3, "refused Operation not permitted\n")
    assert result.stderr.count("sandlock: a memfd passed over a socket was refused") == 1
    [record] = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("limit")]
    assert (record["limit"], record["value"], record["verdict"]) == ("max_memory", "64M", "refuse")


def test_memfds_in_flight_are_refused_for_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "-m", "64M", "--", sys.executable,
                                       "-c", MEMFDS_IN_FLIGHT]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert (result.returncode, result.stdout) == (3, "refused Operation not permitted\n"), \
        result.stderr


def test_other_descriptors_still_pass_under_a_memory_limit(tmp_path):
    script = ("import os, socket\n"
              "a, b = socket.socketpair()\n"
              "r, w = os.pipe()\n"
              "socket.send_fds(a, [b'x'], [r])\n"
              "print(len(socket.recv_fds(b, 1, 1)[1]))\n")
    result = sandlock("run", "-m", "64M", "--", sys.executable, "-c", script, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "1\n"), result.stderr
