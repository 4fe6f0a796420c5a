#!/usr/bin/env python3
"""The floor under `sandlock run -- /bin/true`: the kernel work a run of the default
policy does, done by the smallest Python launcher that can do it, at three depths.

Usage: python bench/startup_floor.py [--runs N] [--sandlock PATH]   (the venv's python)

1. plain: fork a keeper, which forks an init, which forks the command and execs it;
2. + namespaces: the keeper unshares user, PID and mount namespaces (uid/gid maps),
   init makes mounts private and mounts a /tmp, a procfs and 8 masks over it, as
   sandlock's init does for the default workspace;
3. + confinement: the command sets no_new_privs, applies a Landlock ruleset of 20
   path rules, loads a seccomp filter with a notification listener, and its parent
   takes the listener with pidfd_getfd (sandlock's listener handoff) before it execs.

Nothing of sandlock is imported: this is what any Python launcher pays for the same
protection (os and ctypes only). Prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

LAUNCHER = r"""
import ctypes, os, struct, sys
depth = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def check(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result

def namespaces():
    uid, gid = os.getuid(), os.getgid()
    check(libc.unshare(0x10000000 | 0x20000000 | 0x20000))  # NEWUSER | NEWPID | NEWNS
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)

def mounts():
    mount = libc.mount
    check(mount(None, b"/", None, 0x4000 | 0x40000, None))  # MS_REC | MS_PRIVATE
    check(mount(b"tmpfs", b"/tmp", b"tmpfs", 0x2 | 0x4, b"mode=1777"))  # NOSUID | NODEV
    check(mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None))  # | NOEXEC
    for path in (b"/proc/kcore", b"/proc/keys", b"/proc/timer_list", b"/proc/sched_debug",
                 b"/proc/sysrq-trigger", b"/proc/kallsyms", b"/proc/kmsg", b"/proc/latency_stats"):
        if os.path.exists(path):
            check(mount(b"/dev/null", path, None, 0x1000, None))  # MS_BIND

PATHS = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt", "/var/lib", "/run",
         "/sys", "/proc", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty",
         "/dev/pts", "/dev/shm", "/tmp", os.getcwd()]

def landlock():
    handled = (1 << 16) - 1  # every file system right of ABI 5-7
    attr = struct.pack("QQQ", handled, 0, 0)
    ruleset = check(libc.syscall(444, attr, len(attr), 0))
    for path in PATHS:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rights = handled if os.path.isdir(path) else handled & 0x7  # files: file rights only
        rule = struct.pack("=Qi", rights, fd)
        check(libc.syscall(445, ruleset, 1, rule, 0))
        os.close(fd)
    check(libc.syscall(446, ruleset, 0))
    os.close(ruleset)

def seccomp_listener():
    arch, nr = struct.pack("HBBI", 0x20, 0, 0, 4), struct.pack("HBBI", 0x20, 0, 0, 0)
    program = b"".join([arch, struct.pack("HBBI", 0x15, 1, 0, 0xC000003E),  # x86_64?
                        struct.pack("HBBI", 0x06, 0, 0, 0x80000000), nr,  # else kill
                        struct.pack("HBBI", 0x15, 0, 1, 42),  # connect:
                        struct.pack("HBBI", 0x06, 0, 0, 0x7FC00000),  # notify
                        struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)])  # else allow
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    check(libc.prctl(38, 1, 0, 0, 0))  # PR_SET_NO_NEW_PRIVS
    return check(libc.syscall(317, 1, 8, fprog))  # SET_MODE_FILTER, NEW_LISTENER

def command(number_out, go_in):
    if depth >= 3:
        landlock()
        os.write(number_out, str(seccomp_listener()).encode())
        os.read(go_in, 1)  # the parent has its copy
    os.execv("/bin/true", ["/bin/true"])

keeper = os.fork()
if keeper == 0:
    if depth >= 2:
        namespaces()
    init = os.fork()
    if init == 0:
        if depth >= 2:
            mounts()
        (number_in, number_out), (go_in, go_out) = os.pipe(), os.pipe()
        child = os.fork()
        if child == 0:
            command(number_out, go_in)
        if depth >= 3:
            number = int(os.read(number_in, 16))
            pidfd = check(libc.syscall(434, child, 0))  # pidfd_open
            os.close(check(libc.syscall(438, pidfd, number, 0)))  # pidfd_getfd
            os.write(go_out, b"g")
        os.waitpid(child, 0)
        os._exit(0)
    os.waitpid(init, 0)
    os._exit(0)
os.waitpid(keeper, 0)
"""

DEPTHS = {1: "fork, fork, fork, exec", 2: "+ user/PID/mount namespaces, /tmp, procfs, 8 masks",
          3: "+ no_new_privs, Landlock (20 rules), seccomp listener handed to the parent"}


def _time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sandlock", default=os.path.join(os.path.dirname(sys.executable),
                                                           "sandlock"))
    args = parser.parse_args()
    configs = {"bare /bin/true": ["/bin/true"], "python -c pass": [sys.executable, "-c", "pass"]}
    for depth, what in DEPTHS.items():
        configs[f"floor {depth}: {what}"] = [sys.executable, "-c", LAUNCHER, str(depth)]
    if os.path.exists(args.sandlock) or shutil.which(args.sandlock):
        configs["`sandlock run -- /bin/true`"] = [args.sandlock, "run", "--", "/bin/true"]
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for argv in configs.values():  # warm caches (and check that each works)
        _time_once(argv)
    for _ in range(args.runs):
        for name, argv in configs.items():
            samples[name].append(_time_once(argv))
    print(f"{args.runs} runs each, interleaved, {os.cpu_count()} CPUs, Linux {os.uname().release}\n")
    print("| command | median | p90 |")
    print("| --- | --- | --- |")
    for name, values in samples.items():
        values.sort()
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        print(f"| {name} | {statistics.median(values) * 1e3:.2f} ms | {p90 * 1e3:.2f} ms |")
    _warm(args.runs)
    return 0


def _warm(runs: int) -> None:
    """The same chains from this (warm) interpreter, as ``Sandbox.run`` makes them."""
    setup, chain = LAUNCHER.split("keeper = os.fork()", 1)
    rows: dict[str, object] = {"`subprocess.run([\"/bin/true\"])`":
                               lambda: subprocess.run(["/bin/true"], check=True)}
    for depth in DEPTHS:
        namespace = {"__name__": "floor"}
        sys.argv[1:] = [str(depth)]
        exec(setup, namespace)  # noqa: S102 - this file's own launcher
        code = compile("keeper = os.fork()" + chain, "floor", "exec")
        rows[f"floor {depth}"] = lambda code=code, namespace=namespace: exec(code, namespace)  # noqa: S102
    try:
        from sandlock import Policy, Sandbox

        rows["`Sandbox(Policy()).run([\"/bin/true\"])`"] = lambda: Sandbox(Policy()).run(["/bin/true"])
    except ImportError:
        pass
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(runs):
        for name, run in rows.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    print("\n| in a warm process | median |")
    print("| --- | --- |")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values) * 1e3:.2f} ms |")


if __name__ == "__main__":
    sys.exit(main())
