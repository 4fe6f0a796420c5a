#!/usr/bin/env python3
"""What a credential rule (--http-auth) costs per request through the proxy.

2N requests on one keep-alive connection (python http.client inside the sandbox, each
timed there), to a loopback upstream, alternating a path a credential rule matches and
one it does not: the median of each, paired in the same run, so that the proxy's
run-to-run noise (~25 µs) cancels. The same in a run without credentials (both paths
then equal). Plain HTTP (--http-auth-plain), so that TLS does not hide the difference.

Usage: python bench/credentials.py [--runs R] [--requests N]
Medians of interleaved runs; a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SANDLOCK = [sys.executable, "-m", "sandlock"]
HOST = "127.0.0.2"
CLIENT = """
import http.client, statistics, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
connection = http.client.HTTPConnection("api.test", port)
connection.request("GET", "/other"); connection.getresponse().read()  # (connected, warmed)
times = {"/v1/x": [], "/other": []}
for _ in range(count):
    for path, spent in times.items():
        start = time.perf_counter()
        connection.request("GET", path)
        connection.getresponse().read()
        spent.append(time.perf_counter() - start)
print(statistics.median(times["/v1/x"]), statistics.median(times["/other"]))
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()  # (headers and body are two writes: no Nagle delay between them)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def _server() -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer((HOST, 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    server, port = _server()
    common = ["run", "--resolve", f"api.test={HOST}", "--http-port", str(port),
              "--http-allow", "GET api.test/*"]
    credential = ["--credential", "api=env:SANDLOCK_BENCH_KEY", "--http-auth-plain",
                  "--http-auth", "GET api.test/v1/* bearer api"]
    env = {**os.environ, "SANDLOCK_BENCH_KEY": "k" * 40}
    rows: dict[str, list[tuple[float, float]]] = {"without credentials": [], "with a credential rule": []}
    for _ in range(args.runs):
        for name, options in (("without credentials", common),
                              ("with a credential rule", common + credential)):
            out = subprocess.run([*SANDLOCK, *options, "--", "/usr/bin/python3", "-c", CLIENT,
                                  str(port), str(args.requests)],
                                 capture_output=True, text=True, check=True, env=env)
            matched, other = map(float, out.stdout.split())
            rows[name].append((matched, other))
    server.shutdown()
    print("| run | /v1/x (matched by the rule) | /other | difference |\n| --- | --- | --- | --- |")
    for name, pairs in rows.items():
        matched = statistics.median(m for m, _ in pairs)
        other = statistics.median(o for _, o in pairs)
        difference = statistics.median(m - o for m, o in pairs)
        print(f"| {name} | {matched * 1e6:.0f} µs | {other * 1e6:.0f} µs | {difference * 1e6:+.1f} µs |")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    raise SystemExit(main())
