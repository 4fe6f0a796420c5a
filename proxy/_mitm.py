"""mitmproxy, embedded: a Master with the minimal addon set, our listeners, our routes.

Only this module (and the addon) import mitmproxy; they run in the proxy process only.
What is changed from a stock mitmproxy, and why:

* no listener of its own: the transparent-mode server instance serves the sockets
  sandlock made, so their addresses were known before this process started;
* the original destination of a connection is the route sandlock sent
  (``platform.original_addr`` is replaced), never SO_ORIGINAL_DST or DNS;
* the CA comes from memory (TlsConfig would otherwise create or read ~/.mitmproxy);
* only the addons enforcement needs: core, proxyserver, next_layer, tlsconfig;
* the body of a denied request is read and dropped, not buffered: mitmproxy sends a
  response set at request headers only after consuming the whole request body, which
  it would otherwise keep in memory (a denied 10 GB upload must not cost 10 GB);
* a request whose upstream stays silent past --http-upstream-timeout is answered 504
  with the reason (``_idle``), where mitmproxy would wait as long as the client does.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import types
from pathlib import Path

from ._routes import RouteTable


def _skip_addons_package() -> None:
    """Import mitmproxy's addons one by one: the package's __init__ loads every addon
    (flask, passlib, aioquic's server parts...), about a third of mitmproxy's import time."""
    import mitmproxy

    if "mitmproxy.addons" not in sys.modules:
        package = types.ModuleType("mitmproxy.addons")
        package.__path__ = [os.path.join(os.path.dirname(mitmproxy.__file__), "addons")]
        sys.modules["mitmproxy.addons"] = package


_skip_addons_package()

from mitmproxy import certs, master, options, platform  # noqa: E402
from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig  # noqa: E402
from mitmproxy.proxy import mode_servers  # noqa: E402

from ._addon import DENIED  # noqa: E402
from ._idle import install_answer  # noqa: E402


def _drop_denied_request_bodies() -> None:
    from mitmproxy.proxy.layers.http import HttpStream, RequestData

    consume = HttpStream.state_consume_request_body

    def state_consume_request_body(self, event):
        if isinstance(event, RequestData) and self.flow.metadata.get(DENIED):
            return  # read from the client, never kept, never forwarded
        yield from consume(self, event)

    HttpStream.state_consume_request_body = state_consume_request_body


_drop_denied_request_bodies()
install_answer()


class MemoryTlsConfig(tlsconfig.TlsConfig):
    """TlsConfig whose CA is given, never loaded from (or written to) a confdir."""

    def __init__(self, certstore: certs.CertStore | None) -> None:
        super().__init__()
        self.certstore = certstore  # type: ignore[assignment]

    def configure(self, updated: set[str]) -> None:
        pass  # the stock one builds a CertStore from confdir on start

    def get_cert(self, conn_context) -> certs.CertStoreEntry:
        """A leaf for the server name only. The stock one also names the upstream's
        address, which a name-constrained CA may not sign for (and clients then refuse
        the whole certificate). Connections without a server name never get here."""
        from cryptography import x509

        name = conn_context.client.sni
        return self.certstore.get_cert(name, [x509.DNSName(name)], None)


def certstore_from_pem(key_and_cert_pem: bytes) -> certs.CertStore:
    """A CertStore for a CA given as key PEM + certificate PEM, without touching disk."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from cryptography.x509 import load_pem_x509_certificates

    key = load_pem_private_key(key_and_cert_pem, None)
    ca = certs.Cert(load_pem_x509_certificates(key_and_cert_pem)[0])
    dhparams = certs.CertStore.load_dhparam(Path(_memory_file(certs.DEFAULT_DHPARAM)))
    return certs.CertStore(key, ca, None, dhparams)


def _memory_file(data: bytes) -> str:
    """A path to ``data`` that exists in this process only (/proc/self/fd of a memfd:
    not a file any other process can open, the proxy being non-dumpable)."""
    fd = os.memfd_create("sandlock", 0)
    os.write(fd, data)
    return f"/proc/self/fd/{fd}"


def upstream_trust_file(system_bundle: bytes, extra_files: tuple[str, ...]) -> str:
    """The CAs trusted for upstream servers: the system's plus --upstream-ca files.
    (mitmproxy's option replaces its default bundle, certifi's, rather than adding.)"""
    parts = [system_bundle]
    for path in extra_files:
        with open(path, "rb") as file:
            parts.append(file.read())
    return _memory_file(b"\n".join(parts))


async def serve(addons: tuple, routes: RouteTable, listeners: list[socket.socket],
                certstore: certs.CertStore | None, upstream_ca: str, on_listening) -> None:
    """Serve until the process ends (``RouteTable`` ends it when sandlock hangs up).
    ``addons``: sandlock's, in the order they see each hook (the enforcer first)."""
    loop = asyncio.get_running_loop()
    opts = options.Options()
    proxy_master = master.Master(opts, event_loop=loop, with_termlog=False)
    server = proxyserver.Proxyserver()
    proxy_master.addons.add(core.Core(), server, next_layer.NextLayer(),
                            MemoryTlsConfig(certstore), *addons)
    opts.update(
        mode=[],  # no listener of mitmproxy's own: it serves sandlock's sockets (below)
        connection_strategy="lazy",  # decide on the ClientHello before any upstream connect
        rawtcp=False,  # bytes that are not HTTP or TLS are parsed as HTTP, and fail
        ssl_insecure=False,
        ssl_verify_upstream_trusted_ca=upstream_ca,
        http3=False,
        upstream_cert=False,  # the leaf is for the SNI name; no early upstream connect
    )
    platform.original_addr = lambda sock: routes.take(sock.getpeername()).destination
    instance = mode_servers.ServerInstance.make("transparent", server)
    servers = [await asyncio.start_server(instance.handle_stream, sock=s) for s in listeners]
    on_listening()
    try:
        await proxy_master.run()
    finally:
        for srv in servers:
            srv.close()
