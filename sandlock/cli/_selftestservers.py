"""The servers `sandlock selftest` checks reach from inside a sandbox, on 127.0.0.1
only: a TCP listener, an HTTP(S) server."""

from __future__ import annotations

import os
import tempfile


class LocalServer:
    """A TCP listener on 127.0.0.1 that accepts and closes, for the network checks."""

    def __enter__(self) -> int:
        import socket
        import threading

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        threading.Thread(target=self._accept, daemon=True).start()
        return self._socket.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            connection.close()

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


class HttpServer:
    """An HTTP server on 127.0.0.1 answering 200 to every GET, for the HTTP checks;
    with ``tls_name``, HTTPS with a certificate for that name (and its CA's PEM)."""

    def __init__(self, tls_name: str | None = None) -> None:
        self._tls_name = tls_name

    def __enter__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Ok(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
        port = self._server.server_address[1]
        authority = self._tls_name and self._serve_tls()
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return (port, authority) if self._tls_name else port

    def _serve_tls(self) -> bytes:
        import ssl

        from .. import ca

        upstream = ca.ephemeral_ca([self._tls_name])
        cert, key = ca.server_certificate(upstream, self._tls_name)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as directory:
            paths = [os.path.join(directory, n) for n in ("cert.pem", "key.pem")]
            for path, data in zip(paths, (cert, key)):
                with open(path, "wb") as file:
                    file.write(data)
            context.load_cert_chain(*paths)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        return upstream.cert_pem

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
