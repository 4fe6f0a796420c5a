#!/usr/bin/env python3
"""HTTP(S) proxy overheads, measured side by side in one run. Loopback only.

Usage: python bench/proxy.py [--requests N] [--seconds S] [--runs N]

1. latency per keep-alive request (one client, sequential GETs, median): direct vs
   through sandlock's proxy, for HTTP, HTTPS with inspection, HTTPS pass-through;
2. throughput: 8 keep-alive client processes for S seconds, requests per second;
3. a 100 MiB download through the proxy: MB/s and the proxy's peak memory;
4. start-up: `sandlock run -- /bin/true` with and without HTTP rules, and the wall
   time of a run whose first request goes through the proxy.

The upstream is a small asyncio server in its own process (127.0.0.2, name api.test);
its TLS certificate comes from a CA made here and passed with --upstream-ca. Prints
Markdown tables for docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
SANDLOCK = [os.path.join(os.path.dirname(PY), "sandlock")]
if not os.path.exists(SANDLOCK[0]):
    SANDLOCK = [shutil.which("sandlock") or "sandlock"]
HOST, NAME = "127.0.0.2", "api.test"
BODY = b"x" * 64
DOWNLOAD_SIZE = 100 << 20

# --- the upstream server (run as `proxy.py --serve PORT TLSPORT CERTDIR`) ----------------


class _Http(asyncio.Protocol):
    big: str = ""  # a file of zeros served with sendfile for /big/N (N <= its size)

    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1]
            if path.startswith(b"/big/"):
                size = int(path.split(b"/")[2])
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                asyncio.ensure_future(self._sendfile(size))
            else:
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


    async def _sendfile(self, size: int) -> None:
        with open(self.big, "rb") as file:
            await asyncio.get_running_loop().sendfile(self.transport, file, 0, size)


def serve(port: int, tls_port: int, certdir: str) -> None:
    _Http.big = os.path.join(certdir, "zeros")
    with open(_Http.big, "wb") as file:
        file.truncate(DOWNLOAD_SIZE)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(os.path.join(certdir, "leaf.pem"), os.path.join(certdir, "leaf.key"))

    async def main():
        loop = asyncio.get_running_loop()
        await loop.create_server(_Http, HOST, port)
        await loop.create_server(_Http, HOST, tls_port, ssl=context)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def make_certs(certdir: str) -> None:
    """The upstream's CA and its certificate for api.test."""
    from sandlock import ca

    upstream = ca.ephemeral_ca([NAME])
    cert, key = ca.server_certificate(upstream, NAME)
    for name, data in (("ca.pem", upstream.cert_pem), ("leaf.pem", cert), ("leaf.key", key)):
        with open(os.path.join(certdir, name), "wb") as file:
            file.write(data)


# --- clients (run inside or outside the sandbox) -----------------------------------------

# argv: scheme connect-host name port cafile count-or-seconds ("-" cafile: the default
# store, i.e. SSL_CERT_FILE, which sandlock points at the sandbox CA when inspecting)
_CLIENT_COMMON = r"""
import socket, ssl, sys, time
scheme, connect_host, name, port, cafile = sys.argv[1:6]
port = int(port)
REQUEST = ("GET /x HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (name, port)).encode()
def connection():
    s = socket.create_connection((connect_host, port))
    if scheme == "https":
        ctx = ssl.create_default_context(cafile=None if cafile == "-" else cafile)
        s = ctx.wrap_socket(s, server_hostname=name)
    return s
def exchange(s, buf):
    s.sendall(REQUEST)
    while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < 64:
        buf += s.recv(65536)
    return buf.split(b"\r\n\r\n", 1)[1][64:]
"""

LATENCY_CLIENT = _CLIENT_COMMON + r"""
import statistics
count = int(sys.argv[6])
s, buf, samples = connection(), b"", []
for i in range(count + 50):
    t = time.perf_counter()
    buf = exchange(s, buf)
    if i >= 50:
        samples.append(time.perf_counter() - t)
print(statistics.median(samples))
"""

LOAD_CLIENT = _CLIENT_COMMON + r"""
import multiprocessing
seconds = float(sys.argv[6])
def worker(queue):
    s, buf, done, end = connection(), b"", 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        buf = exchange(s, buf)
        done += 1
    queue.put(done)
if __name__ == "__main__":
    q = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker, args=(q,)) for _ in range(8)]
    for p in procs: p.start()
    print(sum(q.get() for _ in procs) / seconds)
    for p in procs: p.join()
"""


def sandboxed(rules: list[str], certdir: str, ports: list[int], argv: list[str],
              inspect: str = "auto") -> list[str]:
    options = ["--resolve", f"{NAME}={HOST}", "--https-inspect", inspect,
               "--upstream-ca", os.path.join(certdir, "ca.pem"), "-q"]
    for port in ports:
        options += ["--http-port", str(port)]
    for rule in rules:
        options += ["--http-allow", rule]
    return [*SANDLOCK, "run", *options, "--", *argv]


def _float(argv: list[str]) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    try:
        return float(out.stdout.split()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"failed: {' '.join(argv)}\n{out.stdout}\n{out.stderr}") from None


CASES = [  # (label, scheme, port index, rules, the sandboxed client trusts the sandbox CA)
    ("HTTP", "http", 0, ["GET api.test/x"], False),
    ("HTTPS, inspected", "https", 1, ["GET api.test/x"], True),
    ("HTTPS, pass-through", "https", 1, ["* api.test"], False),
]


def _pair(client: str, case: tuple, ports: list[int], certdir: str, amount: str) -> tuple[float, float]:
    _, scheme, index, rules, inspected = case
    port, ca = str(ports[index]), os.path.join(certdir, "ca.pem")
    direct = _float([PY, "-c", client, scheme, HOST, NAME, port, ca, amount])
    boxed = _float(sandboxed(rules, certdir, ports,
                             [PY, "-c", client, scheme, NAME, NAME, port, "-" if inspected else ca, amount]))
    return direct, boxed


def latency(ports: list[int], certdir: str, count: int, runs: int) -> list[str]:
    targets = {"HTTP": "≤ 1 ms", "HTTPS, inspected": "≤ 1.2 ms", "HTTPS, pass-through": "≤ 0.3 ms"}
    rows = ["| path | direct | via sandlock | added | target |", "| --- | --- | --- | --- | --- |"]
    for case in CASES:
        pairs = [_pair(LATENCY_CLIENT, case, ports, certdir, str(count)) for _ in range(runs)]
        bare = statistics.median(p[0] for p in pairs) * 1e3
        boxed = statistics.median(p[1] for p in pairs) * 1e3
        rows.append(f"| {case[0]} | {bare:.2f} ms | {boxed:.2f} ms | {boxed - bare:.2f} ms "
                    f"| {targets[case[0]]} |")
    return rows


def throughput(ports: list[int], certdir: str, seconds: float, runs: int) -> list[str]:
    targets = {"HTTP": "≥ 1.2k", "HTTPS, inspected": "-", "HTTPS, pass-through": "≥ 10k"}
    rows = ["| path | direct req/s | via sandlock req/s | target |", "| --- | --- | --- | --- |"]
    for case in CASES:
        pairs = [_pair(LOAD_CLIENT, case, ports, certdir, str(seconds)) for _ in range(runs)]
        rows.append(f"| {case[0]} | {statistics.median(p[0] for p in pairs):,.0f} "
                    f"| {statistics.median(p[1] for p in pairs):,.0f} | {targets[case[0]]} |")
    return rows


# The proxy starts with the run: a first request waits for it, so the download is
# timed once the proxy is up (as in a command's second request).
DOWNLOAD = r"""
curl -sS -o /dev/null "$2"
curl -sS -o /dev/null -w '%{speed_download}\n' "$1" &
sleep 0.3
proxy=$(pgrep -f sandlock.proxy._server | head -1)
wait
grep VmHWM /proc/$proxy/status | awk '{print $2}'
"""


def download(ports: list[int], certdir: str, runs: int) -> list[str]:
    size = DOWNLOAD_SIZE
    url = f"http://{NAME}:{ports[0]}/big/{size}"
    warm = f"http://{NAME}:{ports[0]}/big/1"
    bare = [float(subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}",
                                  "--resolve", f"{NAME}:{ports[0]}:{HOST}", url],
                                 capture_output=True, text=True).stdout) for _ in range(runs)]
    speeds, peaks = [], []
    for _ in range(runs):
        out = subprocess.run(sandboxed([f"GET {NAME}/big/*"], certdir, ports,
                                       ["sh", "-c", DOWNLOAD, "-", url, warm]),
                             capture_output=True, text=True).stdout.split()
        speeds.append(float(out[0]))
        peaks.append(int(out[1]) / 1024)
    return ["| 100 MiB download | direct | via sandlock | proxy peak memory |", "| --- | --- | --- | --- |",
            f"| HTTP | {statistics.median(bare) / 1e6:,.0f} MB/s | {statistics.median(speeds) / 1e6:,.0f} MB/s "
            f"| {statistics.median(peaks):.0f} MiB |"]


def startup(ports: list[int], certdir: str, runs: int) -> list[str]:
    """Interleaved: each figure with the user's proxy fork server (warm after the first
    run) and with a fresh proxy interpreter per run (SANDLOCK_PROXY_FORKSERVER=0)."""
    fresh = {**os.environ, "SANDLOCK_PROXY_FORKSERVER": "0"}

    def wall(argv: list[str], env: dict | None = None) -> float:
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env)
        return time.perf_counter() - start

    http = ["curl", "-sS", f"http://{NAME}:{ports[0]}/x"]
    https = ["curl", "-sS", f"https://{NAME}:{ports[1]}/x"]
    cases = [
        ("`sandlock run -- /bin/true`", [*SANDLOCK, "run", "--", "/bin/true"], None),
        ("same, with a pass-through HTTP rule (no CA)",
         sandboxed([f"* {NAME}"], certdir, ports, ["/bin/true"]), None),
        ("same, with an inspecting HTTP rule (cached ephemeral CA)",
         sandboxed([f"GET {NAME}/x"], certdir, ports, ["/bin/true"]), None),
        ("same, inspecting, fresh proxy interpreter",
         sandboxed([f"GET {NAME}/x"], certdir, ports, ["/bin/true"]), fresh),
        ("`curl` of one HTTP URL through the proxy, launch to exit",
         sandboxed([f"GET {NAME}/x"], certdir, ports, http), None),
        ("same, fresh proxy interpreter", sandboxed([f"GET {NAME}/x"], certdir, ports, http), fresh),
        ("`curl` of one HTTPS URL, inspected, launch to exit",
         sandboxed([f"GET {NAME}/x"], certdir, ports, https), None),
        ("same, fresh proxy interpreter", sandboxed([f"GET {NAME}/x"], certdir, ports, https), fresh),
    ]
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(runs):
        for index, (_, argv, env) in enumerate(cases):
            times[index].append(wall(argv, env))
    return ["| run | median wall time |", "| --- | --- |",
            *(f"| {label} | {statistics.median(samples) * 1e3:.0f} ms |"
              for (label, _, _), samples in zip(cases, times))]


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ports = [_free_port(), _free_port()]
    # In the current directory, which the default workspace grants: the sandbox has a
    # /tmp of its own, where the clients would not find the CA.
    with tempfile.TemporaryDirectory(dir=os.getcwd(), prefix=".bench-proxy-") as certdir:
        make_certs(certdir)
        server = subprocess.Popen([PY, __file__, "--serve", str(ports[0]), str(ports[1]), certdir],
                                  stdout=subprocess.PIPE, text=True)
        try:
            server.stdout.readline()
            print(f"runs: {args.runs}, {args.requests} requests per latency run\n")
            for title, rows in (("Latency per keep-alive request (median)", latency(ports, certdir, args.requests, args.runs)),
                                ("Throughput, 8 keep-alive clients", throughput(ports, certdir, args.seconds, args.runs)),
                                ("Streaming", download(ports, certdir, args.runs)),
                                ("Start-up", startup(ports, certdir, args.runs))):
                print(f"### {title}\n")
                print("\n".join(rows) + "\n", flush=True)
        finally:
            server.kill()


if __name__ == "__main__":
    main()
