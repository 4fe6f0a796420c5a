#!/usr/bin/env python3
"""What judging file metadata calls costs (sandlock.files: chmod, chown, utimes,
extended attributes, watches go to the supervisor, which Landlock does not judge).

Workloads, each run bare (no sandbox), under `sandlock run` and, with `--against
PATH` (another tree's `sandlock`, e.g. a regular install of a commit before the
change), under that one, in interleaved rounds; medians:

* calls: a Python program making N files in its workspace, then chmod and utime on
  each (2N supervised calls): the per-call cost is the difference to the bare run / 2N;
* cp -a: a tree of N small files copied with `cp -a` (fchmod/fchown/utimensat/xattrs
  on descriptors it wrote: the cheap path, no walk of the tree);
* tar x: the same tree extracted from a tarball (utimensat and chmod by path);
* start-up: `sandlock run -- /bin/true`.

Usage: python bench/files.py [--rounds N] [--files N] [--sandlock PATH] [--against PATH]
Run with `PATH=/usr/bin:/bin` and regular installs. Markdown for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory

CALLS = """
import os, sys
n = int(sys.argv[1])
for i in range(n):
    with open(f"f{i}", "w") as f:
        f.write("x")
for i in range(n):
    os.chmod(f"f{i}", 0o640)
    os.utime(f"f{i}", (1, 1))
"""


def _tree(root: str, files: int) -> str:
    source = os.path.join(root, "source")
    for i in range(files):
        directory = os.path.join(source, f"d{i % 20}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"f{i}"), "w") as f:
            f.write("x" * 100)
    subprocess.run(["tar", "-C", root, "-cf", os.path.join(root, "source.tar"), "source"], check=True)
    return source


def _workloads(root: str, files: int) -> dict[str, list[str]]:
    return {
        f"calls ({2 * files} chmod+utime)": [sys.executable, "-c", CALLS, str(files)],
        f"cp -a ({files} files)": ["cp", "-a", os.path.join(root, "source"), "copy"],
        f"tar x ({files} files)": ["tar", "-xf", os.path.join(root, "source.tar")],
        "start-up (/bin/true)": ["/bin/true"],
    }


def _run(prefix: list[str], argv: list[str], root: str) -> float:
    work = tempfile.mkdtemp(dir=root)
    try:
        return _time_once([*prefix, *argv], work)
    finally:
        shutil.rmtree(work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--against")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="sandlock-bench-files-", dir=os.path.expanduser("~"))
    try:
        _tree(root, args.files)
        runners = {"bare": [], "sandlock": [args.sandlock, "run", "-r", "/", "-w", root, "--"]}
        if args.against:
            runners["against"] = [args.against, "run", "-r", "/", "-w", root, "--"]
        workloads = _workloads(root, args.files)
        times = {(w, r): [] for w in workloads for r in runners}
        for _ in range(args.rounds):
            for workload, argv in workloads.items():
                for runner, prefix in runners.items():
                    times[(workload, runner)].append(_run(prefix, argv, root))
    finally:
        shutil.rmtree(root)
    print(f"{args.rounds} interleaved rounds, {os.cpu_count()} CPUs, medians\n")
    print("| workload | " + " | ".join(runners) + " |")
    print("| --- |" + " --- |" * len(runners))
    for workload in workloads:
        cells = [f"{statistics.median(times[(workload, r)]) * 1e3:.1f} ms" for r in runners]
        print(f"| {workload} | " + " | ".join(cells) + " |")
    calls, startup = next(iter(workloads)), list(workloads)[-1]
    for runner in runners:
        if runner == "bare":
            continue
        added = statistics.median(
            (own - own_start) - (bare - bare_start) for own, own_start, bare, bare_start in zip(
                times[(calls, runner)], times[(startup, runner)], times[(calls, "bare")],
                times[(startup, "bare")]))
        print(f"\n{runner}: per call of the calls workload (less the bare run and each one's "
              f"start-up): {added / (2 * args.files) * 1e6:.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
