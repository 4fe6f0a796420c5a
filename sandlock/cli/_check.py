"""`sandlock check`: what the kernel offers and what sandlock will use."""

from __future__ import annotations

import os

from ..confinement import DEFAULT_TASK_CAP
from ..kernel import PID_MAX, probe, protection_level


def main() -> int:
    features = probe()
    width = max(len(f.name) for f in features)
    print(f"{'feature':<{width}}  {'status':<7}  {'kernel':<26}  sandlock uses it for")
    for feature in features:
        status = "ok" if feature.available else ("MISSING" if feature.required else "absent")
        print(f"{feature.name:<{width}}  {status:<7}  {feature.detail:<26}  {feature.use}")
    level, meaning = protection_level(features)
    print(f"\nprotection level: {level} ({meaning})")
    _limits(features)
    missing = [f.name for f in features if f.required and not f.available]
    if missing:
        print(f"sandlock run cannot confine commands here: missing {', '.join(missing)}")
        return 1
    print("\nall required features are present")
    return 0


def _limits(features: list) -> None:
    """Which mechanism holds each resource limit here (docs/usage.md): no cgroups."""
    available = {feature.name: feature.available for feature in features}
    namespaces = available.get("user namespaces", False)
    notify = available.get("seccomp user notification", False)
    pid_max = available.get(PID_MAX, False)
    cpus = os.sched_getaffinity(0)
    sock_diag = _sock_diag()
    rows = (
        ("--max-memory", namespaces and sock_diag,
         "sandlock's watch, no cgroup: summed every 10 ms in the sandbox's own /proc, "
         "with its private /tmp's files and its memfds; its sockets' buffers every 100 ms "
         f"(sock_diag: {'ok' if sock_diag else 'MISSING'}); memfds refused in SCM_RIGHTS "
         "(needs its namespaces)"),
        ("--max-processes", namespaces and notify, "fork-like calls supervised, processes "
                                                   "counted in the sandbox's own /proc"),
        ("(without -P)", namespaces and (os.geteuid() != 0 or pid_max),
         f"at most {DEFAULT_TASK_CAP} tasks, threads included: RLIMIT_NPROC in the "
         "sandbox's user namespace; for root, whom it exempts, the namespace's pid_max"
         + ("" if pid_max else " (not on this kernel: Linux 6.14+)")),
        ("--max-open-files", True, "RLIMIT_NOFILE, hard"),
        ("--max-file-size", True, "RLIMIT_FSIZE, hard"),
        ("--cpu-cores", True, f"CPU affinity (sandlock may use {len(cpus)} CPU(s))"),
        ("--max-output", True, "sandlock reads the command's stdout and stderr; the "
                               "command has no terminal to write to (own session, stdin "
                               "read-only, /dev/tty and /dev/pts not writable)"),
        ("--max-cpu", namespaces, "the sandbox's CPU time, all its processes stopped while "
                                  "over its share (SIGSTOP/SIGCONT)"),
    )
    print("\nresource limits (without cgroups):")
    for option, ok, how in rows:
        print(f"  {option:<17} {'ok' if ok else 'no':<3} {how}")


def _sock_diag() -> bool:
    """The kernel answers the memory watch's questions about sockets (sock_diag)."""
    from ..limits import probe_sockets

    try:
        probe_sockets()
    except OSError:
        return False
    return True
