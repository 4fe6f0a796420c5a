"""Reading and committing a copy-on-write workspace's upper layer (sandlock.cow's
_changes and _commit), on layers a real overlayfs made: each test builds a lower
tree, runs a shell script in it under an overlay mounted in an unprivileged user
and mount namespace (as ``--workdir`` does), then reads or commits the upper from
here, outside, and checks the real tree."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sandlock.cow._changes import Change, changes, format_changes, human_size
from sandlock.cow._commit import commit

TESTS = os.path.dirname(os.path.abspath(__file__))


def tree(root: str, *, times: bool = True) -> dict[str, list]:
    """Every entry under ``root`` (not root itself), without following symlinks:
    path -> [type, mode, size, sha256, link target, mtime (None without ``times``)]."""
    found: dict[str, list] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            kind, size, digest, link = stat.S_IFMT(st.st_mode), None, None, None
            if stat.S_ISREG(st.st_mode):
                size = st.st_size
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                link = os.readlink(path)
            found[rel] = [kind, stat.S_IMODE(st.st_mode), size, digest, link,
                          st.st_mtime_ns if times else None]
    return found


def overlay_xattrs(root: str) -> list[str]:
    """Every user.overlay.* xattr under ``root`` (root included), as path:name."""
    bad = []
    for top, dirs, files in os.walk(root):
        for path in [top] + [os.path.join(top, name) for name in dirs + files]:
            bad += [f"{path}:{name}" for name in os.listxattr(path, follow_symlinks=False)
                    if name.startswith("user.overlay.")]
    return bad


class Space:
    """A lower tree (the real directory, ``dir``), an upper and a work dir, and an
    ``outside`` directory the commit must never reach."""

    def __init__(self, base: str, upper_base: str | None = None) -> None:
        self.base = base
        self.dir = os.path.join(base, "dir")
        self.outside = os.path.join(base, "outside")
        layers = upper_base or base
        self.upper, self.work = os.path.join(layers, "upper"), os.path.join(layers, "work")
        for path in (self.dir, self.outside, self.upper, self.work):
            os.mkdir(path)

    def build(self, entries: dict[str, str | tuple[str, str]]) -> None:
        """path -> text (a file), "/" ending the path (a directory) or ("->", target)."""
        for rel, value in entries.items():
            path = os.path.join(self.dir, rel)
            os.makedirs(os.path.dirname(path.rstrip("/")), exist_ok=True)
            if rel.endswith("/"):
                os.makedirs(path, exist_ok=True)
            elif isinstance(value, tuple):
                os.symlink(value[1], path)
            else:
                Path(path).write_text(value)

    def run(self, script: str, dump: bool = False) -> dict[str, list] | None:
        """``script`` in the directory as the overlay shows it; with ``dump``, the
        merged view afterwards (``tree``)."""
        mount = (f"mount -t overlay ov -o lowerdir={self.dir},upperdir={self.upper},"
                 f"workdir={self.work},userxattr {self.dir}")
        out = os.path.join(self.base, "merged.json")
        dumper = (f"import sys, json; sys.path.insert(0, {TESTS!r}); from test_cow_commit import tree; "
                  f"json.dump(tree('.'), open({out!r}, 'w'))")
        shell = f"set -e; {mount}; cd {shlex.quote(self.dir)}; {script}"
        if dump:
            python = shlex.quote(sys.executable)
            shell += f"\ncd {shlex.quote(self.dir)}; {python} -B -c {shlex.quote(dumper)}"
        subprocess.run(["unshare", "-Urm", "sh", "-c", shell], check=True, capture_output=True, text=True)
        if dump:
            return json.loads(Path(out).read_text())
        return None

    def upper_entries(self) -> list[str]:
        return sorted(os.path.relpath(os.path.join(top, name), self.upper)
                      for top, dirs, files in os.walk(self.upper) for name in dirs + files)


def _remove(path: str) -> None:
    for top, dirs, _ in os.walk(path):
        for name in dirs:  # open up directories a test made read-only
            if not os.path.islink(os.path.join(top, name)):
                os.chmod(os.path.join(top, name), 0o700)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def overlay_works():
    base = tempfile.mkdtemp(prefix="sandlock-cow-probe-", dir="/var/tmp")
    try:
        Space(base).run("true")
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"no overlay in an unprivileged user namespace here: {e}")
    finally:
        _remove(base)


@pytest.fixture
def space(overlay_works):
    base = tempfile.mkdtemp(prefix="sandlock-cow-", dir="/var/tmp")
    yield Space(base)
    _remove(base)


@pytest.fixture
def shm_space(overlay_works):
    """The upper layer on another filesystem (tmpfs) than the directory."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat("/var/tmp").st_dev:
        pytest.skip("/dev/shm is not a filesystem of its own here")
    base = tempfile.mkdtemp(prefix="sandlock-cow-", dir="/var/tmp")
    layers = tempfile.mkdtemp(prefix="sandlock-cow-", dir="/dev/shm")
    yield Space(base, layers)
    _remove(base)
    _remove(layers)


LOWER = {
    "keep.txt": "untouched\n", "mod.txt": "old\n", "gone.txt": "bye\n", "old-name.txt": "moving\n",
    "same.txt": "same\n", "mode.txt": "mode\n", "touched.txt": "touched\n",
    "deldir/a": "a\n", "deldir/sub/b": "b\n",
    "repl/x": "x\n", "repl/y/z": "z\n", "repl/stays": "s\n",
    "file2dir": "was a file\n", "dir2file/in": "was in a dir\n",
    "link": ("->", "keep.txt"), "modes/": "", "olddir/f": "f\n",
}

SCRIPT = """
echo new > mod.txt
rm gone.txt
rm -r deldir
mv old-name.txt new-name.txt
python3 -c "open('same.txt', 'r+')"
chmod 600 mode.txt
touch -d '2001-02-03 04:05:06' touched.txt
rm -r repl; mkdir repl; echo fresh > repl/x; echo s > repl/stays
rm file2dir; mkdir file2dir; echo inside > file2dir/in
rm -r dir2file; echo now a file > dir2file
ln -sfn mod.txt link; ln -s keep.txt newlink
chmod 700 modes
mkdir -p n1/n2/n3; echo deep > n1/n2/n3/deep; head -c 3000 /dev/zero > n1/big
mv olddir newdir
"""

EXPECTED = [
    Change("D", "deldir/"), Change("M", "dir2file", 11), Change("M", "file2dir/"),
    Change("A", "file2dir/in", 7), Change("D", "gone.txt"), Change("M", "link", 7),
    Change("M", "mod.txt", 4), Change("M", "mode.txt", 5), Change("M", "modes/"),
    Change("A", "n1/"), Change("A", "n1/big", 3000), Change("A", "n1/n2/"), Change("A", "n1/n2/n3/"),
    Change("A", "n1/n2/n3/deep", 5), Change("A", "new-name.txt", 7), Change("A", "newdir/"),
    Change("A", "newdir/f", 2), Change("A", "newlink", 8), Change("D", "old-name.txt"),
    Change("D", "olddir/"), Change("M", "repl/stays", 2),  # same content, new mtime
    Change("M", "repl/x", 6), Change("D", "repl/y/"),
    Change("M", "touched.txt", 8),
]


def test_changes_lists_what_the_run_did(space):
    space.build(LOWER)
    space.run(SCRIPT)
    assert changes(space.upper, space.dir) == EXPECTED
    assert "same.txt" in space.upper_entries()  # copied up, yet unchanged: not listed


def test_commit_makes_the_directory_what_the_run_saw(space):
    space.build(LOWER)
    since = time.time_ns()
    merged = space.run(SCRIPT, dump=True)
    expected = changes(space.upper, space.dir)
    report = commit(space.upper, space.dir, since)
    assert report.conflicts == ()
    assert list(report.applied) == expected
    assert tree(space.dir) == merged
    assert space.upper_entries() == []  # everything applied or discarded
    assert overlay_xattrs(space.dir) == []
    assert os.listdir(space.outside) == []


def test_an_unchanged_copy_up_is_neither_listed_nor_applied(space):
    space.build({"f": "text\n", "d/g": "g\n"})
    before = os.lstat(os.path.join(space.dir, "d/g"))
    space.run("""python3 -c "open('f', 'r+'); open('d/g', 'a')" """)
    assert sorted(space.upper_entries()) == ["d", "d/g", "f"]
    assert changes(space.upper, space.dir) == []
    report = commit(space.upper, space.dir, time.time_ns())
    assert report.applied == report.conflicts == ()
    assert space.upper_entries() == []
    after = os.lstat(os.path.join(space.dir, "d/g"))
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)


def test_mode_and_mtime_changes_are_applied(space):
    space.build({"f": "f\n", "d/": ""})
    space.run("chmod 751 f; chmod 700 d; touch -d '2001-02-03 04:05:06' d")
    assert changes(space.upper, space.dir) == [Change("M", "d/"), Change("M", "f", 2)]
    commit(space.upper, space.dir, time.time_ns())
    assert stat.S_IMODE(os.stat(os.path.join(space.dir, "f")).st_mode) == 0o751
    st = os.stat(os.path.join(space.dir, "d"))
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_mtime == time.mktime(time.strptime("2001-02-03 04:05:06", "%Y-%m-%d %H:%M:%S"))


def test_a_change_made_meanwhile_is_a_conflict_left_in_the_upper(space):
    space.build({"a": "a\n", "b": "b\n", "c": "c\n", "d/sub/x": "x\n", "o/p": "p\n"})
    since = time.time_ns()
    space.run("echo run > a; echo run > b; rm c; rm -r d; echo n > new; rm -r o; mkdir o; echo q > o/q")
    time.sleep(0.05)  # past the filesystem's coarse clock tick
    Path(space.dir, "a").write_text("theirs\n")
    Path(space.dir, "d/sub/x").write_text("theirs\n")  # deep in a directory the run deleted
    Path(space.dir, "o/late").write_text("late\n")  # in a directory the run replaced
    report = commit(space.upper, space.dir, since)
    assert report.conflicts == (Change("M", "a", 4), Change("D", "d/"), Change("D", "o/late"))
    assert report.applied == (Change("M", "b", 4), Change("D", "c"), Change("A", "new", 2),
                              Change("D", "o/p"), Change("A", "o/q", 2))
    assert Path(space.dir, "a").read_text() == "theirs\n"
    assert Path(space.dir, "d/sub/x").read_text() == "theirs\n"
    assert Path(space.dir, "b").read_text() == "run\n"
    assert sorted(os.listdir(os.path.join(space.dir, "o"))) == ["late", "q"]
    assert Path(space.upper, "a").read_text() == "run\n"
    # what is left is the conflicts, and nothing else
    assert changes(space.upper, space.dir) == list(report.conflicts)
    assert sorted(space.upper_entries()) == ["a", "d", "o", "o/late"]


def test_force_applies_conflicts(space):
    space.build({"a": "a\n", "d/x": "x\n"})
    since = time.time_ns()
    space.run("echo run > a; rm -r d")
    time.sleep(0.05)
    Path(space.dir, "a").write_text("theirs\n")
    Path(space.dir, "d/x").write_text("theirs\n")
    report = commit(space.upper, space.dir, since, force=True)
    assert report.conflicts == ()
    assert report.applied == (Change("M", "a", 4), Change("D", "d/"))
    assert Path(space.dir, "a").read_text() == "run\n"
    assert not os.path.lexists(os.path.join(space.dir, "d"))
    assert space.upper_entries() == []


def test_a_conflicting_type_change_keeps_its_contents_in_the_upper(space):
    space.build({"f": "f\n"})
    since = time.time_ns()
    space.run("rm f; mkdir f; echo in > f/in")
    time.sleep(0.05)
    Path(space.dir, "f").write_text("theirs\n")
    report = commit(space.upper, space.dir, since)
    assert report.conflicts == (Change("M", "f/"), Change("A", "f/in", 3))
    assert report.applied == ()
    assert Path(space.dir, "f").read_text() == "theirs\n"
    assert changes(space.upper, space.dir) == list(report.conflicts)


def test_commit_across_filesystems_copies_atomically(shm_space):
    space = shm_space
    space.build({"mod": "old\n", "keep": "k\n", "d/x": "x\n", "link": ("->", "keep")})
    since = time.time_ns()
    script = ("echo new > mod; chmod 640 mod; touch -d '2001-02-03 04:05:06' mod; "
              "ln -sfn mod link; mkdir -p n/m; echo deep > n/m/deep; mkfifo n/fifo; "
              "rm -r d; mkdir d; echo y > d/y; echo more >> keep; "
              """python3 -c "import os; os.setxattr('keep', 'user.mine', b'1')" """)
    merged = space.run(script, dump=True)
    report = commit(space.upper, space.dir, since)
    assert report.conflicts == ()
    assert report.left_out == (Change("A", "n/fifo", 0, "a fifo: not committed"),)
    del merged["n/fifo"]  # a special file is never committed
    assert tree(space.dir) == merged
    assert overlay_xattrs(space.dir) == []
    assert os.getxattr(os.path.join(space.dir, "keep"), "user.mine") == b"1"
    assert [name for _, _, names in os.walk(space.dir) for name in names if ".sandlock-" in name] == []
    assert space.upper_entries() == []


def test_overlay_xattrs_stay_out_of_the_directory_when_renamed(space):
    space.build({"f": "f\n", "d/x": "x\n"})
    space.run("""echo g >> f; rm -r d; mkdir d; echo y > d/y;
python3 -c "import os; os.setxattr('f', 'user.mine', b'1')" """)
    assert "user.overlay.opaque" in os.listxattr(os.path.join(space.upper, "d"))
    commit(space.upper, space.dir, time.time_ns())
    assert overlay_xattrs(space.dir) == []
    assert os.getxattr(os.path.join(space.dir, "f"), "user.mine") == b"1"


def test_a_symlink_out_of_the_directory_is_replaced_not_followed(space):
    Path(space.outside, "x").write_text("outside\n")
    os.mkdir(os.path.join(space.outside, "sub"))
    space.build({"link": ("->", space.outside), "d/out": ("->", space.outside), "d/f": "f\n"})
    since = time.time_ns()
    # a run that replaces the symlinks with directories of its own
    space.run("rm link; mkdir link; echo mine > link/x; echo mine > link/y; rm -r d; mkdir d")
    assert changes(space.upper, space.dir) == [
        Change("D", "d/f"), Change("D", "d/out"), Change("M", "link/"),
        Change("A", "link/x", 5), Change("A", "link/y", 5)]
    commit(space.upper, space.dir, since)
    assert sorted(os.listdir(space.outside)) == ["sub", "x"]
    assert Path(space.outside, "x").read_text() == "outside\n"
    assert not os.path.islink(os.path.join(space.dir, "link"))
    assert Path(space.dir, "link/y").read_text() == "mine\n"


def test_a_directory_turned_symlink_meanwhile_is_not_written_through(space):
    Path(space.outside, "x").write_text("outside\n")
    space.build({"d/x": "x\n"})
    space.run("rm d/x; echo new > d/new")  # a whiteout and a file under d, not opaque
    # meanwhile d became a symlink to outside: a naive commit would delete outside/x
    shutil.rmtree(os.path.join(space.dir, "d"))
    os.symlink(space.outside, os.path.join(space.dir, "d"))
    assert changes(space.upper, space.dir) == [Change("M", "d/"), Change("A", "d/new", 4)]
    report = commit(space.upper, space.dir, time.time_ns() - 10**9 * 3600)
    assert report.conflicts == (Change("M", "d/"), Change("A", "d/new", 4))
    assert os.listdir(space.outside) == ["x"]
    report = commit(space.upper, space.dir, 0, force=True)
    assert report.applied == (Change("M", "d/"), Change("A", "d/new", 4))
    assert os.listdir(space.outside) == ["x"]
    assert Path(space.outside, "x").read_text() == "outside\n"
    assert os.listdir(os.path.join(space.dir, "d")) == ["new"]


def test_a_whiteout_for_what_is_gone_is_discarded(space):
    space.build({"f": "f\n", "d/x": "x\n"})
    space.run("rm f; rm -r d")
    os.unlink(os.path.join(space.dir, "f"))
    shutil.rmtree(os.path.join(space.dir, "d"))
    assert changes(space.upper, space.dir) == []
    report = commit(space.upper, space.dir, time.time_ns())
    assert report == type(report)((), ())
    assert space.upper_entries() == []


def test_format_changes():
    lines = format_changes([Change("A", "src/new.c", 1234), Change("D", "old/"),
                            Change("M", "big", 3 * 1024**3 + 1), Change("M", "small", 512)])
    assert lines == ["A     1.2K src/new.c", "D        - old/", "M     3.0G big", "M      512 small"]
    assert [human_size(n) for n in (0, 1023, 1024, 3565158, 1024**4)] == ["0", "1023", "1.0K", "3.4M", "1.0T"]


def test_read_only_and_unreadable_directories(space):
    """What an ordinary user's run does to read-only trees (a Go module cache) and
    to directories it locks: the commit opens them up to work, then restores them."""
    space.build({"cache/mod/f": "f\n", "ro/old": "o\n"})
    for path in ("cache/mod/f", "cache/mod", "cache", "ro"):
        os.chmod(os.path.join(space.dir, path), 0o444 if path.endswith("/f") else 0o555)
    since = time.time_ns()
    space.run("chmod -R u+w cache; rm -rf cache; chmod u+w ro; echo n > ro/new; chmod u-w ro; "
                       "mkdir locked; echo s > locked/s; chmod 000 locked")
    assert changes(space.upper, space.dir) == [
        Change("D", "cache/"), Change("A", "locked/"), Change("A", "locked/s", 2), Change("A", "ro/new", 2)]
    merged = space.run("true", dump=True)
    report = commit(space.upper, space.dir, since)
    assert report.conflicts == ()
    assert space.upper_entries() == []
    locked = os.path.join(space.dir, "locked")
    assert stat.S_IMODE(os.stat(locked).st_mode) == 0
    mtime = os.stat(locked).st_mtime_ns
    os.chmod(locked, 0o700)  # for an ordinary user to look in, as the run could
    merged["locked"][1] = 0o700
    assert tree(space.dir) == merged
    assert os.stat(locked).st_mtime_ns == mtime


def test_a_mount_in_a_deleted_directory_is_a_conflict_even_forced(space):
    """The overlay never shows what is mounted inside the directory: deleting a tree
    that holds a mount must not delete that filesystem's files."""
    space.build({"d/mnt/": "", "d/f": "f\n", "e/": ""})
    space.run("rm -r d; rm -r e")
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(TESTS)!r}); "
            "from sandlock.cow._commit import commit; "
            f"print(commit({space.upper!r}, {space.dir!r}, 0, force=True))")
    mnt = os.path.join(space.dir, "d", "mnt")
    shell = (f"set -e; mount -t tmpfs t {mnt}; echo keep > {mnt}/k; {shlex.quote(sys.executable)} -B -c "
             f"{shlex.quote(code)}; cat {mnt}/k")
    out = subprocess.run(["unshare", "-Urm", "sh", "-c", shell], check=True, capture_output=True,
                         text=True).stdout
    assert "conflicts=(Change(kind='D', path='d/', size=None, note=None),)" in out
    assert "applied=(Change(kind='D', path='e/', size=None, note=None),)" in out
    assert out.endswith("keep\n")
    assert os.path.exists(os.path.join(space.dir, "d/f"))
