#!/usr/bin/env python3
"""What network rules of a nested sandbox cost (`sb.sandbox(Policy(net_allow=...))`):
a connect by a thread the supervisor already knows, and a thread's first connect,
for which it asks the nested resident which sandbox the thread is in. Against the
same in the parent sandbox, in the same rounds; and the cost of making such a nested
sandbox.

Usage: python bench/nested.py [--rounds N] [--connects N] [--threads N]
Per-connect times measured inside the sandbox (perf_counter around connect());
medians of per-round medians. Loopback only. Markdown for docs/performance.md.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

from sandlock import Policy, Sandbox

SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc"]


def connects(port: int, count: int) -> float:
    """Median µs of ``count`` connects by this thread (the first one, not counted,
    makes the thread known)."""
    times = []
    for index in range(count + 1):
        with socket.socket() as sock:
            started = time.perf_counter()
            sock.connect(("127.0.0.1", port))
            if index:
                times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def first_connects(port: int, count: int) -> float:
    """Median µs of the first connect of each of ``count`` new threads, one at a time."""
    times: list[float] = []

    def one() -> None:
        with socket.socket() as sock:
            started = time.perf_counter()
            sock.connect(("127.0.0.1", port))
            times.append(time.perf_counter() - started)

    for _ in range(count):
        thread = threading.Thread(target=one)
        thread.start()
        thread.join()
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--connects", type=int, default=400)
    parser.add_argument("--threads", type=int, default=100)
    args = parser.parse_args()
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = listener.getsockname()[1]
    accepting = threading.Thread(target=lambda: [listener.accept()[0].close() for _ in iter(int, 1)],
                                 daemon=True)
    accepting.start()
    rule = f"127.0.0.1:{port}"
    results: dict[str, list[float]] = {}
    with Sandbox(Policy(net_allow=[rule]), quiet=True) as plain, \
            Sandbox(Policy(net_allow=[rule]), quiet=True) as sb:
        for each in (plain, sb):
            each.call(connects, args=(port, 1))  # the engine built
        started = time.perf_counter()
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[rule]))
        made = (time.perf_counter() - started) * 1e3
        where = {"no nested sandbox": plain, "the parent, with one": sb, "the nested one": nested}
        for _ in range(args.rounds):
            for name, runner in where.items():
                results.setdefault(name, []).append(runner.call(connects, args=(port, args.connects)).value)
                results.setdefault(name + " first", []).append(
                    runner.call(first_connects, args=(port, args.threads)).value)
    print("| connect, in | a known thread's | a thread's first |")
    print("| --- | --- | --- |")
    for name in where:
        known, first = (statistics.median(results[name + key]) for key in ("", " first"))
        print(f"| {name} | {known:.1f} µs | {first:.1f} µs |")
    print(f"\nMaking the nested sandbox (its resident forked, confined, ready): {made:.1f} ms")


if __name__ == "__main__":
    main()
