#!/usr/bin/env python3
"""What the embedding API costs in a warm process: the round trip of a call of a
trivial function (a fresh `Sandbox(policy).call`, a call in a running sandbox), the
same as `Sandbox.run(["/bin/true"])` and `subprocess.run`, and COW clones per second
(`sb.fork(N)` to the last clone's exit, with init's data shared).

Usage: python bench/embed.py [--rounds N] [--clones N] [--items N]
Medians of interleaved rounds; Markdown tables for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from sandlock import Policy, Sandbox

DATA: list[int] = []
ITEMS = [100_000]  # init's list (1M items: ~40 MB of Python objects), set by --items


def init() -> None:
    DATA.extend(range(ITEMS[0]))  # shared by every clone


def work() -> int:
    return DATA[int(os.environ["CLONE_ID"])]


def nothing() -> None:
    return None


def _bare_forks(count: int) -> float:
    """Forks per second of this process itself, with no sandbox: the floor."""
    started = time.perf_counter()
    for index in range(count):
        if os.fork() == 0:
            work_on = DATA[index % len(DATA)]  # as a clone reads init's data
            os._exit(work_on & 0)
    for _ in range(count):
        os.wait()
    return count / (time.perf_counter() - started)


def _elapsed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


STREAK = 20


def _streaks(running: Sandbox, rounds: int) -> dict[str, float]:
    """Round trips made back to back (an RL loop's calls, a tool server's), each kind in
    streaks of STREAK, streaks of the two kinds interleaved: the median per round trip.
    (Interleaved one by one with fresh sandboxes, a call also pays for the teardown of
    the previous sandbox running on the other CPU.)"""
    cases = {
        "`subprocess.run(['/bin/true'])`, back to back": lambda: subprocess.run(["/bin/true"]),
        "`sb.call(f)` in a running sandbox, back to back": lambda: running.call(nothing),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, action in cases.items():
            times[name] += [_elapsed(action) for _ in range(STREAK)]
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--clones", type=int, default=1000)
    parser.add_argument("--items", type=int, default=ITEMS[0])
    args = parser.parse_args()
    ITEMS[0] = args.items
    policy = Policy()
    sandbox = Sandbox(policy)
    with Sandbox(policy) as running:
        cases = {
            "`subprocess.run(['/bin/true'])`": lambda: subprocess.run(["/bin/true"]),
            "`Sandbox(policy).run(['/bin/true'])`": lambda: sandbox.run(["/bin/true"]),
            "`Sandbox(policy).call(f)`": lambda: sandbox.call(nothing),
            "`sb.call(f)` in a running sandbox": lambda: running.call(nothing),
        }
        for action in cases.values():  # warm: imports, caches
            action()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, action in cases.items():
                times[name].append(_elapsed(action))
        streaks = _streaks(running, args.rounds)
    print(f"{args.rounds} rounds, {os.cpu_count()} CPUs\n")
    print("| round trip | median | p90 |")
    print("| --- | --- | --- |")
    for name, values in times.items():
        values.sort()
        print(f"| {name} | {statistics.median(values) * 1e3:.2f} ms "
              f"| {values[int(len(values) * 0.9)] * 1e3:.2f} ms |")
    print("\nIn streaks (20 in a row, the two kinds interleaved by streak), per round trip:\n")
    print("| round trip | median |\n| --- | --- |")
    for name, value in streaks.items():
        print(f"| {name} | {value * 1e3:.2f} ms |")
    init()
    print(f"\nbare `os.fork()` of this process, {args.items} items, each child reading one and "
          f"exiting, reaped in a batch: {_bare_forks(args.clones):.0f}/s")
    DATA.clear()
    rates = []
    with Sandbox(policy, init, work) as clones:
        clones.fork(10)  # warm
        for _ in range(3):
            started = time.perf_counter()
            batch = clones.fork(args.clones)
            codes = [clone.wait(60) for clone in batch]
            rates.append(args.clones / (time.perf_counter() - started))
            assert codes == [0] * args.clones and batch[-1].value == args.clones - 1
    print(f"`sb.fork({args.clones})`, to the last clone's exit: "
          f"{statistics.median(rates):.0f} clones/s (median of 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
