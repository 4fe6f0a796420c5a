#!/usr/bin/env python3
"""Items per second through sandlock.ray's SandboxPool, against the same work unconfined.

* ray tasks: each item a plain Ray task (num_cpus=1), no confinement;
* ray actors: each item a method call on one of `--actors` plain Ray actors (what the
  pool is, without the sandbox);
* pool: SandboxPool(Policy(), size=`--actors`).map: each item in a clone of an actor's
  sandbox;
* Sandbox.fork: on this machine alone, `Sandbox(policy, init_fn, work_fn).fork(N)`:
  N clones at once, no Ray.

An item spins the CPU for `--ms` milliseconds (process time). One local Ray of
`--cpus` CPUs, started once; the cases run interleaved, `--runs` rounds, the median
wall time of each. Per-item overhead: wall time x workers / items - the item's own
time. Each round runs the cases in another order (rotated). Usage: python
bench/ray.py [--runs R] [--items N] [--ms 1,10,50]
"""

from __future__ import annotations

import os
import sys

# This file is named ray.py: its directory must not shadow the ray package.
sys.path[:] = [path for path in sys.path if os.path.abspath(path or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import ray  # noqa: E402

from sandlock import Policy, Sandbox  # noqa: E402
from sandlock.ray import SandboxPool  # noqa: E402


def spin(seconds: float) -> float:
    """The item: `seconds` of CPU."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


@ray.remote(num_cpus=1)
def spin_task(seconds: float) -> float:
    return spin(seconds)


@ray.remote(num_cpus=0)  # (as the pool's: the tasks' case needs the CPUs free)
class Plain:
    def run(self, seconds: float) -> float:
        return spin(seconds)


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def cases(items: int, seconds: float, actors: list, pool: SandboxPool) -> dict:
    def tasks() -> None:
        ray.get([spin_task.remote(seconds) for _ in range(items)])

    def plain_actors() -> None:
        ray.get([actors[n % len(actors)].run.remote(seconds) for n in range(items)])

    def confined() -> None:
        results = list(pool.map(spin, [seconds] * items))
        assert all(result.success for result in results), results[0]

    def forks() -> None:
        clones = Sandbox(Policy(), init_fn=lambda: None,
                         work_fn=lambda _clone: spin(seconds)).fork(items)
        assert all(clone.success for clone in clones)

    return {"ray tasks": tasks, "ray actors": plain_actors, "pool": confined,
            "Sandbox.fork": forks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--ms", default="1,10,50", help="the items' CPU time, comma-separated")
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    workers = args.cpus
    actors = [Plain.remote() for _ in range(workers)]
    ray.get([actor.run.remote(0) for actor in actors])
    with SandboxPool(Policy(), size=workers, num_cpus=0) as pool:
        list(pool.map(spin, [0.0] * 20))  # (warm: the actors' first calls)
        print(f"{args.items} items, {workers} workers, medians of {args.runs} interleaved rounds\n")
        print("| item CPU | case | wall | items/s | overhead per item | vs ray tasks |")
        print("| --- | --- | --- | --- | --- | --- |")
        for ms in (float(value) for value in args.ms.split(",")):
            seconds = ms / 1000
            runs = cases(args.items, seconds, actors, pool)
            times: dict[str, list[float]] = {name: [] for name in runs}
            names = list(runs)
            for round_ in range(args.runs):
                # Each round in another order: a case that always ran after the same
                # one measured ~2% apart from an identical one (the machine's state).
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    times[name].append(timed(runs[name]))
            medians = {name: statistics.median(values) for name, values in times.items()}
            base = medians["ray tasks"]
            for name, wall in medians.items():
                overhead = wall * workers / args.items - seconds
                print(f"| {ms:g} ms | {name} | {wall:.2f} s | {args.items / wall:.0f} | "
                      f"{overhead * 1000:.2f} ms | {wall / base - 1:+.0%} |")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
