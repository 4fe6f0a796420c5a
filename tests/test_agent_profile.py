"""`-p agent`: LocalGPT's shell sandbox spec's defaults, each promise run as written
with a real confined program (the timeout shortened with -t, as a user would), each
with its control (the same program without the profile gets past the limit)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import Sandbox
from sandlock.policyfiles import load_profile

MIB = 1 << 20

LIMITS = r"""
import resource
for name in ("RLIMIT_NOFILE", "RLIMIT_FSIZE"):
    print(name, *resource.getrlimit(getattr(resource, name)))
"""

# Opens /dev/null until refused: how many, and why it stopped.
OPEN_FILES = r"""
import os
fds = []
try:
    while len(fds) < 400:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    print("opened", len(fds))
except OSError as e:
    print("refused", len(fds), e.errno)
"""

# Writes one byte at OFFSET of a sparse file (no 50M written): RLIMIT_FSIZE is about
# the offset. Python ignores SIGXFSZ (the write fails with EFBIG); "default" restores
# the signal's default action, which kills the program at that write, as it does a C one.
WRITE_AT = r"""
import os, signal, sys
offset, how = int(sys.argv[1]), sys.argv[2]
if how == "default":
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
fd = os.open("sparse", os.O_WRONLY | os.O_CREAT, 0o600)
try:
    os.pwrite(fd, b"x", offset); print("written")
except OSError as e:
    print("refused", e.errno)
"""

# Starts up to 80 sleeping processes at once: how many it got, then ends them.
PROCESSES = r"""
import subprocess
children = []
try:
    while len(children) < 80:
        children.append(subprocess.Popen(["sleep", "30"]))
    print("started", len(children))
except OSError as e:
    print("refused", len(children), e.errno)
for child in children:
    child.kill(); child.wait()
"""

OUTPUT = "import sys; sys.stdout.write('o' * (2 << 20)); sys.stderr.write('e' * (2 << 20))"


def run(*args: str, cwd, **kwargs):
    return sandlock("run", *args, cwd=cwd, **kwargs)


def test_the_profile_holds_the_specs_defaults():
    policy = load_profile("agent")
    assert policy.timeout == 120
    assert (policy.max_output, policy.max_file_size) == (MIB, 50 * MIB)
    assert (policy.max_processes, policy.max_open_files) == (64, 256)
    home = os.path.expanduser("~")
    assert {os.path.join(home, name) for name in (".ssh", ".aws", ".gnupg", ".config", ".docker")} \
        <= {os.path.join(home, os.path.relpath(path, os.path.realpath(home))) for path in policy.fs_denied}
    assert policy.announce and policy.mode == "workspace-write"
    assert not policy.net_allow_specs  # the network: denied
    assert Sandbox("agent").policy == policy  # the API's name for it


def test_plain_run_keeps_no_timeout_and_no_limits(tmp_path):
    printed = run("--print-policy", cwd=tmp_path).stdout
    assert "timeout" not in printed and "[limits]" not in printed
    agent = run("-p", "agent", "--print-policy", cwd=tmp_path).stdout
    assert "timeout = 120.0" in agent and 'max_output = "1M"' in agent


def test_profile_list_and_show_name_the_built_in_one(tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # no profiles of one's own
    listed = sandlock("profile", "list", env=env)
    assert listed.returncode == 0 and listed.stdout.startswith("agent "), listed
    shown = sandlock("profile", "show", "agent", env=env)
    assert shown.returncode == 0 and "max_open_files = 256" in shown.stdout


def test_a_profile_file_of_that_name_replaces_it(tmp_path):
    profiles = tmp_path / "sandlock" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "agent.toml").write_text("[process]\ntimeout = 7\n")
    printed = sandlock("run", "-p", "agent", "--print-policy", cwd=tmp_path,
                       env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}).stdout
    assert "timeout = 7.0" in printed and "max_output" not in printed


def test_the_timeout_kills_at_the_limit(tmp_path):
    began = time.monotonic()
    result = run("-p", "agent", "-t", "1", "--", "sh", "-c", "sleep 30 & sleep 30", cwd=tmp_path)
    took = time.monotonic() - began
    assert result.returncode == 124, result.stderr
    assert took < 15  # killed at 1 s, not at the end of the sleeps (30 s)
    assert "sandlock: timeout: killed 'sh' and everything it started after 1 s" in result.stderr


def test_a_command_within_the_timeout_ends_as_it_would(tmp_path):
    """Control: the same profile lets a command that ends in time end with its status."""
    result = run("-p", "agent", "-t", "5", "--", "sh", "-c", "sleep 0.1; exit 3", cwd=tmp_path)
    assert result.returncode == 3, result.stderr


def test_output_is_truncated_at_1M_each_with_a_note(tmp_path):
    result = sandlock("run", "-p", "agent", "--", sys.executable, "-c", OUTPUT, cwd=tmp_path,
                      text=False)
    assert result.returncode == 0
    assert result.stdout == b"o" * MIB  # nothing of the indicator or the notes
    assert b"e" * MIB in result.stderr and b"e" * (MIB + 1) not in result.stderr
    err = result.stderr.decode()
    assert "sandlock: output limit 1M reached: dropped 1048576 bytes of stdout (--max-output)" in err
    assert "sandlock: output limit 1M reached: dropped 1048576 bytes of stderr (--max-output)" in err


def test_without_the_profile_the_output_is_whole(tmp_path):
    """Control: the same program, no profile: both outputs whole, no note."""
    result = sandlock("run", "--", sys.executable, "-c", OUTPUT, cwd=tmp_path, text=False)
    assert (len(result.stdout), result.stderr.count(b"e")) == (2 * MIB, 2 * MIB)
    assert b"output limit" not in result.stderr


@pytest.mark.parametrize("how, expected", [
    ("ignore", "refused 27"),  # EFBIG
    ("default", None),  # killed by SIGXFSZ
])
def test_a_file_past_50M_is_refused(tmp_path, how, expected):
    result = run("-p", "agent", "--", sys.executable, "-c", WRITE_AT, str(50 * MIB), how,
                 cwd=tmp_path)
    if expected is not None:
        assert result.stdout.strip() == expected, result.stderr
        return
    assert result.returncode == 128 + 25, result  # SIGXFSZ
    assert "killed by SIGXFSZ (--max-file-size)" in result.stderr


def test_a_file_up_to_50M_is_written(tmp_path):
    """Control: the last byte below the limit is written (the test sees a write pass)."""
    result = run("-p", "agent", "--", sys.executable, "-c", WRITE_AT, str(50 * MIB - 1), "default",
                 cwd=tmp_path)
    assert result.stdout.strip() == "written", result.stderr
    assert (tmp_path / "sparse").stat().st_size == 50 * MIB


def test_limits_are_the_specs_inside(tmp_path):
    result = run("-p", "agent", "--", sys.executable, "-c", LIMITS, cwd=tmp_path)
    assert result.stdout.split("\n")[:2] == ["RLIMIT_NOFILE 256 256",
                                             f"RLIMIT_FSIZE {50 * MIB} {50 * MIB}"], result.stderr


def test_the_257th_descriptor_is_refused(tmp_path):
    result = run("-p", "agent", "--", sys.executable, "-c", OPEN_FILES, cwd=tmp_path)
    words = result.stdout.split()
    assert words[0] == "refused" and words[2] == "24", result  # EMFILE
    assert 200 < int(words[1]) < 256  # (0-2 and the interpreter's own are open too)
    control = run("--", sys.executable, "-c", OPEN_FILES, cwd=tmp_path)
    assert control.stdout.strip() == "opened 400", control.stderr


def test_the_65th_process_is_refused(tmp_path):
    result = run("-p", "agent", "--", sys.executable, "-c", PROCESSES, cwd=tmp_path)
    words = result.stdout.split()
    assert words[0] == "refused" and words[2] == "11", result  # EAGAIN
    assert int(words[1]) == 63  # 64 processes alive: the program and 63 sleeps
    assert "process limit 64 reached" in result.stderr
    control = run("--", sys.executable, "-c", PROCESSES, cwd=tmp_path)
    assert control.stdout.strip() == "started 80", control.stderr


SECRETS = (".ssh/id_rsa", ".aws/credentials", ".gnupg/private-keys-v1.d/key", ".config/tool/token",
           ".docker/config.json")


@pytest.fixture
def home(unscratched):
    for name in (*SECRETS, "notes.txt", ".config/git/config"):
        path = unscratched / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret\n")
    return unscratched


def _cat(home, *options: str, files, cwd, argv_prefix=()):
    paths = [str(home / name) for name in files]
    script = 'for f in "$@"; do cat "$f" >/dev/null 2>&1 && echo "read $f" || echo "denied $f"; done'
    return sandlock("run", *options, "--", "sh", "-c", script, "sh", *paths, cwd=cwd,
                    env={**os.environ, "HOME": str(home)}).stdout.split("\n")[:-1]


def test_the_credential_directories_are_denied_even_under_a_grant_of_everything(home, tmp_path):
    """-r / grants everything: the profile's denials hold inside it."""
    seen = _cat(home, "-p", "agent", "-r", "/", "-w", str(tmp_path), files=(*SECRETS, "notes.txt"),
                cwd=tmp_path)
    assert seen == [f"denied {home / name}" for name in SECRETS] + [f"read {home / 'notes.txt'}"]


def test_config_is_denied_where_the_default_workspace_reads_it(home, tmp_path):
    """The default workspace reads ~/.config/git; -p agent denies all of ~/.config."""
    control = _cat(home, files=(".config/git/config",), cwd=tmp_path)
    assert control == [f"read {home / '.config/git/config'}"]
    assert _cat(home, "-p", "agent", files=(".config/git/config",), cwd=tmp_path) == \
        [f"denied {home / '.config/git/config'}"]


def test_the_profile_holds_for_an_unprivileged_user(as_nobody, world_tmp):
    argv = as_nobody([*SANDLOCK, "run", "-p", "agent", "-t", "1", "--", sys.executable, "-c",
                      LIMITS + "import time; time.sleep(30)"])
    result = subprocess.run(argv, capture_output=True, text=True, cwd=world_tmp, timeout=60)
    assert result.returncode == 124, result.stderr
    assert result.stdout.split("\n")[:2] == ["RLIMIT_NOFILE 256 256",
                                             f"RLIMIT_FSIZE {50 * MIB} {50 * MIB}"]
    assert "Running sandboxed:" in result.stderr and "exit status 124" in result.stderr
