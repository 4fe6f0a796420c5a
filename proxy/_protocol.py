"""What sandlock and its proxy process say to each other, over one SOCK_SEQPACKET pair.

sandlock -> proxy: ``config`` once, then a ``route`` before each connection it steers
to the proxy (the original destination and the names pinned to it). The route is
sent before the connect, so it is already queued when the proxy accepts.

proxy -> sandlock: ``trust`` once the CA and the command's trust bundle are ready (or
could not be made), ``listening`` once it accepts, and ``audit`` for request decisions.

Messages are one dict each: ``{"kind": ..., ...}``, read by code that checks types on
receipt. sandlock's are marshal'd: the proxy trusts the process that made it, and
marshal costs sandlock no import before the command starts (json, with re, ~3 ms). The
proxy's are JSON: sandlock reads what a process handling hostile traffic says, so it
reads them with a parser that builds only plain values, and any input it refuses is
skipped.
"""

from __future__ import annotations

import marshal
import select

from .._record import field, record, values_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Iterator

MAX_MESSAGE = 1 << 20  # a config with thousands of rules still fits

CONFIG = "config"
ROUTE = "route"
TRUST = "trust"
LISTENING = "listening"
AUDIT = "audit"


@record
class Route:
    """One steered connection: who connects (as the proxy sees it), where it meant to go."""

    peer: tuple[str, int]  # the child's socket address, bound by the supervisor
    destination: tuple[str, int]  # the pinned address and port it connected to
    names: tuple[str, ...]  # the names pinned to that address (Host and SNI must be one)
    pid: int = 0  # the thread that connected, for the audit log
    # The HTTP rules (allow, deny texts) of each nested sandbox the thread is in: a
    # request must pass them too.
    nested: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()


@record
class ProxyConfig:
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    inspect: str  # "auto" | "on" | "off"
    upstream_ca: tuple[str, ...] = ()  # extra CA files trusted for upstream servers
    audit_allowed: bool = False  # also report allowed requests (an --audit log exists)
    ca: dict = field(factory=dict)  # how to get the CA (see _authority)
    run_dir: str = ""  # private per-run directory for the command's trust bundle
    ports: tuple[int, ...] = ()  # the upstream TCP ports it may connect to (--http-port)
    best_effort: bool = False  # confine the proxy with what the kernel has
    auth: tuple[str, ...] = ()  # --http-auth rule texts
    # credential name -> secret: sent over the control channel only; never in a repr
    secrets: dict = field(factory=dict, repr=False)
    auth_plain: bool = False  # credentials may go over plain HTTP too
    upstream_timeout: float = 120.0  # seconds an upstream may send nothing (_idle)


def to_proxy(kind: str, **payload: object) -> bytes:
    return marshal.dumps({"kind": kind, **payload})


def from_sandlock(data: bytes) -> dict:
    try:
        return _checked(marshal.loads(data))
    except (EOFError, TypeError) as exc:
        raise ValueError(f"malformed control message: {exc}") from None


def to_sandlock(kind: str, **payload: object) -> bytes:
    import json  # the proxy's side

    return json.dumps({"kind": kind, **payload}, separators=(",", ":")).encode()


def from_proxy(data: bytes) -> dict:
    import json  # on sandlock's reader thread, after the command started

    try:
        return _checked(json.loads(data))
    except RecursionError:  # nested past the interpreter's limit: not a message of ours
        raise ValueError("malformed control message: nested too deep") from None


def _checked(message: object) -> dict:
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise ValueError("malformed control message")
    return message


def receive(channel: socket.socket, decode: Callable[[bytes], dict]) -> Iterator[dict]:
    """Each message arriving on ``channel`` (blocking or not), read by ``decode``
    (``from_sandlock`` or ``from_proxy``), until the other side hangs up or the channel
    fails. A malformed message is skipped: neither side trusts the other's bytes blindly."""
    poller = select.poll()
    poller.register(channel, select.POLLIN)
    while True:
        poller.poll()
        try:
            data = channel.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            return
        if not data:
            return
        try:
            yield decode(data)
        except ValueError:
            continue


def route_message(route: Route) -> bytes:
    return to_proxy(ROUTE, peer=route.peer, destination=route.destination, names=route.names,
                    pid=route.pid, nested=route.nested)


def route_from(message: dict) -> Route:
    peer, destination, names = message["peer"], message["destination"], message["names"]
    nested = tuple((_strings(allow, "nested"), _strings(deny, "nested"))
                   for allow, deny in message.get("nested", ()))
    return Route(_address(peer), _address(destination), tuple(str(n) for n in names),
                 int(message.get("pid", 0)), nested)


def config_message(config: ProxyConfig) -> bytes:
    return to_proxy(CONFIG, config=values_of(config))


def config_from(message: dict) -> ProxyConfig:
    raw = message["config"]
    return ProxyConfig(
        allow=tuple(raw["allow"]), deny=tuple(raw["deny"]), inspect=str(raw["inspect"]),
        upstream_ca=tuple(raw["upstream_ca"]), audit_allowed=bool(raw["audit_allowed"]),
        ca=dict(raw["ca"]), run_dir=str(raw["run_dir"]),
        ports=tuple(int(port) for port in raw.get("ports", ())),
        best_effort=bool(raw.get("best_effort", False)),
        auth=_strings(raw.get("auth", ()), "auth"), secrets=_secrets(raw.get("secrets", {})),
        auth_plain=raw.get("auth_plain", False) is True,
        upstream_timeout=float(raw.get("upstream_timeout", ProxyConfig.upstream_timeout)),
    )


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"config: {what} must be a list of strings")
    return tuple(value)


def _secrets(value: object) -> dict[str, str]:
    """Names and values are checked for type only: an error shows neither value."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError("config: secrets must map credential names to strings")
    return dict(value)


def _address(value: object) -> tuple[str, int]:
    host, port = value  # type: ignore[misc]
    return str(host), int(port)
