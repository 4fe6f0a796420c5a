#!/usr/bin/env python3
"""What a credential rule (--http-auth) costs per request through the proxy.

N requests on one keep-alive connection (python http.client inside the sandbox, timed
there), to a loopback upstream, in three runs: HTTP rules only; the same with a
credential rule, requests it does not match; requests it matches (the header is set).
Plain HTTP (--http-auth-plain), so that TLS does not hide the difference.

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
import http.client, sys, time
port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
connection = http.client.HTTPConnection("api.test", port)
connection.request("GET", path); connection.getresponse().read()  # (connected, warmed)
start = time.perf_counter()
for _ in range(count):
    connection.request("GET", path)
    connection.getresponse().read()
print((time.perf_counter() - start) / count)
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

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
    cases = {
        "rules only": (common, "/v1/x"),
        "credential rule, not matched": (common + credential, "/other"),
        "credential rule, matched": (common + credential, "/v1/x"),
    }
    env = {**os.environ, "SANDLOCK_BENCH_KEY": "k" * 40}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (options, path) in cases.items():
            out = subprocess.run([*SANDLOCK, *options, "--", "/usr/bin/python3", "-c", CLIENT,
                                  str(port), path, str(args.requests)],
                                 capture_output=True, text=True, check=True, env=env)
            times[name].append(float(out.stdout))
    server.shutdown()
    base = statistics.median(times["rules only"])
    print("| requests through the proxy | per request | added |\n| --- | --- | --- |")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1e6:.0f} µs | {(median - base) * 1e6:+.0f} µs |")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    raise SystemExit(main())
