"""The recipe of docs/mcp.md: a third-party MCP server (here a FastMCP server of the
SDK's, written as the test's own script) confined by `sandlock run --policy p.toml --
python server.py`, driven by the SDK's client over the stdio sandlock passes through.
The policy allows its one directory and one API host; what it tries past them is
denied, and said on stderr and in the audit log."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("mcp")

from conftest import CHECKOUT, PYTHON, SANDLOCK  # noqa: E402
from mcpclient import run  # noqa: E402

SERVER = '''
import urllib.request
from mcp.server.fastmcp import FastMCP

server = FastMCP("files-and-api")


@server.tool()
def read_file(path: str) -> str:
    """The text of a file."""
    with open(path) as file:
        return file.read()


@server.tool()
def fetch(url: str) -> str:
    """GET url; the status."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.status)


server.run()
'''


@pytest.fixture
def place(unscratched, upstreams):
    allowed, _ = upstreams
    data, secret = unscratched / "data", unscratched / "secret.txt"
    data.mkdir()
    (data / "notes.txt").write_text("allowed notes\n")
    secret.write_text("SECRET\n")
    script = unscratched / "server.py"
    script.write_text(SERVER)
    system = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
    policy = unscratched / "p.toml"
    policy.write_text(f"[filesystem]\nread = {json.dumps([*system, *PYTHON, CHECKOUT, str(script)])}\n"
                      f"write = {json.dumps([str(data)])}\n"
                      f"[network]\nallow = [\"127.0.0.2:{allowed.port}\"]\n")
    os.chmod(policy, 0o644)
    return unscratched, script, policy, data, secret


async def use(session, data, secret, upstreams):
    allowed, denied = upstreams
    names = [tool.name for tool in (await session.list_tools()).tools]
    calls = {}
    for name, tool, arguments in (
            ("notes", "read_file", {"path": str(data / "notes.txt")}),
            ("secret", "read_file", {"path": str(secret)}),
            ("api", "fetch", {"url": f"http://127.0.0.2:{allowed.port}/api"}),
            ("elsewhere", "fetch", {"url": f"http://127.0.0.3:{denied.port}/exfiltrate"})):
        result = await session.call_tool(tool, arguments)
        calls[name] = (result.isError, result.content[0].text)
    return names, calls


def test_a_confined_third_party_server(place, upstreams, tmp_path):
    where, script, policy, data, secret = place
    audit, errors = tmp_path / "audit.jsonl", tmp_path / "stderr"
    command = [*SANDLOCK, "run", "--policy", str(policy), "--audit", str(audit), "--",
               sys.executable, str(script)]

    async def scenario(session):
        return await use(session, data, secret, upstreams)

    with open(errors, "w") as errlog:
        names, calls = run(scenario, [], cwd=where, command=command, errlog=errlog)
    assert names == ["read_file", "fetch"]
    assert calls["notes"] == (False, "allowed notes\n")
    assert calls["secret"][0] and "Permission denied" in calls["secret"][1]
    assert calls["api"] == (False, "200")
    assert calls["elsewhere"][0] and "Permission denied" in calls["elsewhere"][1]
    allowed, denied = upstreams
    assert allowed.paths() == ["/api"] and denied.paths() == []
    said = errors.read_text()
    assert f"sandlock: denied connect to 127.0.0.3:{denied.port} (no --net-allow rule)" in said
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r.get("destination") == f"127.0.0.3:{denied.port}" and r["verdict"] == "deny"
               for r in records)


def test_control_unconfined_the_same_server_reaches_both(place, upstreams):
    where, script, _, data, secret = place

    async def scenario(session):
        return await use(session, data, secret, upstreams)

    _, calls = run(scenario, [], cwd=where, command=[sys.executable, str(script)])
    assert calls["secret"] == (False, "SECRET\n")
    assert calls["elsewhere"] == (False, "200")
