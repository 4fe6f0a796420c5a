#!/usr/bin/env python3
"""What the copy-on-write workspace (--workdir) costs.

* start-up: `sandlock run --workdir D -- /bin/true` against `sandlock run --cwd D`;
* a workload: untar N files into D, then `git status` (D a git work tree), bare, in a
  plain sandlock run, and in a --workdir run whose changes are discarded;
* commit: N changed files applied to D (the commit of a kept workspace, timed in
  this process, and `sandlock workspace commit` as a whole command).

Usage: python bench/cow.py [--runs R] [--files N]
Medians of interleaved runs, whole processes; a Markdown table for docs/performance.md.
Run from a directory outside /tmp with PATH=/usr/bin:/bin.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SANDLOCK = [sys.executable, "-m", "sandlock"]


def _timed(argv: list[str], **kwargs: object) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - start


def _interleaved(cases: dict[str, list[str]], runs: int, before=None,
                 stdin: str | None = None) -> dict[str, float]:
    """``stdin``: a file each run reads (the tarball: a sandbox's /var/tmp is its own)."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            if before is not None:
                before()
            if stdin is None:
                times[name].append(_timed(argv))
                continue
            with open(stdin, "rb") as given:
                times[name].append(_timed(argv, stdin=given))
    return {name: statistics.median(values) for name, values in times.items()}


def _make_tarball(base: str, files: int) -> str:
    source = os.path.join(base, "src")
    for index in range(files):
        directory = os.path.join(source, f"d{index // 100:03d}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"f{index:05d}.txt"), "w") as f:
            f.write(f"file {index}\n" * 4)
    tarball = os.path.join(base, "src.tar")
    subprocess.run(["tar", "-cf", tarball, "-C", source, "."], check=True)
    return tarball


def _project(base: str) -> str:
    project = tempfile.mkdtemp(prefix="proj-", dir=base)
    subprocess.run(["git", "init", "-q", project], check=True)
    return project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=10000)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="sandlock-bench-cow-", dir="/var/tmp")
    state = tempfile.mkdtemp(prefix="sandlock-bench-state-", dir=os.path.expanduser("~"))
    os.environ["XDG_STATE_HOME"] = state
    try:
        project = _project(base)
        startup = _interleaved({
            "plain": [*SANDLOCK, "run", "--cwd", project, "--", "/bin/true"],
            "workdir": [*SANDLOCK, "run", "--workdir", project, "--", "/bin/true"],
        }, args.runs * 3)
        tarball = _make_tarball(base, args.files)
        work = "tar -xf - && git status --porcelain | wc -l"

        def clean() -> None:
            shutil.rmtree(project)
            os.mkdir(project)
            subprocess.run(["git", "init", "-q", project], check=True)

        workload = _interleaved({
            "bare": ["sh", "-c", f"cd {project} && {work}"],
            "plain": [*SANDLOCK, "run", "--cwd", project, "--", "sh", "-c", work],
            "workdir": [*SANDLOCK, "run", "--workdir", project, "--on-exit", "abort", "--",
                        "sh", "-c", work],
        }, args.runs, before=clean, stdin=tarball)
        commit_in_process, commit_command = _commits(project, work, tarball, args.runs)
        modify = ("/usr/bin/python3 -c \"import os; [open(os.path.join(r, f), 'a').write('x') "
                  "for r, _, fs in os.walk('.') for f in fs if f.endswith('.txt')]\"")
        commit_modified, _ = _commits(project, modify, tarball, args.runs, extracted=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    print("| figure | median | ratio |\n| --- | --- | --- |")
    print(f"| `run --cwd D -- /bin/true` | {startup['plain'] * 1e3:.1f} ms | 1.00 |")
    print(f"| `run --workdir D -- /bin/true` | {startup['workdir'] * 1e3:.1f} ms | "
          f"+{(startup['workdir'] - startup['plain']) * 1e3:.1f} ms |")
    print(f"| untar {args.files} files + git status, bare | {workload['bare'] * 1e3:.0f} ms | "
          f"{workload['bare'] / workload['plain']:.2f} |")
    print(f"| the same, plain sandlock run | {workload['plain'] * 1e3:.0f} ms | 1.00 |")
    print(f"| the same, --workdir (discarded) | {workload['workdir'] * 1e3:.0f} ms | "
          f"{workload['workdir'] / workload['plain']:.2f} |")
    print(f"| commit of {args.files} new files (cow.commit) | {commit_in_process * 1e3:.0f} ms | |")
    print(f"| commit of {args.files} modified files (cow.commit) | {commit_modified * 1e3:.0f} ms | |")
    print(f"| `sandlock workspace commit ID`, whole command | {commit_command * 1e3:.0f} ms | |")
    return 0


def _commits(project: str, work: str, tarball: str, runs: int,
             extracted: bool = False) -> tuple[float, float]:
    """(median of cow.commit, of `sandlock workspace commit`) for what ``work`` changes;
    ``extracted``: the tarball is in the project before the run."""
    from sandlock.confinement import workspace_store
    from sandlock.cow import Workspace, commit

    root = workspace_store(os.environ, os.path.expanduser("~"))
    in_process, command = [], []
    for index in range(runs):
        shutil.rmtree(project)
        os.mkdir(project)
        if extracted:
            subprocess.run(["tar", "-xf", tarball, "-C", project], check=True)
        with open(tarball, "rb") as given:
            subprocess.run([*SANDLOCK, "run", "--workdir", project, "--on-exit", "keep", "--",
                            "sh", "-c", work], check=True, capture_output=True, stdin=given)
        (ident,) = os.listdir(root)
        if index % 2:
            command.append(_timed([*SANDLOCK, "workspace", "commit", ident], stderr=subprocess.DEVNULL))
            continue
        workspace = Workspace.open(root, ident)
        start = time.perf_counter()
        commit(workspace.upper, workspace.directory, workspace.since_ns)
        in_process.append(time.perf_counter() - start)
        workspace.remove()
    return statistics.median(in_process), statistics.median(command)


if __name__ == "__main__":
    raise SystemExit(main())
