"""A denied directory seen through the grants around it: watches on it (inotify, which
Landlock does not judge), its names listed through a read grant above it, its files'
sizes. Each attack performed by a real confined process, with its control."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK, UNPRIVILEGED_UID

# Watches DIRECTORY with inotify or fanotify (argv[2]), says so ("watching" or the
# error), then says what is made there within 5 s ("seen", with the name for inotify).
WATCH = r"""
import ctypes, errno, os, select, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
directory, kind = sys.argv[1], sys.argv[2]
if kind == "inotify":
    fd = libc.inotify_init1(0)
    watched = libc.inotify_add_watch(fd, directory.encode(), 0x100 | 0x20)  # IN_CREATE | IN_OPEN
else:  # unprivileged fanotify: notification class, events reported by handle and name
    fd = libc.fanotify_init(0xC00, os.O_RDONLY)  # FAN_REPORT_DFID_NAME
    libc.fanotify_mark.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                   ctypes.c_char_p)
    watched = libc.fanotify_mark(fd, 1, 0x100, -100, directory.encode())  # ADD, FAN_CREATE
if fd < 0 or watched < 0:
    print(errno.errorcode[ctypes.get_errno()], flush=True)
    sys.exit()
print("watching", flush=True)
if select.select([fd], [], [], 5)[0]:
    data = os.read(fd, 4096)
    if kind == "inotify":
        _, _, _, size = struct.unpack_from("iIII", data)
        print("seen", data[16:16 + size].rstrip(b"\0").decode(), flush=True)
    else:
        print("seen made-by-the-host", flush=True)
"""
LIST = r"""
import os, sys
for path in sys.argv[1:]:
    try:
        print(path, sorted(os.listdir(path)))
    except OSError as exc:
        print(path, exc.strerror)
"""
SIZE = "import os, sys\nprint(os.stat(sys.argv[1]).st_size)"


@pytest.fixture
def home(unscratched):
    home = unscratched / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("secret key")
    (home / ".netrc").write_text("machine x login y password z")
    (home / "proj").mkdir()
    (home / "data").mkdir()
    (home / "data" / "notes").write_text("notes")
    for path in (home, home / ".ssh", home / "proj", home / "data"):
        os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        path.chmod(0o755)
    return home


def _watch(directory, kind, *options, env=None, as_user=lambda argv: argv):
    """What the watcher said: whether it could watch, and what it saw made there."""
    argv = as_user([*SANDLOCK, "run", *options, "--", sys.executable, "-c", WATCH, str(directory), kind])
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as watcher:
        first = watcher.stdout.readline().strip()
        if first == "watching":
            time.sleep(0.1)
            (directory / "made-by-the-host").write_text("")
        out, err = watcher.communicate(timeout=30)
    return [first, *out.split("\n")[:-1]], err


@pytest.mark.parametrize("kind", ["inotify", "fanotify"])
@pytest.mark.parametrize("nobody", [False, True])
def test_a_denied_directory_cannot_be_watched(home, kind, nobody, request):
    as_user = request.getfixturevalue("as_nobody") if nobody else (lambda argv: argv)
    env = {**os.environ, "HOME": str(home)}
    said, err = _watch(home / ".ssh", kind, "--cwd", str(home / "proj"), env=env, as_user=as_user)
    assert said == ["EACCES"], err
    call = "inotify_add_watch" if kind == "inotify" else "fanotify_mark"
    assert f"sandlock: denied {call} of" in err and "not readable in this sandbox" in err
    # Through a read grant above it (where the store is masked): refused too.
    said, err = _watch(home / ".ssh", kind, "-r", "/", "-w", str(home / "proj"), env=env,
                       as_user=as_user)
    assert said == ["EACCES"], err
    # Control: the same watcher on a directory it may read sees the host's file made.
    said, err = _watch(home / "data", kind, "-r", "/", "-w", str(home / "proj"), env=env,
                       as_user=as_user)
    assert said == ["watching", "seen made-by-the-host"], err


def test_a_denied_store_is_not_listed_through_a_read_grant(home, as_nobody):
    env = {**os.environ, "HOME": str(home)}
    argv = [*SANDLOCK, "run", "-r", "/", "-w", str(home / "proj"), "--", sys.executable, "-c", LIST,
            str(home / ".ssh"), str(home / "data")]
    for user in (lambda argv: argv, as_nobody):
        done = subprocess.run(user(argv), capture_output=True, text=True, timeout=60, env=env)
        lines = done.stdout.splitlines()
        assert lines[0] in (f"{home / '.ssh'} Permission denied", f"{home / '.ssh'} []"), done.stderr
        assert lines[1] == f"{home / 'data'} ['notes']"  # control: a readable sibling lists
    # Control: unconfined, the same program lists the key's name.
    done = subprocess.run([sys.executable, "-c", LIST, str(home / ".ssh")], capture_output=True, text=True)
    assert "id_rsa" in done.stdout


def test_a_denied_file_under_a_read_grant_shows_no_size(home):
    env = {**os.environ, "HOME": str(home)}
    argv = [*SANDLOCK, "run", "-r", "/", "-w", str(home / "proj"), "--", sys.executable, "-c", SIZE]
    done = subprocess.run([*argv, str(home / ".netrc")], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "0", done.stderr
    control = subprocess.run([*argv, str(home / "data" / "notes")], capture_output=True, text=True,
                             env=env, timeout=60)
    assert control.stdout.strip() == "5", control.stderr
