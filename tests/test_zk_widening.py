"""zkit's ZK_SANDBOX_RO / ZK_SANDBOX_RW widen the default workspace exactly as
SANDLOCK_FS_READ / SANDLOCK_FS_WRITE do: colon-separated paths, read or read-write,
the default workspace only. A real confined shell reads and writes a directory the
default workspace leaves out (outside /tmp, outside the workspace)."""

from __future__ import annotations

import subprocess

import pytest

from conftest import SANDLOCK, UNWIDENED, users

TRY = 'cat "$1/data" >/dev/null 2>&1; echo read=$?; echo x 2>/dev/null > "$1/new"; echo write=$?'


@pytest.fixture
def outside(unscratched):
    """Two directories the default workspace does not reach."""
    for name in ("a", "b"):
        (unscratched / name).mkdir()
        (unscratched / name / "data").write_text("data\n")
    unscratched.chmod(0o777)
    for name in ("a", "b"):
        (unscratched / name).chmod(0o777)
    return unscratched


def attempt(directory, cwd, env: dict[str, str], as_user=None) -> list[str]:
    argv = [*SANDLOCK, "run", "--", "sh", "-c", TRY, "sh", str(directory)]
    result = subprocess.run(as_user(argv) if as_user else argv, capture_output=True, text=True,
                            cwd=cwd, env={**UNWIDENED, **env}, timeout=60)
    return result.stdout.split()


@users
def test_unwidened_the_directory_is_out_of_reach(outside, world_tmp, as_nobody_or_self):
    """The control: without the variables, neither read nor write."""
    assert attempt(outside / "a", world_tmp, {}, as_nobody_or_self) == ["read=1", "write=2"]


@users
def test_zk_sandbox_ro_grants_reading_only(outside, world_tmp, as_nobody_or_self):
    seen = attempt(outside / "a", world_tmp, {"ZK_SANDBOX_RO": f"{outside / 'b'}:{outside / 'a'}"},
                   as_nobody_or_self)
    assert seen == ["read=0", "write=2"]
    assert not (outside / "a" / "new").exists()


@users
def test_zk_sandbox_rw_grants_reading_and_writing(outside, world_tmp, as_nobody_or_self):
    seen = attempt(outside / "a", world_tmp, {"ZK_SANDBOX_RW": str(outside / "a")},
                   as_nobody_or_self)
    assert seen == ["read=0", "write=0"]
    assert (outside / "a" / "new").read_text() == "x\n"


def test_both_names_add_up(outside, world_tmp):
    env = {"ZK_SANDBOX_RO": str(outside / "a"), "SANDLOCK_FS_READ": str(outside / "b")}
    assert attempt(outside / "a", world_tmp, env) == ["read=0", "write=2"]
    assert attempt(outside / "b", world_tmp, env) == ["read=0", "write=2"]


def test_an_explicit_policy_is_not_widened(outside, world_tmp):
    """With -r/-w the user is choosing: the variables apply to the default workspace only."""
    argv = [*SANDLOCK, "run", "-r", "/usr", "-r", "/lib", "-r", "/bin", "-r", "/etc", "--",
            "sh", "-c", TRY, "sh", str(outside / "a")]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=world_tmp, timeout=60,
                            env={**UNWIDENED, "ZK_SANDBOX_RW": str(outside / "a")})
    assert result.stdout.split() == ["read=1", "write=2"], result.stderr


def test_print_policy_names_them(outside, world_tmp):
    result = subprocess.run([*SANDLOCK, "run", "--print-policy"], capture_output=True, text=True,
                            cwd=world_tmp, timeout=60,
                            env={**UNWIDENED, "ZK_SANDBOX_RO": str(outside / "a")})
    assert f"# ZK_SANDBOX_RO adds to the default workspace: {outside / 'a'}" in result.stdout
