"""A run's proxy process, however it was started (proxy/_spawn.py): a fresh
interpreter, sandlock's child running ``sandlock.proxy._server``, or a child of the
user's proxy fork server (``sandlock.proxy._forkserver DIRECTORY``)."""

from __future__ import annotations

import os
import subprocess
import time

from conftest import RUNTIME_DIR, SANDLOCK

FRESH = {"SANDLOCK_PROXY_FORKSERVER": "0"}  # runs that start their proxy from scratch
FORKSERVER_DIR = os.path.join(RUNTIME_DIR, "sandlock", "proxy")
MODES = {"fresh": FRESH, "forked": {}}  # for tests that check both ways


def _process(pid: str) -> tuple[bytes, int, int] | None:
    """(cmdline, parent pid, start time) of ``pid``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return cmdline, int(fields[1]), int(fields[19])


def _processes() -> dict[int, tuple[bytes, int, int]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _process(entry)) is not None:
            found[int(entry)] = info
    return found


def forkserver_pid(directory: str = FORKSERVER_DIR) -> int | None:
    """The fork server serving ``directory`` (not one of its children)."""
    processes = _processes()
    marker = b"sandlock.proxy._forkserver\0" + os.fsencode(directory) + b"\0"
    servers = {pid for pid, (cmdline, _, _) in processes.items() if marker in cmdline}
    return next((pid for pid in servers if processes[pid][1] not in servers), None)


def proxy_of(sandlock_pid: int, directory: str = FORKSERVER_DIR) -> int | None:
    """The newest proxy process of the run whose sandlock is ``sandlock_pid``
    (forked ones: the newest child of the fork server; tests run one at a time)."""
    processes = _processes()
    server = forkserver_pid(directory)
    candidates = [(start, pid) for pid, (cmdline, parent, start) in processes.items()
                  if (parent == sandlock_pid and b"sandlock.proxy._server" in cmdline)
                  or (server is not None and parent == server)]
    return max(candidates)[1] if candidates else None


def connecting(then: str = "") -> list[str]:
    """A command that connects to example.test:80 (which the proxy serves: it starts at a
    run's first connection steered to it), then runs the Python statement ``then``."""
    return ["/usr/bin/python3", "-c",
            f"import socket, time; c = socket.create_connection(('example.test', 80)); {then}"]


def warm_forkserver(directory: str = FORKSERVER_DIR, env: dict | None = None) -> int:
    """Make sure the fork server is up and serving (an HTTP run starts it); its pid."""
    token = os.path.join(directory, "proxy.token")
    deadline = time.monotonic() + 60
    while not os.path.exists(token) or forkserver_pid(directory) is None:
        assert time.monotonic() < deadline, "the proxy fork server did not start"
        subprocess.run([*SANDLOCK, "run", "-q", "--http-allow", "GET example.test/*", "--resolve",
                        "example.test=127.0.0.1", "--", *connecting()], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        time.sleep(0.2)
    return forkserver_pid(directory)
