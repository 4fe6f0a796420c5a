#!/usr/bin/env python3
"""Network overheads: on-behalf connect latency, a served port's throughput, start-up.

Usage: python bench/network.py [--connects N] [--requests N] [--sends N] [--runs N] [--only PART]

1. connect latency: a Python client inside and outside the sandbox times N connects
   to a loopback listener (per-connect median, in-process timing, so interpreter
   start-up is excluded); the difference is what the supervisor adds.
2. unix connect latency: the same, to a unix listener the program bound itself, by
   an abstract name and by a path (the sandbox's own IPC: recognised, then reached).
3. server throughput: an asyncio echo server inside the sandbox (--net-allow-bind)
   versus bare, driven from outside by 8 keep-alive clients; requests per second.
4. start-up: `sandlock run --net-allow host:443 -- /bin/true` versus no network rule.
5. sends: a Python client inside and outside the sandbox times N UDP sendto()s of 64
   bytes with a destination, and N/20 sendmsg()s of 1 MiB on a unix stream a thread
   drains (per-call medians): what the supervisor adds to a small send and a bulk one.
6. binds to a path: a Python client inside and outside the sandbox times N binds of a
   fresh unix socket to an absolute path and N to a relative one (per-bind medians,
   the file removed after each): what the binder adds (docs/architecture.md).
Prints Markdown tables for docs/performance.md. Loopback only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

PY = sys.executable
SANDLOCK = [os.path.join(os.path.dirname(PY), "sandlock")]
if not os.path.exists(SANDLOCK[0]):
    SANDLOCK = [shutil.which("sandlock") or "sandlock"]

CONNECT_CLIENT = r"""
import socket, statistics, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
samples = []
for _ in range(count):
    s = socket.socket()
    start = time.perf_counter()
    s.connect(("127.0.0.1", port))
    samples.append(time.perf_counter() - start)
    s.close()
print(statistics.median(samples) * 1e6)
"""

UNIX_CLIENT = r"""
import os, socket, statistics, sys, tempfile, time
count = int(sys.argv[1])

def median_connect(address):
    server = socket.socket(socket.AF_UNIX)
    server.bind(address)
    server.listen()
    samples = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX)
        start = time.perf_counter()
        s.connect(address)  # (a unix connect completes in the kernel, before any accept)
        samples.append(time.perf_counter() - start)
        server.accept()[0].close()
        s.close()
    server.close()
    return statistics.median(samples) * 1e6

directory = tempfile.mkdtemp()
print(median_connect(b"\0sandlock-bench-%d" % os.getpid()), median_connect(os.path.join(directory, "s")))
os.unlink(os.path.join(directory, "s"))
os.rmdir(directory)
"""

SEND_CLIENT = r"""
import socket, statistics, sys, threading, time
count = int(sys.argv[1])
receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
receiver.bind(("127.0.0.1", 0))
address, sender, small = receiver.getsockname(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM), []
for _ in range(count):
    start = time.perf_counter()
    sender.sendto(b"x" * 64, address)
    small.append(time.perf_counter() - start)
a, b = socket.socketpair()
def drain():
    while b.recv(1 << 20):
        pass
threading.Thread(target=drain, daemon=True).start()
data, bulk = b"y" * (1 << 20), []
for _ in range(max(count // 20, 1)):
    start = time.perf_counter()
    a.sendmsg([data])
    bulk.append(time.perf_counter() - start)
print(statistics.median(small) * 1e6, statistics.median(bulk) * 1e6)
"""

BIND_CLIENT = r"""
import os, socket, statistics, sys, tempfile, time
count = int(sys.argv[1])
directory = tempfile.mkdtemp()
os.chdir(directory)
samples = {"absolute": [], "relative": []}
for _ in range(count):
    for kind, path in (("absolute", os.path.join(directory, "a")), ("relative", "r")):
        s = socket.socket(socket.AF_UNIX)
        start = time.perf_counter()
        s.bind(path)
        samples[kind].append(time.perf_counter() - start)
        s.close()
        os.unlink(path)
os.rmdir(directory)
print(statistics.median(samples["absolute"]) * 1e6, statistics.median(samples["relative"]) * 1e6)
"""

ECHO_SERVER = r"""
import asyncio, sys
async def handle(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


def _listener() -> tuple[socket.socket, int]:
    """A loopback listener that never accepts: connect() completes in the kernel (the
    handshake lands in the backlog), so no server thread competes with the client and
    the supervisor for the 2 vCPUs. That competition made results swing between two
    modes by thread placement (accept and close before or after the reply). Each run
    gets its own listener; its backlog (4096) holds every connection of one run."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    return server, server.getsockname()[1]


def connect_latency(count: int) -> tuple[float, float]:
    if count > 4096:
        raise SystemExit("--connects: at most 4096 (the listener's backlog)")
    results = []
    for prefix in ([], [*SANDLOCK, "run", "-q", "--net-allow", "127.0.0.1", "--"]):
        server, port = _listener()
        try:
            results.append(float(subprocess.check_output([*prefix, PY, "-c", CONNECT_CLIENT,
                                                          str(port), str(count)])))
        finally:
            server.close()
    return results[0], results[1]


def unix_connect_latency(count: int) -> list[tuple[float, float]]:
    """(abstract, path) per-connect medians in µs: bare, then sandboxed."""
    return [tuple(map(float, subprocess.check_output([*prefix, PY, "-c", UNIX_CLIENT, str(count)]).split()))
            for prefix in ([], [*SANDLOCK, "run", "-q", "--"])]


def bind_latency(count: int) -> list[tuple[float, float]]:
    """(absolute, relative) per-bind medians in µs: bare, then sandboxed."""
    return [tuple(map(float, subprocess.check_output([*prefix, PY, "-c", BIND_CLIENT, str(count)]).split()))
            for prefix in ([], [*SANDLOCK, "run", "-q", "--"])]


def send_latency(count: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((bare small, bare bulk), (sandboxed small, sandboxed bulk)), µs per call."""
    results = []
    for prefix in ([], [*SANDLOCK, "run", "-q", "--net-allow", "127.0.0.1", "--"]):
        out = subprocess.check_output([*prefix, PY, "-c", SEND_CLIENT, str(count)])
        small, bulk = map(float, out.split())
        results.append((small, bulk))
    return results[0], results[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drive(port: int, requests: int, clients: int = 8) -> float:
    payload = b"x" * 128
    done = []

    def client() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            for _ in range(requests // clients):
                s.sendall(payload)
                received = 0
                while received < len(payload):
                    received += len(s.recv(65536))
        done.append(True)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return requests / (time.perf_counter() - start)


def server_throughput(requests: int, prefix: list[str]) -> float:
    port = _free_port()
    proc = subprocess.Popen([*prefix, PY, "-c", ECHO_SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        _drive(port, requests // 10)  # warm up
        return _drive(port, requests)
    finally:
        proc.kill()
        proc.wait()


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def startup(runs: int) -> tuple[float, float]:
    plain = [*SANDLOCK, "run", "--", "/bin/true"]
    named = [*SANDLOCK, "run", "--resolve", "api.example.test=127.0.0.1", "--net-allow",
             "api.example.test:443", "--", "/bin/true"]
    samples: dict[str, list[float]] = {"plain": [], "named": []}
    for _ in range(runs):
        samples["plain"].append(_time(plain))
        samples["named"].append(_time(named))
    return statistics.median(samples["plain"]) * 1e3, statistics.median(samples["named"]) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=40000)
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="median over this many rounds")
    parser.add_argument("--only", choices=("connect", "unix", "server", "startup", "send", "bind"),
                        help="measure only this part")
    args = parser.parse_args()
    if args.only in (None, "connect"):
        _report_connect(args)
    if args.only in (None, "unix"):
        _report_unix(args)
    if args.only in (None, "server"):
        _report_server(args)
    if args.only in (None, "startup"):
        _report_startup(args)
    if args.only in (None, "send"):
        _report_send(args)
    if args.only in (None, "bind"):
        _report_bind(args)
    return 0


def _report_connect(args: argparse.Namespace) -> None:
    latencies = [connect_latency(args.connects) for _ in range(args.repeat)]
    bare = statistics.median(b for b, _ in latencies)
    boxed = statistics.median(s for _, s in latencies)
    print(f"## connect latency ({args.connects} connects, median of {args.repeat} rounds)\n")
    print("| | per connect |\n| --- | --- |")
    print(f"| bare | {bare:.1f} µs |\n| sandboxed (on-behalf) | {boxed:.1f} µs |")
    print(f"| added | {boxed - bare:.1f} µs |\n")


def _report_unix(args: argparse.Namespace) -> None:
    rounds = [unix_connect_latency(args.connects) for _ in range(args.repeat)]
    (bare_abstract, bare_path), (boxed_abstract, boxed_path) = (
        tuple(statistics.median(r[side][kind] for r in rounds) for kind in (0, 1)) for side in (0, 1))
    print(f"## unix connect latency, to the program's own listener ({args.connects} connects, "
          f"median of {args.repeat} rounds)\n")
    print("| | abstract name | path |\n| --- | --- | --- |")
    print(f"| bare | {bare_abstract:.1f} µs | {bare_path:.1f} µs |")
    print(f"| sandboxed (on-behalf) | {boxed_abstract:.1f} µs | {boxed_path:.1f} µs |")
    print(f"| added | {boxed_abstract - bare_abstract:.1f} µs | {boxed_path - bare_path:.1f} µs |\n")


def _report_server(args: argparse.Namespace) -> None:
    bare_rps = statistics.median(server_throughput(args.requests, []) for _ in range(args.repeat))
    boxed_rps = statistics.median(server_throughput(
        args.requests, [*SANDLOCK, "run", "-q", "--net-allow-bind", "*", "--"]) for _ in range(args.repeat))
    print(f"## echo server inside the sandbox (8 clients, {args.requests} requests)\n")
    print("| | requests/s |\n| --- | --- |")
    print(f"| bare | {bare_rps:,.0f} |\n| sandboxed | {boxed_rps:,.0f} ({boxed_rps / bare_rps:.1%}) |\n")


def _report_startup(args: argparse.Namespace) -> None:
    plain, named = startup(args.runs)
    print(f"## start-up ({args.runs} runs)\n")
    print("| | median |\n| --- | --- |")
    print(f"| `sandlock run -- /bin/true` | {plain:.1f} ms |")
    print(f"| `sandlock run --net-allow api.example.test:443 ... -- /bin/true` | {named:.1f} ms "
          f"({named - plain:+.1f} ms) |")


def _report_send(args: argparse.Namespace) -> None:
    rounds = [send_latency(args.sends) for _ in range(args.repeat)]
    _two_columns(f"sends ({args.sends} UDP sendto of 64 B, {max(args.sends // 20, 1)} sendmsg "
                 f"of 1 MiB; median of {args.repeat} rounds)", ("sendto 64 B", "sendmsg 1 MiB"),
                 ("bare", "sandboxed"), rounds)


def _report_bind(args: argparse.Namespace) -> None:
    rounds = [bind_latency(args.connects) for _ in range(args.repeat)]
    _two_columns(f"binds to a path ({args.connects} of each, median of {args.repeat} rounds)",
                 ("absolute path", "relative path"), ("bare", "sandboxed (the binder)"), rounds)


def _two_columns(title: str, columns: tuple[str, str], rows: tuple[str, str],
                 rounds: list) -> None:
    """A table of two measures (µs, medians over ``rounds``), bare then sandboxed."""
    print(f"## {title}\n")
    print(f"| | {columns[0]} | {columns[1]} |\n| --- | --- | --- |")
    for index, name in enumerate(rows):
        first, second = (statistics.median(r[index][column] for r in rounds) for column in (0, 1))
        print(f"| {name} | {first:.1f} µs | {second:.1f} µs |")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
