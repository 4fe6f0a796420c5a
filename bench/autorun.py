#!/usr/bin/env python3
"""What the protection of autorun files costs a run: the start scan (what git reads
of each repository, bound read-only or recorded) and the end check (what was made
where it was missing, repositories made or changed).

Workspaces, made once in a scratch directory: an empty directory; a repository of 300
files; one of 10,000 (its index, ~1 MB, is searched for gitlinks at start); one of
60,000 (an index too large to search at start); a directory of 50 repositories
(``~/projects`` as a workspace). In each, `sandlock run -- /bin/true`, and in the 10k
repository a run that changes the index (`git add`, so the end check reads it). Each
round runs every case once, shuffled; with ``--against PATH`` (another tree's
`sandlock`, e.g. the tree before this change) the same cases of that tree too, in the
same rounds. Medians, and the median of the per-round differences.

``--phases``: the start scan (``protect``) and the end check alone, in-process (medians
of 40 calls each, nothing written between them), in each workspace, for this tree and,
with ``--against``, the other tree's scan (through the interpreter its script names).

Usage: python bench/autorun.py [--rounds N] [--sandlock PATH] [--against PATH] [--phases]
Run with regular installs (an editable one adds ~10 ms a start) of the same
interpreter, and `PATH=/usr/bin:/bin`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory

IDENTITY = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.test",
            "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.test"}


def _repository(path: str, files: int) -> str:
    os.makedirs(path)
    for i in range(files):
        directory = os.path.join(path, f"d{i // 200}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"f{i}.txt"), "w") as file:
            file.write(str(i))
    env = {**os.environ, **IDENTITY}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "x"]):
        subprocess.run(argv, cwd=path, check=True, env=env)
    return path


def _workspaces(base: str) -> dict[str, str]:
    projects = os.path.join(base, "projects")
    for i in range(50):
        _repository(os.path.join(projects, f"p{i}"), 20)
    empty = os.path.join(base, "empty")
    os.makedirs(empty)
    return {"empty directory": empty, "repository, 300 files": _repository(os.path.join(base, "r300"), 300),
            "repository, 10k files": _repository(os.path.join(base, "r10k"), 10_000),
            "repository, 60k files": _repository(os.path.join(base, "r60k"), 60_000),
            "50 repositories": projects}


PHASES = """
import os, sys, time
from sandlock.autorun import _autorun
def median(function):
    times = []
    for _ in range(40):
        start = time.perf_counter(); function(); times.append(time.perf_counter() - start)
    return sorted(times)[20] * 1e3
homes = [os.path.expanduser("~")]
for directory in sys.argv[1:]:
    try:
        protect = lambda: _autorun.protect([directory], homes, private=["/tmp"])
        protection = protect()
    except TypeError:  # (a tree before the end check)
        protect = lambda: _autorun.protect([directory], homes)
        protection = protect()
    record = getattr(protection, "record", None)
    end = median(lambda: protection.leftovers(None).check()) if record else float("nan")
    print(f"{median(protect):.3f} {end:.3f}")
"""


def _phases(trees: dict[str, str], places: dict[str, str]) -> None:
    results = {}
    for tree, script in trees.items():
        with open(script) as file:
            python = file.readline()[2:].strip()  # the interpreter its #! names
        out = subprocess.run([python, "-c", PHASES, *places.values()], capture_output=True,
                             text=True, check=True, cwd="/").stdout.split("\n")
        results[tree] = [line.split() for line in out if line]
    print("in-process, medians of 40 calls\n")
    print("| workspace | " + " | ".join(f"{tree}: start scan" for tree in trees)
          + " | this: end check |")
    print("| --- |" + " --- |" * (len(trees) + 1))
    for i, name in enumerate(places):
        cells = [f"{float(results[tree][i][0]):.2f} ms" for tree in trees]
        print(f"| {name} | " + " | ".join(cells) + f" | {float(results['this'][i][1]):.2f} ms |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--against", help="another tree's sandlock, in the same rounds")
    parser.add_argument("--phases", action="store_true", help="the scan and the check alone")
    args = parser.parse_args()
    trees = {"this": args.sandlock, **({"against": args.against} if args.against else {})}
    base = tempfile.mkdtemp(prefix="sandlock-bench-autorun-", dir="/srv" if os.access("/srv", os.W_OK) else None)
    try:
        _measure(args, trees, _workspaces(base))
    finally:
        subprocess.run(["rm", "-rf", base], check=False)
    return 0


def _measure(args: argparse.Namespace, trees: dict[str, str], places: dict[str, str]) -> None:
    if args.phases:
        _phases(trees, places)
    commands = {name: (cwd, ["/bin/true"]) for name, cwd in places.items()}
    commands["10k files, `git add` (index read at the end)"] = (
        places["repository, 10k files"], ["sh", "-c", "echo x >> d0/f0.txt && git add d0/f0.txt"])
    cases = [(tree, name) for tree in trees for name in commands]
    times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    for _ in range(args.rounds):
        random.shuffle(cases)
        for tree, name in cases:
            cwd, command = commands[name]
            times[(tree, name)].append(_time_once([trees[tree], "run", "--", *command], cwd))
    print(f"`sandlock run`, {args.rounds} shuffled rounds, {os.cpu_count()} CPUs\n")
    print("| workspace | " + " | ".join(f"{tree}: median" for tree in trees)
          + (" | this − against (median of rounds) |" if len(trees) > 1 else " |"))
    print("| --- |" + " --- |" * (len(trees) + (len(trees) > 1)))
    for name in commands:
        cells = [f"{statistics.median(times[(tree, name)]) * 1e3:.2f} ms" for tree in trees]
        if len(trees) > 1:
            added = statistics.median(a - b for a, b in zip(times[("this", name)], times[("against", name)]))
            cells.append(f"{added * 1e3:+.2f} ms")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
