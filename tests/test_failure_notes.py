"""A command that fails under a policy says why where users look, and names the grant
that would let it through (docs/usage.md, "When it bites"; docs/api.md, start errors):
a venv outside the workspace, its base interpreter's prefix, a host file under the
host's /tmp, a script that is not executable, a program outside the -r paths, one
named by a relative path, a path that does not exist yet, pip's user site. Each case
runs the real CLI as a user would, then follows the note and checks that it works."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import SANDLOCK, UNWIDENED, users
from sandlock import Policy, Sandbox
from test_policy_docs import wheel

SYSTEM_PYTHON = "/usr/bin/python3"  # world-readable, under a system tree
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.test",
                "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.test"}


@pytest.fixture
def home(unscratched):
    """A home outside every scratch directory, with a project to work in."""
    (unscratched / "proj").mkdir()
    os.chmod(unscratched / "proj", 0o777)
    return unscratched


def sandlock_run(home: Path, *argv: str, cwd: Path | None = None, env=None, as_user=None,
                 ) -> subprocess.CompletedProcess:
    command = [*SANDLOCK, "run", *argv]
    return subprocess.run(as_user(command) if as_user else command, capture_output=True,
                          text=True, timeout=120, cwd=cwd or home / "proj",
                          env={**UNWIDENED, **GIT_IDENTITY, "HOME": str(home), **(env or {})})


def make_venv(path: Path, python: str = SYSTEM_PYTHON) -> Path:
    subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True,
                   capture_output=True)
    return path


def notes(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("sandlock: note: ")]


# --- Python environments -----------------------------------------------------------------

def test_a_venv_outside_the_workspace_is_named_with_its_grant(home):
    """Before: Python's own PermissionError on pyvenv.cfg, and no sandlock line."""
    venv = make_venv(home / "venvs" / "x")
    failed = sandlock_run(home, "--", f"{venv}/bin/python", "-c", "print('ran')")
    assert failed.returncode != 0
    assert notes(failed) == [f"sandlock: note: {venv}/bin/python is in the Python venv {venv}, "
                             f"outside the default workspace; SANDLOCK_FS_READ={venv} grants it "
                             "(the venv's pyvenv.cfg)"], failed.stderr
    followed = sandlock_run(home, "--", f"{venv}/bin/python", "-c", "print('ran')",
                            env={"SANDLOCK_FS_READ": str(venv)})
    assert (followed.returncode, followed.stdout) == (0, "ran\n"), followed.stderr


@pytest.fixture
def tmp_venv():
    """A venv in the host's /tmp (not in pytest's, which the session grants)."""
    directory = Path(tempfile.mkdtemp(prefix="sandlock-test-venv-", dir="/tmp"))
    os.chmod(directory, 0o755)
    yield make_venv(directory / "v")
    shutil.rmtree(directory)


@users
def test_a_venv_in_the_hosts_tmp_says_the_sandbox_has_its_own(home, tmp_venv, as_nobody_or_self):
    """Before: exit 127 with only "No such file or directory"."""
    python = f"{tmp_venv}/bin/python"
    failed = sandlock_run(home, "--", python, "-c", "print('ran')", as_user=as_nobody_or_self)
    assert failed.returncode == 127
    assert f"sandlock: cannot run '{python}': No such file or directory" in failed.stderr
    assert notes(failed) == [f"sandlock: note: {python} is in the Python venv {tmp_venv}, in the "
                             "host's /tmp, which the sandbox does not see (its /tmp is its own, "
                             f"empty at start); SANDLOCK_FS_READ={tmp_venv} grants it (the "
                             "venv's pyvenv.cfg)"], failed.stderr
    followed = sandlock_run(home, "--", python, "-c", "print('ran')", as_user=as_nobody_or_self,
                            env={"SANDLOCK_FS_READ": str(tmp_venv)})
    assert (followed.returncode, followed.stdout) == (0, "ran\n"), followed.stderr


def test_the_api_says_why_a_command_could_not_start_in_stderr(home, tmp_venv, capfd):
    """Before: Result.stderr was b"" and only start_error explained the 127."""
    python = f"{tmp_venv}/bin/python"
    result = Sandbox(Policy(cwd=str(home / "proj"))).run([python, "-c", "pass"])
    error = f"sandlock: cannot run '{python}': No such file or directory"
    assert result.exit_code == 127 and result.start_error == error.removeprefix("sandlock: ")
    lines = result.stderr.decode().splitlines()
    assert lines[0] == error
    assert lines[1].startswith(f"sandlock: note: {python} is in the Python venv {tmp_venv}, in the "
                               "host's /tmp") and len(lines) == 2
    quiet = Sandbox(Policy(cwd=str(home / "proj")), quiet=True).run([python, "-c", "pass"])
    assert quiet.stderr.decode() == error + "\n"  # the error always, the notes unless quiet
    capfd.readouterr()
    shown = Sandbox(Policy(cwd=str(home / "proj"))).run([python], capture_output=False)
    assert shown.stderr is None and capfd.readouterr().err.startswith(error + "\n")
    # The control: a command that starts has only its own stderr.
    ran = Sandbox(Policy(cwd=str(home / "proj"))).run(["sh", "-c", "echo own >&2"])
    assert (ran.exit_code, ran.stderr) == (0, b"own\n")


def test_a_base_interpreter_outside_the_workspace_is_named(home):
    """A venv in the project whose interpreter lives elsewhere (uv's and pyenv's live in
    the home, which the default workspace does not grant): it cannot start."""
    prefix = home / "pythons" / "cpython-3"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(os.path.realpath(SYSTEM_PYTHON), prefix / "bin" / "python3")
    venv = make_venv(home / "proj" / ".venv", str(prefix / "bin" / "python3"))
    failed = sandlock_run(home, "--", ".venv/bin/python", "-c", "print('ran')")
    assert failed.returncode == 126
    assert notes(failed) == [f"sandlock: note: .venv/bin/python is in the Python venv {venv}, "
                             f"whose interpreter's prefix {prefix} is outside the default "
                             f"workspace; SANDLOCK_FS_READ={prefix} grants it"], failed.stderr
    followed = sandlock_run(home, "--", ".venv/bin/python", "-c", "print('ran')",
                            env={"SANDLOCK_FS_READ": str(prefix)})
    assert (followed.returncode, followed.stdout) == (0, "ran\n"), followed.stderr


# --- hints that pointed the wrong way ------------------------------------------------------

def test_a_host_file_in_tmp_says_the_sandbox_has_its_own(home):
    """Before: only cat's "No such file or directory"."""
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="sandlock-test-") as file:
        file.write("data\n")
        file.flush()
        os.chmod(file.name, 0o644)
        failed = sandlock_run(home, "--", "cat", file.name)
        assert failed.returncode == 1
        assert notes(failed) == [f"sandlock: note: {file.name} is in the host's /tmp, which the "
                                 "sandbox does not see (its /tmp is its own, empty at start); "
                                 f"SANDLOCK_FS_READ={file.name} (or SANDLOCK_FS_WRITE) grants "
                                 "it, or choose the paths with -r/-w"], failed.stderr
        followed = sandlock_run(home, "--", "cat", file.name, env={"SANDLOCK_FS_READ": file.name})
        assert (followed.returncode, followed.stdout) == (0, "data\n"), followed.stderr


def test_a_script_that_is_not_executable_is_not_blamed_on_fs_read(home):
    """Before: "Permission denied (is it inside an -r/--fs-read path?)" with no -r."""
    script = home / "proj" / "build.sh"
    script.write_text("#!/bin/sh\necho built\n")
    failed = sandlock_run(home, "--", "./build.sh")
    assert failed.returncode == 126
    assert ("sandlock: cannot run './build.sh': Permission denied (not executable: chmod +x it, "
            "or run it with its interpreter)") in failed.stderr
    assert "-r/--fs-read" not in failed.stderr and not notes(failed)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    ran = sandlock_run(home, "--", "./build.sh")
    assert (ran.returncode, ran.stdout) == (0, "built\n"), ran.stderr


def test_a_program_outside_the_fs_read_paths_is_named(home):
    script = home / "proj" / "build.sh"
    script.write_text("#!/bin/sh\necho built\n")
    script.chmod(0o755)
    system = ["-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin", "-r", "/etc"]
    failed = sandlock_run(home, *system, "--", "./build.sh")
    assert failed.returncode == 126
    assert "sandlock: cannot run './build.sh': Permission denied\n" in failed.stderr
    assert notes(failed) == [f"sandlock: note: ./build.sh ({script}) is not inside an "
                             "-r/--fs-read path: with -r/-w, nothing else is reachable "
                             f"(-r {home / 'proj'} grants it)"]
    followed = sandlock_run(home, *system, "-r", str(home / "proj"), "--", "./build.sh")
    assert (followed.returncode, followed.stdout) == (0, "built\n"), followed.stderr


def test_a_program_outside_named_by_a_relative_path(home):
    """Before: "Permission denied (is it inside an -r/--fs-read path?)" and no note."""
    venv = make_venv(home / "proj" / ".venv")
    tool = home / "proj" / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    (home / "proj" / "sub").mkdir()
    sub = home / "proj" / "sub"
    failed = sandlock_run(home, "--", "../.venv/bin/python", "-c", "print('ran')", cwd=sub)
    assert failed.returncode != 0 and "-r/--fs-read" not in failed.stderr
    assert notes(failed) == [f"sandlock: note: ../.venv/bin/python is in the Python venv {venv}, "
                             f"outside the default workspace; SANDLOCK_FS_READ={venv} grants it "
                             "(the venv's pyvenv.cfg)"], failed.stderr
    failed = sandlock_run(home, "--", "../bin/tool", cwd=sub)
    assert failed.returncode == 126
    assert notes(failed) == [f"sandlock: note: ../bin/tool is outside the default workspace; "
                             f"SANDLOCK_FS_READ={tool} (or SANDLOCK_FS_WRITE) grants it, or "
                             "choose the paths with -r/-w"], failed.stderr
    followed = sandlock_run(home, "--", "../bin/tool", cwd=sub, env={"SANDLOCK_FS_READ": str(tool)})
    assert (followed.returncode, followed.stdout) == (0, "tool ran\n"), followed.stderr


def test_a_path_that_does_not_exist_yet_outside_the_workspace(home):
    """`git worktree add ../wt`: before, git's "Permission denied" and no sandlock line."""
    project = home / "proj"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "commit", "-q", "--allow-empty", "-m", "first"],
                   check=True, env={**os.environ, **GIT_IDENTITY})
    worktree = home / "wt"
    failed = sandlock_run(home, "--", "git", "worktree", "add", "../wt")
    assert failed.returncode != 0 and not worktree.exists()
    assert notes(failed) == [f"sandlock: note: {worktree} does not exist, and {home}, where it "
                             "would be made, is outside the default workspace: make it first and "
                             f"grant it with SANDLOCK_FS_WRITE={worktree}, or choose the paths "
                             "with -r/-w"], failed.stderr
    worktree.mkdir()
    followed = sandlock_run(home, "--", "git", "worktree", "add", "../wt",
                            env={"SANDLOCK_FS_WRITE": str(worktree)})
    assert followed.returncode == 0, followed.stderr
    assert (worktree / ".git").is_file()


def test_pip_install_user_names_the_user_site(home):
    """Before: pip's "Permission denied: ~/.local/lib" and no sandlock line."""
    for name in ("lib", "bin"):
        (home / ".local" / name).mkdir(parents=True)
    name = wheel(home / "proj")
    install = ["python3", "-m", "pip", "install", "--user", "--no-index", "--no-deps",
               "--no-cache-dir", "--break-system-packages", name]
    env = {"PATH": "/usr/bin:/bin"}
    failed = sandlock_run(home, "--", *install, env=env)
    local = home / ".local"
    assert failed.returncode != 0
    assert (f"sandlock: note: pip install --user writes {local}, which the default workspace "
            "does not let it write (your own tools run what is there, unconfined): install into "
            f"a venv in the workspace, or SANDLOCK_FS_WRITE={local}/lib:{local}/bin grants it"
            ) in notes(failed), failed.stderr
    followed = sandlock_run(home, "--", *install,
                            env={**env, "SANDLOCK_FS_WRITE": f"{local}/lib:{local}/bin"})
    assert followed.returncode == 0, followed.stderr
    assert list(local.glob("lib/python3*/site-packages/tinypkg/__init__.py"))
