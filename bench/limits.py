#!/usr/bin/env python3
"""What the limits cost.

Start-up: `sandlock run -- /bin/true` plain, with `-P 50`, with `-m 1G` and with both.
Each round runs every configuration once, in a shuffled order; "added" is the median
over rounds of the difference to that round's plain run (a per-round difference sees
through this VM's drifting speed, which medians of separate runs do not). With
`--against PATH` (another tree's `sandlock`, e.g. a regular install of the previous
commit), the same configurations of that tree run in the same rounds.

Loops: a shell spawning N `/bin/true` and M `python3 -c 'import json, asyncio, ssl'`
under `-P 50 -m 1G` against the same without limits (interleaved rounds).

Usage: python bench/limits.py [--startup-rounds N] [--runs N] [--spawns N]
                              [--pythons M] [--sandlock PATH] [--against PATH]
Run with `PATH=/usr/bin:/bin` (a PATH that starts with shims slows every exec) and
regular installs (an editable one adds ~10 ms a start). Markdown tables for
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory

LIMITS = {
    "plain": [],
    "`-P 50`": ["-P", "50"],
    "`-m 1G`": ["-m", "1G"],
    "`-P 50 -m 1G`": ["-P", "50", "-m", "1G"],
}


def _startup(trees: dict[str, str], rounds: int, workdir: str) -> None:
    cases = [(tree, limit) for tree in trees for limit in LIMITS]
    times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    for _ in range(rounds):
        random.shuffle(cases)
        for tree, limit in cases:
            argv = [trees[tree], "run", *LIMITS[limit], "--", "/bin/true"]
            times[(tree, limit)].append(_time_once(argv, workdir))
    print(f"start-up, {rounds} shuffled rounds, {os.cpu_count()} CPUs\n")
    print("| run | " + " | ".join(f"{tree}: median | added" for tree in trees) + " |")
    print("| --- |" + " --- | --- |" * len(trees))
    for limit in LIMITS:
        cells = []
        for tree in trees:
            own, plain = times[(tree, limit)], times[(tree, "plain")]
            added = statistics.median(a - b for a, b in zip(own, plain))
            cells += [f"{statistics.median(own) * 1e3:.2f} ms",
                      "—" if limit == "plain" else f"+{added * 1e3:.2f} ms"]
        print(f"| {limit} | " + " | ".join(cells) + " |")
    print()


def _loops(sandlock: str, runs: int, spawns: int, pythons: int, workdir: str) -> None:
    loop = (f"i=0; while [ $i -lt {spawns} ]; do /bin/true; i=$((i+1)); done; "
            f"i=0; while [ $i -lt {pythons} ]; do python3 -c 'import json, asyncio, ssl'; "
            "i=$((i+1)); done")
    cases = {
        "no limits": [sandlock, "run", "--", "sh", "-c", loop],
        "`-P 50 -m 1G`": [sandlock, "run", *LIMITS["`-P 50 -m 1G`"], "--", "sh", "-c", loop],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            times[name].append(_time_once(argv, workdir))
    base, limited = (statistics.median(times[name]) for name in cases)
    print(f"shell loop: {spawns} `true` + {pythons} python imports, {runs} rounds\n")
    print("| no limits | `-P 50 -m 1G` | ratio |")
    print("| --- | --- | --- |")
    print(f"| {base:.2f} s | {limited:.2f} s | {limited / base:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startup-rounds", type=int, default=120)
    parser.add_argument("--runs", type=int, default=7, help="rounds of the loops")
    parser.add_argument("--spawns", type=int, default=1000)
    parser.add_argument("--pythons", type=int, default=50)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--against", help="another tree's sandlock, timed alongside")
    args = parser.parse_args()
    trees = {"this tree": args.sandlock}
    if args.against:
        trees["against"] = args.against
    with tempfile.TemporaryDirectory() as workdir:
        _startup(trees, args.startup_rounds, workdir)
        if args.runs:
            _loops(args.sandlock, args.runs, args.spawns, args.pythons, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
