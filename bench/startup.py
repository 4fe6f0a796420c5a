#!/usr/bin/env python3
"""Whole-process start-up cost: `sandlock run -- /bin/true` vs bare and vs bubblewrap.

Usage: python bench/startup.py [--runs N] [--sandlock PATH]
Prints a Markdown table (median and p90 wall time per run, ratio to bare) for
docs/performance.md. Each configuration is timed in interleaved rounds so that a
noisy neighbour affects all of them alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def _time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _default_sandlock() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "sandlock")
    return beside if os.path.exists(beside) else shutil.which("sandlock") or "sandlock"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sandlock", default=_default_sandlock())
    args = parser.parse_args()

    configs = {
        "bare /bin/true": ["/bin/true"],
        "sandlock run -- /bin/true": [args.sandlock, "run", "--", "/bin/true"],
    }
    if shutil.which("bwrap"):
        configs["bwrap --ro-bind / / --dev /dev /bin/true"] = [
            "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "/bin/true"]
    else:
        print("(bwrap not installed: apt-get install bubblewrap to compare)", file=sys.stderr)

    samples: dict[str, list[float]] = {name: [] for name in configs}
    for argv in configs.values():  # warm caches once
        _time_once(argv)
    for _ in range(args.runs):
        for name, argv in configs.items():
            samples[name].append(_time_once(argv))

    bare = statistics.median(samples["bare /bin/true"])
    print(f"{args.runs} runs each, {os.cpu_count()} CPUs, Linux {os.uname().release}\n")
    print("| command | median | p90 | ratio to bare |")
    print("| --- | --- | --- | --- |")
    for name, xs in samples.items():
        median = statistics.median(xs)
        p90 = statistics.quantiles(xs, n=10)[-1]
        print(f"| `{name}` | {median * 1e3:.2f} ms | {p90 * 1e3:.2f} ms | {median / bare:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
