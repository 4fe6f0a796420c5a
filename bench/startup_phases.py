#!/usr/bin/env python3
"""Where a run's start-up goes, phase by phase, for a plain run and under the limits.

Each run is `sandlock run [LIMITS] -- /bin/true` in a fresh interpreter, as the CLI
runs it, with timers wrapped around sandlock's own steps (private names: this bench
follows the code, update it with the code):

  parse     interpreter start to the supervision made (imports, options, policy)
  fork      the supervision made to the keeper forked (os.fork's return in sandlock)
  sandbox   the fork to the command's listener taken (the keeper, init and mounts,
            the command's confinement)
  listener  Supervision.take_listener (the command waits for its go meanwhile)
  exec      the go to spawn's return (the command's exec)
  watch     spawn's return to the wait for the end (the watches started)
  end       the wait to its return (the command's run and exit, the reports)

Usage: python bench/startup_phases.py [--rounds N] [--python PATH]
Medians over shuffled rounds, in milliseconds; run with a regular install's python
and `PATH=/usr/bin:/bin`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys

LIMITS = {"plain": [], "-P 50": ["-P", "50"], "-m 1G": ["-m", "1G"],
          "-P 50 -m 1G": ["-P", "50", "-m", "1G"]}
PHASES = ("parse", "fork", "sandbox", "listener", "exec", "watch", "end")

# Runs in the measured interpreter: marks each step's start and end, prints them.
_TIMED_RUN = r"""
import os, sys, time
T0 = time.perf_counter()
import sandlock.process._process as process
import sandlock.api._launching as launching
import sandlock.process._supervision as supervision
marks = {}
def timed(owner, name, label):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        marks.setdefault(label + ">", (time.perf_counter() - T0) * 1e3)
        try:
            return original(*args, **kwargs)
        finally:
            marks.setdefault(label + "<", (time.perf_counter() - T0) * 1e3)
    setattr(owner, name, wrapper)
timed(supervision.Supervision, "__init__", "supervision")
timed(os, "fork", "fork")
timed(supervision.Supervision, "take_listener", "listener")
timed(launching, "spawn", "spawn")
timed(process.SandboxedProcess, "wait", "wait")
from sandlock.cli import main
me = os.getpid()
try:
    main(sys.argv[1:])
finally:
    if os.getpid() == me:
        print(" ".join(f"{name}={value:.3f}" for name, value in marks.items()), file=sys.stderr)
"""


def _phases(marks: dict[str, float]) -> dict[str, float]:
    take_start = marks.get("listener>", marks["spawn<"])
    take_end = marks.get("listener<", take_start)
    return {
        "parse": marks["supervision<"],
        "fork": marks["fork<"] - marks["supervision<"],
        "sandbox": take_start - marks["fork<"],
        "listener": take_end - take_start,
        "exec": marks["spawn<"] - take_end,
        "watch": marks["wait>"] - marks["spawn<"],
        "end": marks["wait<"] - marks["wait>"],
    }


def _run_once(python: str, limits: list[str]) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([python, "-c", _TIMED_RUN, "run", *limits, "--", "/bin/true"],
                            capture_output=True, text=True, env=env, check=True)
    line = result.stderr.strip().splitlines()[-1]
    marks = {name: float(value) for name, value in
             (field.split("=") for field in line.split())}
    return _phases(marks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    seen: dict[str, dict[str, list[float]]] = {
        name: {phase: [] for phase in PHASES} for name in LIMITS}
    names = list(LIMITS)
    for _ in range(args.rounds):
        random.shuffle(names)
        for name in names:
            for phase, value in _run_once(args.python, LIMITS[name]).items():
                seen[name][phase].append(value)
    print(f"{args.rounds} shuffled rounds, medians in ms\n")
    print("| phase | " + " | ".join(LIMITS) + " |")
    print("| --- |" + " --- |" * len(LIMITS))
    for phase in (*PHASES, "total"):
        cells = []
        for name in LIMITS:
            if phase == "total":
                value = sum(statistics.median(seen[name][p]) for p in PHASES)
            else:
                value = statistics.median(seen[name][phase])
            cells.append(f"{value:.2f}")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
