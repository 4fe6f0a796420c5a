"""What a command in a --workdir sandbox can leave in its layer to hurt the user once
it is gone: the commit that follows (and `sandlock workspace list/diff/commit/abort`,
the user's own later commands) is the attack surface. Each test performs the attack
in a real confined run as an unprivileged user (nobody) with a home of its own
outside /tmp, then checks what reached the real directory and that every command
answered in one line (never a traceback); each has a control showing the attack
itself worked inside, or what the same thing does where it is allowed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import SANDLOCK

from sandlock.cow._changes import human_size

MIB = 1 << 20


class User:
    """nobody (or the test's own user, when not root), with ``home`` as $HOME and
    its workspace store in it."""

    def __init__(self, home: Path, wrap) -> None:
        self.home, self.wrap = home, wrap
        self.store = home / ".local" / "state" / "sandlock" / "workspaces"

    def sandlock(self, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
        env = {name: value for name, value in os.environ.items() if name != "XDG_STATE_HOME"}
        env["HOME"] = str(self.home)
        result = subprocess.run(self.wrap([*SANDLOCK, *map(str, args)]), capture_output=True,
                                text=True, errors="surrogateescape", env=env, cwd="/",
                                timeout=timeout, check=False)
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        return result

    def project(self, name: str) -> Path:
        path = self.home / name
        path.mkdir()
        _own(path)
        return path

    def workspaces(self) -> list[str]:
        return sorted(os.listdir(self.store)) if self.store.exists() else []


def _own(path: Path) -> None:
    if os.getuid() == 0:
        os.chown(path, 65534, 65534)


@pytest.fixture
def user(unscratched, as_nobody):
    _own(unscratched)
    yield User(unscratched, as_nobody)
    # (shutil.rmtree recurses: too deep for it, what these tests make)
    subprocess.run(["rm", "-rf", "--one-file-system", *map(str, unscratched.iterdir())], check=False)


def notice(result: subprocess.CompletedProcess) -> str:
    """sandlock's own stderr: exactly one line (the command's lines are its own)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("sandlock")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_sparse_file_counts_at_its_apparent_size_against_max_disk(user):
    project = user.project("p")
    audit = user.home / "audit.jsonl"
    run = user.sandlock("run", "--workdir", project, "--max-disk", "10M", "--audit", audit, "--",
                        "sh", "-c", "truncate -s 1T huge && echo made")
    assert run.returncode == 0 and run.stdout == "made\n"  # (control: the run made it)
    line = notice(run)
    assert "not committed" in line and "1.0T" in line and "more than --max-disk 10M" in line
    records = [json.loads(record) for record in audit.read_text().splitlines()]
    assert any(r.get("limit") == "max_disk" and "not committed" in r["reason"] for r in records)
    assert any(r.get("event") == "workspace" and r["action"] == "keep" for r in records)
    assert os.listdir(project) == []
    (ident,) = user.workspaces()
    assert f"{ident} " in user.sandlock("workspace", "list").stdout
    assert user.sandlock("workspace", "diff", ident).stdout == "A     1.0T huge\n"
    blocks = sum(os.lstat(os.path.join(top, name)).st_blocks
                 for top, dirs, files in os.walk(user.store) for name in dirs + files)
    assert blocks * 512 < MIB  # kept on disk with its holes
    again = user.sandlock("workspace", "commit", ident)
    assert again.returncode == 1 and "not committed" in notice(again)
    assert os.listdir(project) == []
    assert user.sandlock("workspace", "abort", ident).returncode == 0
    assert user.workspaces() == []
    # Control: with no --max-disk, nothing bounds the run's files: it is committed,
    # and keeps its holes (1 TiB of apparent size, no real blocks).
    free = user.sandlock("run", "--workdir", project, "--", "truncate", "-s", "1T", "huge")
    assert free.returncode == 0, free.stderr
    st = os.stat(project / "huge")
    assert st.st_size == 1 << 40 and st.st_blocks * 512 < MIB


def test_holes_and_hard_links_are_kept_by_a_copying_commit(user):
    """With --max-disk the layer is a tmpfs: the commit copies. A sparse file within
    the limit, and a file with six names, take no more room than in the layer."""
    project = user.project("p")
    script = ("truncate -s 6M sparse && printf data | dd of=sparse bs=1 seek=3145728 conv=notrunc "
              "status=none && head -c 3145728 /dev/urandom > big && for i in 1 2 3 4 5; do "
              "ln big link$i; done")
    run = user.sandlock("run", "--workdir", project, "--max-disk", "10M", "--", "sh", "-c", script)
    assert run.returncode == 0, run.stderr
    assert "committed 7 changes" in notice(run)
    sparse = os.stat(project / "sparse")
    assert sparse.st_size == 6 * MIB and sparse.st_blocks * 512 <= 64 * 1024
    with open(project / "sparse", "rb") as f:
        f.seek(3 * MIB)
        assert f.read(4) == b"data"
    big = os.stat(project / "big")
    assert big.st_nlink == 6  # (six names in the layer: 18M counted per name, 3M per file)
    assert all(os.stat(project / f"link{i}").st_ino == big.st_ino for i in range(1, 6))


DEEP = ("import os\nfor _ in range(1100):\n    os.mkdir('d'); os.chdir('d')\n"
        "open('bottom', 'w').write('deep\\n')\n")


def walk_down(top: Path) -> tuple[int, list[str]]:
    """How many directories deep ``top``'s single chain goes, and the names at the
    bottom (through descriptors: the path is longer than the kernel would take)."""
    fd, depth = os.open(top, os.O_RDONLY | os.O_DIRECTORY), 0
    try:
        while True:
            names = os.listdir(fd)
            inner = [n for n in names if stat.S_ISDIR(os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode)]
            if not inner:
                return depth, sorted(names)
            next_fd = os.open(inner[0], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, depth = next_fd, depth + 1
    finally:
        os.close(fd)


@pytest.mark.parametrize("disk", [[], ["--max-disk", "10M"]], ids=["layer-on-disk", "tmpfs-layer"])
def test_a_tree_1100_deep_commits_and_every_command_answers(user, disk):
    plain = user.home / "plain"
    make = f"import os; os.makedirs({str(plain)!r}); os.chdir({str(plain)!r})\n{DEEP}"
    subprocess.run(user.wrap(["/usr/bin/python3", "-c", make]), check=True)
    assert walk_down(plain) == (1100, ["bottom"])  # control: the tree, made unconfined
    project = user.project("p")
    run = user.sandlock("run", "--workdir", project, *disk, "--", "/usr/bin/python3", "-c", DEEP)
    assert run.returncode == 0 and "committed 1101 changes" in notice(run)
    assert walk_down(project) == (1100, ["bottom"])
    assert user.workspaces() == []
    # kept, then looked at, committed; and another one aborted
    kept_for = {}
    for name in ("q", "r"):
        kept = user.sandlock("run", "--workdir", user.project(name), *disk, "--on-exit", "keep",
                             "--", "/usr/bin/python3", "-c", DEEP)
        assert kept.returncode == 0 and "kept 1101 changes" in notice(kept)
        kept_for[name] = next(ident for ident in user.workspaces() if ident.startswith(f"{name}-"))
    listing = user.sandlock("workspace", "list")
    assert listing.returncode == 0 and listing.stdout.count(" 1101 ") == 2
    diff = user.sandlock("workspace", "diff", kept_for["q"])
    assert diff.returncode == 0 and len(diff.stdout.splitlines()) == 1101
    patch = user.sandlock("workspace", "diff", "--patch", kept_for["q"])
    assert patch.returncode == 0 and patch.stdout.endswith("+deep\n")
    assert user.sandlock("workspace", "commit", kept_for["q"]).returncode == 0
    assert walk_down(user.home / "q") == (1100, ["bottom"])
    assert user.sandlock("workspace", "abort", kept_for["r"]).returncode == 0
    assert user.workspaces() == [] and os.listdir(user.home / "r") == []


LONG = ("import os\nfor _ in range(20):\n    os.mkdir('n' * 250); os.chdir('n' * 250)\n"
        "open('far', 'w').write('far\\n')\n")


def test_a_path_longer_than_path_max(user):
    project = user.project("p")
    kept = user.sandlock("run", "--workdir", project, "--on-exit", "keep", "--",
                         "/usr/bin/python3", "-c", LONG)
    assert kept.returncode == 0 and "kept 21 changes" in notice(kept)
    (ident,) = user.workspaces()
    assert user.sandlock("workspace", "list").returncode == 0
    diff = user.sandlock("workspace", "diff", ident)
    assert diff.returncode == 0 and len(diff.stdout.splitlines()) == 21
    patch = user.sandlock("workspace", "diff", "--patch", ident)
    assert patch.returncode == 0 and patch.stdout.endswith("+far\n")
    done = user.sandlock("workspace", "commit", ident)
    assert done.returncode == 0, done.stderr
    assert walk_down(project) == (20, ["far"])
    with pytest.raises(OSError) as error:  # control: no full path reaches it
        os.stat(project / "/".join(["n" * 250] * 20) / "far")
    assert error.value.strerror == "File name too long"


SETID = ("cp /bin/true new && chmod u+s,g+s new && touch tool && mkdir dir && chmod g+s dir && "
         "stat -c '%A %n' new tool dir")


@pytest.mark.parametrize("disk", [[], ["--max-disk", "10M"]], ids=["rename", "copy"])
def test_set_id_bits_never_reach_the_directory(user, disk):
    project = user.project("p")
    tool = project / "tool"
    tool.write_bytes(Path("/bin/true").read_bytes())
    _own(tool)
    os.chmod(tool, 0o4755)  # the directory's own set-uid file, which the run touches
    preview = user.sandlock("run", "--dry-run", "--workdir", project, *disk,
                            "--allow-syscall", "fchmodat", "--allow-syscall", "fchmodat2",
                            "--", "sh", "-c", SETID)
    size = human_size(os.stat("/bin/true").st_size)
    assert f"A {size:>8} new  [set-id bits and file capabilities dropped]" in preview.stderr
    assert f"M {size:>8} tool  [set-id bits and file capabilities dropped]" in preview.stderr
    run = user.sandlock("run", "--workdir", project, *disk, "--allow-syscall", "fchmodat",
                        "--allow-syscall", "fchmodat2", "--", "sh", "-c", SETID)
    assert run.returncode == 0, run.stderr
    # control: set inside, and kept by the copy-up
    assert run.stdout == "-rwsr-sr-x new\n-rwsr-xr-x tool\ndrwxr-sr-x dir\n"
    assert "dropped from new, tool" in notice(run)
    for name in ("new", "tool", "dir"):
        assert os.stat(project / name).st_mode & 0o7777 == 0o755, name


def test_fifos_and_sockets_are_left_out(user):
    project = user.project("p")
    script = ("mkfifo pipe && /usr/bin/python3 -c \"import socket; socket.socket(socket.AF_UNIX)"
              ".bind('sock')\" && test -p pipe && test -S sock && echo both && echo x > kept")
    preview = user.sandlock("run", "--dry-run", "--workdir", project, "--", "sh", "-c", script)
    assert preview.stdout == "both\n"  # control: made inside
    assert "A        0 pipe  [a fifo: not committed]" in preview.stderr
    assert "A        0 sock  [a socket: not committed]" in preview.stderr
    run = user.sandlock("run", "--workdir", project, "--", "sh", "-c", script)
    assert run.returncode == 0
    assert notice(run).endswith("committed 1 change to "
                                f"{project}; not committed, as special files: pipe, sock")
    assert os.listdir(project) == ["kept"]


NAMES = ("import os\nfor name in (b'new\\nline', b'tab\\there', b'\\xff\\xfe', "
         "'\\u202eevil'.encode(), b'back\\\\slash'):\n    open(name, 'w').write('x')\n"
         "os.mkdir(b'dir\\nname'); open(b'dir\\nname/in', 'w').write('y')\n")


def test_names_with_newlines_and_bad_utf8_are_one_escaped_line_each(user):
    project = user.project("p")
    preview = user.sandlock("run", "--dry-run", "--workdir", project, "--",
                            "/usr/bin/python3", "-c", NAMES)
    assert preview.returncode == 0
    assert preview.stderr.splitlines()[1:] == [
        "A        1 back\\\\slash", "A        - dir\\nname/", "A        1 dir\\nname/in",
        "A        1 new\\nline", "A        1 tab\\there", "A        1 \\u202eevil", "A        1 \\xff\\xfe"]
    kept = user.sandlock("run", "--workdir", project, "--on-exit", "keep", "--",
                         "/usr/bin/python3", "-c", NAMES)
    assert kept.returncode == 0
    (ident,) = user.workspaces()
    assert len(user.sandlock("workspace", "list").stdout.splitlines()) == 2
    diff = user.sandlock("workspace", "diff", ident)
    assert diff.stdout.splitlines() == preview.stderr.splitlines()[1:]
    patch = user.sandlock("workspace", "diff", "--patch", ident)
    assert patch.returncode == 0 and "+++ b/new\\nline\n" in patch.stdout
    assert user.sandlock("workspace", "commit", ident).returncode == 0
    assert sorted(os.listdir(os.fsencode(project))) == sorted(  # the real names, byte for byte
        [b"new\nline", b"tab\there", b"\xff\xfe", "\u202eevil".encode(), b"back\\slash", b"dir\nname"])
    assert (project / "dir\nname" / "in").read_text() == "y"


@pytest.fixture
def small_disk(user):
    """A 1 MiB file system of the user's own, as the directory (root mounts it)."""
    if os.getuid() != 0:
        pytest.skip("mounting a small file system needs root")
    path = user.project("small")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M,uid=65534,gid=65534,mode=0755",
                    "sandlock-test", str(path)], check=True)
    yield path
    subprocess.run(["umount", str(path)], check=True)


def test_a_commit_that_fails_part_way_says_what_it_wrote_and_keeps_the_rest(user, small_disk):
    project = small_disk
    run = user.sandlock("run", "--workdir", project, "--", "sh", "-c",
                        "head -c 700000 /dev/urandom > a && head -c 700000 /dev/urandom > b")
    assert run.returncode == 0  # the command's
    line = notice(run)
    (written,) = os.listdir(project)  # one fitted; of the other, not even a temporary file
    rest = "b" if written == "a" else "a"
    assert f"stopped at {rest}: No space left on device, after 1 change;" in line, line
    (ident,) = user.workspaces()
    assert f"kept as {ident}" in line
    listing = user.sandlock("workspace", "list").stdout.splitlines()[1].split()
    assert listing[:3] == [ident, "kept", "1"]
    assert user.sandlock("workspace", "diff", ident).stdout.split() == ["A", "683.6K", rest]
    os.unlink(project / written)  # room again: the rest commits
    done = user.sandlock("workspace", "commit", ident)
    assert done.returncode == 0 and os.listdir(project) == [rest]
    assert user.workspaces() == []


def test_file_capabilities_never_reach_the_directory(unscratched):
    """Root's run: overlayfs copies a file's capabilities up with it, so a file of the
    directory that had some, touched by the run, would be written back with them."""
    if os.getuid() != 0:
        pytest.skip("only root gives a file capabilities")
    root = User(unscratched, list)
    project = root.project("p")
    tool = project / "tool"
    tool.write_bytes(Path("/bin/true").read_bytes())
    os.setxattr(tool, "security.capability", CAP_NET_RAW)
    kept = root.sandlock("run", "--workdir", project, "--on-exit", "keep", "--", "touch", "tool")
    (ident,) = root.workspaces()
    upper = root.store / ident / "layer" / "upper" / "tool"
    assert "security.capability" in os.listxattr(upper)  # control: the layer has them
    done = root.sandlock("workspace", "commit", ident)
    assert done.returncode == 0, done.stderr
    size = human_size(os.stat("/bin/true").st_size)
    assert f"M {size:>8} tool  [set-id bits and file capabilities dropped]" in done.stderr
    assert "security.capability" not in os.listxattr(tool)
    assert kept.returncode == 0


# cap_net_raw, permitted and effective (VFS_CAP_REVISION_2)
CAP_NET_RAW = (0x02000001).to_bytes(4, "little") + (1 << 13).to_bytes(4, "little") + bytes(12)


def test_a_symlink_the_run_made_is_shown_by_the_patch_never_read_through(user):
    secret = user.home / "secret.txt"
    secret.write_text("the user's secret\n")
    _own(secret)
    project = user.project("p")
    (project / "notes").write_text("mine\n")
    _own(project / "notes")
    kept = user.sandlock("run", "--workdir", project, "--on-exit", "keep", "--", "sh", "-c",
                         f"ln -s {secret} leak && rm notes && ln -s {secret} notes && mkfifo pipe")
    assert kept.returncode == 0, kept.stderr
    (ident,) = user.workspaces()
    patch = user.sandlock("workspace", "diff", "--patch", ident, timeout=30)  # (a fifo never opened)
    assert patch.returncode == 0
    assert f"+symbolic link to {secret}\n" in patch.stdout
    assert "-mine\n" in patch.stdout and "+a fifo: not committed\n" in patch.stdout
    assert "secret" not in patch.stdout.replace(str(secret), "")
    # control: diff given the layer's path (as --patch did) reads through the link
    leak = user.store / ident / "layer" / "upper" / "leak"
    plain = subprocess.run(["diff", "-uN", os.devnull, str(leak)], capture_output=True, text=True,
                           check=False)
    assert plain.stdout.endswith("+the user's secret\n")
