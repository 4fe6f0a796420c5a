"""The upstream idle timeout (``--http-upstream-timeout``): a request whose upstream
sends nothing for that long is answered 504 by sandlock, and its connection closed.

mitmproxy waits for an upstream as long as the client does: its only timer closes a
client connection idle for 10 minutes, and an upstream that accepted a request and
never answers held it for as long as the client waited (290 s measured), two
descriptors and a flow each. Here each allowed request is watched from its headers on: any byte
of it that goes up, any byte of its response (or, on an HTTP/2 upstream, of any
response on that connection) is activity. Past the timeout without any, the upstream
connection's task is cancelled (a connect still pending, or a wait for the response),
and the stream's protocol error becomes a 504 with the reason in ``X-Sandlock-Timeout``
(``answer_idle``, installed by ``_mitm``); a response already begun is cut, as an
upstream that closed would cut it. Pass-through TLS (not inspected) is relayed as
bytes: nothing there says when an answer is due, so no timer runs on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping

from mitmproxy import http

from ._addon import header_safe
from ._routes import RouteTable

TIMEOUT_HEADER = "X-Sandlock-Timeout"
IDLE = "sandlock_upstream_idle"  # flow metadata: why it timed out (see answer_idle)
GATEWAY_TIMEOUT = 504
TIMEOUT_FLAG = "--http-upstream-timeout"


class _Watch:
    """One request: when anything last moved, and its timer."""

    __slots__ = ("flow", "last", "timer")

    def __init__(self, flow: http.HTTPFlow) -> None:
        self.flow = flow
        self.last = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None


class UpstreamIdle:
    """The addon (after the enforcer: it watches only requests that go upstream).
    ``report(**fields)`` tells sandlock (a notice, an audit record)."""

    def __init__(self, timeout: float, routes: RouteTable, report: Callable[..., None]) -> None:
        self._timeout = timeout
        self._routes = routes  # (the pid of who asked, for the audit log)
        self._report = report
        # client connection id -> {flow id -> its watch}, while the request waits upstream
        self._watches: dict[str, dict[str, _Watch]] = {}
        self._moved: dict[str, float] = {}  # upstream connection id -> last byte, any stream
        self._connections: Mapping[object, object] = {}  # mitmproxy's handlers, by client id

    def running(self) -> None:
        from mitmproxy import ctx

        self._connections = ctx.master.addons.get("proxyserver").connections

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.request.stream is not True:
            return  # answered by sandlock (denied): nothing goes upstream
        watch = self._watches.setdefault(flow.client_conn.id, {})[flow.id] = _Watch(flow)
        watch.timer = asyncio.get_running_loop().call_later(self._timeout, self._check, watch)
        flow.request.stream = self._passing(watch, upstream=False)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        watch = self._watches.get(flow.client_conn.id, {}).get(flow.id)
        if watch is not None and flow.response is not None:
            watch.last = self._moved[flow.server_conn.id] = time.monotonic()
            if flow.response.stream is True:
                flow.response.stream = self._passing(watch, upstream=True)

    def response(self, flow: http.HTTPFlow) -> None:
        self._forget(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._forget(flow)

    def server_disconnected(self, data: object) -> None:
        self._moved.pop(data.server.id, None)  # type: ignore[attr-defined]

    def _passing(self, watch: _Watch, upstream: bool) -> Callable[[bytes], bytes]:
        """The stream function of a request body (``upstream`` False) or a response
        body: each chunk, unchanged, is activity of the request, and a response's of
        its upstream connection (kept while it is open: server_disconnected)."""
        moved = self._moved

        def passing(data: bytes) -> bytes:
            watch.last = now = time.monotonic()
            if upstream:
                moved[watch.flow.server_conn.id] = now
            return data

        return passing

    def _check(self, watch: _Watch) -> None:
        flow = watch.flow
        if not flow.live:
            self._forget(flow)
            return
        last = max(watch.last, self._moved.get(flow.server_conn.id, 0.0))
        remaining = last + self._timeout - time.monotonic()
        if remaining > 0:
            watch.timer = asyncio.get_running_loop().call_later(remaining, self._check, watch)
            return
        self._expire(flow)

    def _expire(self, flow: http.HTTPFlow) -> None:
        """Cancel the upstream connection ``flow`` waits on. Every request waiting on
        it is cut with it: those of the same client on the same connection (HTTP/2
        streams) or, while it connects, on the same placeholder (mitmproxy opens a
        new connection object, which the flows learn only once it is up)."""
        address = flow.server_conn.address
        where = f"{address[0]}:{address[1]}" if address else "upstream"
        reason = f"the upstream {where} sent nothing for {self._timeout:g} s ({TIMEOUT_FLAG})"
        client, upstream = flow.client_conn, flow.server_conn
        for watch in [watch for watch in self._watches.get(client.id, {}).values()
                      if watch.flow.server_conn is upstream]:
            self._forget(watch.flow)
            watch.flow.metadata[IDLE] = reason
            self._tell(watch.flow, where, reason)
        handler = self._connections.get(client.id)
        transports = getattr(handler, "transports", {})
        cut = [upstream] if upstream in transports else [
            connection for connection in transports
            if connection is not client and not connection.connected
            and connection.address == address]
        for connection in cut:
            task = transports[connection].handler
            if task is not None:
                task.cancel(reason)  # -> the streams' protocol errors -> answer_idle

    def _tell(self, flow: http.HTTPFlow, where: str, reason: str) -> None:
        request = flow.request
        route = self._routes.get(flow.client_conn.id)
        self._report(event="upstream-timeout", pid=route.pid if route else 0, destination=where,
                     method=request.method, host=request.pretty_host,
                     path=request.path.split("?", 1)[0], reason=reason,
                     answered=flow.response is None)

    def _forget(self, flow: http.HTTPFlow) -> None:
        client = flow.client_conn.id
        watch = self._watches.get(client, {}).pop(flow.id, None)
        if watch is None:
            return
        if not self._watches[client]:
            del self._watches[client]
        if watch.timer is not None:
            watch.timer.cancel()


def install_answer() -> None:
    """The stream's protocol error, for a flow that timed out before its response
    began, becomes sandlock's 504 (mitmproxy's would be a 502 page, no reason)."""
    from mitmproxy.proxy.layers.http import HttpStream, ResponseProtocolError

    handle = HttpStream.handle_protocol_error

    def handle_protocol_error(self, event):
        flow = getattr(self, "flow", None)
        reason = flow.metadata.get(IDLE) if flow is not None else None
        if reason and isinstance(event, ResponseProtocolError) and flow.response is None:
            yield from answer_idle(self, reason)
        else:
            yield from handle(self, event)

    HttpStream.handle_protocol_error = handle_protocol_error


def answer_idle(stream, reason: str) -> Iterator[object]:
    """(An HttpStream's commands) the 504 for ``reason``: as a response of its own when
    the request was read whole; else sent, and the client's connection closed (the
    rest of its request has nowhere to go)."""
    from mitmproxy.net.http import status_codes
    from mitmproxy.proxy.layers.http import (
        DropStream,
        ResponseData,
        ResponseHeaders,
        ResponseProtocolError,
        SendHttp,
    )

    flow = stream.flow
    request = flow.request
    shown = f"{request.method} {request.pretty_host}{request.path.split('?', 1)[0]}"
    text = f"sandlock: {shown}: {reason}\n"
    flow.response = http.Response.make(GATEWAY_TIMEOUT, text.encode(), {
        "Content-Type": "text/plain; charset=utf-8", TIMEOUT_HEADER: header_safe(reason),
        "Connection": "close"})
    if stream.client_state == stream.state_done:
        yield from stream.send_response()
        return
    client = stream.context.client
    yield SendHttp(ResponseHeaders(stream.stream_id, flow.response, end_stream=False), client)
    yield SendHttp(ResponseData(stream.stream_id, flow.response.raw_content), client)
    yield SendHttp(ResponseProtocolError(stream.stream_id, reason, status_codes.NO_RESPONSE),
                   client)
    stream.client_state = stream.server_state = stream.state_errored
    flow.live = False
    yield DropStream(stream.stream_id)
