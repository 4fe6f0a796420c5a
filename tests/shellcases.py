"""Running bash command lines in a real sandbox and telling what they did, for the
vetting tests: whether a shell changed directory (any shell of the case, subshells and
coprocesses included), wrote outside its workspace, or changed the workspace.

Each case runs as ``bash -c CASE`` in its own scratch directory SCRATCH/cN:
``ws/`` (the workspace and the current directory: a git repository with a tracked
``a.txt``, an archive ``arch.tar``, directories ``cd/`` and ``sub/``) beside
``outside/`` (empty: a file there is a write outside the workspace). Many cases share
one ``sandlock run -w SCRATCH -r /``, each in a subshell with a timeout.

Directory changes are seen through a small preloaded library that notes every
chdir/fchdir a shell (bash, sh, dash) makes, in its own file: ``builtin cd``, an
alias, a coprocess alike; no other program's (git -C, find -execdir) count.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conftest import sandlock

_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_path[4096];

__attribute__((constructor)) static void setup(void) {
    const char *path = getenv("VET_CHDIR_LOG");  /* read once: unsetting it changes nothing */
    if (path && strlen(path) < sizeof log_path) strcpy(log_path, path);
}

static int shell(void) {
    const char *me = program_invocation_short_name;
    return !strcmp(me, "bash") || !strcmp(me, "sh") || !strcmp(me, "dash");
}

static void note(const char *what) {
    if (!log_path[0] || !shell()) return;
    int saved = errno;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) { dprintf(fd, "%d %s\n", getpid(), what); close(fd); }
    errno = saved;
}

int chdir(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "chdir");
    note(path);
    return real(path);
}

int fchdir(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fchdir");
    note("(fchdir)");
    return real(fd);
}
"""

_DRIVER = r"""
for case in "$1"/c*/; do
  ( cd "$case/ws" && VET_CHDIR_LOG="$case/chdir.log" LD_PRELOAD="$2" \
      timeout 10 bash -c "$(< "$case/case.sh")" < /dev/null > "$case/out" 2>&1 )
done
exit 0
"""
_GIT = ["git", "-c", "user.name=vet", "-c", "user.email=vet@example.org", "-c",
        "init.defaultBranch=main"]


@dataclass(frozen=True)
class Outcome:
    """What a case did: the directories its shells changed to, the files it wrote
    outside the workspace, the workspace files it changed; its output."""

    chdirs: tuple[str, ...]
    outside: tuple[str, ...]
    changed: tuple[str, ...]
    output: str


def build_shim(directory: Path) -> Path:
    source = directory / "chdirlog.c"
    source.write_text(_SHIM)
    library = directory / "chdirlog.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
                   check=True, capture_output=True)
    return library


def build_template(directory: Path) -> Path:
    """The workspace every case starts from (copied, never run in)."""
    ws = directory / "template"
    ws.mkdir()
    (ws / "a.txt").write_text("a\nb\n")
    (ws / "cd").mkdir()
    (ws / "sub").mkdir()
    (ws / "sub" / "x.txt").write_text("x\n")
    with tarfile.open(ws / "arch.tar", "w") as archive:
        archive.add(ws / "sub" / "x.txt", arcname="x.txt")
    past = 1_600_000_000  # no file is "racily clean": git status has nothing to refresh
    for path in (ws / "a.txt", ws / "sub" / "x.txt", ws / "arch.tar"):
        os.utime(path, (past, past))
    subprocess.run([*_GIT, "init", "-q"], cwd=ws, check=True)
    shutil.rmtree(ws / ".git" / "hooks")
    # A copy has new inodes and ctimes: git compares only mtimes and sizes, so a
    # read-only command has no reason to rewrite the index.
    for key, value in (("gc.auto", "0"), ("maintenance.auto", "false"), ("core.fsmonitor", "false"),
                       ("core.checkStat", "minimal"), ("core.trustctime", "false")):
        subprocess.run(["git", "config", key, value], cwd=ws, check=True)
    subprocess.run([*_GIT, "add", "-A"], cwd=ws, check=True)
    subprocess.run([*_GIT, "commit", "-qm", "start"], cwd=ws, check=True)
    subprocess.run(["git", "status", "--porcelain"], cwd=ws, check=True, capture_output=True)
    return ws


def run_cases(cases: list[str], template: Path, shim: Path) -> list[Outcome]:
    """Run each case in its own copy of the workspace, inside one sandbox; what each did.
    The copies live in /dev/shm where there is one: on this machine's disk each copy
    costs ~40 ms, in memory ~2 ms."""
    fast = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = Path(tempfile.mkdtemp(prefix="sandlock-vet-", dir=fast))
    try:
        return _run(cases, scratch, template, shim)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(cases: list[str], scratch: Path, template: Path, shim: Path) -> list[Outcome]:
    befores = []
    for index, case in enumerate(cases):
        directory = scratch / f"c{index:04d}"
        directory.mkdir()
        shutil.copytree(template, directory / "ws", symlinks=True)
        (directory / "outside").mkdir()
        (directory / "case.sh").write_text(case)
        befores.append(snapshot(directory / "ws"))
    driver = scratch / "driver.sh"
    driver.write_text(_DRIVER)
    result = sandlock("run", "-w", str(scratch), "-r", "/", "--", "bash", str(driver),
                      str(scratch), str(shim), cwd=scratch, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = []
    for index, before in enumerate(befores):
        directory = scratch / f"c{index:04d}"
        log = directory / "chdir.log"
        after = snapshot(directory / "ws")
        changed = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
        outcomes.append(Outcome(
            tuple(log.read_text().splitlines()) if log.exists() else (),
            tuple(sorted(os.listdir(directory / "outside"))), tuple(changed),
            (directory / "out").read_text(errors="replace") if (directory / "out").exists() else ""))
    return outcomes


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: its kind, mode and content (not times: a read-only git
    command may rewrite its index with the same bytes)."""
    found = {}
    for directory, subdirectories, files in os.walk(root):
        for entry in subdirectories + files:
            path = os.path.join(directory, entry)
            info = os.lstat(path)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                found[relative] = "link " + os.readlink(path)
            elif os.path.isdir(path):
                found[relative] = f"dir {info.st_mode:o}"
            else:
                with open(path, "rb") as opened:
                    digest = hashlib.sha256(opened.read()).hexdigest()
                found[relative] = f"file {info.st_mode:o} {digest}"
    return found
