"""The [mcp] section of a policy file: a profile per tool, and call options the model
may not give; a call may narrow (a cwd inside the workspace, a shorter timeout), never
widen. Bad keys: one line each, naming the file and line (docs/mcp.md)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("mcp")

from conftest import sandlock  # noqa: E402
from mcpclient import command, run  # noqa: E402


@pytest.fixture
def project(unscratched):
    directory = unscratched / "project"
    (directory / "sub").mkdir(parents=True)
    return directory


def policy(path, text):
    path.write_text(text)
    os.chmod(path, 0o644)
    return str(path)


def test_fixed_options_leave_the_schema_and_are_refused(project, unscratched):
    fixed = policy(unscratched / "fixed.toml", '[mcp]\nfixed = ["cwd", "timeout"]\n')

    async def scenario(session):
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        given = await command(session, "pwd", cwd="sub")
        plain = await command(session, "pwd")
        return tools, given, plain

    tools, given, plain = run(scenario, ["--policy", fixed], cwd=project)
    assert set(tools["run_command"].inputSchema["properties"]) == {"command"}
    assert set(tools["run_python"].inputSchema["properties"]) == {"code"}
    assert given[0] and "cwd" in given[2]  # refused (the SDK's schema check, or ours)
    assert not plain[0] and plain[1]["stdout"] == f"{project}\n"


def test_control_without_fixed_a_call_may_narrow(project):
    async def scenario(session):
        return await command(session, "pwd", cwd="sub")

    failed, data, _ = run(scenario, [], cwd=project)
    assert not failed and data["stdout"] == f"{project / 'sub'}\n"


def test_a_calls_grants_are_the_servers_whatever_its_cwd(project):
    """The sandbox starts in the root (the default workspace of the root), the call's
    cwd is entered inside it: from sub/ the root is writable, its parent is not."""

    async def scenario(session):
        return await command(session, "touch ../top.txt ../../beside.txt; pwd", cwd="sub")

    _, data, _ = run(scenario, [], cwd=project)
    assert data["stdout"] == f"{project / 'sub'}\n"
    assert (project / "top.txt").exists() and not (project.parent / "beside.txt").exists()


def test_a_call_never_widens(project):
    """A cwd out of the workspace (by .., by an absolute path, by a symlink) is refused;
    a longer timeout than the server's is cut to the server's."""
    (project / "out").symlink_to(project.parent)

    async def scenario(session):
        escapes = [await command(session, "touch escaped", cwd=where)
                   for where in ("..", str(project.parent), "out")]
        longer = await command(session, "sleep 30", timeout=1000)
        return escapes, longer

    escapes, longer = run(scenario, ["--timeout", "1"], cwd=project)
    for failed, data, text in escapes:
        assert failed and data is None and "is outside the workspace" in text
    assert not (project.parent / "escaped").exists()
    assert longer[0] and longer[1]["limits"][0]["limit"] == "timeout"


def test_a_profile_per_tool(project, unscratched, upstreams):
    """run_command runs under the profile that opens the upstream; run_python, with no
    profile of its own, under the server's policy: no network."""
    allowed, _ = upstreams
    config = unscratched / "config"
    (config / "sandlock" / "profiles").mkdir(parents=True)
    policy(config / "sandlock" / "profiles" / "net.toml",
           f'[network]\nallow = ["127.0.0.2:{allowed.port}"]\n')
    server = policy(unscratched / "server.toml", '[mcp]\nrun_command = "net"\n')
    fetch = f"import urllib.request\nurllib.request.urlopen('http://127.0.0.2:{allowed.port}/py', timeout=5).status"

    async def scenario(session):
        shell = await command(session, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.2:{allowed.port}/sh")
        result = await session.call_tool("run_python", {"code": fetch})
        return shell, result.structuredContent

    shell, python = run(scenario, ["--policy", server], cwd=project,
                        env={"XDG_CONFIG_HOME": str(config)})
    assert shell[1]["stdout"] == "200" and shell[1]["denied"] == []
    assert python["denied"][0]["destination"] == f"127.0.0.2:{allowed.port}"
    assert allowed.paths() == ["/sh"]


@pytest.mark.parametrize("text, line, error", [
    ('[mcp]\nrun_comand = "x"\n', 2, "unknown key 'run_comand' in [mcp]: did you mean 'run_command'?"),
    ('[mcp]\nrun_python = 3\n', 2, "mcp.run_python: expected a profile name (letters, digits, '_', "
                                   "'.' and '-'), got an integer"),
    ('[mcp]\nrun_command = "../x"\n', 2, "mcp.run_command: expected a profile name (letters, "
                                         "digits, '_', '.' and '-'), got '../x'"),
    ('[mcp]\nfixed = ["cwd",\n  "cwdd"]\n', 3, "mcp.fixed: 'cwdd' is not a call option: did you mean 'cwd'?"),
    ('[mcp]\nfixed = "cwd"\n', 2, "mcp.fixed: expected a list of call options, got a string"),
    ('mcp = 1\n', 1, "mcp: expected a table ([mcp]), got an integer"),
])
def test_each_bad_key_is_one_line(tmp_path, text, line, error):
    path = policy(tmp_path / "p.toml", text)
    for argv in (["profile", "validate", path], ["mcp", "--policy", path]):
        result = sandlock(*argv, cwd=tmp_path)
        assert (result.returncode, result.stderr) == (2, f"sandlock: error: {path}:{line}: {error}\n")


def test_a_missing_profile_is_one_line(project, unscratched):
    path = policy(unscratched / "p.toml", '[mcp]\nrun_python = "nope"\n')
    result = sandlock("mcp", "--policy", path, cwd=project,
                      env={**os.environ, "XDG_CONFIG_HOME": str(unscratched / "none")})
    assert result.returncode == 2
    assert result.stderr.startswith("sandlock: error: [mcp] run_python = 'nope': --profile nope: no such profile")
    assert result.stderr.count("\n") == 1


def test_run_reads_past_the_section(tmp_path):
    path = policy(tmp_path / "p.toml", '[filesystem]\nread = ["/usr"]\n[mcp]\nfixed = ["cwd"]\n')
    printed = sandlock("run", "--policy", path, "--print-policy")
    assert printed.returncode == 0 and "[mcp]" not in printed.stdout
