"""LocalGPT's names: `--sandbox MODE` is --mode, `sandlock sandbox status` is `check`,
`sandlock sandbox test` is `selftest`, which runs the spec's two checks it lacked
(timeout enforcement, a child process inherits the confinement)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import sandlock
from sandlock.cli import _probes as probes


def test_sandbox_read_only_denies_writing_the_workspace(tmp_path):
    result = sandlock("run", "--sandbox", "read-only", "--", "sh", "-c", "echo x > f; echo $?",
                      cwd=tmp_path)
    assert result.stdout.strip() == "2" and not (tmp_path / "f").exists()


def test_sandbox_workspace_write_lets_it_write(tmp_path):
    """The control: the same write, the default mode."""
    result = sandlock("run", "--sandbox", "workspace-write", "--", "sh", "-c", "echo x > f",
                      cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "f").read_text() == "x\n"


def test_sandbox_full_access_still_needs_the_consent(tmp_path):
    result = sandlock("run", "--sandbox", "full-access", "--", "true", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--dangerously-allow-full-access" in result.stderr


def test_a_bad_sandbox_mode_is_one_line(tmp_path):
    result = sandlock("run", "--sandbox", "read-onyl", "--", "true", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("sandlock: error: --mode: invalid choice 'read-onyl': "
                             "did you mean 'read-only'?\n")


def test_sandbox_status_is_check():
    status, check = sandlock("sandbox", "status"), sandlock("check")
    assert status.returncode == check.returncode == 0
    assert status.stdout == check.stdout and "protection level: Full" in status.stdout


def test_sandbox_without_an_action_is_one_line():
    result = sandlock("sandbox")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_sandbox_test_runs_the_specs_checks(tmp_path):
    result = sandlock("sandbox", "test", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\N{CHECK MARK} timeout kills the command and its children at the limit" in result.stdout
    assert "\N{CHECK MARK} a child's child is confined as the command is" in result.stdout
    assert "0 failed" in result.stdout


def test_the_grandchild_probe_sees_an_unconfined_write(tmp_path):
    """The control of the inheritance check: unconfined, the grandchild writes both."""
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    out = subprocess.run([sys.executable, "-c", probes.GRANDCHILD_WRITES, probes.TRY_WRITE,
                          str(tmp_path / "in" / "g"), str(tmp_path / "out" / "g")],
                         capture_output=True, text=True, timeout=60).stdout
    assert out.split() == ["written", "written"]
    assert os.path.exists(tmp_path / "out" / "g")
