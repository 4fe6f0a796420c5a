#!/usr/bin/env python3
"""What the process cap and the memory limit cost: start-up of `sandlock run -P 50
-m 1G -- /bin/true` against `sandlock run -- /bin/true`, and a shell loop spawning N
`/bin/true` and M `python3 -c 'import json, asyncio, ssl'` under `-P 50 -m 1G` against
the same without limits.

Usage: python bench/limits.py [--runs N] [--spawns N] [--pythons M] [--sandlock PATH]
Medians of interleaved runs (each configuration once per round), Markdown tables for
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--spawns", type=int, default=1000)
    parser.add_argument("--pythons", type=int, default=50)
    parser.add_argument("--sandlock", default=_default_sandlock())
    args = parser.parse_args()
    loop = (f"i=0; while [ $i -lt {args.spawns} ]; do /bin/true; i=$((i+1)); done; "
            f"i=0; while [ $i -lt {args.pythons} ]; do python3 -c 'import json, asyncio, ssl'; "
            "i=$((i+1)); done")
    cases = {
        "`sandlock run -- /bin/true`": [args.sandlock, "run", "--", "/bin/true"],
        "`sandlock run -P 50 -m 1G -- /bin/true`":
            [args.sandlock, "run", "-P", "50", "-m", "1G", "--", "/bin/true"],
        f"shell loop: {args.spawns} `true` + {args.pythons} python imports, no cap":
            [args.sandlock, "run", "--", "sh", "-c", loop],
        "the same under `-P 50 -m 1G`":
            [args.sandlock, "run", "-P", "50", "-m", "1G", "--", "sh", "-c", loop],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.runs):
            for name, argv in cases.items():
                times[name].append(_time_once(argv, workdir))
    print(f"{args.runs} rounds, {os.cpu_count()} CPUs\n")
    print("| run | median | ratio |")
    print("| --- | --- | --- |")
    names = list(cases)
    for index, name in enumerate(names):
        median = statistics.median(times[name])
        base = statistics.median(times[names[index - 1]]) if index % 2 else median
        unit = f"{median * 1e3:.1f} ms" if median < 1 else f"{median:.2f} s"
        print(f"| {name} | {unit} | {median / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
