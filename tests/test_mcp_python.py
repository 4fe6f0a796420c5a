"""`run_python`: one confined interpreter per session, whose state persists between
calls, and whose replies sandlock reads as hostile input: the model's code runs in
the worker and can write anything to the reply pipe (docs/mcp.md)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("mcp")

from mcpclient import run  # noqa: E402

# The model's code forging the worker's reply on the reply descriptor (sys.argv[1]).
FORGE = "import os, struct, sys, time\nframe = {frame}\nos.write(int(sys.argv[1]), {header} + frame)\ntime.sleep(30)"


async def python(session, code, **arguments):
    result = await session.call_tool("run_python", {"code": code, **arguments})
    return result.isError, result.structuredContent, result.content[0].text


@pytest.fixture
def project(unscratched):
    directory = unscratched / "project"
    directory.mkdir()
    os.chmod(unscratched, 0o755)
    return directory


def test_state_and_imports_persist_between_calls(project):
    async def scenario(session):
        return [await python(session, code) for code in (
            "import json\nx = 41\nprint('set')", "x + 1", "json.dumps({'x': x})",
            "import subprocess; subprocess.run(['echo', 'from a child'])\nNone", "1/0")]

    first, second, third, child, error = run(scenario, [], cwd=project)
    assert first[1]["stdout"] == "set\n" and "value" not in first[1]
    assert second[1]["value"] == "42" and third[1]["value"] == "'{\"x\": 41}'"
    assert child[1]["stdout"] == "from a child\n"  # its children's output is captured too
    assert not error[0] and error[1]["exit_code"] == 1
    assert error[1]["stderr"].startswith('Traceback (most recent call last):\n  File "<run_python>"')
    assert error[1]["stderr"].endswith("ZeroDivisionError: division by zero\n")


def test_what_the_code_is_denied_is_reported(project, unscratched):
    home = unscratched / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")

    async def scenario(session):
        key = await python(session, "import os\nopen(os.path.expanduser('~/.ssh/id_ed25519')).read()")
        connect = await python(session, "import socket\nsocket.create_connection(('127.0.0.3', 9), 5)")
        return key[1], connect[1]

    key, connect = run(scenario, [], cwd=project, home=home)
    assert "PRIVATE KEY" not in key.get("value", "") and "PermissionError" in key["stderr"]
    assert key["denied"][0]["path"] == str(home / ".ssh" / "id_ed25519")
    # (the default policy's private network: the host's loopback is out of its sight)
    assert connect["denied"] == [{"kind": "connect", "protocol": "tcp", "destination": "127.0.0.3:9",
                                  "reason": "nothing listens there in the sandbox's private network "
                                            "(the host's loopback is out of its sight)"}]


@pytest.mark.parametrize("frame, header, said", [
    ("b'x'", "struct.pack('>I', 2**31)", "announced a reply of 2147483648 bytes"),
    ("b'not json'", "struct.pack('>I', len(frame))", "could not be read"),
    ("b'{\"stdout\": 5, \"stderr\": \"\", \"value\": null, \"error\": null, \"dropped\": [0, 0]}'",
     "struct.pack('>I', len(frame))", "has a stdout that is not text"),
    ("b'{\"stdout\": \"\", \"stderr\": \"\", \"value\": null, \"error\": null, \"dropped\": [-1, 0]}'",
     "struct.pack('>I', len(frame))", "bad count of dropped bytes"),
    ("b'[1, 2]'", "struct.pack('>I', len(frame))", "not what the protocol says"),
])
def test_a_forged_reply_ends_the_worker_and_nothing_else(project, frame, header, said):
    async def scenario(session):
        await python(session, "kept = 1")
        forged = await python(session, FORGE.format(frame=frame, header=header), timeout=20)
        after = await python(session, "'kept' in globals()")
        return forged, after

    (failed, data, text), after = run(scenario, ["--max-output", "1K"], cwd=project)
    assert failed and said in data["error"] and data["exit_code"] == 125
    assert "its state (variables, imports) is lost" in text
    assert after[1]["value"] == "False"  # a new worker, saying so
    assert "a new Python worker started" in after[2]


def test_control_a_well_formed_forged_reply_is_taken_but_cut_at_the_cap(project):
    """The forging channel works (the reply above is the code's, as the doc says), and
    what comes back is cut at --max-output here, whatever the worker said it cut."""
    frame = ("json.dumps({'stdout': 'y' * 5000, 'stderr': '', 'value': 'forged', 'error': None, "
             "'dropped': [0, 0]}).encode()")

    async def scenario(session):
        return await python(session, "import json\n" + FORGE.format(frame=frame, header="struct.pack('>I', len(frame))"),
                            timeout=20)

    failed, data, _ = run(scenario, ["--max-output", "1K"], cwd=project)
    assert not failed and data["value"] == "forged"
    assert data["stdout"] == "y" * 1024 and data["truncated"]["stdout"].endswith("3976 more bytes dropped")


def test_a_timeout_ends_the_worker_and_says_the_state_is_lost(project):
    async def scenario(session):
        await python(session, "kept = 1")
        slow = await python(session, "import time\ntime.sleep(60)", timeout=1)
        after = await python(session, "'kept' in globals()")
        return slow, after

    slow, after = run(scenario, [], cwd=project)
    assert slow[0] and slow[1]["limits"][0]["limit"] == "timeout" and "is lost" in slow[2]
    assert after[1]["value"] == "False"


def test_with_a_workdir_its_writes_go_to_the_layer(project, unscratched):
    async def scenario(session):
        await python(session, "open('made.py', 'w').write('x = 1\\n')")
        diff = await session.call_tool("workspace_diff", {})
        return diff.content[0].text

    diff = run(scenario, ["--workdir", str(project)], cwd=unscratched)
    assert diff == "A        6 made.py" and not (project / "made.py").exists()
