#!/usr/bin/env python3
"""Pipeline throughput: `head -c SIZE /dev/zero | cat | cat` as three sandboxed stages
(`Pipeline.run`) against the same shell pipeline bare, its output read by Python the
same way (Capture's 64 KiB reads); each with the last stage's output kept (SIZE bytes
in memory, as `result.stdout`) and read but dropped (the last stage's `max_output`
64K: what holding 1 GiB in Python costs is not the pipeline's); and into /dev/null,
which the last stage writes itself (`sh -c 'cat >/dev/null'` sandboxed: the kernel's
pipes alone, no byte read by Python). Then the fixed cost of a pipeline: three
`/bin/true` stages against `sh -c 'true | true | true'`.

Usage: python bench/pipeline.py [--runs N] [--size BYTES]   (with the venv's python)
Medians of interleaved rounds (each configuration once per round, every other round
in reverse order, after a warm-up round), Markdown tables for docs/performance.md.
Throughput is SIZE over the whole run's wall time, start and exit included; GB/s are
10^9 bytes per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from sandlock import Pipeline, Policy, Sandbox


def _drain(fd: int, keep: bool) -> int:
    """Read ``fd`` to its end as Capture does (64 KiB reads; kept and joined, or
    dropped): the length."""
    chunks, size = [], 0
    while chunk := os.read(fd, 65536):
        size += len(chunk)
        if keep:
            chunks.append(chunk)
    return len(b"".join(chunks)) if keep else size


def _bare_read(shell: str, keep: bool) -> int:
    process = subprocess.Popen(["sh", "-c", shell], stdout=subprocess.PIPE)
    size = _drain(process.stdout.fileno(), keep)
    process.stdout.close()
    process.wait()
    return size


def _bare_discarded(shell: str) -> int:
    subprocess.run(["sh", "-c", shell + " >/dev/null"], check=True)
    return 0


def _timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


def _rounds(cases: dict[str, object], runs: int) -> dict[str, list[float]]:
    """Interleaved, in reverse order every other round: a case that allocates 1 GiB
    right after one that freed as much is faster (here, a VM: memory freed a while
    ago has gone back to the host and faults in again slowly), so no case may always
    come first."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for run in cases.values():  # warm-up: caches, the first fork of a big heap
        run()  # type: ignore[operator]
    order = list(cases.items())
    for _ in range(runs):
        for name, run in order:
            times[name].append(_timed(run))
        order.reverse()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--size", type=int, default=1 << 30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        sandbox = Sandbox(Policy(cwd=workdir), quiet=True)
        dropping = Sandbox(Policy(cwd=workdir, max_output="64K"), quiet=True)
        shell = f"head -c {args.size} /dev/zero | cat | cat"
        stages = sandbox.cmd(["head", "-c", str(args.size), "/dev/zero"]) | sandbox.cmd(["cat"])
        kept, dropped = stages | sandbox.cmd(["cat"]), stages | dropping.cmd(["cat"])
        nulled = stages | sandbox.cmd(["sh", "-c", "cat >/dev/null"])

        def sandboxed(pipeline: Pipeline, size: int) -> None:
            result = pipeline.run()
            assert result.success and len(result.stdout) == size, result.exit_codes

        flow = _rounds({
            "sandlock `Pipeline.run`, stdout kept": lambda: sandboxed(kept, args.size),
            "bare `sh -c`, stdout kept by Python": lambda: _bare_read(shell, keep=True),
            "sandlock `Pipeline.run`, stdout read, dropped past `max_output` 64K":
                lambda: sandboxed(dropped, 65536),
            "bare `sh -c`, stdout read by Python, dropped": lambda: _bare_read(shell, keep=False),
            "sandlock `Pipeline.run`, the last stage writing to /dev/null": lambda: sandboxed(nulled, 0),
            "bare `sh -c`, into /dev/null": lambda: _bare_discarded(shell),
        }, args.runs)
        trues = sandbox.cmd(["/bin/true"]) | sandbox.cmd(["/bin/true"]) | sandbox.cmd(["/bin/true"])
        fixed = _rounds({
            "sandlock `Pipeline.run`, 3 × `/bin/true`": trues.run,
            "`subprocess.run(['sh', '-c', 'true | true | true'])`":
                lambda: subprocess.run(["sh", "-c", "true | true | true"], check=True),
        }, args.runs * 5)
    print(f"{args.runs} rounds, {args.size} bytes, {os.cpu_count()} CPUs, Linux {os.uname().release}\n")
    print("| pipeline | median | throughput |")
    print("| --- | --- | --- |")
    for name, xs in flow.items():
        median = statistics.median(xs)
        print(f"| {name} | {median:.3f} s | {args.size / median / 1e9:.2f} GB/s |")
    print("\n| fixed cost | median | p90 |")
    print("| --- | --- | --- |")
    for name, xs in fixed.items():
        print(f"| {name} | {statistics.median(xs) * 1e3:.1f} ms "
              f"| {statistics.quantiles(xs, n=10)[-1] * 1e3:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
