"""An upstream that accepts a request and never answers no longer holds it: past
--http-upstream-timeout the proxy answers 504 with the reason in X-Sandlock-Timeout
(proxy/_idle.py), and closes both connections. Before, mitmproxy waited as long as
the client did (290 s measured), a flow and two descriptors each. Real confined
clients, a real silent server on loopback, the proxy's memory and descriptors read
from its /proc."""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import SANDLOCK, sandlock
from httpservers import free_port_on
from proxies import MODES, proxy_of, warm_forkserver

SILENT, TRICKLE = "127.0.0.2", "127.0.0.3"
TIMEOUT = 0.2  # the tests' --http-upstream-timeout
# 1,500 requests, measured after 500 (the proxy's allocator has warmed up by then) and
# at the end: a flow kept per request would add ~5 MB; measured noise is under 1 MB.
REQUESTS, BATCH, WARM = 1500, 50, 500

# The confined client: REQUESTS requests in parallel batches of BATCH, each its own
# connection; prints each request's status, X-Sandlock-Timeout and seconds as JSON
# lines per batch; stops for the test to measure at the marks (after WARM and at the end).
CLIENT = r"""
import json, socket, sys, time
from concurrent.futures import ThreadPoolExecutor
host, port, total, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
marks = {int(mark) for mark in sys.argv[5].split(",")}
def get(n):
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=30) as conn:
        conn.sendall(f"GET /{n} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
                     .encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode(errors="replace").split("\r\n")
    fields = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
    timeout = next((v for k, v in fields.items() if k.lower() == "x-sandlock-timeout"), "")
    return head[0].split(" ")[1] if head[0] else "none", timeout, time.monotonic() - started
done = 0
with ThreadPoolExecutor(batch) as pool:
    while done < total:
        results = list(pool.map(get, range(done, done + batch)))
        done += batch
        print(json.dumps(results), flush=True)
        if done in marks:
            print("mark", done, flush=True)
            sys.stdin.readline()
"""


class SilentUpstream:
    """Accepts every connection and reads what comes, never answering; a connection
    ends when its peer closes it. ``trickle``: sends a response a byte every
    ``trickle`` seconds instead (slow, never silent for that long)."""

    def __init__(self, host: str, port: int, trickle: float = 0.0) -> None:
        self._listener = socket.create_server((host, port), backlog=4096)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._trickle = trickle
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> SilentUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()

    def _serve(self) -> None:
        while not self._stop:
            for key, _ in self._selector.select(0.1):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._read(key.fileobj)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ)
        if self._trickle:
            threading.Thread(target=self._send_slowly, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._selector.unregister(conn)
            conn.close()

    def _send_slowly(self, conn: socket.socket) -> None:
        time.sleep(self._trickle)
        body = b"slow but alive, byte by byte"
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
            for byte in body:
                time.sleep(self._trickle)
                conn.sendall(bytes([byte]))
        except OSError:
            pass


def _status(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open descriptors) of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _status_once(pid: int, reached, seconds: float = 20) -> tuple[int, int]:
    """``_status`` as soon as its descriptors' count is ``reached`` (a loaded machine may
    take the proxy longer than the client's second to accept every connection), or at
    the deadline."""
    deadline = time.monotonic() + seconds
    while not reached((status := _status(pid))[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


def _settled(pid: int) -> tuple[int, int]:
    """``_status`` once the connections just answered are closed: the fewest
    descriptors over half a second (the proxy closes an upstream socket a loop
    iteration or two after the 504 has gone out; a held one would stay)."""
    samples = []
    for _ in range(10):
        samples.append(_status(pid))
        time.sleep(0.05)
    return samples[-1][0], min(fds for _, fds in samples)


def _argv(host: str, port: int, timeout: float) -> list[str]:
    return [*SANDLOCK, "run", "--resolve", f"api.test={host}", "--http-port", str(port),
            "--https-inspect", "off", "--http-allow", "GET api.test/*",
            "--http-upstream-timeout", str(timeout), "--"]


@pytest.fixture(scope="module")
def port():
    return free_port_on(SILENT, TRICKLE)


def _many_requests(port: int, timeout: float, mode: str, marks: tuple[int, ...],
                   total: int = REQUESTS, prefix: list[str] | None = None
                   ) -> tuple[list, dict[int, tuple], str]:
    """Every request's (status, reason, seconds); the proxy's (RSS, fds) and sandlock's
    at each mark; sandlock's stderr. ``prefix``: runs sandlock as another user."""
    argv = [*(prefix or []), *_argv(SILENT, port, timeout), sys.executable, "-c", CLIENT,
            "api.test", str(port), str(total), str(BATCH), ",".join(map(str, marks))]
    env = {**os.environ, **MODES[mode]}
    if mode == "forked":
        warm_forkserver()
    results, measured = [], {}
    with SilentUpstream(SILENT, port), subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd=tempfile.gettempdir()) as run:
        try:
            for line in run.stdout:
                if line.startswith("mark"):
                    proxy = proxy_of(run.pid)
                    measured[int(line.split()[1])] = (_settled(proxy), _settled(run.pid))
                    run.stdin.write("go\n")
                    run.stdin.flush()
                else:
                    results += json.loads(line)
            err = run.stderr.read()
            run.wait(60)
        finally:
            run.kill()
    assert run.returncode == 0, err
    return results, measured, err


def test_a_silent_upstream_is_answered_504_and_holds_nothing(port):
    results, measured, err = _many_requests(port, TIMEOUT, "forked", (WARM, REQUESTS))
    assert len(results) == REQUESTS
    reason = (f"the upstream {SILENT}:{port} sent nothing for {TIMEOUT:g} s "
              "(--http-upstream-timeout)")
    assert {(status, why) for status, why, _ in results} == {("504", reason)}
    slowest = max(seconds for _, _, seconds in results)
    assert slowest < 5, f"a request waited {slowest:.1f} s"  # (0.2 s, on a loaded machine)
    # Said once, not a thousand times; not a denial.
    assert err.count("answered 504") == 1 and "denied" not in err, err
    (proxy_warm, sandlock_warm), (proxy_end, sandlock_end) = measured[WARM], measured[REQUESTS]
    # 1,000 requests more: nothing kept per request (each held two descriptors and a flow).
    assert proxy_end[1] <= proxy_warm[1] + 2, (proxy_warm, proxy_end)
    assert proxy_end[0] - proxy_warm[0] < 2048, (proxy_warm, proxy_end)
    assert sandlock_end[1] <= sandlock_warm[1] + 2, (sandlock_warm, sandlock_end)
    assert sandlock_end[0] - sandlock_warm[0] < 2048, (sandlock_warm, sandlock_end)


def test_a_silent_upstream_is_answered_504_for_an_unprivileged_user(port, as_nobody):
    results, _, err = _many_requests(port, TIMEOUT, "fresh", (BATCH,), total=BATCH,
                                     prefix=as_nobody([]))
    assert {status for status, _, _ in results} == {"504"}, err
    assert max(seconds for _, _, seconds in results) < 5


def test_without_the_timeout_a_silent_upstream_holds_every_request(port):
    """The control: the same requests with a timeout longer than the test are held,
    and the proxy's descriptors show it (the client's and the upstream's of each)."""
    argv = [*_argv(SILENT, port, 3600), sys.executable, "-c", HELD_CLIENT, "api.test", str(port),
            str(BATCH)]
    measured = {}
    with SilentUpstream(SILENT, port), subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, **MODES["fresh"]}, cwd=tempfile.gettempdir()) as run:
        try:
            for line in run.stdout:
                if line.strip() == "ready":
                    measured["ready"] = _status(proxy_of(run.pid))
                elif line.strip() == "sent":
                    held = measured["ready"][1] + 2 * BATCH - 5
                    measured["sent"] = _status_once(proxy_of(run.pid), lambda fds: fds >= held)
                if line.strip() in ("ready", "sent"):
                    run.stdin.write("go\n")
                    run.stdin.flush()
                else:
                    outcomes = line.split()
            err = run.stderr.read()
        finally:
            run.kill()
    assert outcomes == ["held"] * BATCH, err
    assert measured["sent"][1] - measured["ready"][1] >= 2 * BATCH - 5, measured


# Starts the proxy with a request it answers itself (denied), then sends BATCH requests
# the silent upstream never answers, and tells which were answered within 1 s.
HELD_CLIENT = r"""
import socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with socket.create_connection((host, port)) as first:
    first.sendall(f"PUT / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    assert first.recv(100).startswith(b"HTTP/1.1 403")
print("ready", flush=True)
sys.stdin.readline()
conns = [socket.create_connection((host, port)) for _ in range(count)]
for n, conn in enumerate(conns):
    conn.sendall(f"GET /{n} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
time.sleep(1)
print("sent", flush=True)
sys.stdin.readline()
outcomes = []
for conn in conns:
    conn.settimeout(0.01)
    try:
        outcomes.append("answered" if conn.recv(1) else "closed")
    except TimeoutError:
        outcomes.append("held")
print(" ".join(outcomes), flush=True)
"""


TRICKLING = r"""
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
started = time.monotonic()
with socket.create_connection((host, port)) as conn:
    conn.sendall(f"GET /slow HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
print(data.split(b"\r\n", 1)[0].decode(), data.rsplit(b"\r\n\r\n", 1)[1].decode(),
      round(time.monotonic() - started, 1))
"""


def test_an_upstream_that_is_slow_but_never_silent_that_long_is_not_cut(port):
    """The timeout is on silence, not on the whole response: an upstream that takes
    2.9 s in all, a byte every 0.1 s, passes a 1 s timeout untouched."""
    argv = [*_argv(TRICKLE, port, 1), sys.executable, "-c", TRICKLING, "api.test", str(port)]
    with SilentUpstream(TRICKLE, port, trickle=0.1):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                cwd=tempfile.gettempdir())
    assert result.stdout.startswith("HTTP/1.1 200 OK slow but alive, byte by byte "), \
        result.stderr
    assert float(result.stdout.split()[-1]) >= 2.8 and "sent nothing" not in result.stderr


def test_the_timeout_is_validated():
    for bad in ("0", "-1", "nan", "inf", "86401", "soon"):
        result = sandlock("run", "--http-upstream-timeout", bad, "--http-allow", "GET a.test/*",
                          "--", "true")
        assert result.returncode == 2, (bad, result)
        assert result.stderr.startswith("sandlock: error:") and "--http-upstream-timeout" in \
            result.stderr, (bad, result.stderr)
        assert "Traceback" not in result.stderr
    with tempfile.TemporaryDirectory() as work:
        policy = os.path.join(work, "p.toml")
        with open(policy, "w") as file:
            file.write('[http]\nallow = ["GET a.test/*"]\nupstream_timeout = 0\n')
        result = sandlock("run", "--policy", policy, "--", "true")
        assert (result.returncode, result.stderr.splitlines()[0]) == (2, (
            f"sandlock: error: {policy}:3: http.upstream_timeout: must be more than 0 "
            "seconds and at most 86400, got 0")), result.stderr
