"""Driving `sandlock mcp` with the MCP SDK's own client over stdio (tests only)."""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from conftest import SANDLOCK


@asynccontextmanager
async def connected(args, *, cwd, home=None, errlog=None, wrap=None, command=None, env=None):
    """A ClientSession with `sandlock mcp ARGS` (or ``command``) run in ``cwd``, with
    HOME=``home`` and ``env`` added to this environment; ``wrap`` prefixes the argv
    (setpriv, for the unprivileged cases)."""
    argv = list(command or [*SANDLOCK, "mcp", *args])
    if wrap is not None:
        argv = wrap(argv)
    env = {**os.environ, **(env or {})}
    if home is not None:
        env["HOME"] = str(home)
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(cwd), env=env)
    async with stdio_client(params, errlog=errlog or sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def run(scenario, *args, **kwargs):
    """anyio.run(scenario(session)) against a server started as ``connected`` says."""

    async def main():
        with anyio.fail_after(120):
            async with connected(*args, **kwargs) as session:
                return await scenario(session)

    return anyio.run(main)


async def command(session, line, **arguments):
    """run_command's result: (isError, structuredContent or None, text)."""
    result = await session.call_tool("run_command", {"command": line, **arguments})
    return result.isError, result.structuredContent, result.content[0].text


async def cancel(session, request_id):
    await session.send_notification(types.ClientNotification(types.CancelledNotification(
        params=types.CancelledNotificationParams(requestId=request_id, reason="test"))))
