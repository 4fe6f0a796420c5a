"""`sandlock mcp --workdir DIR`: the calls' writes go to one copy-on-write layer per
session, which the model (and so the user) reviews, commits or throws away; nothing
reaches DIR before a commit. Driven by the MCP SDK's own client (docs/mcp.md)."""

from __future__ import annotations

import io
import os

import pytest

pytest.importorskip("mcp")

from mcpclient import command, run  # noqa: E402


async def tool(session, name):
    result = await session.call_tool(name, {})
    return result.isError, result.content[0].text


@pytest.fixture
def project(unscratched):
    directory = unscratched / "project"
    (directory / "src").mkdir(parents=True)
    (directory / "a.txt").write_text("a\n")
    return directory


def listing(directory):
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def test_writes_wait_for_a_commit_and_an_abort_drops_them(project, unscratched):
    before = listing(project)
    seen = {}

    async def scenario(session):
        names = [t.name for t in (await session.list_tools()).tools]
        await command(session, "cp a.txt b.txt; rm a.txt")
        await command(session, "touch made", cwd="src")
        seen["inside"] = (await command(session, "ls . src"))[1]["stdout"]
        seen["host during"] = listing(project)  # the attack: the agent's writes reaching DIR
        diff = await tool(session, "workspace_diff")
        aborted = await tool(session, "workspace_abort")
        seen["host after abort"] = listing(project)
        seen["after abort"] = (await command(session, "ls"))[1]["stdout"]
        await command(session, "cp a.txt c.txt")
        committed = await tool(session, "workspace_commit")
        seen["host after commit"] = listing(project)  # control: a commit does reach DIR
        empty = await tool(session, "workspace_diff")
        return names, diff, aborted, committed, empty

    names, diff, aborted, committed, empty = run(scenario, ["--workdir", str(project)],
                                                 cwd=unscratched)
    assert names == ["run_command", "run_python", "workspace_diff", "workspace_commit", "workspace_abort"]
    assert seen["inside"] == ".:\nb.txt\nsrc\n\nsrc:\nmade\n"
    assert seen["host during"] == before
    assert diff == (False, "D        - a.txt\nA        2 b.txt\nA        0 src/made")
    assert aborted == (False, f"discarded 3 change(s): {project} unchanged")
    assert seen["host after abort"] == before and seen["after abort"] == "a.txt\nsrc\n"
    assert committed == (False, f"committed 1 change(s) to {project}\nA c.txt")
    assert seen["host after commit"] == sorted([*before, "c.txt"])
    assert (project / "c.txt").read_text() == "a\n"
    assert empty == (False, "no changes")


def test_a_session_that_ends_uncommitted_keeps_its_layer(project, unscratched, tmp_path):
    errors = tmp_path / "stderr"

    async def scenario(session):
        await command(session, "touch left")

    state = tmp_path / "state"  # (where it is kept: not the user's own store)
    with open(errors, "w") as errlog:
        run(scenario, ["--workdir", str(project)], cwd=unscratched, errlog=errlog,
            env={"XDG_STATE_HOME": str(state)})
    assert not (project / "left").exists()
    said = errors.read_text()
    assert "the session's 1 change(s) to " in said and f"sandlock workspace --fs-storage {state}/" in said
    (session,) = (state / "sandlock" / "mcp").iterdir()
    (kept,) = session.iterdir()
    assert (kept / "layer" / "upper" / "left").exists()


def test_each_call_is_told_only_its_own_denials(project, unscratched):
    """One sandbox for the session, one audit log: the calls take turns, and each reads
    what the log gained during it."""

    async def scenario(session):
        first = await command(session, "getent hosts one.example; true")
        second = await command(session, "getent hosts two.example; true")
        quiet = await command(session, "true")
        return first[1], second[1], quiet[1]

    first, second, quiet = run(scenario, ["--workdir", str(project)], cwd=unscratched)
    assert [d["name"] for d in first["denied"]] == ["one.example"]
    assert [d["name"] for d in second["denied"]] == ["two.example"]
    assert quiet["denied"] == []


def test_a_timeout_in_the_session_kills_the_call_not_the_layer(project, unscratched):
    async def scenario(session):
        await command(session, "touch kept")
        slow = await command(session, "sleep 30", timeout=1)
        return slow, (await command(session, "ls"))[1]["stdout"]

    slow, after = run(scenario, ["--workdir", str(project)], cwd=unscratched)
    assert slow[0] and slow[1]["limits"][0]["limit"] == "timeout"
    assert "kept" in after.split()


def test_options_mcp_refuses_with_a_workdir(project, unscratched):
    from conftest import sandlock

    disk = sandlock("mcp", "--workdir", str(project), "--max-disk", "10M", cwd=unscratched)
    assert disk.returncode == 2 and disk.stderr.startswith("sandlock: error: --max-disk: not with")
    cwd = sandlock("mcp", "--workdir", str(project), "--cwd", str(project), cwd=unscratched)
    assert cwd.returncode == 2 and cwd.stderr.startswith("sandlock: error: --cwd: not with")


def test_a_cancelled_call_in_the_session_is_killed(project, unscratched):
    import anyio
    from conftest import unique_sleep, wait_no_process
    from mcpclient import cancel
    from test_mcp import running

    marker = unique_sleep()

    async def scenario(session):
        request_id = session._request_id
        outcome = {}

        async def call():
            try:
                outcome["result"] = await command(session, f"sleep {marker}", timeout=60)
            except Exception as error:
                outcome["error"] = error

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            with anyio.fail_after(20):
                while not running("sleep", marker):
                    await anyio.sleep(0.05)
            await cancel(session, request_id)
        outcome["next"] = (await command(session, "echo still here"))[1]["stdout"]
        return outcome

    outcome = run(scenario, ["--workdir", str(project)], cwd=unscratched)
    assert "result" not in outcome and outcome["next"] == "still here\n"
    assert wait_no_process("sleep", marker, seconds=10)
