#!/usr/bin/env python3
"""Whole-process start-up cost: `sandlock run -- /bin/true` (default policy: a private
network; the same with the host's; a pinned --net-allow, an inspecting --http-allow) vs
bare, vs the interpreter alone and vs bubblewrap; then `Sandbox(policy).run` in a warm process vs `subprocess.run`.

Usage: python bench/startup.py [--runs N] [--sandlock PATH] [--virtual]   (run it with the venv's
python: the interpreter row and the API rows use sys.executable and its sandlock)
Prints Markdown tables (median and p90 wall time per run, ratio to bare) for
docs/performance.md. Each configuration is timed in interleaved rounds so that a
noisy neighbour affects all of them alike. The HTTP row's first run fills the
per-user CA cache (docs/ca.md); the warm-up round does it. --virtual adds the rows
of the machine's view and reproducible runs (--max-memory and --num-cpus' /proc
files, --time-start, --random-seed, --deterministic-dirs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def _time_once(argv: list[str], cwd: str | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True, cwd=cwd)
    return time.perf_counter() - start


def _default_sandlock() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "sandlock")
    return beside if os.path.exists(beside) else shutil.which("sandlock") or "sandlock"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sandlock", default=_default_sandlock())
    parser.add_argument("--virtual", action="store_true",
                        help="also the /proc files and reproducible-run options")
    args = parser.parse_args()

    pin = ["--resolve", "example.test=127.0.0.1"]
    configs = {
        "bare /bin/true": ["/bin/true"],
        "python -c pass": [sys.executable, "-c", "pass"],
        "sandlock run -- /bin/true": [args.sandlock, "run", "--", "/bin/true"],
        # (the default run has a private network: this one the host's, as -r/-w runs)
        "sandlock run --no-net-private-loopback -- /bin/true":
            [args.sandlock, "run", "--no-net-private-loopback", "--", "/bin/true"],
        "sandlock run --net-allow example.test:443 --resolve ... -- /bin/true":
            [args.sandlock, "run", "--net-allow", "example.test:443", *pin, "--", "/bin/true"],
        "sandlock run --http-allow 'GET example.test/*' --resolve ... -- /bin/true":
            [args.sandlock, "run", "--http-allow", "GET example.test/*", *pin, "--", "/bin/true"],
    }
    if args.virtual:
        for options in (["-m", "512M"], ["-m", "512M", "--num-cpus", "1"],
                        ["--time-start", "2000-01-01T00:00:00Z"], ["--random-seed", "42"],
                        ["--deterministic-dirs"],
                        ["--time-start", "2000-01-01T00:00:00Z", "--random-seed", "42",
                         "--deterministic-dirs", "--num-cpus", "1"]):
            configs[f"sandlock run {' '.join(options)} -- /bin/true"] = [
                args.sandlock, "run", *options, "--", "/bin/true"]
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
    _warm_api(args.runs)
    return 0


def _warm_api(runs: int) -> None:
    """Sandbox(policy).run in a process that has run one already, against subprocess.run."""
    from sandlock import Policy, Sandbox

    sandbox = Sandbox(Policy(), quiet=True)
    timings: dict[str, list[float]] = {"Sandbox(Policy()).run": [], "subprocess.run": []}
    for _ in range(3):
        sandbox.run(["/bin/true"])
    for _ in range(runs):
        start = time.perf_counter()
        sandbox.run(["/bin/true"])
        timings["Sandbox(Policy()).run"].append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run(["/bin/true"], check=True)
        timings["subprocess.run"].append(time.perf_counter() - start)
    print("\n| in a warm process | median | p90 |")
    print("| --- | --- | --- |")
    for name, xs in timings.items():
        print(f"| `{name}([\"/bin/true\"])` | {statistics.median(xs) * 1e3:.2f} ms "
              f"| {statistics.quantiles(xs, n=10)[-1] * 1e3:.2f} ms |")


if __name__ == "__main__":
    raise SystemExit(main())
