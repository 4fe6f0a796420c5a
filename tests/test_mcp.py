"""`sandlock mcp` driven by the MCP SDK's own client over stdio: what the model can do,
what it is denied and told, and what it cannot make the server do (docs/mcp.md).
Network only on loopback: 127.0.0.2 is the allowed upstream, 127.0.0.3 the denied."""

from __future__ import annotations

import json
import os
import subprocess

import anyio
import pytest

pytest.importorskip("mcp")

from conftest import SANDLOCK, _cmdline, unique_sleep, users, wait_no_process  # noqa: E402
from mcpclient import cancel, command, run  # noqa: E402


def running(*argv: str) -> bool:
    wanted = b"\0".join(arg.encode() for arg in argv) + b"\0"
    return any(_cmdline(entry) == wanted for entry in os.listdir("/proc") if entry.isdigit())


@pytest.fixture
def place(unscratched):
    """A fake HOME holding an SSH key, and a project beside it (the server's cwd); both
    outside /tmp, which every run has its own of."""
    home, project = unscratched / "home", unscratched / "project"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    project.mkdir()
    (project / "notes.txt").write_text("hello\n")
    for path in (unscratched, home, home / ".ssh", project):
        os.chmod(path, 0o777)
    os.chmod(home / ".ssh" / "id_ed25519", 0o644)  # the sandbox, not the mode, must refuse it
    return home, project


def test_lists_run_command(place):
    home, project = place

    async def scenario(session):
        return (await session.list_tools()).tools

    tools = run(scenario, [], cwd=project, home=home)
    assert [tool.name for tool in tools] == ["run_command", "run_python"]
    schema = tools[0].inputSchema
    assert schema["required"] == ["command"] and set(schema["properties"]) == {"command", "cwd", "timeout"}


def test_a_permitted_command_runs_and_writes_the_workspace(place):
    home, project = place

    async def scenario(session):
        return await command(session, "cat notes.txt; cp notes.txt made.txt; echo oops >&2; exit 3")

    failed, data, text = run(scenario, [], cwd=project, home=home)
    assert not failed and data["exit_code"] == 3
    assert data["stdout"] == "hello\n" and data["stderr"] == "oops\n" and data["denied"] == []
    assert (project / "made.txt").read_text() == "hello\n"
    assert text.startswith("exit status 3")


@users
def test_the_ssh_key_is_denied_and_the_denial_reported(place, as_nobody_or_self):
    home, project = place

    async def scenario(session):
        return await command(session, "cat ~/.ssh/id_ed25519")

    failed, data, text = run(scenario, [], cwd=project, home=home, wrap=as_nobody_or_self)
    assert "PRIVATE KEY" not in data["stdout"] and data["exit_code"] == 1
    key = str(home / ".ssh" / "id_ed25519")
    assert {"kind": "path", "path": key, "source": "the command's error message"} in data["denied"]
    assert key in text and "ask the user to widen it" in text


def test_control_a_wider_policy_reads_home_but_never_the_key(place):
    """The server runs calls under the policy it was given: with -r HOME a file there
    is read (and nothing reported), while ~/.ssh stays denied in every policy."""
    home, project = place
    (home / "notes").write_text("plain\n")
    os.chmod(home / "notes", 0o644)

    async def scenario(session):
        return (await command(session, "cat ~/notes"), await command(session, "cat ~/.ssh/id_ed25519"))

    (_, notes, _), (_, key, _) = run(scenario, ["-r", str(home), "-r", "/usr", "-r", "/lib", "-r", "/lib64",
                                                "-r", "/etc", "-r", "/bin", "-w", str(project)],
                                     cwd=project, home=home)
    assert notes["stdout"] == "plain\n" and notes["denied"] == []
    assert key["stdout"] == "" and key["denied"][0]["path"] == str(home / ".ssh" / "id_ed25519")


@users
def test_a_denied_connect_and_a_denied_lookup_are_reported(place, upstreams, as_nobody_or_self):
    home, project = place
    allowed, denied = upstreams
    curl = "curl -s -o /dev/null -w '%{http_code}\\n' --max-time 5"

    async def scenario(session):
        return await command(session, f"{curl} http://127.0.0.2:{allowed.port}/ok; "
                             f"{curl} http://127.0.0.3:{denied.port}/no; "
                             "getent hosts forbidden.example; true")

    failed, data, text = run(scenario, ["--net-allow", f"127.0.0.2:{allowed.port}"],
                             cwd=project, home=home, wrap=as_nobody_or_self)
    assert data["stdout"].startswith("200\n")  # control: the allowed one went through
    assert allowed.paths() == ["/ok"] and denied.paths() == []
    assert {"kind": "connect", "protocol": "tcp", "destination": f"127.0.0.3:{denied.port}",
            "reason": "no --net-allow rule"} in data["denied"]
    assert any(entry["kind"] == "lookup" and entry["name"] == "forbidden.example"
               for entry in data["denied"])
    assert not any(f"127.0.0.2:{allowed.port}" in json.dumps(entry) for entry in data["denied"])
    assert f"connect to 127.0.0.3:{denied.port}" in text and "DNS lookup of forbidden.example" in text


def test_a_denied_http_request_is_reported(place):
    """HTTP rules: the proxy's decision comes back with the call (method, host, path)."""
    from httpservers import Upstream, free_port_on

    home, project = place
    port = free_port_on("127.0.0.2")
    curl = "curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10"

    async def scenario(session):
        return await command(session, f"{curl} http://api.test:{port}/repos/x; {curl} http://api.test:{port}/user")

    with Upstream("127.0.0.2", port, name="api") as api:
        failed, data, text = run(scenario, ["--resolve", "api.test=127.0.0.2", "--http-port", str(port),
                                            "--https-inspect", "off", "--http-allow", "GET api.test/repos/*"],
                                 cwd=project, home=home)
        assert api.paths() == ["/repos/x"]  # control: the allowed request went through
    assert data["stdout"] == "200\n403\n"
    assert {"kind": "http", "method": "GET", "host": "api.test", "path": "/user",
            "reason": "no --http-allow rule matches"} in data["denied"]
    assert "HTTP GET api.test/user (no --http-allow rule matches)" in text


def test_a_refused_command_never_runs(place):
    home, project = place

    async def scenario(session):
        refused = await command(session, "cd .. && touch escaped")
        control = await command(session, "touch ran")
        return refused, control

    (failed, data, text), control = run(scenario, [], cwd=project, home=home)
    assert failed and data is None and text.startswith("refused by sandlock vet (cd): ")
    assert not (project.parent / "escaped").exists()
    assert not control[0] and (project / "ran").exists()


def test_calls_run_concurrently(place):
    """The first call waits for a file only the second one makes: one at a time, it
    would wait until its timeout."""
    home, project = place

    async def scenario(session):
        results = {}

        async def one(name, line):
            results[name] = await command(session, line, timeout=30)

        async with anyio.create_task_group() as group:
            group.start_soon(one, "waiter", "until [ -e flag ]; do sleep 0.05; done; echo seen")
            await anyio.sleep(0.5)
            group.start_soon(one, "maker", "touch flag")
        return results

    results = run(scenario, [], cwd=project, home=home)
    assert results["waiter"][1]["stdout"] == "seen\n" and not results["waiter"][0]
    assert results["maker"][1]["exit_code"] == 0


def test_cancellation_kills_the_calls_process_tree(place):
    home, project = place
    marker = unique_sleep()

    async def scenario(session):
        request_id = session._request_id  # the id the next request gets
        outcome = {}

        async def call():
            try:
                outcome["result"] = await command(session, f"sh -c 'sleep {marker}' & wait", timeout=60)
            except Exception as error:  # the server answers a cancelled request with an error
                outcome["error"] = error

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(20):
                while not running("sleep", marker):
                    await anyio.sleep(0.05)  # control: the process exists before the cancel
            await cancel(session, request_id)
        return outcome

    outcome = run(scenario, [], cwd=project, home=home)
    assert "result" not in outcome
    assert wait_no_process("sleep", marker, seconds=10)


def test_a_timeout_is_the_tools_error_naming_the_limit(place):
    home, project = place
    marker = unique_sleep()

    async def scenario(session):
        return await command(session, f"echo started; sleep {marker}", timeout=1)

    failed, data, text = run(scenario, [], cwd=project, home=home)
    assert failed and data["exit_code"] == 124 and data["stdout"] == "started\n"
    assert [limit["limit"] for limit in data["limits"]] == ["timeout"]
    assert "limit reached: timeout" in text
    assert wait_no_process("sleep", marker, seconds=10)


def test_output_is_cut_at_the_cap_saying_so(place):
    home, project = place

    async def scenario(session):
        big = await command(session, "head -c 5000 /dev/zero | tr '\\0' x")
        small = await command(session, "echo small")
        return big, small

    (failed, data, text), small = run(scenario, ["--max-output", "1K"], cwd=project, home=home)
    assert data["stdout"] == "x" * 1024
    assert data["truncated"] == {"stdout": "cut at 1024 bytes: 3976 more bytes dropped"}
    assert "[stdout cut at 1024 bytes: 3976 more bytes dropped]" in text
    assert small[1]["stdout"] == "small\n" and "truncated" not in small[1]


def test_every_call_is_audited_with_the_request_id(place, upstreams):
    home, project = place
    _, denied = upstreams
    audit = project.parent / "audit.jsonl"

    async def scenario(session):
        await command(session, "echo one")
        await command(session, f"curl -s --max-time 5 http://127.0.0.3:{denied.port}/ ; true")
        await command(session, "cd /")

    run(scenario, ["--audit", str(audit)], cwd=project, home=home)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    calls = [r for r in records if r.get("event") == "mcp"]
    assert [(c["command"], c["outcome"]) for c in calls] == [
        ("echo one", "ran"), (calls[1]["command"], "ran"), ("cd /", "refused")]
    ids = [c["request_id"] for c in calls]
    assert len(set(ids)) == 3
    connect = [r for r in records if r.get("destination") == f"127.0.0.3:{denied.port}"]
    # The default policy's private network: the connect is the sandbox's own ("allow"),
    # and nothing listens there ("refused").
    assert connect and all(r["request_id"] == ids[1] for r in connect)
    assert [r["verdict"] for r in connect] == ["allow", "refused"]


def test_stdout_carries_nothing_but_the_protocol(place):
    """sandlock's notices (a denial) go to stderr; every stdout line is a JSON-RPC message."""
    home, project = place
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_command", "arguments": {"command": "cat ~/.ssh/id_ed25519; getent hosts x.example; true"}}},
    ]
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    server = subprocess.Popen([*SANDLOCK, "mcp"], cwd=project, env={**os.environ, "HOME": str(home)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    server.stdin.write(stdin)
    server.stdin.flush()
    lines = []
    while len(lines) < 2:
        lines.append(server.stdout.readline())
    rest, stderr = server.communicate(timeout=30)
    replies = [json.loads(line) for line in [*lines, *rest.splitlines()] if line]
    assert [reply["id"] for reply in replies] == [1, 2]
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    assert "denied lookup of x.example" in stderr  # the notice, on stderr
    assert "x.example" in replies[1]["result"]["content"][0]["text"]


# --- docs/mcp.md ------------------------------------------------------------------------

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "mcp.md")


def _blocks(kind: str) -> list[str]:
    import re

    with open(DOC) as doc:
        return re.findall(rf"^```{kind}\n(.*?)^```$", doc.read(), re.M | re.S)


def test_the_docs_json_is_json_and_the_schema_is_the_tools():
    from sandlock.mcp._tools import RUN_COMMAND, RUN_PYTHON

    blocks = [json.loads(block) for block in _blocks("json")]
    assert RUN_COMMAND.inputSchema in blocks and RUN_PYTHON.inputSchema in blocks
    servers = [block["mcpServers"] for block in blocks if "mcpServers" in block]
    ours = [found["sandlock"] for found in servers if "sandlock" in found]
    assert len(ours) == 3 and all(config["args"][0] == "mcp" for config in ours)
    recipe = next(found["files"] for found in servers if "files" in found)
    assert recipe["args"][:2] == ["run", "--policy"] and "--" in recipe["args"]


def test_what_the_model_reads_is_what_the_doc_shows(place):
    home, project = place
    sample = next(block for block in _blocks("text") if block.startswith("exit status 2"))

    async def scenario(session):
        return await command(session, "cat ~/.ssh/id_ed25519; curl -s http://127.0.0.3:8080/; "
                             "getent hosts api.example.com")

    _, _, text = run(scenario, [], cwd=project, home=home)
    assert text.replace(str(home), "/home/me") + "\n" == sample


def test_without_the_sdk_one_line(place, tmp_path):
    """`sandlock mcp` where `import mcp` fails (the extra not installed): one line, 125."""
    home, project = place
    (tmp_path / "mcp.py").write_text("raise ImportError('no mcp here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*SANDLOCK, "mcp"], cwd=project, env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=60)
    assert (result.returncode, result.stderr) == (
        125, "sandlock: error: mcp: the MCP SDK is not installed: pip install 'sandlock[mcp]'\n")


# A client of the SDK's 2.x line cannot share this venv (its h11 and mitmproxy 11's
# exclude each other): with SANDLOCK_MCP2_PYTHON naming a venv's python that has it,
# that client drives the server too (docs/mcp.md, "Protocol version and SDK").
CLIENT_2X = '''
import sys, anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as streams:
        async with ClientSession(*streams[:2]) as session:
            init = await session.initialize()
            print(getattr(init, "protocol_version", None) or init.protocolVersion)
            print(*[tool.name for tool in (await session.list_tools()).tools])
            result = await session.call_tool("run_command", {"command": "echo hi"})
            print(result.content[0].text.splitlines()[2])

anyio.run(main)
'''


@pytest.mark.skipif(not os.environ.get("SANDLOCK_MCP2_PYTHON"), reason="no 2.x SDK client here "
                    "(SANDLOCK_MCP2_PYTHON: a python whose venv has mcp 2.x)")
def test_a_2x_client_speaks_to_the_server(place):
    home, project = place
    result = subprocess.run([os.environ["SANDLOCK_MCP2_PYTHON"], "-c", CLIENT_2X, *SANDLOCK, "mcp"],
                            cwd=project, capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["2025-11-25", "run_command run_python", "hi"], result.stderr
