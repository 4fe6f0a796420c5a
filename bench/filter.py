#!/usr/bin/env python3
"""What the seccomp filter costs the syscalls the command makes.

C loops of N calls run bare and under `sandlock run` (and, with `--against PATH`,
another tree's `sandlock`) in interleaved rounds; the added time per call is the median
over rounds of (sandboxed - bare) / N. Needs gcc. Two loops:

* getppid(): a syscall with no rule, the common case. The kernel's seccomp action
  cache (Linux 5.11+) finds at load time that the filter allows it whatever its
  arguments, and skips the filter for it: what is left is seccomp's own cost.
* openat(/dev/null, O_RDONLY) + close(): openat has a rule that reads its flags (a
  set-id mode refused when it creates), so the filter runs on every call: the search
  for the number, then the rule.

Usage: python bench/filter.py [--rounds N] [--calls N] [--sandlock PATH] [--against PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile

from startup import _default_sandlock, _time_once  # bench/ is the script's directory

LOOP = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    if (strcmp(argv[2], "openat") == 0)
        for (long i = 0; i < n; i++) close(openat(AT_FDCWD, "/dev/null", O_RDONLY));
    else
        for (long i = 0; i < n; i++) syscall(SYS_getppid);
    return 0;
}
"""
LOOPS = {"getppid()": ("getppid", 1), "openat() + close()": ("openat", 4)}  # (argv, calls / N)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--against")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sandlock-bench-filter-", dir=os.path.expanduser("~"))
    try:
        source = os.path.join(work, "loop.c")
        with open(source, "w") as f:
            f.write(LOOP)
        program = os.path.join(work, "loop")
        subprocess.run(["gcc", "-O2", "-o", program, source], check=True)
        runners = {"bare": [], "sandlock": [args.sandlock, "run", "-r", "/", "--"]}
        if args.against:
            runners["against"] = [args.against, "run", "-r", "/", "--"]
        times = {(loop, name): [] for loop in LOOPS for name in runners}
        for _ in range(args.rounds):
            for loop, (which, fraction) in LOOPS.items():
                calls = args.calls // fraction
                for name, prefix in runners.items():
                    times[(loop, name)].append(_time_once([*prefix, program, str(calls), which], work))
    finally:
        shutil.rmtree(work)
    print(f"{args.calls} calls a loop (openat: a quarter), {args.rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs\n")
    print("| loop | runner | median | added per iteration |")
    print("| --- | --- | --- | --- |")
    for loop, (_, fraction) in LOOPS.items():
        calls = args.calls // fraction
        for name in runners:
            own, bare = times[(loop, name)], times[(loop, "bare")]
            added = statistics.median((a - b) / calls for a, b in zip(own, bare))
            cell = "—" if name == "bare" else f"{added * 1e9:.1f} ns"
            print(f"| {loop} | {name} | {statistics.median(own) * 1e3:.1f} ms | {cell} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
