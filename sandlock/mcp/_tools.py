"""The tools' schemas, as the client lists them (docs/mcp.md quotes them)."""

from __future__ import annotations

from mcp import types

RUN_COMMAND = types.Tool(
    name="run_command",
    description=(
        "Run a bash command line in sandlock's sandbox, in the workspace directory (or "
        "`cwd` beneath it). The line is first vetted (no `cd` out of the workspace, no "
        "writes outside it, no code built at run time): a refusal says why. The result "
        "gives the exit status, stdout and stderr (cut at the server's cap, saying so) "
        "and what the sandbox denied (paths, connections, DNS lookups, HTTP requests): "
        "a denial is the policy's decision, so ask the user to widen it instead of retrying."),
    inputSchema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the bash command line"},
            "cwd": {"type": "string",
                    "description": "directory to run in, relative to the workspace (default: its root)"},
            "timeout": {"type": "number", "exclusiveMinimum": 0,
                        "description": "seconds (default and most: the server's timeout)"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)

RUN_PYTHON = types.Tool(
    name="run_python",
    description=(
        "Run Python code in a confined interpreter that lasts for the session: variables, "
        "functions and imports stay defined from one call to the next. The value of a last "
        "expression comes back as its repr, with what the code printed (its subprocesses' "
        "output included, cut at the server's cap) and the traceback of an exception. Same "
        "sandbox rules and denial reports as run_command; a timeout or a cancellation "
        "ends the interpreter, and its state with it."),
    inputSchema={
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source: statements, optionally ending in an expression"},
            "timeout": {"type": "number", "exclusiveMinimum": 0,
                        "description": "seconds (default and most: the server's timeout)"},
        },
        "required": ["code"],
        "additionalProperties": False,
    },
)


def _workspace_tool(name: str, description: str) -> types.Tool:
    return types.Tool(name=name, description=description,
                      inputSchema={"type": "object", "properties": {}, "additionalProperties": False})


# With --workdir: the calls' writes are held in a copy-on-write layer until one of these.
WORKSPACE_TOOLS = (
    _workspace_tool("workspace_diff", "List what the commands changed in the workspace so far, "
                    "not yet applied: one line per path, A added, M modified, D deleted, with "
                    "the new size."),
    _workspace_tool("workspace_commit", "Apply the commands' changes to the real directory "
                    "(what changed there meanwhile is left aside and named). Only when the user "
                    "asked for it."),
    _workspace_tool("workspace_abort", "Discard every change the commands made since the last "
                    "commit or abort: the directory stays as it was."),
)


def without(tool: types.Tool, fixed: tuple[str, ...]) -> types.Tool:
    """``tool`` as the client sees it when the policy fixes some call options: they are
    not in its schema (and the schema admits no other properties)."""
    if not fixed:
        return tool
    schema = dict(tool.inputSchema)
    schema["properties"] = {name: spec for name, spec in schema["properties"].items() if name not in fixed}
    return tool.model_copy(update={"inputSchema": schema})
