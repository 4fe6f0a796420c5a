"""The proxy process: ``python -m sandlock.proxy._server CONTROL_FD LISTENER_FD...``.

Started by ``_launcher`` for runs with HTTP rules. In order: become non-dumpable (it
will hold the CA key), read the configuration, make the CA and the command's trust
bundle (the command may be waiting for it), then import mitmproxy and serve until
sandlock hangs up.
"""

from __future__ import annotations

import socket
import sys

from . import _protocol
from ._rules import HttpRules


def main(argv: list[str]) -> int:
    from sandlock._libc import PR_SET_DUMPABLE, prctl

    prctl(PR_SET_DUMPABLE, 0)  # no /proc/PID/mem, environ or fd for anyone of this uid
    control_fd, *listener_fds = map(int, argv)
    control = socket.socket(fileno=control_fd)
    listeners = [socket.socket(fileno=fd) for fd in listener_fds]
    config = _protocol.config_from(_protocol.decode(control.recv(_protocol.MAX_MESSAGE)))
    rules = HttpRules.parse(config.allow, config.deny)
    from ._authority import prepare

    authority = prepare(config, rules)
    control.send(_protocol.encode(_protocol.TRUST, error=authority.error))
    control.setblocking(False)
    import asyncio  # only now: the command may be waiting for the trust message above

    try:
        asyncio.run(_serve(config, rules, authority, control, listeners))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - one line for the user; connections now fail closed
        print(f"sandlock: error: the HTTP proxy stopped: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 1
    return 0


async def _serve(config, rules, authority, control, listeners) -> None:
    from . import _mitm
    from ._addon import Enforcer
    from ._routes import RouteTable

    routes = RouteTable(control)

    def report(**fields: object) -> None:
        try:
            control.send(_protocol.encode(_protocol.AUDIT, **fields))
        except OSError:
            pass  # sandlock is gone: nobody to tell, and we stop on the EOF

    certstore = _mitm.certstore_from_pem(authority.mitmproxy_pem) if authority.mitmproxy_pem else None
    enforcer = Enforcer(rules, config.inspect, certstore is not None, routes, report,
                        config.audit_allowed)
    upstream = _mitm.upstream_trust_file(_system_bundle(), config.upstream_ca)
    await _mitm.serve(enforcer, routes, listeners, certstore, upstream,
                      lambda: report_listening(control))


def report_listening(control: socket.socket) -> None:
    try:
        control.send(_protocol.encode(_protocol.LISTENING))
    except OSError:
        pass


def _system_bundle() -> bytes:
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, "/etc/ssl/certs/ca-certificates.crt",
                      "/etc/pki/tls/certs/ca-bundle.crt"):
        if candidate:
            try:
                with open(candidate, "rb") as file:
                    return file.read()
            except OSError:
                continue
    return b""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
