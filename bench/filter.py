#!/usr/bin/env python3
"""What the seccomp filter costs every syscall the command makes.

A C loop of N getppid() calls (a syscall with no rule: it passes through the whole
filter to ALLOW, the common case) runs bare and under `sandlock run` (and, with
`--against PATH`, another tree's `sandlock`) in interleaved rounds; the added time per
syscall is the median over rounds of (sandboxed - bare) / N. Needs gcc.

Usage: python bench/filter.py [--rounds N] [--calls N] [--sandlock PATH] [--against PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory

LOOP = r"""
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    return 0;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--against")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sandlock-bench-filter-", dir=os.path.expanduser("~"))
    try:
        source = os.path.join(work, "loop.c")
        with open(source, "w") as f:
            f.write(LOOP)
        program = os.path.join(work, "loop")
        subprocess.run(["gcc", "-O2", "-o", program, source], check=True)
        runners = {"bare": [], "sandlock": [args.sandlock, "run", "-r", "/", "--"]}
        if args.against:
            runners["against"] = [args.against, "run", "-r", "/", "--"]
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, prefix in runners.items():
                times[name].append(_time_once([*prefix, program, str(args.calls)], work))
    finally:
        shutil.rmtree(work)
    print(f"{args.calls} getppid() calls, {args.rounds} interleaved rounds, {os.cpu_count()} CPUs\n")
    print("| runner | median | added per syscall |")
    print("| --- | --- | --- |")
    for name in runners:
        added = statistics.median((a - b) / args.calls for a, b in zip(times[name], times["bare"]))
        cell = "—" if name == "bare" else f"{added * 1e9:.1f} ns"
        print(f"| {name} | {statistics.median(times[name]) * 1e3:.1f} ms | {cell} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
