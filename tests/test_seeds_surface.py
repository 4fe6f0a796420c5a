"""The Sandlock documents' surface (../shared/seeds/ 003, 004): their Policy names, CLI
spellings and profile format, typed as written, work here. Commands that need the
internet get a pin to a loopback stand-in (--resolve), and commands this machine may
not have (make) a stand-in that shows what the example is about; the options are the
documents' own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import Policy, PolicyError, Sandbox, SandlockError

OPENAI = "127.0.0.61"  # api.openai.com's stand-in
ELSEWHERE = "127.0.0.62"
SERVER = "127.0.0.63"  # where the --net-bind example listens
HTTPS = "127.0.0.64"  # a host answering on 443 for --net-connect 443

README_PROFILE = """\
fs_writable = ["/tmp/work"]
fs_readable = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
clean_env = true
isolate_ipc = true

[env]
CC = "gcc"
LANG = "C.UTF-8"
"""
# The same policy in the sectioned form.
SECTIONED_PROFILE = """\
[filesystem]
write = ["/tmp/work"]
read = ["/usr", "/lib", "/lib64", "/bin", "/etc"]

[process]
clean_env = true
env = { CC = "gcc", LANG = "C.UTF-8" }
"""


@pytest.fixture(scope="module", autouse=True)
def tmp_work():
    os.makedirs("/tmp/work", exist_ok=True)  # the documents' examples name it
    os.makedirs("/tmp/sandbox", exist_ok=True)


@pytest.fixture
def profiles(tmp_path) -> dict[str, str]:
    """XDG_CONFIG_HOME with ~/.config/sandlock/profiles/build.toml as the README shows it."""
    directory = tmp_path / "config" / "sandlock" / "profiles"
    directory.mkdir(parents=True)
    (directory / "build.toml").write_text(README_PROFILE)
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}


class Listener:
    """A TCP server on loopback that answers each connection with its own name."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.sock = socket.create_server((host, port))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"reached")

    def close(self) -> None:
        self.sock.close()


CONNECT = """
import socket, sys
for host, port in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            print(host, port, s.recv(16).decode())
    except OSError as e:
        print(host, port, "refused", e.errno)
"""


# --- Python ------------------------------------------------------------------------------


def test_the_readmes_policy_example_runs_as_written():
    policy = Policy(
        fs_writable=["/tmp/sandbox"],
        fs_readable=["/usr", "/lib", "/etc"],
        isolate_ipc=True,
        clean_env=True,
        env={"LANG": "C.UTF-8"},
    )
    result = Sandbox(policy).run(["python3", "-c", "print('hello')"])
    assert (result.exit_code, result.stdout) == (0, b"hello\n"), result.stderr
    assert policy.env == {"LANG": "C.UTF-8"} and policy.fs_denied == ()


def test_the_landlock_example_fields_are_accepted():
    policy = Policy(fs_writable=["/tmp/work"], fs_readable=["/usr", "/lib"], net_bind=[8080],
                    net_connect=[443, "5432"], isolate_ipc=True, isolate_signals=True)
    assert (policy.net_bind, policy.net_connect) == (("8080",), ("443", "5432"))


@pytest.mark.parametrize(("kwargs", "suggestion"), [
    ({"fs_read": ["/usr"]}, "fs_readable"),
    ({"fs_write": ["/tmp"]}, "fs_writable"),
    ({"fs_deny": ["/tmp"]}, "fs_denied"),
    ({"net_alow": ["x"]}, "net_allow"),
])
def test_an_unknown_field_names_the_right_one(kwargs, suggestion):
    with pytest.raises(PolicyError, match=f"did you mean '{suggestion}'") as info:
        Policy(**kwargs)
    assert info.value.field == next(iter(kwargs))


def test_isolation_cannot_be_switched_off_by_its_seeds_name():
    with pytest.raises(PolicyError, match="allow_ipc relaxes both"):
        Policy(isolate_signals=False)


def test_sandbox_takes_a_profile_by_name(profiles, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", profiles["XDG_CONFIG_HOME"])
    sandbox = Sandbox("build")
    assert sandbox.policy.fs_writable == ("/tmp/work",) and sandbox.policy.clean_env
    result = sandbox.run(["sh", "-c", 'echo "$CC $LANG"; env | wc -l'])
    assert result.exit_code == 0, result.stderr
    cc_lang, count = result.stdout.decode().split("\n")[:2]
    assert cc_lang == "gcc C.UTF-8" and int(count) <= 8  # clean: PATH HOME ... plus CC, LANG
    with pytest.raises(SandlockError, match="--profile nonesuch: no such profile") as info:
        Sandbox("nonesuch")
    assert info.value.exit_code == 2


# --- the CLI ---------------------------------------------------------------------------


def test_basic_confinement_example():
    result = sandlock("run", "-r", "/usr", "-r", "/lib", "-w", "/tmp", "--", "ls", "/tmp")
    assert result.returncode == 0, result.stderr


def test_interactive_shell_example():
    result = sandlock("run", "-i", "-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/bin",
                      "-r", "/etc", "-w", "/tmp", "--", "/bin/sh", input="echo hi; exit 3\n")
    assert (result.returncode, result.stdout) == (3, "hi\n"), result.stderr


def test_net_allow_host_example():
    """--net-allow-host api.openai.com: that host on any port, nothing else."""
    api, other = Listener(OPENAI), Listener(ELSEWHERE)
    try:
        result = sandlock("run", "--resolve", f"api.openai.com={OPENAI}",
                          "--resolve", f"elsewhere.test={ELSEWHERE}",
                          "--net-allow-host", "api.openai.com", "-r", "/usr", "-r", "/lib",
                          "-r", "/etc", "--", "python3", "-c", CONNECT,
                          "api.openai.com", str(api.port), "elsewhere.test", str(other.port),
                          OPENAI, str(api.port))
    finally:
        api.close()
        other.close()
    lines = result.stdout.splitlines()
    assert lines[0] == f"api.openai.com {api.port} reached", result.stderr
    assert lines[1] == f"elsewhere.test {other.port} refused 13"
    assert lines[2] == f"{OPENAI} {api.port} reached"  # the pinned address itself


def test_net_bind_and_net_connect_example():
    """--net-bind 8080 --net-connect 443: listen on 8080 only; connect to port 443 only."""
    https, wrong = Listener(HTTPS, 443), Listener(HTTPS, 444)
    server = """
import socket, sys
for port in (8080, 8081):
    s = socket.socket()
    try:
        s.bind((sys.argv[1], port)); s.listen(); print("bound", port)
    except OSError as e:
        print("bind", port, "refused", e.errno)
""" + CONNECT.replace("sys.argv[1::2], sys.argv[2::2]", "sys.argv[2::2], sys.argv[3::2]")
    try:
        result = sandlock("run", "--net-bind", "8080", "--net-connect", "443", "-r", "/usr",
                          "-r", "/lib", "-r", "/etc", "--", "python3", "-c", server, SERVER,
                          HTTPS, "443", HTTPS, "444")
    finally:
        https.close()
        wrong.close()
    assert result.stdout.splitlines() == [
        "bound 8080", "bind 8081 refused 13", f"{HTTPS} 443 reached", f"{HTTPS} 444 refused 13",
    ], result.stderr


def test_ipc_scoping_and_clean_environment_example():
    result = sandlock("run", "--isolate-ipc", "--isolate-signals", "--clean-env", "--env",
                      "CC=gcc", "-r", "/usr", "-r", "/lib", "-w", "/tmp", "--", "env",
                      env={**os.environ, "SECRET_TOKEN": "x"})
    assert result.returncode == 0, result.stderr
    assert "CC=gcc" in result.stdout.splitlines() and "SECRET_TOKEN" not in result.stdout
    abstract = "import socket; s = socket.socket(socket.AF_UNIX); s.connect(b'\\0sandlock-seeds')"
    host = socket.socket(socket.AF_UNIX)
    host.bind(b"\0sandlock-seeds")
    host.listen()
    with host:
        scoped = sandlock("run", "--isolate-ipc", "--", sys.executable, "-c", abstract)
    assert scoped.returncode != 0 and "PermissionError" in scoped.stderr


def test_profile_as_the_readme_writes_it(profiles):
    listed = sandlock("profile", "list", env=profiles)
    assert listed.returncode == 0 and "build" in listed.stdout
    shown = sandlock("profile", "show", "build", env=profiles)
    assert shown.returncode == 0 and README_PROFILE in shown.stdout
    ran = sandlock("run", "-p", "build", "--", "sh", "-c", 'echo "$CC"', env=profiles)
    assert (ran.returncode, ran.stdout) == (0, "gcc\n"), ran.stderr
    overridden = sandlock("run", "-p", "build", "--env", "CC=clang", "--", "sh", "-c",
                          'echo "$CC"; touch /tmp/work/ok; touch /usr/nope', env=profiles)
    assert overridden.stdout == "clang\n" and "Permission denied" in overridden.stderr


def test_flat_and_sectioned_forms_are_the_same_policy(tmp_path, profiles):
    flat, sectioned = tmp_path / "flat.toml", tmp_path / "sectioned.toml"
    flat.write_text(README_PROFILE)
    sectioned.write_text(SECTIONED_PROFILE)
    printed = [sandlock("run", *source, "--print-policy", env=profiles)
               for source in (["--policy", str(flat)], ["--policy", str(sectioned)],
                              ["-p", "build"])]
    assert all(p.returncode == 0 for p in printed), [p.stderr for p in printed]
    assert printed[0].stdout == printed[1].stdout == printed[2].stdout
    assert "[filesystem]" in printed[0].stdout  # one canonical form: sectioned
    validated = sandlock("profile", "validate", str(flat), str(sectioned))
    assert validated.returncode == 0, validated.stderr


@pytest.mark.parametrize(("text", "message"), [
    ('fs_read = ["/usr"]\n', "p.toml:1: unknown top-level key 'fs_read': did you mean 'fs_readable'?"),
    ('fs_readable = ["/usr"]\n[filesystem]\nread = ["/etc"]\n',
     "p.toml:3: filesystem.read: sets fs_readable again, as fs_readable does (line 1)"),
    ("isolate_ipc = false\n",
     "p.toml:1: isolate_ipc: IPC and signals are always isolated; allow_ipc relaxes both "
     "(--allow-ipc)"),
    ('net_allow_hosts = ["api.openai.com:443"]\n',
     "p.toml:1: net_allow_hosts: 'api.openai.com:443': expected a host name or address alone "
     "(ports and schemes go in --net-allow)"),
    ('net_connect = [true]\n', "p.toml:1: net_connect: expected a list of ports (integers, or "
     'strings such as "8000-8100"), got a boolean in the array'),
])
def test_flat_form_errors_name_the_line(tmp_path, text, message):
    (tmp_path / "p.toml").write_text(text)
    result = sandlock("run", "--policy", "p.toml", "--print-policy", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"sandlock: error: {message}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--net-allow-host", "*"], "--net-allow-host: '*': expected a host name or address alone"),
    (["--net-connect", "0"], "--net-connect: '0': port 0 is not a port number"),
    (["--net-deny", "10.0.0.0/8", "--net-connect", "443"],
     "--net-deny: cannot be combined with --net-connect"),
])
def test_seeds_options_check_their_values(argv, message):
    result = sandlock("run", *argv, "--", "true")
    assert result.returncode == 2 and result.stderr.startswith(f"sandlock: error: {message}")


def test_help_lists_the_seeds_spellings():
    text = sandlock("run", "--help").stdout
    for option in ("--net-allow-host", "--net-bind", "--net-connect", "--isolate-ipc",
                   "--isolate-signals", "-i, --interactive", "--pass-fd"):
        assert option in text


def test_seeds_options_unprivileged(as_nobody):
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--isolate-ipc", "--isolate-signals",
                                       "-i", "--net-bind", "8080", "--net-connect", "443",
                                       "--clean-env", "--env", "CC=gcc", "-r", "/usr", "-r",
                                       "/lib", "--", "sh", "-c", 'echo "$CC"']),
                            capture_output=True, text=True, timeout=60, cwd="/")
    assert (result.returncode, result.stdout) == (0, "gcc\n"), result.stderr


def test_profile_show_path(profiles):
    shown = sandlock("profile", "show", "build", env=profiles)
    expected = Path(profiles["XDG_CONFIG_HOME"]) / "sandlock" / "profiles" / "build.toml"
    assert str(expected) in shown.stdout
