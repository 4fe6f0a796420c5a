"""The proxy process: ``python -m sandlock.proxy._server CONTROL_FD LISTENER_FD...``.

Started by ``_launcher`` for runs with HTTP rules. In order: become non-dumpable (it
will hold the CA key), read the configuration, make the CA and the command's trust
bundle (the command may be waiting for it), confine itself (``_confine``), start
reading routes (a burst of connections must not fill the channel while mitmproxy
loads), then import mitmproxy and serve. It ends when sandlock hangs up the control
channel.

Decisions go back to sandlock on the same channel with blocking sends: a proxy whose
reports are not read yet waits (and so do its clients) rather than drop a record.
"""

from __future__ import annotations

import socket
import sys

from . import _protocol
from ._routes import RouteTable
from ._rules import HttpRules


def main(argv: list[str]) -> int:
    from sandlock.kernel import PR_SET_DUMPABLE, prctl

    prctl(PR_SET_DUMPABLE, 0)  # no /proc/PID/mem, environ or fd for anyone of this uid
    control_fd, *listener_fds = map(int, argv)
    control = socket.socket(fileno=control_fd)
    listeners = [socket.socket(fileno=fd) for fd in listener_fds]
    config = _protocol.config_from(_protocol.from_sandlock(control.recv(_protocol.MAX_MESSAGE)))
    from ._authority import prepare

    authority = prepare(config)  # reads a persistent or user CA, writes the trust bundle
    try:
        _confine(config)  # before any thread: Landlock binds the threads made after it
    except Exception as exc:  # noqa: BLE001 - reported to sandlock, which fails the run
        _send(control, _protocol.to_sandlock(_protocol.TRUST, error=f"HTTP proxy: {exc}"))
        return 1
    routes = RouteTable(control)
    routes.start()
    # The CA goes back to sandlock too (over this channel, never to disk): a proxy that
    # replaces this one, should it die, serves the certificates the command trusts.
    pem = authority.mitmproxy_pem.decode() if authority.mitmproxy_pem else None
    _send(control, _protocol.to_sandlock(_protocol.TRUST, error=authority.error, ca=pem))
    import asyncio  # only now: the command may be waiting for the trust message above

    try:
        rules = HttpRules.parse(config.allow, config.deny, config.auth)
        asyncio.run(_serve(config, rules, authority, control, routes, listeners))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - one line for the user; connections now fail closed
        print(f"sandlock: error: the HTTP proxy stopped: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        return 1
    return 0


async def _serve(config, rules, authority, control, routes, listeners) -> None:
    from . import _mitm
    from ._addon import Enforcer
    from ._idle import UpstreamIdle

    def report(**fields: object) -> None:
        _send(control, _protocol.to_sandlock(_protocol.AUDIT, **fields))

    certstore = _mitm.certstore_from_pem(authority.mitmproxy_pem) if authority.mitmproxy_pem else None
    enforcer = Enforcer(rules, config.inspect, certstore is not None, routes, report,
                        config.audit_allowed, config.secrets, config.auth_plain)
    upstream = _mitm.upstream_trust_file(_system_bundle(), config.upstream_ca)
    idle = UpstreamIdle(config.upstream_timeout, routes, report)
    await _mitm.serve((enforcer, idle), routes, listeners, certstore, upstream,
                      lambda: _send(control, _protocol.to_sandlock(_protocol.LISTENING)))


def _confine(config) -> None:
    from sandlock.ca import system_bundle

    from ._confine import confine_proxy

    bundle = system_bundle()
    confine_proxy(config, (*config.upstream_ca, *([str(bundle)] if bundle else [])))


def _send(control: socket.socket, message: bytes) -> None:
    try:
        control.send(message)  # blocking: see the module's docstring
    except OSError:
        pass  # sandlock is gone: the route reader ends this process


def _system_bundle() -> bytes:
    """The CAs this machine trusts, for verifying upstream servers."""
    from sandlock.ca import system_bundle

    path = system_bundle()
    return path.read_bytes() if path is not None else b""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
