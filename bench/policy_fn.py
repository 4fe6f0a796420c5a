#!/usr/bin/env python3
"""What a policy_fn that allows everything costs: per exec (a chain of N execs, no
fork), per fork + exec (a shell loop running /bin/true N times) and per connect (a
python loop of N connects to a local server), each against the same run without
policy_fn.

Usage: python bench/policy_fn.py [--runs R] [--execs N] [--connects N]
Medians of interleaved runs, in this process through the API (what an embedding
program pays); "added" is the median of each round's difference, divided by N. A
Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from sandlock import Policy, Sandbox

# Re-execs itself $0 more times: one exec after another, no fork.
CHAIN = 'if [ "$0" -gt 0 ]; then exec sh -c "$1" $(($0-1)) "$1"; fi'


# The connects' server: accepts and closes, in a process of its own, as a real server
# would be (a thread of this process competed with the supervisor for the GIL).
_SERVER = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(512)
print(server.getsockname()[1], flush=True)
while True:
    server.accept()[0].close()
"""


def _serve() -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE,
                              text=True)
    return server, int(server.stdout.readline())


def _allow(event, ctx) -> int:
    """Allows everything; an exec whose last argument is "deny" starts deny_path."""
    if event.syscall == "execve" and event.argv[-1:] == ("deny",):
        ctx.deny_path(_DENIED)
    return 0


_DENIED = tempfile.mkdtemp(prefix="sandlock-bench-denied-")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--execs", type=int, default=300)
    parser.add_argument("--connects", type=int, default=2000)
    parser.add_argument("--opens", type=int, default=2000)
    args = parser.parse_args()
    server, port = _serve()
    connects = (f"import socket\nfor _ in range({args.connects}):\n"
                f"    socket.create_connection(('127.0.0.1', {port})).close()")
    opens = (f"import os\nfor _ in range({args.opens}):\n    os.close(os.open('/etc/hostname', os.O_RDONLY))")
    cases = {
        f"{args.execs} execs in a chain": (["sh", "-c", CHAIN, str(args.execs), CHAIN], args.execs),
        f"{args.execs} fork + exec of /bin/true":
            (["sh", "-c", f"i=0; while [ $i -lt {args.execs} ]; do /bin/true; i=$((i+1)); done"],
             args.execs),
        f"{args.connects} connects": (["python3", "-c", connects], args.connects),
        f"{args.opens} opens": (["python3", "-c", opens], args.opens),
        f"{args.opens} opens after a deny_path": (["python3", "-c", opens, "deny"], args.opens),
        f"{args.opens} opens, file events": (["python3", "-c", opens], args.opens),
    }
    events = {f"{args.opens} opens, file events": {"file"}}  # (Sandbox(events=...))
    policy = Policy(net_allow=[f"127.0.0.1:{port}"])
    times = {(name, fn): [] for name in cases for fn in (False, True)}
    with tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        for _ in range(args.runs):
            for name, (argv, _count) in cases.items():
                for fn in (False, True):
                    sandbox = Sandbox(policy, policy_fn=_allow if fn else None, quiet=True,
                                      events=events.get(name, ()) if fn else ())
                    started = time.perf_counter()
                    result = sandbox.run(argv)
                    times[(name, fn)].append(time.perf_counter() - started)
                    assert result.exit_code == 0, result
    server.kill()
    server.wait()
    print(f"{args.runs} rounds, {os.cpu_count()} CPUs\n")
    print("| run | without policy_fn | with (returns 0) | added per operation |")
    print("| --- | --- | --- | --- |")
    for name, (_argv, count) in cases.items():
        bare, watched = (statistics.median(times[(name, fn)]) for fn in (False, True))
        # Each round's difference: the VM's speed drifts more between rounds than the
        # cost measured here.
        added = statistics.median(with_fn - without for without, with_fn in
                                  zip(times[(name, False)], times[(name, True)])) / count
        per = f"{added * 1e6:.0f} µs" if added < 1e-3 else f"{added * 1e3:.2f} ms"
        print(f"| {name} | {bare * 1e3:.0f} ms | {watched * 1e3:.0f} ms | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
