"""Real HTTP(S) upstream servers on loopback aliases, recording what reached them.

``Upstream("127.0.0.2")`` serves every method: it answers ``<name> <METHOD> <path>``
(``name`` tells which server answered), counts the body bytes it received, and keeps
a log of (method, path, host header, body bytes) and one of each request's headers
(``headers_log``). ``tls=`` a trustme CA makes it HTTPS with a certificate for the
given names. A directory can be served as files under /files/ (or another prefix:
``files_at``; a directory's index.html for its path), and a directory of git
repositories through ``git http-backend`` (``git=``: git's smart HTTP protocol, on
every path). A path holding ``/redirect?to=URL`` is answered 302 to URL.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def _any(self) -> None:
        kept: list[bytes] | None = [] if self.server.git else None  # else only counted
        length = int(self.headers.get("Content-Length") or 0)
        received = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            received = self._read_chunked(kept)
        else:
            while received < length:
                chunk = self.rfile.read(min(65536, length - received))
                if not chunk:
                    break
                received += len(chunk)
                if kept is not None:
                    kept.append(chunk)
        self.server.log.append((self.command, self.path, self.headers.get("Host"), received))
        self.server.headers_log.append(list(self.headers.items()))
        if "/redirect?to=" in self.path:
            return self._redirect(self.path.split("/redirect?to=", 1)[1])
        prefix = self.server.files_at
        if self.path.startswith(prefix) and self.server.files and self.command in ("GET", "HEAD"):
            return self._file(self.path[len(prefix):].split("?")[0])
        if self.server.git:
            return self._git(b"".join(kept))
        if self.path.startswith("/big/"):
            return self._big(int(self.path.split("/")[2]))
        body = f"{self.server.name} {self.command} {self.path}\n".encode()
        self._reply(200, body)

    def _read_chunked(self, kept: list[bytes] | None) -> int:
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return total
            chunk = self.rfile.read(size)
            total += len(chunk)
            if kept is not None:
                kept.append(chunk)
            self.rfile.readline()

    def _git(self, body: bytes) -> None:
        """git's smart HTTP protocol, answered by git http-backend as a CGI program."""
        path, _, query = self.path.partition("?")
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": self.server.git,
               "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command,
               "PATH_INFO": path, "QUERY_STRING": query, "CONTENT_LENGTH": str(len(body)),
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
               "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True, check=False).stdout
        head, _, content = out.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n") if line)
        status = int(headers.pop("Status", "200").split()[0])
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def _file(self, relative: str) -> None:
        path = os.path.realpath(os.path.join(self.server.files, relative))
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not path.startswith(self.server.files) or not os.path.isfile(path):
            return self._reply(404, b"not found\n")
        with open(path, "rb") as file:
            html = path.endswith(".html")  # an index page (pip checks the type)
            self._reply(200, file.read(), "text/html" if html else "text/plain")

    def _big(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b"x" * 65536
        while size > 0:
            self.wfile.write(block[:size])
            size -= len(block)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", content_type)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], name: str, files: str | None, files_at: str,
                 git: str | None, context: ssl.SSLContext | None) -> None:
        self.name = name
        self.files = os.path.realpath(files) if files else None
        self.files_at = files_at
        self.git = git
        self.log: list[tuple[str, str, str | None, int]] = []
        self.headers_log: list[list[tuple[str, str]]] = []  # each request's headers, as received
        self._context = context
        super().__init__(address, _Handler)

    def get_request(self):
        connection, peer = super().get_request()
        if self._context is not None:
            connection = self._context.wrap_socket(connection, server_side=True,
                                                   do_handshake_on_connect=False)
        return connection, peer


class Upstream:
    def __init__(self, host: str, port: int = 0, *, name: str | None = None,
                 files: str | None = None, files_at: str = "/files/", git: str | None = None,
                 tls=None, tls_names: tuple[str, ...] = ()) -> None:
        context = None
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.issue_cert(*(tls_names or (host,))).configure_cert(context)
        self.server = _Server((host, port), name or host, files, files_at, git, context)
        self.host, self.port = self.server.server_address[:2]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def log(self) -> list[tuple[str, str, str | None, int]]:
        return self.server.log

    @property
    def headers_log(self) -> list[list[tuple[str, str]]]:
        return self.server.headers_log

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.log]

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def served_repository(directory) -> str:
    """A bare git repository (one commit, "hello") under ``directory``/srv/repo.git,
    ready for git's dumb HTTP protocol; returns the directory to serve (``srv``)."""
    import subprocess

    work, repo = os.path.join(directory, "work"), os.path.join(directory, "srv", "repo.git")
    subprocess.run(["git", "init", "-q", work], check=True)
    subprocess.run(["git", "-C", work, "-c", "user.email=a@b", "-c", "user.name=a",
                    "commit", "-q", "--allow-empty", "-m", "hello"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", work, repo], check=True)
    subprocess.run(["git", "-C", repo, "update-server-info"], check=True)
    return os.path.dirname(repo)


def free_port_on(*hosts: str) -> int:
    """A TCP port free on every one of ``hosts`` (for servers sharing one HTTP port), below
    the kernel's ephemeral range: a port from bind(0) is one the next connect() of any
    concurrent test may take as its own local port before the server binds it."""
    for _ in range(200):
        port = random.randrange(20000, 32768)
        try:
            for host in hosts:
                with socket.socket() as probe:
                    probe.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no common free port")
