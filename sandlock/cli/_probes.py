"""What `sandlock selftest`'s checks are made of: the small programs it runs inside
sandboxes, each trying one thing and printing what happened (the error's text, or what
it read), for a check to compare; and the servers those checks reach from inside a
sandbox, on 127.0.0.1 only (a TCP listener, an HTTP(S) server)."""

from __future__ import annotations

import os
import tempfile

TRY_WRITE = """
import sys
try:
    open(sys.argv[1], "w").write("x"); print("written")
except OSError as e:
    print(e.strerror)
"""
# TRY_WRITE (argv[1]) run by a grandchild, python -> sh -> python, for each path after it.
GRANDCHILD_WRITES = """
import subprocess, sys
for path in sys.argv[2:]:
    print(subprocess.run(["sh", "-c", 'exec "$0" -c "$1" "$2"', sys.executable, sys.argv[1], path],
                         capture_output=True, text=True).stdout.strip())
"""
TRY_READ = """
import sys
try:
    open(sys.argv[1]).read(); print("read")
except OSError as e:
    print(e.strerror)
"""
TRY_LIST = """
import os, sys
try:
    names = os.listdir(sys.argv[1]); print("listed", *sorted(names), sep="\\n")
except OSError as e:
    print(e.strerror)
"""
TRY_CHMOD = """
import os, sys
for path in sys.argv[1:]:
    try:
        os.chmod(path, 0o777); print("changed")
    except OSError as e:
        print(e.strerror)
"""
TRY_SYSCALL = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
args = [ctypes.c_long(int(a)) for a in sys.argv[1:]]
r = libc.syscall(*args)
print("ok" if r >= 0 else __import__("os").strerror(ctypes.get_errno()))
"""
INT80 = """
import ctypes, mmap
# mov eax, 20 (i386 getpid); int 0x80; ret
code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])
mem = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mem.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
print("survived")
"""
RAW_SOCKET = """
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("created")
except OSError as e:
    print(e.strerror)
"""
SIGNAL_OUTSIDE = """
import os, sys
try:
    os.kill(int(sys.argv[1]), 0); print("delivered")
except OSError as e:
    print(e.strerror)
"""

CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX if sys.argv[1].startswith("/") else socket.AF_INET)
try:
    s.connect(sys.argv[1] if sys.argv[1].startswith("/") else (sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as e:
    print(e.strerror)
"""
ABSTRACT_CONNECT = """
import os, socket, sys
target = sys.argv[1].encode()
# Names holding a newline: /proc/net/unix shows lines of their choosing, saying that
# these sockets, the sandbox's own, hold the target's name (one may come first).
forgers = [socket.socket(socket.AF_UNIX) for _ in range(32)]
for i, own in enumerate(forgers):
    line = b"0000000000000000: 00000002 00000000 00010000 0001 01 %5d @%s" % (os.fstat(own.fileno()).st_ino, target)
    own.bind(b"\\0x%d\\n" % i + line)
for address in (b"\\0" + target, b""):  # b"": the family alone, never the name ""
    try:
        socket.socket(socket.AF_UNIX).connect(address); print("connected")
    except OSError as e:
        print(e.strerror)
"""
RESOLVE = """
import socket, sys
for name in sys.argv[1:]:
    try:
        print(socket.gethostbyname(name))
    except OSError:
        print("unresolved")
"""

HTTP_GET = """
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=10).status)
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("X-Sandlock-Denied"))
    except OSError as e:
        print(getattr(e, "reason", e))
"""


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
