"""Changes to a file's metadata where the sandbox may not write (Landlock does not judge
them: sandlock.files does), each attack performed by a real confined process, with its
control: the same program, in the same sandbox, on a file it may write, succeeds."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from conftest import SANDLOCK, UNPRIVILEGED_UID

# Every way the attack review changed a file's metadata: by path (following links or
# not), through an O_PATH descriptor (fchmodat2/fchownat with AT_EMPTY_PATH, and
# /proc/self/fd/N), through a descriptor opened for reading where it can be.
ATTACK = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW = 0x1000, 0x100
FCHMODAT2, FCHOWNAT, UTIMENSAT = 452, 260, 280
def raw(nr, *args):
    if libc.syscall(ctypes.c_long(nr), *args) < 0:
        raise OSError(ctypes.get_errno(), "")
path = sys.argv[1]
uid, gid = os.getuid(), os.getgid()
def o_path():
    return os.open(path, os.O_PATH)
def readable():
    return os.open(path, os.O_RDONLY)
attempts = {
    "chmod": lambda: os.chmod(path, 0o777),
    "lchown": lambda: os.lchown(path, uid, gid),
    "chown": lambda: os.chown(path, uid, gid),
    "utime": lambda: os.utime(path, (1, 1)),
    "setxattr": lambda: os.setxattr(path, "user.planted", b"1"),
    "removexattr": lambda: os.removexattr(path, "user.kept"),
    "fchmodat2-empty": lambda: raw(FCHMODAT2, ctypes.c_long(o_path()), b"", ctypes.c_long(0o777),
                                   ctypes.c_long(AT_EMPTY_PATH)),
    "fchownat-empty": lambda: raw(FCHOWNAT, ctypes.c_long(o_path()), b"", ctypes.c_long(uid),
                                  ctypes.c_long(gid), ctypes.c_long(AT_EMPTY_PATH)),
    "utimensat-empty": lambda: raw(UTIMENSAT, ctypes.c_long(o_path()), b"", None,
                                   ctypes.c_long(AT_EMPTY_PATH)),
    "proc-fd-chmod": lambda: os.chmod(f"/proc/self/fd/{o_path()}", 0o777),
    "proc-self-setxattr": lambda: os.setxattr(f"/proc/self/fd/{o_path()}", "user.planted", b"1"),
}
if "--readable" in sys.argv:
    attempts.update({
        "fchmod": lambda: os.fchmod(readable(), 0o777),
        "futimens": lambda: os.utime(readable(), (1, 1)),
        "fsetxattr": lambda: os.setxattr(readable(), "user.planted", b"1"),
    })
for name, attempt in attempts.items():
    try:
        attempt()
        print(name, "ok")
    except OSError as exc:
        print(name, errno.errorcode.get(exc.errno, exc.errno))
"""


def _state(path) -> tuple:
    info = os.stat(path, follow_symlinks=False)
    return (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, info.st_mtime_ns,
            sorted(os.listxattr(path)))


def _attack(path, *options, readable=False, as_user=lambda argv: argv, env=None, cwd=None):
    argv = as_user([*SANDLOCK, "run", *options, "--", sys.executable, "-c", ATTACK, str(path),
                    *(["--readable"] if readable else [])])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
    results = dict(line.split() for line in done.stdout.splitlines())
    assert results, done.stderr
    return results, done.stderr


def _victim(path, owner: int | None = None):
    path.write_text("secret")
    path.chmod(0o600)
    os.setxattr(path, "user.kept", b"1")
    if owner is not None:
        os.chown(path, owner, owner)
    return _state(path)


@pytest.fixture
def home(unscratched):
    """A realistic home outside /tmp: a key, a project (the default workspace)."""
    home = unscratched / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "proj").mkdir()
    (home / "data").mkdir()
    return home


def _refused_all(results: dict, stderr: str) -> None:
    assert set(results.values()) <= {"EACCES", "EPERM"}, (results, stderr)


def test_a_denied_key_keeps_its_metadata(home):
    key = home / ".ssh" / "id_rsa"
    before = _victim(key)
    env = {**os.environ, "HOME": str(home)}
    results, stderr = _attack(key, "--cwd", str(home / "proj"), env=env)
    _refused_all(results, stderr)
    assert _state(key) == before
    assert f"sandlock: denied chmod of {key} (not writable in this sandbox)" in stderr
    # Control: the same program, same sandbox, on a file in its workspace.
    own = home / "proj" / "own"
    _victim(own)
    results, stderr = _attack(own, "--cwd", str(home / "proj"), env=env)
    assert set(results.values()) == {"ok"}, (results, stderr)
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o777 and "user.planted" in os.listxattr(own)


def test_a_read_only_file_keeps_its_metadata(home):
    data = home / "data" / "table.csv"
    before = _victim(data)
    results, stderr = _attack(data, "-r", "/", "-w", str(home / "proj"), readable=True)
    _refused_all(results, stderr)
    assert "fchmod" in results and _state(data) == before
    control = home / "proj" / "table.csv"
    _victim(control)
    results, stderr = _attack(control, "-r", "/", "-w", str(home / "proj"), readable=True)
    assert set(results.values()) == {"ok"}, (results, stderr)


def test_an_fs_deny_path_keeps_its_metadata(home):
    secret = home / "proj" / "secret"
    before = _victim(secret)
    results, stderr = _attack(secret, "-r", "/", "-w", str(home / "proj"), "--fs-deny", str(secret))
    _refused_all(results, stderr)
    assert _state(secret) == before


def test_a_symlink_in_the_workspace_does_not_reach_the_key(home):
    key = home / ".ssh" / "id_rsa"
    before = _victim(key)
    link = home / "proj" / "link"
    link.symlink_to(key)
    env = {**os.environ, "HOME": str(home)}
    results, stderr = _attack(link, "--cwd", str(home / "proj"), env=env)
    # The link itself is the workspace's (lchown); what it points to is not.
    assert results.pop("lchown") == "ok"
    _refused_all(results, stderr)
    assert _state(key) == before


def test_set_id_bits_are_refused_in_the_workspace(tmp_path):
    program = tmp_path / "shell"
    program.write_bytes(b"#!/bin/sh\n")
    code = ("import os, sys\n"
            "for mode in (0o4755, 0o2755, 0o755):\n"
            "    try: os.chmod(sys.argv[1], mode); print(oct(mode), 'ok')\n"
            "    except OSError as e: print(oct(mode), e.strerror)\n")
    done = subprocess.run([*SANDLOCK, "run", "-r", "/", "-w", str(tmp_path), "--", sys.executable,
                           "-c", code, str(program)], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["0o4755 Operation not permitted", "0o2755 Operation not permitted",
                                        "0o755 ok"], done.stderr
    assert stat.S_IMODE(program.stat().st_mode) == 0o755
    # Control: the same program unconfined sets them.
    unconfined = subprocess.run([sys.executable, "-c", code, str(program)], capture_output=True, text=True)
    assert unconfined.stdout.splitlines()[0] == "0o4755 ok"


@pytest.mark.skipif(os.getuid() != 0, reason="makes a device node")
def test_a_writable_device_keeps_its_metadata(tmp_path):
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = _state(node)[:3]
    code = "import os, sys\ntry: os.chmod(sys.argv[1], 0o600); print('ok')\nexcept OSError as e: print(e.strerror)"
    done = subprocess.run([*SANDLOCK, "run", "-r", "/", "-w", str(node), "--", sys.executable, "-c", code,
                           str(node)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "Permission denied", done.stderr
    assert _state(node)[:3] == before
    assert "a device's metadata is the host's" in done.stderr
    # Control: unconfined, the same program changes it.
    subprocess.run([sys.executable, "-c", code, str(node)], check=True, capture_output=True)
    assert _state(node)[0] == 0o600


def test_a_denied_key_keeps_its_metadata_unprivileged(as_nobody, home):
    for path in (home, home / ".ssh", home / "proj"):
        os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    key = home / ".ssh" / "id_rsa"
    before = _victim(key, owner=UNPRIVILEGED_UID)
    env = {**os.environ, "HOME": str(home)}
    results, stderr = _attack(key, "--cwd", str(home / "proj"), as_user=as_nobody, env=env)
    _refused_all(results, stderr)
    assert _state(key) == before
    # Control: nobody owns the key, so unconfined the same program changes it.
    subprocess.run(as_nobody([sys.executable, "-c", ATTACK, str(key)]), check=True,
                   capture_output=True, timeout=60)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o777


# chattr through the inode-flag ioctl, on a descriptor opened for reading.
CHATTR = r"""
import errno, fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
flags = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, bytes(4)))[0]  # FS_IOC_GETFLAGS
try:
    fcntl.ioctl(fd, 0x40086602, struct.pack("i", flags | 0x80))  # FS_IOC_SETFLAGS, +A (noatime)
    print("ok")
except OSError as exc:
    print(errno.errorcode[exc.errno])
"""


def _flags(path) -> int:
    import fcntl
    import struct

    with open(path) as file:
        return struct.unpack("i", fcntl.ioctl(file, 0x80086601, bytes(4)))[0]


def test_inode_flags_of_a_read_only_file_are_kept(home):
    data = home / "data" / "table.csv"
    data.write_text("x")
    before = _flags(data)
    argv = [*SANDLOCK, "run", "-r", "/", "-w", str(home / "proj"), "--", sys.executable, "-c", CHATTR]
    done = subprocess.run([*argv, str(data)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "EACCES", done.stderr
    assert _flags(data) == before
    control = home / "proj" / "table.csv"
    control.write_text("x")
    done = subprocess.run([*argv, str(control)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
    assert _flags(control) & 0x80
