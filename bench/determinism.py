#!/usr/bin/env python3
"""What the reproducible-run options cost a program that uses what they answer:
realtime clock reads (--time-start), getrandom (--random-seed) and directory
listings (--deterministic-dirs), each timed inside the sandbox with and without the
option (interleaved runs, median of the per-call time the program measures itself).

Then the start-up of `sandlock run OPTIONS -- /bin/true`: wall time and CPU time
(user + system of sandlock and everything it started that it waited for: the
children's rusage; the sandbox's own processes are reaped by its keeper and init,
whose times reach sandlock's as theirs end),
interleaved; on a loaded machine the CPU time is the steadier of the two.

Usage: python bench/determinism.py [--runs N] [--sandlock PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Each program prints the seconds per call it measured (perf_counter: the monotonic
# clock, which --time-start makes a syscall, never an answer of the supervisor: the
# monotonic row shows that cost).
CLOCK = "import time\nn=20000\nt=time.perf_counter()\nfor _ in range(n): time.time()\nprint((time.perf_counter()-t)/n)"
MONOTONIC = CLOCK.replace("time.time()", "time.monotonic()")
RANDOM = "import os,time\nn=5000\nt=time.perf_counter()\nfor _ in range(n): os.urandom(16)\nprint((time.perf_counter()-t)/n)"
LISTING = ("import os,time\nn=100\nt=time.perf_counter()\nfor _ in range(n): os.listdir('{d}')\n"
           "print((time.perf_counter()-t)/n)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    beside = os.path.join(os.path.dirname(sys.executable), "sandlock")
    parser.add_argument("--sandlock", default=beside if os.path.exists(beside) else shutil.which("sandlock"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.getcwd()) as directory:
        for number in range(1000):
            open(os.path.join(directory, f"{(number * 7919) % 1000:04d}"), "w").close()
        cases = {
            "time.time()": (CLOCK, ["--time-start", "2000-01-01T00:00:00Z"]),
            "time.monotonic()": (MONOTONIC, ["--time-start", "2000-01-01T00:00:00Z"]),
            "os.urandom(16)": (RANDOM, ["--random-seed", "42"]),
            "os.listdir (1000 entries)": (LISTING.format(d=directory), ["--deterministic-dirs"]),
        }
        print(f"{args.runs} runs each, {os.cpu_count()} CPUs, Linux {os.uname().release}\n")
        print("| call | without | with the option | option |")
        print("| --- | --- | --- | --- |")
        for name, (program, options) in cases.items():
            plain, optioned = [], []
            for _ in range(args.runs):
                plain.append(_per_call(args.sandlock, [], program))
                optioned.append(_per_call(args.sandlock, options, program))
            print(f"| `{name}` | {_shown(statistics.median(plain))} | "
                  f"{_shown(statistics.median(optioned))} | `{' '.join(options)}` |")
    _startup(args.sandlock, args.runs * 4)
    return 0


STARTUP = {
    "(none)": [],
    "-m 512M": ["-m", "512M"],
    "-m 512M --num-cpus 1": ["-m", "512M", "--num-cpus", "1"],
    "--time-start 2000-01-01T00:00:00Z": ["--time-start", "2000-01-01T00:00:00Z"],
    "--random-seed 42": ["--random-seed", "42"],
    "--deterministic-dirs": ["--deterministic-dirs"],
}


def _startup(sandlock: str, runs: int) -> None:
    wall: dict[str, list[float]] = {name: [] for name in STARTUP}
    cpu: dict[str, list[float]] = {name: [] for name in STARTUP}
    for _ in range(runs):
        for name, options in STARTUP.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sandlock, "run", *options, "--", "/bin/true"], check=True,
                           stdout=subprocess.DEVNULL)
            wall[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(f"\n`sandlock run OPTIONS -- /bin/true`, {runs} interleaved runs each\n")
    print("| options | wall median | CPU median (user + system) |")
    print("| --- | --- | --- |")
    for name in STARTUP:
        print(f"| `{name}` | {_shown(statistics.median(wall[name]))} | "
              f"{_shown(statistics.median(cpu[name]))} |")


def _per_call(sandlock: str, options: list[str], program: str) -> float:
    result = subprocess.run([sandlock, "run", *options, "--", sys.executable, "-c", program],
                            capture_output=True, text=True, check=True)
    return float(result.stdout)


def _shown(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
