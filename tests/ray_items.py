"""What the Ray tests' items run, in the pool's sandboxes: module-level functions, so
that they travel by reference (the actors import this module; see test_ray.py)."""

from __future__ import annotations

import os
import socket
import time

TABLE: list[int] = []


def load() -> dict:
    """The pool's init: built once per actor, shared by its clones."""
    TABLE[:] = [n * n for n in range(10_000)]
    return {"size": len(TABLE)}


def square(n: int) -> int:
    return TABLE[n % len(TABLE)] if TABLE else n * n


BUMPS = [0]


def bump(_: object) -> int:
    """The clone's own count of the items it ran (a process per item: always 1)."""
    BUMPS[0] += 1
    return BUMPS[0]


def busy(seconds: float) -> float:
    """Spins for ``seconds`` of CPU (the bench's item)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def read(path: str) -> str:
    with open(path) as file:
        return file.read()


def connect(port: int) -> int:
    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex(("127.0.0.1", port))


def fork_bomb(_: object) -> int:
    children = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
    except OSError:
        return children


def allocate(megabytes: int) -> int:
    blocks = [bytearray(1 << 20) for _ in range(megabytes)]
    return len(blocks)


def hang(_: object) -> None:
    time.sleep(3600)


def shout(size: int) -> int:
    os.write(1, b"x" * size)
    return size


def namespace(_: object) -> str:
    """The sandbox's PID namespace (as the host names it): which processes are its."""
    return os.readlink("/proc/self/ns/pid")


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def fork_some(count: int) -> int:
    """``count`` children, each reaped: within a cap, forks work."""
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return count


def kill_parent(_: object) -> str:
    """Kill the process that forked this one: its sandbox's resident (a nested one's,
    under a narrowed policy)."""
    os.kill(os.getppid(), 9)
    return "killed it"


def kill_all(_: object) -> str:
    """kill(-1, SIGKILL): every process this one may signal."""
    os.kill(-1, 9)
    return "killed them"


def kill_child(_: object) -> int:
    """Kill a child of its own (the control: an item may signal what it started)."""
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    os.kill(child, 9)
    return os.waitpid(child, 0)[1]


def attempt(kind_and_argument: tuple[str, object]) -> object:
    """One of the functions above, by name: a mixed map of attacks and plain items."""
    kind, argument = kind_and_argument
    return globals()[kind](argument)


def no_true(event: object, ctx: object) -> bool:
    """A pool's policy_fn: no exec of `true` (EPERM), recorded in the audit log."""
    return event.syscall == "execve" and os.path.basename(event.path) == "true"


def run_program(name: str) -> object:
    """Runs /usr/bin/NAME; its exit status, or the error that stopped it."""
    import subprocess

    try:
        return subprocess.run([f"/usr/bin/{name}"], check=False).returncode
    except OSError as exc:
        return type(exc).__name__


def modules(_: object) -> list[str]:
    """The modules the clone holds (its resident's, and this one's)."""
    import sys

    return sorted(sys.modules)
