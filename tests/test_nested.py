"""Nested sandboxes (``sb.sandbox(policy)``): processes of the running sandbox confined
further by a second policy, so that they may do only what both allow, filesystem and
network alike, and a nested policy can never widen its parent. Real processes against
real loopback servers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import PYTHON, sandlock

from sandlock import Policy, PolicyError, Sandbox

SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc", *PYTHON]
FETCH = ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"]


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "public").mkdir()
    (tmp_path / "public" / "notes").write_text("public")
    (tmp_path / "secret").write_text("private")
    return tmp_path


def read(path: str) -> str:
    with open(path) as file:
        return file.read()


def test_the_filesystem_is_what_both_allow(tree):
    outer = Policy(fs_readable=[*SYSTEM, str(tree)])
    with Sandbox(outer) as sb:
        inner = sb.sandbox(Policy(fs_readable=[*SYSTEM, str(tree / "public")]))
        assert inner.run(["cat", str(tree / "public" / "notes")]).stdout == b"public"
        denied = inner.run(["cat", str(tree / "secret")])
        assert denied.exit_code == 1 and b"Permission denied" in denied.stderr
        assert sb.call(read, args=(str(tree / "secret"),)).value == "private"  # the parent can
        assert inner.call(read, args=(str(tree / "public" / "notes"),)).value == "public"
        assert inner.call(read, args=(str(tree / "secret"),)).error.type == "PermissionError"


def test_a_nested_policy_cannot_widen_its_parent(tree):
    with Sandbox(Policy(fs_readable=[*SYSTEM, str(tree / "public")])) as sb:
        wider = sb.sandbox(Policy(fs_readable=[*SYSTEM, str(tree)], fs_writable=[str(tree)]))
        assert b"Permission denied" in wider.run(["cat", str(tree / "secret")]).stderr
        assert wider.run(["touch", str(tree / "public" / "new")]).exit_code == 1
        assert not (tree / "public" / "new").exists()


def test_the_network_is_none_or_the_parents(upstreams):
    allowed, denied = upstreams
    url_ok = f"http://127.0.0.2:{allowed.port}/ok"
    url_denied = f"http://127.0.0.3:{denied.port}/no"
    with Sandbox(Policy(net_allow=[f"127.0.0.2:{allowed.port}"]), quiet=True) as sb:
        offline = sb.sandbox(Policy(fs_readable=SYSTEM))
        assert offline.run([*FETCH, url_ok]).exit_code == 7  # no socket at all
        online = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=["*"]))
        assert online.run([*FETCH, url_ok]).stdout == b"200"
        assert online.run([*FETCH, url_denied]).exit_code == 7  # the parent's rules hold
    assert allowed.paths() == ["/ok"] and denied.paths() == []


@pytest.mark.parametrize("fields,name", [
    ({"http_allow": ["GET example.test/*"]}, "http_allow"),
    ({"unix_allow": ["/run/x.sock"]}, "unix_allow"),
    ({"resolve": ["web.test=127.0.0.2"]}, "resolve"),
    ({"max_memory": "64M"}, "max_memory"),
])
def test_what_a_nested_sandbox_cannot_enforce_is_refused_by_name(fields, name):
    with Sandbox(Policy()) as sb:
        with pytest.raises(PolicyError, match=name):
            sb.sandbox(Policy(fs_readable=SYSTEM, **fields))


def test_nesting_needs_a_running_sandbox():
    with pytest.raises(RuntimeError, match="sandbox\\(\\) needs a running sandbox"):
        Sandbox(Policy()).sandbox(Policy(fs_readable=SYSTEM))


def test_a_nested_timeout_kills_its_command():
    with Sandbox(Policy()) as sb:
        inner = sb.sandbox(Policy(fs_readable=SYSTEM))
        result = inner.run(["sleep", "30"], timeout=0.5)
        assert result.timed_out and result.exit_code == 124


UNPRIVILEGED = textwrap.dedent("""
    import os
    from sandlock import Policy, Sandbox
    with Sandbox(Policy(fs_readable=["/usr", "/lib", "/lib64", "/bin", "/etc", os.getcwd()])) as sb:
        inner = sb.sandbox(Policy(fs_readable=["/usr", "/lib", "/lib64", "/bin"]))
        print(inner.run(["cat", "/etc/hostname"]).exit_code, inner.run(["true"]).exit_code)
""")


def test_nesting_as_an_unprivileged_user(as_nobody):
    result = subprocess.run(as_nobody([sys.executable, "-c", UNPRIVILEGED]), capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.split() == ["1", "0"], result.stderr  # /etc: the inner policy's no


# --- sandlock run inside sandlock run ------------------------------------------------

ROOT = str(Path(__file__).resolve().parent.parent)
INNER = [sys.executable, "-m", "sandlock", "run"]


def outer(*options: str, inner: list[str], cwd: str, **kwargs: object):
    """`sandlock run OPTIONS -- sandlock run INNER` (the project readable inside)."""
    env = {**os.environ, "SANDLOCK_FS_READ": ROOT}
    env.pop("SANDLOCK_FS_WRITE", None)  # (the suite's: all of pytest's temporary tree)
    return sandlock("run", *options, "--", *INNER, *inner, cwd=cwd, env=env, **kwargs)


def test_sandlock_run_inside_sandlock_run_narrows_and_never_widens(tree):
    work = str(tree / "public")
    reads = [f"--fs-read={path}" for path in SYSTEM]
    inner = outer(*reads, "-r", ROOT, "-r", str(tree),
                  inner=[*reads, "-r", work, "--", "sh", "-c", f"cat {work}/notes; cat {tree}/secret"],
                  cwd=work)
    assert inner.stdout == "public" and inner.returncode == 1, inner.stderr
    assert "Permission denied" in inner.stderr
    # The outer's default workspace is public/ alone: the inner's grants cannot add to it.
    wider = outer(inner=[*reads, "-r", str(tree), "-w", str(tree), "--", "sh", "-c",
                         f"touch {tree}/new; cat {tree}/secret"], cwd=work)
    assert wider.returncode == 1 and wider.stdout == "", wider.stderr
    assert not (tree / "new").exists()


def test_sandlock_run_inside_keeps_the_outer_network_or_none(upstreams, tree):
    allowed, denied = upstreams
    outer_rule = ("--net-allow", f"127.0.0.2:{allowed.port}", "-q")
    ok, no = f"http://127.0.0.2:{allowed.port}/ok", f"http://127.0.0.3:{denied.port}/no"
    cwd = str(tree)
    offline = outer(*outer_rule, inner=["--", *FETCH, ok], cwd=cwd)
    assert offline.returncode == 7, offline.stderr
    online = outer(*outer_rule, inner=["--net-allow", "*", "--", *FETCH, ok], cwd=cwd)
    assert online.stdout == "200", online.stderr
    refused = outer(*outer_rule, inner=["--net-allow", "*", "--", *FETCH, no], cwd=cwd)
    assert refused.returncode == 7
    assert allowed.paths() == ["/ok"] and denied.paths() == []


@pytest.mark.parametrize("option,value,named", [
    ("--unix-allow", "/run/x.sock", "--unix-allow"), ("-m", "64M", "--max-memory"),
    ("--http-allow", "GET example.test/*", "--http-allow")])
def test_sandlock_run_inside_refuses_what_it_cannot_enforce(option, value, named, tree):
    result = outer(inner=[option, value, "--", "true"], cwd=str(tree))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"sandlock: error: {named}"), result.stderr


def test_sandlock_run_inside_keeps_its_timeout(tree):
    result = outer(inner=["-t", "0.5", "--", "sleep", "10"], cwd=str(tree))
    assert result.returncode == 124, result.stderr


def test_sandlock_run_inside_sandlock_run_as_an_unprivileged_user(as_nobody):
    from conftest import SANDLOCK

    env = {**os.environ, "SANDLOCK_FS_READ": ROOT}
    env.pop("SANDLOCK_FS_WRITE", None)
    argv = [*SANDLOCK, "run", "--", *INNER, "--", "sh", "-c", "id -u; cat /etc/hostname >/dev/null"]
    result = subprocess.run(as_nobody(argv), capture_output=True, text=True, env=env,
                            cwd=tempfile.gettempdir(), timeout=60)
    assert (result.returncode, result.stdout) == (0, "65534\n"), result.stderr


BLOCK_INSIDE = textwrap.dedent("""
    from sandlock import Policy, Sandbox, SetupError
    print(Sandbox(Policy()).run(["true"]).exit_code)
    print(Sandbox(Policy()).call(sum, args=([1, 2],)).value)
    try:
        with Sandbox(Policy()):
            pass
    except SetupError as exc:
        print("refused:", "sb.sandbox()" in str(exc))
""")


def test_the_api_inside_a_sandbox(tree):
    env = {**os.environ, "SANDLOCK_FS_READ": ROOT}
    env.pop("SANDLOCK_FS_WRITE", None)
    result = sandlock("run", "--", sys.executable, "-c", BLOCK_INSIDE, cwd=str(tree), env=env)
    assert result.stdout.split("\n")[:3] == ["0", "3", "refused: True"], result.stderr


def test_a_call_inside_a_sandbox_without_proc_says_why(tree):
    """A function's process lists its descriptors in /proc before it confines itself:
    where the enclosing sandbox grants no /proc, the call fails saying so."""
    env = {**os.environ, "SANDLOCK_FS_READ": ROOT}
    env.pop("SANDLOCK_FS_WRITE", None)
    program = ("from sandlock import Policy, Sandbox\n"
               "print(Sandbox(Policy()).call(sum, args=([1, 2],)).error.message)")
    reads = [f"--fs-read={path}" for path in SYSTEM]
    result = sandlock("run", *reads, "-r", ROOT, "--", sys.executable, "-c", program,
                      cwd=str(tree), env=env)
    assert "grant /proc there" in result.stdout, result.stderr
