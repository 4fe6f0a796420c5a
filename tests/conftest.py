"""Shared helpers: run the real `sandlock` CLI, and run things as an unprivileged user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

UNPRIVILEGED_UID = 65534  # nobody
SANDLOCK = [sys.executable, "-m", "sandlock"]
# CI sets this so that a machine where the unprivileged cases cannot run fails loudly
# instead of skipping them.
REQUIRE_UNPRIVILEGED = os.environ.get("SANDLOCK_REQUIRE_UNPRIVILEGED") == "1"
# The tests run their confined Python programs with this interpreter (and import
# sandlock in some): a venv and a checkout wherever they are, which the default
# workspace (deny by default for $HOME, the current directory writable) may not cover.
# Widened for the whole session the way a user would (docs/usage.md); tests that show
# exact output (--print-policy) use UNWIDENED.
UNWIDENED = {name: value for name, value in os.environ.items() if name != "SANDLOCK_FS_READ"}
os.environ["SANDLOCK_FS_READ"] = ":".join(
    (sys.prefix, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def sandlock(*args: str, **kwargs: object) -> subprocess.CompletedProcess:
    """Run the sandlock CLI (`sandlock ARGS...`), capturing text output."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 60)
    return subprocess.run([*SANDLOCK, *args], **kwargs)


def _unprivileged_problem() -> str | None:
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    # A whole confined launch: setpriv itself can start an interpreter that the user
    # could not exec again (it still holds root's capabilities while it execs).
    probe = subprocess.run(
        unprivileged([*SANDLOCK, "run", "--", sys.executable, "-c", "pass"]),
        capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )
    if probe.returncode != 0:
        return (f"uid {UNPRIVILEGED_UID} cannot run {sys.executable} with sandlock "
                f"(create the venv with a world-readable interpreter, e.g. /usr/bin/python3): "
                f"{probe.stderr.strip()[-200:]}")
    return None


def unprivileged(argv: Sequence[str]) -> list[str]:
    """argv prefixed to run as nobody:nogroup with no supplementary groups."""
    return ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}",
            "--clear-groups", "--", *argv]


@pytest.fixture(scope="session")
def as_nobody():
    """Returns `unprivileged`; skips (or, in CI, fails) where uid 65534 cannot run sandlock."""
    if os.getuid() != 0:
        return lambda argv: list(argv)  # already unprivileged
    problem = _unprivileged_problem()
    if problem:
        if REQUIRE_UNPRIVILEGED:
            pytest.fail(problem)
        pytest.skip(problem)
    return unprivileged


@pytest.fixture
def world_tmp(tmp_path):
    """A scratch directory an unprivileged user can use (tmp_path's parents are 0700)."""
    path = tmp_path / "shared"
    path.mkdir()
    for p in (tmp_path, path):
        os.chmod(p, 0o777)
    parent = tmp_path.parent
    while parent != parent.parent and str(parent).startswith("/tmp/"):
        os.chmod(parent, os.stat(parent).st_mode | 0o711)
        parent = parent.parent
    return path


@pytest.fixture
def unscratched():
    """An empty directory outside /tmp, /var/tmp and /dev/shm (which the default
    workspace makes writable), for a fake $HOME the default workspace must not see."""
    base = "/srv" if os.access("/srv", os.W_OK) else os.path.expanduser("~")
    path = tempfile.mkdtemp(prefix="sandlock-test-", dir=base)
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)
