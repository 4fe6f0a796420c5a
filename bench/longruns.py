#!/usr/bin/env python3
"""Long runs: what sandlock holds after many processes and many proxied requests.

1. `with Sandbox(Policy()) as sb`: STEPS steps, a `sb.call(f)` and an
   `sb.exec(["true"])` in turn; sandlock's own RSS (after a collection) and open
   descriptors every 1,000 steps, and the time per step.
2. `sandlock run --http-upstream-timeout 0.2`: REQUESTS requests, 50 at a time, to a
   loopback upstream that accepts and never answers (each is answered 504); the
   proxy's (a fresh interpreter, sandlock's child) and sandlock's RSS and descriptors
   every 500 requests.

Usage: python bench/longruns.py [--steps N] [--requests N]
Prints Markdown tables for docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from sandlock import Policy, Sandbox

PY = sys.executable
SANDLOCK = os.path.join(os.path.dirname(PY), "sandlock")
if not os.path.exists(SANDLOCK):
    SANDLOCK = shutil.which("sandlock") or "sandlock"
HOST = "127.0.0.2"
CLIENT_PY = "/usr/bin/python3"  # the system's (the default workspace may not reach a venv's)
BATCH = 50


def nothing() -> None:
    return None


def status(pid: int | str = "self") -> tuple[int, int]:
    """(RSS in KiB, open descriptors) of a process."""
    with open(f"/proc/{pid}/status") as file:
        rss = next(int(line.split()[1]) for line in file if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def settled(pid: int) -> tuple[int, int]:
    """``status`` with the fewest descriptors over half a second: the proxy closes an
    upstream socket a loop iteration or two after its 504 has gone out."""
    samples = []
    for _ in range(10):
        samples.append(status(pid))
        time.sleep(0.05)
    return samples[-1][0], min(fds for _, fds in samples)


def long_lived(steps: int) -> None:
    print(f"### `with Sandbox(Policy()) as sb`: {steps:,} steps (a call and an exec in turn)\n")
    print("| steps | sandlock RSS | descriptors | ms per step (last 1,000) |")
    print("| --- | --- | --- | --- |")
    with Sandbox(Policy(), quiet=True) as sb:
        started = time.perf_counter()
        for step in range(1, steps + 1):
            if step % 2:
                assert sb.call(nothing).success
            else:
                assert sb.exec(["true"]).wait(10) == 0
            if step % 1000 == 0:
                elapsed = time.perf_counter() - started
                gc.collect()
                rss, fds = status()
                print(f"| {step:,} | {rss / 1024:.1f} MiB | {fds} | {elapsed:.2f} |", flush=True)
                started = time.perf_counter()
    print()


# --- a silent upstream, and the confined client ------------------------------------------

async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.read(65536):  # read what comes, answer nothing, until the peer closes
        pass
    writer.close()


def _silent_upstream(port: int) -> None:
    async def serve() -> None:
        server = await asyncio.start_server(_hold, HOST, port, backlog=4096)
        await server.serve_forever()

    threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()


CLIENT = r"""
import socket, sys
from concurrent.futures import ThreadPoolExecutor
port, total, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def get(n):
    with socket.create_connection(("api.test", port), timeout=30) as conn:
        conn.sendall(b"GET /%d HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n" % n)
        return conn.recv(12)[9:12]
with ThreadPoolExecutor(batch) as pool:
    for done in range(batch, total + 1, batch):
        assert set(pool.map(get, range(done - batch, done))) == {b"504"}
        if done % 500 == 0:
            print(done, flush=True)
            sys.stdin.readline()
"""


def _proxy_of(sandlock_pid: int) -> int:
    """The run's proxy (a fresh interpreter here: sandlock's child)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read()
            with open(f"/proc/{entry}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        if b"sandlock.proxy._server" in cmdline and parent == sandlock_pid:
            return int(entry)
    raise LookupError("no proxy process")


def silent_upstream(requests: int) -> None:
    port = 18000 + os.getpid() % 1000
    _silent_upstream(port)
    time.sleep(0.2)
    argv = [SANDLOCK, "run", "-q", "--resolve", f"api.test={HOST}", "--http-port", str(port),
            "--https-inspect", "off", "--http-allow", "GET api.test/*",
            "--http-upstream-timeout", "0.2", "--", CLIENT_PY, "-c", CLIENT, str(port),
            str(requests), str(BATCH)]
    print(f"### {requests:,} requests to a silent upstream, {BATCH} at a time "
          "(`--http-upstream-timeout 0.2`)\n")
    print("| requests | proxy RSS | proxy descriptors | sandlock RSS | sandlock descriptors |")
    print("| --- | --- | --- | --- | --- |")
    env = {**os.environ, "SANDLOCK_PROXY_FORKSERVER": "0"}  # the proxy: sandlock's child
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=env, cwd=tempfile.gettempdir()) as run:
        for line in run.stdout:
            proxy_rss, proxy_fds = settled(_proxy_of(run.pid))
            own_rss, own_fds = status(run.pid)
            print(f"| {int(line):,} | {proxy_rss / 1024:.1f} MiB | {proxy_fds} | "
                  f"{own_rss / 1024:.1f} MiB | {own_fds} |", flush=True)
            run.stdin.write("go\n")
            run.stdin.flush()
    assert run.returncode == 0
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=3_000)
    args = parser.parse_args()
    long_lived(args.steps)
    silent_upstream(args.requests)


if __name__ == "__main__":
    main()
