"""A real container registry for tests (the distribution API v2, over HTTPS with a
trustme certificate, on a loopback address), with its token service and a blob CDN.

``Registry(ca)`` starts three servers sharing one state: the registry (``/v2/...``:
manifests by tag or digest, blobs), the token service (``/token``: Bearer tokens, for
``token_realm``) and a CDN the registry redirects blob requests to when
``redirect_blobs`` is set (``/cdn/<digest>``); ``tls=False`` serves plain HTTP. Every request is logged with the
server's role, its path and its headers, so a test can prove what was asked and what
was sent where. ``push`` copies an OCI layout (``ocibuild``) into a repository; the
state's knobs (``token_realm``, ``redirect_to``, ``basic``, and its manifests and
blobs, which a test may replace) make it misbehave the way an attacker's registry would.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler

from httpservers import _Server

TOKEN = "tok-for-pulls"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _RoleServer

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        state = self.server.state
        state.log.append((self.server.role, self.path, dict(self.headers.items())))
        if self.server.role == "token":
            return self._reply(200, json.dumps({"token": TOKEN}).encode(), "application/json")
        if self.server.role == "cdn":
            blob = state.blobs.get(self.path.rsplit("/", 1)[-1])
            return self._reply(200, blob) if blob is not None else self._reply(404, b"")
        if state.basic and self.headers.get("Authorization") != f"Basic {state.basic}":
            return self._reply(401, b"{}", headers={"WWW-Authenticate": 'Basic realm="registry"'})
        if state.token_realm and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = (f'Bearer realm="{state.token_realm}",service="registry.test",'
                         f'scope="repository:team/tool:pull"')
            return self._reply(401, b"{}", headers={"WWW-Authenticate": challenge})
        parts = self.path.split("/")  # /v2/<repo...>/manifests|blobs/<ref>
        if len(parts) < 5 or parts[1] != "v2":
            return self._reply(404, b"")
        kind, ref = parts[-2], parts[-1]
        if kind == "manifests":
            found = state.manifests.get(ref)
            if found is None:
                return self._reply(404, b"")
            media_type, data = found
            return self._reply(200, data, media_type)
        if kind == "blobs":
            if state.redirect_to:
                return self._reply(307, b"", headers={"Location": f"{state.redirect_to}/cdn/{ref}"})
            blob = state.blobs.get(ref)
            return self._reply(200, blob) if blob is not None else self._reply(404, b"")
        return self._reply(404, b"")

    def _reply(self, status: int, body: bytes, content_type: str = "application/octet-stream",
               headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class _RoleServer(_Server):
    def __init__(self, host: str, role: str, state: _State, context: ssl.SSLContext | None) -> None:
        super().__init__((host, 0), role, None, "", None, context)
        self.RequestHandlerClass = _Handler
        self.role, self.state = role, state


class _State:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.manifests: dict[str, tuple[str, bytes]] = {}  # tag or digest -> (type, bytes)
        self.blobs: dict[str, bytes] = {}  # digest -> bytes
        self.token_realm = ""
        self.redirect_to = ""
        self.basic = ""  # base64 user:password the registry asks for (a Basic challenge)


class Registry:
    """The registry on ``host`` (``registry.test``), its token service on
    ``token_host`` (``auth.test``) and CDN on ``cdn_host`` (``cdn.test``)."""

    def __init__(self, ca, host: str = "127.0.0.2", token_host: str = "127.0.0.3",
                 cdn_host: str = "127.0.0.4", *, tls: bool = True) -> None:
        self.state = _State()
        self._servers = {}
        for role, address, name in (("registry", host, "registry.test"), ("token", token_host, "auth.test"),
                                    ("cdn", cdn_host, "cdn.test")):
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH) if tls else None
            if context is not None:
                ca.issue_cert(name).configure_cert(context)
            self._servers[role] = _RoleServer(address, role, self.state, context)
        self.addresses = {role: server.server_address[:2] for role, server in self._servers.items()}
        self.port = self.addresses["registry"][1]

    def zone(self) -> dict[str, list[str]]:
        """The names FakeDns answers for the three servers."""
        return {"registry.test": [self.addresses["registry"][0]],
                "auth.test": [self.addresses["token"][0]], "cdn.test": [self.addresses["cdn"][0]]}

    def url(self, role: str, name: str) -> str:
        return f"https://{name}:{self.addresses[role][1]}"

    def require_token(self, realm: str | None = None) -> None:
        self.state.token_realm = realm or f"{self.url('token', 'auth.test')}/token"

    def redirect_blobs(self, to: str | None = None) -> None:
        self.state.redirect_to = to or self.url("cdn", "cdn.test")

    @property
    def log(self) -> list[tuple[str, str, dict[str, str]]]:
        return self.state.log

    def requests(self, role: str = "registry") -> list[str]:
        return [path for who, path, _ in self.log if who == role]

    def push(self, layout: str, tag: str | None) -> str:
        """The image of an OCI layout served under ``tag``; returns its manifest digest."""
        blobs = os.path.join(layout, "blobs", "sha256")
        for name in os.listdir(blobs):
            with open(os.path.join(blobs, name), "rb") as f:
                self.state.blobs[f"sha256:{name}"] = f.read()
        with open(os.path.join(layout, "index.json")) as f:
            digest = json.load(f)["manifests"][0]["digest"]
        return self.serve(self.state.blobs[digest], tag, MANIFEST)

    def serve(self, data: bytes, tag: str | None, media_type: str) -> str:
        """``data`` served as a manifest (or index) by its digest and ``tag``."""
        digest = digest_of(data)
        self.state.manifests[digest] = (media_type, data)
        if tag:
            self.state.manifests[tag] = (media_type, data)
        return digest

    def __enter__(self) -> Registry:
        for server in self._servers.values():
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()


class Silent:
    """A TCP listener on loopback that accepts and never answers (a stalled registry),
    or answers ``answer`` to whatever it is sent and hangs up (a garbage one)."""

    def __init__(self, host: str = "127.0.0.5", answer: bytes | None = None) -> None:
        self._answer = answer
        self._socket = socket.create_server((host, 0))
        self.address = self._socket.getsockname()[:2]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            if self._answer is not None:
                connection.recv(65536)
                connection.sendall(self._answer)
                connection.close()
                continue
            self._held.append(connection)

    def __enter__(self) -> Silent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._socket.close()
        for connection in self._held:
            connection.close()
