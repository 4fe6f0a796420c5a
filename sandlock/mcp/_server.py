"""The MCP server over stdio: its tools, and each call's way from the request to the
result and the audit log. Nothing but the protocol reaches stdout: the descriptor the
client reads is set aside, and descriptor 1 becomes stderr for everything else."""

from __future__ import annotations

import os
import sys
import threading
from io import TextIOWrapper

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from .. import shellpolicy
from .._errors import PolicyError, SandlockError, visible
from . import _command, _report
from ._python import PythonSession
from ._tools import RUN_COMMAND, RUN_PYTHON, WORKSPACE_TOOLS, without
from ._workspace import SessionWorkspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._settings import Settings

_VETTING = threading.Lock()  # one tree-sitter parse at a time (its parser is shared)


class Session:
    """The tools of one server session, over its settings."""

    def __init__(self, settings: Settings, tools: Mapping[str, Settings] | None = None) -> None:
        self.settings = settings
        self._tools = dict(tools or {})  # a tool's own settings ([mcp] TOOL = "PROFILE")
        self.workspace = SessionWorkspace(settings) if settings.policy.workdir else None
        self._python: PythonSession | None = None

    def settings_for(self, tool: str) -> Settings:
        return self._tools.get(tool, self.settings)

    def tools(self) -> list[types.Tool]:
        listed = [without(RUN_COMMAND, self.settings.fixed), without(RUN_PYTHON, self.settings.fixed)]
        return [*listed, *(WORKSPACE_TOOLS if self.workspace else ())]

    async def call(self, name: str, arguments: dict, request_id: object) -> types.CallToolResult:
        if name == "run_command":
            return await self.run_command(arguments, request_id)
        if name == "run_python":
            return await self.run_python(arguments, request_id)
        if self.workspace is not None and name in ("workspace_diff", "workspace_commit", "workspace_abort"):
            return await self.workspace_tool(name, request_id)
        return _error(f"no tool named {name!r}")

    async def workspace_tool(self, name: str, request_id: object) -> types.CallToolResult:
        action = getattr(self.workspace, name.removeprefix("workspace_"))
        try:
            lines = await anyio.to_thread.run_sync(action)
        except (SandlockError, OSError) as exc:
            self._log({"tool": name, "request_id": request_id}, outcome="failed", reason=str(exc))
            return _error(f"{name}: {exc}")
        self._log({"tool": name, "request_id": request_id}, outcome="done", lines=len(lines))
        text = "\n".join(lines) if lines else "no changes"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structuredContent={"lines": list(lines)})

    def close(self) -> None:
        if self._python is not None:
            self._python.close()
        if self.workspace is not None:
            said = self.workspace.close()
            if said:
                print(visible(said), file=sys.stderr)

    async def run_command(self, arguments: dict, request_id: object) -> types.CallToolResult:
        command = arguments["command"]
        call = {"tool": "run_command", "request_id": request_id, "command": command}
        settings = self.settings_for("run_command")
        try:
            cwd = settings.call_cwd(arguments.get("cwd"))
            timeout = settings.call_timeout(arguments.get("timeout"))
        except PolicyError as exc:
            return self._refused(call, str(exc))
        decision = await anyio.to_thread.run_sync(_vet, command)
        if not decision.allowed:
            return self._refused(call, f"refused by sandlock vet ({decision.code}): {decision.reason}")
        if self.workspace is not None:
            workspace = self.workspace

            def execute(handle: _command.Handle) -> _command.Outcome:
                return workspace.run(command, cwd, timeout, handle)
        else:
            def execute(handle: _command.Handle) -> _command.Outcome:
                return _command.run(settings.policy, command, cwd, settings.root, timeout,
                                    settings.output_cap, handle, quiet=settings.quiet,
                                    policy_files=settings.policy_files)
        return await self._execute(call, execute, cwd, settings)

    async def run_python(self, arguments: dict, request_id: object) -> types.CallToolResult:
        code = arguments["code"]
        call = {"tool": "run_python", "request_id": request_id, "code": code}
        settings = self.settings_for("run_python")
        try:
            timeout = settings.call_timeout(arguments.get("timeout"))
        except PolicyError as exc:
            return self._refused(call, str(exc))
        if self.workspace is not None:
            run = self.workspace.python
        else:
            self._python = self._python or PythonSession(settings)
            run = self._python.run
        return await self._execute(call, lambda handle: run(code, timeout, handle), settings.root,
                                   settings)

    async def _execute(self, call: dict, execute: Callable[[_command.Handle], _command.Outcome],
                       cwd: str, settings: Settings) -> types.CallToolResult:
        """``execute(handle)`` in a worker thread; the client's cancellation kills what
        it started (through ``handle``) before the call is over."""
        handle = _command.Handle()
        try:
            outcome = await anyio.to_thread.run_sync(lambda: execute(handle), abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            handle.kill()  # the client cancelled: the call's whole tree goes
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(handle.finished.wait)
            self._log(call, outcome="cancelled")
            raise
        except SandlockError as exc:
            return self._refused(call, f"the sandbox could not be set up: {exc}")
        data = _report.result(outcome, cwd, settings.output_cap)
        self._log(call, outcome="limit" if "limits" in data else "ran", exit_code=outcome.exit_code,
                  denied=len(data["denied"]), records=outcome.records)
        return types.CallToolResult(content=[types.TextContent(type="text", text=_report.text(data))],
                                    structuredContent=data, isError="limits" in data or "error" in data)

    def _refused(self, call: dict, message: str) -> types.CallToolResult:
        self._log(call, outcome="refused", reason=message)
        return _error(message)

    def _log(self, call: dict, *, records: list[dict] = (), **details: object) -> None:
        """The call, then its own audit records, each with the client's request id."""
        audit = self.settings.audit
        if audit is None:
            return
        audit.write({"event": "mcp", **call, **details})
        for record in records:
            audit.write({**record, "tool": call["tool"], "request_id": call["request_id"]})


def _vet(command: str) -> shellpolicy.Decision:
    with _VETTING:
        return shellpolicy.decide(command)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], isError=True)


def build(session: Session) -> Server:
    server: Server = Server("sandlock", instructions=(
        "Commands run confined by sandlock: a result lists what the sandbox denied; "
        "ask the user to widen the policy rather than retrying a denied access."))

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return session.tools()

    @server.call_tool()
    async def call_tool(name: str, arguments: dict) -> types.CallToolResult:
        return await session.call(name, arguments, server.request_context.request_id)

    return server


def serve(settings: Settings, tools: Mapping[str, Settings] | None = None) -> int:
    """Serve one client on stdin/stdout until it closes them; ``tools``: the settings of
    the tools that have their own ([mcp] TOOL = "PROFILE")."""
    protocol = os.dup(1)
    os.dup2(2, 1)  # a stray print, ours or a library's, lands on stderr, not in the protocol
    sys.stdout = sys.stderr
    out = anyio.wrap_file(TextIOWrapper(os.fdopen(protocol, "wb", buffering=0), encoding="utf-8",
                                        write_through=True))
    session = Session(settings, tools)
    server = build(session)

    async def main() -> None:
        async with stdio_server(stdout=out) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # a broken pipe, the client gone: one line, no traceback
        print(f"sandlock: mcp: stopped: {visible(repr(exc))}", file=sys.stderr)
        return 1
    finally:
        session.close()
    return 0
