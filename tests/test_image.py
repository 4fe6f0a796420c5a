"""--image and --chroot: another root for the command, confined as usual.

The images are built here (``ocibuild``): a statically linked probe (``image_probe.c``,
gcc -static) that reads, writes and lists what it is told. The unpacking attacks are
layers a hostile image could hold (names with '..', absolute names, links and
whiteouts aimed through symlinks at the host): each runs the real unpacking and
checks the host file it aims at, with a control showing the same check sees the
file when the layer is harmless or the path is the image's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile

import pytest

from conftest import SANDLOCK
from ocibuild import Entry, docker_save, oci_layout

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> bytes:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the image's static probe")
    out = tmp_path_factory.mktemp("probe") / "probe"
    built = subprocess.run(["gcc", "-static", "-O2", "-o", str(out),
                            os.path.join(HERE, "image_probe.c")], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"no static C library to build the probe: {built.stderr[-200:]}")
    return out.read_bytes()


@pytest.fixture
def store(world_tmp) -> str:
    """XDG_STATE_HOME for the run: the image store under it, a fresh one per test."""
    return str(world_tmp)


def run(store: str, *args: str, wrap=None) -> subprocess.CompletedProcess:
    argv = [*SANDLOCK, "run", *args]
    env = {**os.environ, "XDG_STATE_HOME": store}
    return subprocess.run(wrap(argv) if wrap else argv, capture_output=True, text=True,
                          timeout=60, cwd="/tmp", env=env)


def base(probe: bytes) -> list[Entry]:
    return [Entry("bin", "dir", mode=0o755), Entry("bin/probe", data=probe, mode=0o755),
            Entry("etc/hostname", data=b"image\n")]


def images(store: str) -> list[str]:
    directory = os.path.join(store, "sandlock", "images")
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


# --- the image as the root ---------------------------------------------------------------


@pytest.fixture
def layout(tmp_path, probe) -> str:
    return oci_layout(str(tmp_path / "layout"), [
        base(probe),
        [Entry("etc/.wh.hostname"), Entry("etc/motd", data=b"second layer\n"),
         Entry("bin/setuid", data=b"#!", mode=0o4755), Entry("dev/null", "chardev")],
    ], workdir="/etc")
    # (made world-readable below: as_nobody reads it)


def _readable(path: str) -> None:
    for directory, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.chmod(os.path.join(directory, name), 0o755)
    os.chmod(path, 0o755)
    parent = os.path.dirname(path)
    while parent.startswith("/tmp/") and parent != "/tmp":
        os.chmod(parent, os.stat(parent).st_mode | 0o711)
        parent = os.path.dirname(parent)


@pytest.mark.parametrize("user", ["self", "nobody"])
def test_a_command_runs_in_an_oci_layout(layout, store, user, request):
    """The seed's example, with a layout built here: the image's files, not the
    host's; its whiteout honoured, its WorkingDir the start; read-only but /tmp."""
    wrap = request.getfixturevalue("as_nobody") if user == "nobody" else None
    _readable(layout)
    result = run(store, "--image", layout, "--", "/bin/probe", "cwd", ".", "read", "/etc/motd",
                 "read", "/etc/hostname", "read", "/etc/passwd", "write", "/etc/motd",
                 "write", "/tmp/scratch", "ls", "/", wrap=wrap)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "/etc", "second layer", "ENOENT", "ENOENT", "EROFS", "ok", "bin dev etc proc tmp"] \
        or sorted(result.stdout.splitlines()[-1].split()) == ["bin", "dev", "etc", "proc", "tmp"], \
        result.stdout
    # Control: the host has the file the image does not show.
    assert os.path.exists("/etc/passwd")


def test_the_seed_example_echo_hi(layout, store, probe, tmp_path):
    echo = oci_layout(str(tmp_path / "echo"), [[Entry("bin/echo", data=probe, mode=0o755)]])
    # (the probe prints nothing for "hi" alone: use it as `echo` through its read of a file)
    result = run(store, "--image", layout, "--", "/bin/probe", "read", "/etc/motd")
    assert result.stdout == "second layer\n", result.stderr
    assert len(images(store)) == 1
    again = run(store, "--image", echo, "--", "/bin/echo")
    assert again.returncode == 0, again.stderr
    assert len(images(store)) == 2  # one root per image, reused after


def test_set_id_bits_and_devices_are_left_out(layout, store):
    run(store, "--image", layout, "--", "/bin/probe")
    [name] = images(store)
    root = os.path.join(store, "sandlock", "images", name, "rootfs")
    assert os.stat(os.path.join(root, "bin", "setuid")).st_mode & 0o7777 == 0o755
    assert not os.path.exists(os.path.join(root, "dev", "null"))


def test_the_host_side_cannot_be_reached_from_the_image(layout, store):
    """init's root is the host's: /proc/1/root must not lead there (EACCES)."""
    result = run(store, "--image", layout, "--", "/bin/probe", "read", "/proc/1/root/etc/passwd",
                 "ls", "/proc/1/root/")
    assert result.stdout.splitlines() == ["EACCES", "EACCES"], result.stdout + result.stderr


def test_a_docker_save_tarball(tmp_path, store, probe):
    tarball = docker_save(str(tmp_path / "image.tar"), [base(probe)], repo_tag="test/probe:1")
    result = run(store, "--image", tarball + ":1", "--", "/bin/probe", "read", "/etc/hostname")
    assert result.stdout == "image\n", result.stderr


def test_the_store_is_denied_to_every_sandbox(layout, store):
    """A run with no image must not change a root a later run trusts."""
    run(store, "--image", layout, "--", "/bin/probe")
    [name] = images(store)
    motd = os.path.join(store, "sandlock", "images", name, "rootfs", "etc", "motd")
    # (the session grants writing pytest's directories, the store's among them)
    result = run(store, "--", "sh", "-c", f"echo evil > {motd}")
    assert result.returncode != 0
    assert open(motd).read() == "second layer\n"
    # Control: the same write where the grant is not the store's works.
    other = os.path.join(store, "other")
    assert run(store, "--", "sh", "-c", f"echo ok > {other}").returncode == 0


# --- refusals ----------------------------------------------------------------------------


def test_neither_a_path_nor_a_registry_reference_is_one_line(store):
    """(Registry pulls: tests/test_image_pull.py, against a registry on loopback.)"""
    result = run(store, "--image", "Alpine", "--", "/bin/echo", "hi")
    assert result.returncode == 2
    assert "not a registry reference" in result.stderr and "lowercase" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("content", [b"not a tar at all", b'{"manifests": [{"digest": 7}]}'])
def test_what_is_not_an_image_is_one_line(tmp_path, store, content):
    target = tmp_path / "thing"
    if content.startswith(b"{"):  # a layout with a malformed index
        target.mkdir()
        (target / "index.json").write_bytes(content)
    else:
        target.write_bytes(content)
    result = run(store, "--image", str(target), "--", "/bin/true")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "--image" in result.stderr


def test_a_tampered_layer_is_refused_and_nothing_is_kept(tmp_path, store, probe):
    good = oci_layout(str(tmp_path / "good"), [base(probe)], compress=False)
    with open(os.path.join(good, "index.json")) as f:
        import json
        manifest_digest = json.load(f)["manifests"][0]["digest"]
    with open(os.path.join(good, "blobs", "sha256", manifest_digest[7:])) as f:
        layer_digest = json.load(f)["layers"][0]["digest"]
    blob = os.path.join(good, "blobs", "sha256", layer_digest[7:])
    data = open(blob, "rb").read()
    open(blob, "wb").write(data.replace(b"image\n", b"evil!\n"))
    result = run(store, "--image", good, "--", "/bin/probe", "read", "/etc/hostname")
    assert result.returncode == 2 and "does not match" in result.stderr, result.stderr
    assert images(store) == []  # no partial root left behind
    open(blob, "wb").write(data)  # control: the original runs
    assert run(store, "--image", good, "--", "/bin/probe", "read", "/etc/hostname").stdout == "image\n"


# --- hostile layers -------------------------------------------------------------------------


@pytest.fixture
def target(tmp_path):
    """A host directory a hostile layer aims at, holding a file it must not touch."""
    directory = tmp_path / "host-target"
    directory.mkdir()
    (directory / "keep").write_text("host\n")
    return directory


def _attack(tmp_path, store, probe, layers) -> subprocess.CompletedProcess:
    layout = oci_layout(str(tmp_path / "attack"), [base(probe), *layers])
    return run(store, "--image", layout, "--", "/bin/probe", "read", "/etc/hostname")


def test_dot_dot_and_absolute_names_refuse_the_image(tmp_path, store, probe, target):
    for name in (f"../../../../../..{target}/new", f"{target}/new", f"etc/../../{target.name}"):
        result = _attack(tmp_path, store, probe, [[Entry(name, data=b"evil")]])
        assert result.returncode == 2 and "layer entry" in result.stderr, (name, result.stderr)
        shutil.rmtree(tmp_path / "attack")
    assert sorted(os.listdir(target)) == ["keep"] and images(store) == []


def test_files_through_a_symlink_stay_in_the_root(tmp_path, store, probe, target):
    """A symlink to the host directory (absolute, and by '..'), then files through it:
    they land in the image's root, where the link leads when / is the root."""
    layers = [[Entry("escape", "symlink", target=str(target)),
               Entry("up", "symlink", target="../../../../../../../.." + str(target))],
              [Entry("escape/new", data=b"evil"), Entry("up/new2", data=b"evil")]]
    result = _attack(tmp_path, store, probe, layers)
    assert sorted(os.listdir(target)) == ["keep"], result.stderr
    assert (target / "keep").read_text() == "host\n"
    if result.returncode == 0:  # made inside the root, where the links lead there
        [name] = images(store)
        inside = os.path.join(store, "sandlock", "images", name, "rootfs", str(target).lstrip("/"))
        assert sorted(os.listdir(inside)) == ["new", "new2"]


def test_whiteouts_through_a_symlink_remove_nothing_of_the_hosts(tmp_path, store, probe, target):
    layers = [[Entry("victim", "symlink", target=str(target))],
              [Entry("victim/.wh.keep"), Entry("victim/.wh..wh..opq")]]
    _attack(tmp_path, store, probe, layers)
    assert (target / "keep").read_text() == "host\n"
    # Control: a whiteout of the image's own file does remove it.
    result = _attack(tmp_path, store, probe, [[Entry("etc/.wh.hostname")]])
    assert result.stdout == "ENOENT\n", result.stderr


def test_a_hard_link_to_a_host_file_is_never_made(tmp_path, store, probe, target):
    layers = [[Entry("etc-link", "symlink", target=str(target)),
               Entry("stolen", "hardlink", target=f"etc-link/keep")]]
    _attack(tmp_path, store, probe, layers)
    assert os.stat(target / "keep").st_nlink == 1
    for name in (f"{target}/keep", f"../../../../..{target}/keep"):
        shutil.rmtree(tmp_path / "attack", ignore_errors=True)
        result = _attack(tmp_path, store, probe, [[Entry("stolen", "hardlink", target=name)]])
        assert result.returncode == 2, result.stderr
    assert os.stat(target / "keep").st_nlink == 1
    # Control: a hard link within the image is made.
    shutil.rmtree(tmp_path / "attack")
    result = _attack(tmp_path, store, probe, [[Entry("etc/twin", "hardlink", target="etc/hostname")]])
    assert result.returncode == 0, result.stderr


# --- --chroot ---------------------------------------------------------------------------------


def test_chroot_runs_the_command_in_a_directory(tmp_path, store, probe):
    root = tmp_path / "root"
    for name in ("bin", "etc", "proc", "dev", "tmp"):
        (root / name).mkdir(parents=True)
    (root / "bin" / "probe").write_bytes(probe)
    (root / "bin" / "probe").chmod(0o755)
    (root / "etc" / "hostname").write_text("chroot\n")
    result = run(store, "--chroot", str(root), "--", "/bin/probe", "cwd", ".", "read",
                 "/etc/hostname", "read", "/etc/passwd", "write", "/etc/hostname",
                 "write", "/tmp/x", "read", "/proc/self/comm")
    assert result.stdout.splitlines() == ["/", "chroot", "ENOENT", "EROFS", "ok", "probe"], \
        result.stdout + result.stderr
    assert (root / "etc" / "hostname").read_text() == "chroot\n"
    assert not (root / "tmp" / "x").exists()  # its /tmp is the run's own


def test_chroot_and_image_refuse_what_they_cannot_mean(tmp_path, store):
    for args in (["--chroot", str(tmp_path), "--image", str(tmp_path)],
                 ["--chroot", str(tmp_path), "--cwd", str(tmp_path)],
                 ["--chroot", str(tmp_path / "missing")]):
        result = run(store, *args, "--", "true")
        assert result.returncode == 2 and "Traceback" not in result.stderr, (args, result.stderr)


def test_symlinks_in_the_chroot_lead_nowhere_outside(tmp_path, store, probe):
    """/tmp, /proc and /dev of the new root as symlinks to a host directory: nothing is
    mounted or granted there; the command's writes find no way to it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "probe").write_bytes(probe)
    (root / "bin" / "probe").chmod(0o755)
    for name in ("tmp", "proc", "dev"):
        (root / name).symlink_to(outside)
    result = run(store, "--chroot", str(root), "--", "/bin/probe", "write", "/tmp/x",
                 "write", f"{outside}/y", "ls", "/proc")
    assert result.returncode == 0, result.stderr
    assert list(outside.iterdir()) == []
    # (the link leads to its own target's name inside the root: missing, or a loop
    # when that name starts with /tmp, the link itself)
    assert set(result.stdout.split()) <= {"ENOENT", "ELOOP"}, result.stdout
