"""The copy-on-write workspace (issue 18): `--workdir DIR` runs real programs (sh, git,
pip, gcc, make) on an overlay of DIR; their changes are committed, aborted or kept,
and a dry run lists them. DIR's tree is compared byte for byte (and mtime for mtime)
with what it must be, and with the same commands run without a sandbox."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import SANDLOCK, sandlock
from test_cow_commit import overlay_xattrs
from test_cow_commit import tree as entries

from sandlock import Policy, Sandbox

# Every kind of change a command makes, in DIR (the tree of `populate`).
EVERY_CHANGE = """set -e
echo new > added.txt
echo changed >> modified.txt
rm deleted.txt
rm -r deleted_dir
mv renamed_from.txt renamed_to.txt
rm -r replaced_dir && mkdir replaced_dir && echo fresh > replaced_dir/only.txt
rm file_to_dir && mkdir file_to_dir && echo in > file_to_dir/x
rm -r dir_to_file && echo now-a-file > dir_to_file
ln -s added.txt link_new
ln -sfn modified.txt link_changed
chmod 600 mode.txt
chmod 700 keep_dir
touch -d '2001-02-03 04:05:06' mtime.txt
mkdir -p nested/a/b && echo deep > nested/a/b/c.txt
echo in-existing > keep_dir/new_inside.txt
"""


def populate(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "modified.txt": "old\n", "deleted.txt": "bye\n", "deleted_dir/f1": "1\n",
        "deleted_dir/sub/f2": "2\n", "renamed_from.txt": "moving\n",
        "replaced_dir/old1": "o1\n", "replaced_dir/old2": "o2\n", "file_to_dir": "f\n",
        "dir_to_file/a": "a\n", "mode.txt": "m\n", "mtime.txt": "t\n",
        "keep_dir/existing.txt": "e\n", "untouched.txt": "same\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    os.symlink("deleted.txt", root / "link_changed")
    return root


def tree(root: Path, *, times: bool = True) -> dict[str, list]:
    """Every entry of ``root`` (``test_cow_commit.tree``) and, with ``times``, root's own
    mode and mtime too (an entry made and removed again still shows there)."""
    found = entries(str(root), times=times)
    if times:
        st = os.stat(root)
        found["."] = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), None, None, None,
                      st.st_mtime_ns]
    return found


@pytest.fixture
def state(unscratched, monkeypatch):
    """A store of workspaces of the test's own ($XDG_STATE_HOME), for the CLI and the API:
    outside /tmp, as a real one is (denied in every policy, a store beneath the /tmp
    write grant would take the write right off /tmp itself)."""
    os.chmod(unscratched, 0o777)  # (for the unprivileged user's store too)
    monkeypatch.setenv("XDG_STATE_HOME", str(unscratched))
    return unscratched / "sandlock" / "workspaces"


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("cwd", "/")
    return sandlock("run", *args, **kwargs)


def workspaces(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir()) if store.exists() else []


def test_commit_applies_every_kind_of_change_as_a_plain_run_makes_it(tmp_path, state):
    plain, confined = populate(tmp_path / "plain"), populate(tmp_path / "confined")
    subprocess.run(["sh", "-c", EVERY_CHANGE], cwd=plain, check=True)
    result = run("--workdir", str(confined), "--", "sh", "-c", EVERY_CHANGE)
    assert result.returncode == 0, result.stderr
    assert tree(confined, times=False) == tree(plain, times=False)
    assert os.stat(confined / "mtime.txt").st_mtime == os.stat(plain / "mtime.txt").st_mtime
    assert overlay_xattrs(str(confined)) == []  # overlayfs's marks stay in its layer
    assert "committed" in result.stderr
    assert workspaces(state) == []  # nothing left behind


def test_a_failure_aborts_and_leaves_the_directory_byte_identical(tmp_path, state):
    root = populate(tmp_path / "w")
    before = tree(root)
    time.sleep(0.01)  # a write the abort failed to undo would show in an mtime
    result = run("--workdir", str(root), "--", "sh", "-c", EVERY_CHANGE + "exit 3")
    assert result.returncode == 3
    assert tree(root) == before
    assert "discarded" in result.stderr and "--on-error abort" in result.stderr
    assert workspaces(state) == []


def test_dry_run_lists_the_changes_and_writes_nothing(tmp_path, state):
    root = populate(tmp_path / "w")
    elsewhere = tmp_path / "elsewhere"  # writable in a real run (SANDLOCK_FS_WRITE)
    elsewhere.mkdir()
    before = tree(root)
    script = ("echo 12345 > added.txt; echo changed >> modified.txt; rm deleted.txt; "
              "rm -r deleted_dir; mkdir -p n/m; echo x > n/m/y; "
              f"echo no > {elsewhere}/out || echo refused")
    result = run("--dry-run", "--workdir", str(root), "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "refused" in result.stdout and not (elsewhere / "out").exists()
    assert tree(root) == before
    lines = [line.split() for line in result.stderr.splitlines() if line[:2] in ("A ", "M ", "D ")]
    assert lines == [["A", "6", "added.txt"], ["D", "-", "deleted.txt"], ["D", "-", "deleted_dir/"],
                     ["M", "12", "modified.txt"], ["A", "-", "n/"], ["A", "-", "n/m/"],
                     ["A", "2", "n/m/y"]]
    assert "dry run: 7 changes" in result.stderr
    assert workspaces(state) == []


def test_dry_run_defaults_to_the_current_directory(tmp_path, state):
    root = populate(tmp_path / "w")
    result = sandlock("run", "--dry-run", "--", "sh", "-c", "echo x > made", cwd=root)
    assert result.returncode == 0, result.stderr
    assert not (root / "made").exists()
    assert "A        2 made" in result.stderr


def test_api_dry_run_and_the_outcome_of_a_run(tmp_path, state):
    root = populate(tmp_path / "w")
    sandbox = Sandbox(Policy(workdir=str(root)), quiet=True)
    preview = sandbox.dry_run(["sh", "-c", "echo x > new; rm deleted.txt"])
    assert preview.changes == (("D", "deleted.txt"), ("A", "new"))
    assert not (root / "new").exists()
    done = sandbox.run(["sh", "-c", "echo x > new"])
    assert done.workspace.action == "commit" and done.changes == (("A", "new"),)
    assert (root / "new").read_text() == "x\n"
    kept = Sandbox(Policy(workdir=str(root), on_exit="keep"), quiet=True).run(["touch", "later"])
    assert kept.workspace.action == "keep" and kept.workspace.id in workspaces(state)
    assert not (root / "later").exists()


def test_a_change_made_to_the_directory_during_the_run_is_a_conflict(tmp_path, state):
    root = populate(tmp_path / "w")
    sandbox = Sandbox(Policy(workdir=str(root)), quiet=True)
    read, write = os.pipe()
    go_r, go_w = os.pipe()
    process = sandbox.start(["sh", "-c", "echo run > modified.txt; echo run > added.txt; "
                             "echo ready; read line"], stdout=write, stdin=go_r)
    os.close(write)
    os.close(go_r)
    assert os.read(read, 64) == b"ready\n"
    (root / "modified.txt").write_text("outside\n")  # the user edits the same file meanwhile
    os.write(go_w, b"done\n")
    os.close(go_w)
    assert process.wait(30) == 0
    outcome = process.workspace
    assert outcome.conflicts == (("M", "modified.txt"),)
    assert (root / "modified.txt").read_text() == "outside\n"  # not overwritten
    assert (root / "added.txt").read_text() == "run\n"  # the rest committed
    ident = outcome.id
    diff = sandlock("workspace", "diff", "--patch", ident)
    assert "-outside" in diff.stdout and "+run" in diff.stdout
    listed = sandlock("workspace", "list")
    assert ident in listed.stdout and "conflicts" in listed.stdout
    again = sandlock("workspace", "commit", ident)
    assert again.returncode == 1 and "--force" in again.stderr
    forced = sandlock("workspace", "commit", "--force", ident)
    assert forced.returncode == 0, forced.stderr
    assert (root / "modified.txt").read_text() == "run\n"
    assert workspaces(state) == []


def test_a_kept_workspace_is_committed_later(tmp_path, state):
    root = populate(tmp_path / "w")
    result = run("--workdir", str(root), "--on-exit", "keep", "--", "sh", "-c", EVERY_CHANGE)
    assert result.returncode == 0, result.stderr
    (ident,) = workspaces(state)
    assert f"kept 22 changes to {root} as {ident}" in result.stderr
    assert not (root / "added.txt").exists()
    diff = sandlock("workspace", "diff", ident)
    assert "A        4 added.txt" in diff.stdout.splitlines()
    commit = sandlock("workspace", "commit", ident)
    assert commit.returncode == 0, commit.stderr
    assert (root / "added.txt").read_text() == "new\n" and not (root / "deleted_dir").exists()
    assert workspaces(state) == []
    assert sandlock("workspace", "diff", ident).returncode == 2


def test_abort_of_a_kept_workspace(tmp_path, state):
    root = populate(tmp_path / "w")
    before = tree(root)
    run("--workdir", str(root), "--on-error", "keep", "--", "sh", "-c", "echo x > f; exit 1")
    (ident,) = workspaces(state)
    aborted = sandlock("workspace", "abort", ident)
    assert aborted.returncode == 0 and "unchanged" in aborted.stderr
    assert tree(root) == before and workspaces(state) == []
    assert "no workspace" in sandlock("workspace", "abort", ident).stderr


def test_kill_9_of_sandlock_mid_run_leaves_the_directory_untouched(tmp_path, state):
    root = populate(tmp_path / "w")
    before = tree(root)
    process = subprocess.Popen([*SANDLOCK, "run", "--workdir", str(root), "--", "sh", "-c",
                                EVERY_CHANGE + "echo ready; sleep 60"],
                               stdout=subprocess.PIPE, text=True, cwd="/")
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGKILL)
    process.wait()
    (ident,) = workspaces(state)
    deadline = time.monotonic() + 10  # the keeper sees sandlock gone and ends the sandbox
    while "interrupted" not in sandlock("workspace", "list").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert tree(root) == before
    assert "A        4 added.txt" in sandlock("workspace", "diff", ident).stdout.splitlines()
    assert sandlock("workspace", "commit", ident).returncode == 0
    assert (root / "added.txt").read_text() == "new\n"


def test_git_commit_inside_the_workspace(tmp_path, state):
    root = tmp_path / "repo"
    root.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    (root / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=root, check=True)
    script = " && ".join([
        "echo two >> a.txt", "echo b > b.txt", f"{' '.join(git)} add -A",
        f"{' '.join(git)} commit -qm second", "git status --porcelain"])
    aborted = run("--workdir", str(root), "--on-exit", "abort", "--", "sh", "-c", script)
    assert aborted.returncode == 0, aborted.stderr
    log = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True)
    assert log.stdout.split() == ["first"]
    committed = run("--workdir", str(root), "--", "sh", "-c", script)
    assert committed.returncode == 0, committed.stderr
    log = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True)
    assert log.stdout.split() == ["second", "first"]
    assert subprocess.run(["git", "fsck", "--strict"], cwd=root, capture_output=True).returncode == 0
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    assert status.stdout == ""


def test_pip_install_into_a_venv_in_the_workspace(tmp_path, state):
    root = tmp_path / "proj"
    root.mkdir()
    wheel = root / "tinypkg-1.0-py3-none-any.whl"  # offline: a wheel made here, by hand
    info = "tinypkg-1.0.dist-info"
    members = {"tinypkg/__init__.py": "VALUE = 42\n",
               f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
               f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in members)
                         + f"{info}/RECORD,,\n")
    python = sys.executable
    script = (f"{python} -m venv --without-pip venv && "
              f"{python} -m pip --python venv/bin/python install -q --no-index "
              f"./{wheel.name} && venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'")
    preview = run("--dry-run", "--workdir", str(root), "--", "sh", "-c", script, timeout=120)
    assert preview.returncode == 0, preview.stderr
    assert preview.stdout.strip().endswith("42")
    assert not (root / "venv").exists()
    assert "A        - venv/" in preview.stderr
    done = run("--workdir", str(root), "--", "sh", "-c", script, timeout=120)
    assert done.returncode == 0, done.stderr
    check = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                            "import tinypkg; print(tinypkg.VALUE)"], capture_output=True, text=True)
    assert check.stdout == "42\n"


def test_a_compiler_build_commits_and_a_failing_build_aborts(tmp_path, state):
    root = tmp_path / "src"
    root.mkdir()
    (root / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("hi");return 0;}\n')
    (root / "Makefile").write_text(
        "all: hello\nhello: hello.o\n\tgcc -o hello hello.o\nhello.o: hello.c\n\tgcc -c -save-temps hello.c\n"
        "broken: hello.o\n\tfalse\n")
    before = tree(root)
    failing = run("--workdir", str(root), "--", "make", "broken")
    assert failing.returncode == 2  # make's failure
    assert tree(root) == before  # hello.o and the temporaries (-save-temps) discarded
    built = run("--workdir", str(root), "--", "make")
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(root / "hello")], capture_output=True, text=True).stdout == "hi\n"
    assert {"hello.o", "hello.i", "hello.s"} <= set(os.listdir(root))


def test_max_disk_bounds_the_captured_writes(tmp_path, state):
    root = populate(tmp_path / "w")
    audit = tmp_path / "audit.jsonl"
    result = run("--workdir", str(root), "--max-disk", "1M", "--audit", str(audit), "--",
                 "sh", "-c", "head -c 600000 /dev/zero > a && echo first; "
                 "head -c 600000 /dev/zero > b || echo second-failed")
    assert result.returncode == 0
    assert result.stdout.split() == ["first", "second-failed"]
    assert "No space left on device" in result.stderr
    assert "disk limit 1M reached" in result.stderr
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(r.get("limit") == "max_disk" for r in records)
    assert any(r.get("event") == "workspace" and r["action"] == "commit" for r in records)
    assert (root / "a").stat().st_size == 600000  # committed from the tmpfs layer
    kept = run("--workdir", str(root), "--max-disk", "1M", "--on-exit", "keep", "--", "touch", "k")
    assert kept.returncode == 0
    (ident,) = workspaces(state)
    assert sandlock("workspace", "commit", ident).returncode == 0  # kept on disk, after the tmpfs
    assert (root / "k").exists()


def test_the_sandbox_cannot_leave_or_reach_around_its_overlay(tmp_path, state):
    root = populate(tmp_path / "w")
    (root / "secret.txt").write_text("s\n")
    before = tree(root)
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('umount', libc.umount2(os.getcwd().encode(), 2), ctypes.get_errno())\n"
        "print('unshare', libc.unshare(0x00020000), ctypes.get_errno())\n"
        f"try:\n    os.listdir({str(state)!r})\nexcept OSError as e:\n    print('store', e.errno)\n"
        "try:\n    open('secret.txt')\nexcept OSError as e:\n    print('denied', e.errno)\n")
    result = run("--workdir", str(root), "--fs-deny", str(root / "secret.txt"),
                 "--on-exit", "abort", "--", "/usr/bin/python3", "-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["umount -1 1", "unshare -1 1", "store 13", "denied 13"]
    assert tree(root) == before


def test_bad_workspace_options_are_usage_errors(tmp_path, state):
    for args, message in [
        (["--max-disk", "1M"], "--max-disk is about the copy-on-write workspace"),
        (["--on-exit", "keep"], "--on-exit is about the copy-on-write workspace"),
        (["--workdir", str(tmp_path), "--on-exit", "later"], "--on-exit"),
        (["--workdir", str(tmp_path / "missing")], "--workdir"),
        (["--workdir", str(tmp_path), "--max-disk", "12Q"], "--max-disk"),
        (["--workdir", "/"], "whole machine"),
        (["--workdir", str(tmp_path), "--mode", "read-only"], "read-only"),
        (["--workdir", str(state.parent.parent)], "contains the workspace store"),
        (["--workdir", "/var/tmp"], "private to each run"),
    ]:
        result = run(*args, "--", "true")
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("sandlock: error: ") and message in result.stderr, args
        assert len(result.stderr.splitlines()) == 1


def test_refused_user_namespaces_are_named_and_nothing_is_written(tmp_path, state):
    """In a user namespace whose user.max_user_namespaces is 0, sandlock cannot make
    its own: the error names the setting, and DIR is never written instead."""
    root = populate(tmp_path / "w")
    before = tree(root)
    script = ("echo 0 > /proc/sys/user/max_user_namespaces && "
              f"exec {' '.join(SANDLOCK)} run --workdir {root} -- sh -c 'echo x > f'")
    result = subprocess.run(["unshare", "-U", "--map-user=0", "--map-group=0", "sh", "-c", script],
                            capture_output=True, text=True, cwd="/", timeout=60)
    assert result.returncode == 125, result.stderr
    assert "user.max_user_namespaces" in result.stderr
    assert tree(root) == before


def test_policy_fn_and_limits_work_in_a_cow_run(tmp_path, state):
    root = populate(tmp_path / "w")
    seen = []

    def policy_fn(event, ctx):
        if event.syscall in ("execve", "execveat"):
            seen.append(os.path.basename(event.argv[0]))
        return 0

    sandbox = Sandbox(Policy(workdir=str(root), max_processes=3), policy_fn=policy_fn, quiet=True)
    result = sandbox.run(["sh", "-c", "touch made; sleep 0.2 & wait; "
                          "sh -c 'sleep 0.3 & sleep 0.3 & sleep 0.3 & wait' || echo capped"])
    assert result.exit_code == 0
    assert "made" in os.listdir(root)  # committed
    assert "touch" in seen and "sleep" in seen  # policy_fn heard the execs
    assert b"Cannot fork" in result.stderr and result.stdout == b"capped\n"  # the cap held


def test_key_cases_as_an_unprivileged_user(as_nobody, world_tmp, state):
    root = populate(world_tmp / "w")
    subprocess.run(["chown", "-R", "65534:65534", str(world_tmp)], check=True)
    env = {**os.environ, "HOME": str(world_tmp)}
    before = tree(root)
    aborted = subprocess.run(as_nobody([*SANDLOCK, "run", "--workdir", str(root), "--", "sh", "-c",
                                        EVERY_CHANGE + "exit 1"]),
                             capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert aborted.returncode == 1, aborted.stderr
    assert tree(root) == before
    preview = subprocess.run(as_nobody([*SANDLOCK, "run", "--dry-run", "--workdir", str(root), "--",
                                        "sh", "-c", EVERY_CHANGE]),
                             capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert preview.returncode == 0 and "dry run: 22 changes" in preview.stderr, preview.stderr
    plain = populate(world_tmp / "plain")
    subprocess.run(["sh", "-c", EVERY_CHANGE], cwd=plain, check=True)
    done = subprocess.run(as_nobody([*SANDLOCK, "run", "--workdir", str(root), "--max-disk", "10M",
                                     "--", "sh", "-c", EVERY_CHANGE]),
                          capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert done.returncode == 0, done.stderr
    assert tree(root, times=False) == tree(plain, times=False)
    assert os.stat(root / "added.txt").st_uid == 65534


def _write_marker(path: str) -> str:
    with open(path, "w") as f:
        f.write("called\n")
    return "written"


def test_a_long_lived_sandbox_commits_when_its_block_ends_and_aborts_on_an_exception(tmp_path, state):
    root = populate(tmp_path / "w")
    sandbox = Sandbox(Policy(workdir=str(root)), quiet=True)
    with sandbox as sb:
        assert sb.exec(["sh", "-c", "echo a > a.txt"]).wait() == 0
        assert sb.call(_write_marker, (str(root / "called.txt"),)).value == "written"
        assert not (root / "a.txt").exists()  # nothing reaches DIR while the block runs
    assert sandbox.workspace.action == "commit"
    assert (root / "a.txt").read_text() == "a\n" and (root / "called.txt").exists()
    before = tree(root)
    with pytest.raises(KeyError):
        with sandbox as sb:
            sb.exec(["sh", "-c", "echo b > b.txt"]).wait()
            raise KeyError("the agent failed")
    assert sandbox.workspace.action == "abort" and sandbox.workspace.changes == (("A", "b.txt"),)
    assert tree(root) == before


def test_a_call_with_a_workdir_commits_what_the_function_wrote(tmp_path, state):
    root = populate(tmp_path / "w")
    result = Sandbox(Policy(workdir=str(root)), quiet=True).call(_write_marker, (str(root / "c.txt"),))
    assert result.value == "written"
    assert (root / "c.txt").read_text() == "called\n"
    assert workspaces(state) == []


def test_the_network_policy_holds_in_a_cow_run(tmp_path, state):
    import socket

    root = populate(tmp_path / "w")
    allowed, other = socket.socket(), socket.socket()
    for server in (allowed, other):
        server.bind(("127.0.0.1", 0))
        server.listen(4)
    ports = [server.getsockname()[1] for server in (allowed, other)]
    probe = ("import socket, sys\n"
             "for port in map(int, sys.argv[1:]):\n"
             "    try:\n"
             "        socket.create_connection(('127.0.0.1', port), 5).close(); print(port, 'ok')\n"
             "    except OSError as e:\n"
             "        print(port, e.errno)\n"
             "open('net.txt', 'w').write('done')\n")
    try:
        result = run("--workdir", str(root), "--net-allow", f"127.0.0.1:{ports[0]}", "--",
                     "/usr/bin/python3", "-c", probe, *map(str, ports))
    finally:
        allowed.close()
        other.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{ports[0]} ok", f"{ports[1]} 13"]  # EACCES
    assert (root / "net.txt").read_text() == "done"
