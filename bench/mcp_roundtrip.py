#!/usr/bin/env python3
"""`sandlock mcp` (not bench/mcp.py: that name would shadow the SDK's `mcp` for the
script itself): a run_command("true") round trip, as a client sees it (the SDK's
stdio client: request out, result back), vs the whole `sandlock run -- true` process;
and the server's parts: the vetting alone, and `Sandbox(policy).run(["bash", "-c",
"true"])` in a warm process. Goal (issue 39): the round trip within 10 ms of
`sandlock run -- true`.

Usage: python bench/mcp_roundtrip.py [--runs N]   (the venv's python, with the extra `mcp`)
Prints a Markdown table (median and p90 per call) for docs/performance.md; the
configurations are timed in interleaved rounds, in one temporary project directory
(the default workspace of each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SANDLOCK = os.path.join(os.path.dirname(sys.executable), "sandlock")


def _row(name: str, times: list[float], base: float | None = None) -> str:
    median = statistics.median(times) * 1000
    p90 = statistics.quantiles(times, n=10)[-1] * 1000
    extra = f"{median - base:+.1f} ms" if base is not None else ""
    return f"| {name} | {median:.1f} ms | {p90:.1f} ms | {extra} |"


async def measure(runs: int, project: str) -> dict[str, list[float]]:
    from sandlock import Policy, Sandbox
    from sandlock.shellpolicy import decide

    times: dict[str, list[float]] = {"call": [], "cli": [], "api": [], "vet": []}
    params = StdioServerParameters(command=SANDLOCK, args=["mcp", "-q"], cwd=project)
    sandbox = Sandbox(Policy(cwd=project), quiet=True)
    async with stdio_client(params, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for round_ in range(runs + 3):  # (3 warm-up rounds)
                start = time.perf_counter()
                result = await session.call_tool("run_command", {"command": "true"})
                call = time.perf_counter() - start
                assert not result.isError and result.structuredContent["exit_code"] == 0
                start = time.perf_counter()
                subprocess.run([SANDLOCK, "run", "--", "true"], cwd=project, check=True,
                               stdin=subprocess.DEVNULL)
                cli = time.perf_counter() - start
                start = time.perf_counter()
                assert sandbox.run(["bash", "-c", "true"]).exit_code == 0
                api = time.perf_counter() - start
                start = time.perf_counter()
                assert decide("true").allowed
                vet = time.perf_counter() - start
                if round_ >= 3:
                    for name, value in (("call", call), ("cli", cli), ("api", api), ("vet", vet)):
                        times[name].append(value)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as project:
        times = anyio.run(measure, args.runs, project)
    base = statistics.median(times["cli"]) * 1000
    print(f"{args.runs} interleaved rounds\n")
    print("| what | median | p90 | vs `sandlock run -- true` |")
    print("| --- | --- | --- | --- |")
    print(_row("`sandlock run -- true` (whole process)", times["cli"]))
    print(_row("`run_command(\"true\")` round trip (SDK client, stdio)", times["call"], base))
    print(_row("of which: `Sandbox(Policy()).run([\"bash\", \"-c\", \"true\"])`, warm", times["api"], base))
    print(_row("of which: vetting (`shellpolicy.decide(\"true\")`)", times["vet"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
