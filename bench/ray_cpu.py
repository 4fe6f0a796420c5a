#!/usr/bin/env python3
"""Where a SandboxPool item's CPU goes (docs/performance.md, "Where an item's time goes").

* pool: a map of `--items` items of `--ms` through a pool of 2 actors on a local Ray
  of 2 CPUs; CPU per item of each process group (from /proc/PID/stat: the sandbox's
  processes, its host, the actors, this driver, Ray's own);
* alone: one sandbox's host in this process, serial calls: CPU per item of the
  resident (its forks included) and of its clones;
* floor: a plain Python process of the resident's size forking a child per item that
  unpickles the work, runs it and sends the result back through a pipe.

Usage: python bench/ray_cpu.py [--items N] [--ms M]
"""

from __future__ import annotations

import os
import sys

# This directory must not shadow the ray package (bench/ray.py).
sys.path[:] = [path for path in sys.path if os.path.abspath(path or ".") != os.path.dirname(
    os.path.abspath(__file__))]

import argparse  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def spin(seconds: float) -> float:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def processes() -> dict[int, tuple[int, str, int, int]]:
    """pid -> (parent, command line, own ticks, reaped children's ticks)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat, open(f"/proc/{entry}/cmdline", "rb") as cmd:
                fields = stat.read().rsplit(")", 1)[1].split()
                line = cmd.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), line, int(fields[11]) + int(fields[12]),
                             int(fields[13]) + int(fields[14]))
    return table


def group(pid: int, table: dict) -> str | None:
    parent, line = table[pid][:2]
    if pid == os.getpid():
        return "driver"
    if "sandlock.ray._host" in line:
        return "host"
    ancestors = [parent, table.get(parent, (0,))[0]]
    if any("sandlock.ray._host" in table.get(a, (0, ""))[1] for a in ancestors):
        return "sandbox"
    if "SandboxActor" in line:
        return "actor"
    if "ray" in line:
        return "ray"
    return None


def pool_case(items: int, seconds: float) -> None:
    import ray

    from sandlock import Policy
    from sandlock.ray import SandboxPool

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with SandboxPool(Policy(), size=2, num_cpus=0) as pool:
        list(pool.map(spin, [0.0] * 20))
        before = processes()
        start = time.perf_counter()
        results = list(pool.map(spin, [seconds] * items))
        wall = time.perf_counter() - start
        after = processes()
    ray.shutdown()
    assert all(result.success for result in results), results[0]
    spent: dict[str, int] = {}
    for pid, (_parent, _line, own, reaped) in after.items():
        name = group(pid, after)
        if name is None:
            continue
        own0, reaped0 = before.get(pid, (0, "", 0, 0))[2:]
        spent[name] = spent.get(name, 0) + own - own0 + (reaped - reaped0 if name == "sandbox" else 0)
    print(f"pool: {items} items of {seconds * 1000:g} ms, wall {wall / items * 1000:.2f} ms per item")
    for name, ticks in sorted(spent.items()):
        print(f"  {name:8} {ticks / TICK / items * 1000:.2f} ms of CPU per item")


def alone_case(items: int) -> None:
    from ray import cloudpickle

    from sandlock import Policy
    from sandlock.ray._host import SandboxHost

    payload = cloudpickle.dumps((spin, 0.0))
    host = SandboxHost(Policy(), None, None, True)
    try:
        for _ in range(10):
            host.run(0, payload, None, None, None, None)
        resident = max(_children(os.getpid()))  # (the newest of its tree: keeper, init, resident)
        own0, reaped0 = processes()[resident][2:]
        for index in range(items):
            host.run(index, payload, None, None, None, None)
        own, reaped = processes()[resident][2:]
    finally:
        host.close()
    print(f"alone: resident {(own - own0) / TICK / items * 1000:.2f} ms, clones "
          f"{(reaped - reaped0) / TICK / items * 1000:.2f} ms of CPU per item")


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid``."""
    found, table = set(), processes()
    frontier = {pid}
    while frontier:
        frontier = {child for child, row in table.items() if row[0] in frontier} - found
        found |= frontier
    return found


def floor_case(items: int) -> None:
    from ray import cloudpickle

    payload = cloudpickle.dumps((spin, 0.0))

    def one() -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            work, item = pickle.loads(payload)
            os.write(write, pickle.dumps(work(item)))
            os._exit(0)
        os.close(write)
        os.read(read, 1 << 16)
        os.close(read)
        os.waitpid(pid, 0)

    for _ in range(20):
        one()
    start = os.times()
    for _ in range(items):
        one()
    end = os.times()
    cpu = sum(getattr(end, k) - getattr(start, k)
              for k in ("user", "system", "children_user", "children_system"))
    print(f"floor: a plain fork per item, {cpu / items * 1000:.2f} ms of CPU per item")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--ms", type=float, default=10)
    parser.add_argument("--case", choices=("floor", "alone", "pool"))
    args = parser.parse_args()
    if args.case is None:  # each in a process of its own: the pool's imports Ray, whose
        for case in ("floor", "alone", "pool"):  # memory would weigh on the others' forks
            subprocess.run([sys.executable, __file__, "--case", case, "--items",
                            str(args.items), "--ms", str(args.ms)], check=True)
        return 0
    if args.case != "pool":
        from sandlock.ray._host import _cloudpickle_alone  # as a host: Ray's cloudpickle alone

        _cloudpickle_alone()
    {"floor": lambda: floor_case(args.items), "alone": lambda: alone_case(args.items),
     "pool": lambda: pool_case(args.items, args.ms / 1000)}[args.case]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
