"""`sandlock run` end to end: exit statuses, signals, timeout, environment, filesystem."""

from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import SANDLOCK, host_pid, sandlock, unique_sleep, wait_no_process

PY = sys.executable


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


# --- exit statuses ---------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exit_status_is_the_commands(code):
    assert sandlock("run", "--", "sh", "-c", f"exit {code}").returncode == code


def test_death_by_signal_is_128_plus_n():
    result = sandlock("run", "--", "sh", "-c", "kill -USR1 $$")
    assert result.returncode == 128 + signal.SIGUSR1


def test_command_not_found_is_127():
    result = sandlock("run", "--", "no-such-command-sandlock")
    assert result.returncode == 127
    assert "no-such-command-sandlock" in result.stderr


def test_command_not_executable_is_126(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = sandlock("run", "--", str(script))
    assert result.returncode == 126
    assert "Permission denied" in result.stderr


def test_command_outside_the_read_allowlist_cannot_be_executed(tmp_path):
    result = sandlock("run", "-w", str(tmp_path), "--", "/bin/true")
    assert result.returncode == 126
    assert "-r/--fs-read" in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "-r", "/no/such/dir", "--", "true"], "--fs-read: /no/such/dir: no such file"),
        (["run", "-w", "/no/such/dir", "--", "true"], "--fs-write: /no/such/dir"),
        (["run", "--timeout", "-3", "--", "true"], "--timeout"),
        (["run", "--timeout", "soon", "--", "true"], "--timeout"),
        (["run", "--env", "NOEQUALS", "--", "true"], "--env"),
        (["run", "--cwd", "/no/such/dir", "--", "true"], "--cwd"),
        (["run", "--allow-syscall", "execve", "--", "true"], "--allow-syscall"),
        (["run", "--no-such-option", "--", "true"], "--no-such-option"),
        (["run"], "missing COMMAND"),
        (["run", "--"], "missing COMMAND"),
    ],
)
def test_invalid_options_are_one_line_and_exit_2(args, expected):
    result = sandlock(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sandlock: error: ")
    assert expected in lines[0]


def test_missing_kernel_feature_is_125_naming_it():
    # An unknown architecture stands in for a kernel without a feature: the probe path
    # is the same (SetupError -> 125 with the reason).
    code = (
        "import os, sys; from sandlock.cli import _main as _cli\n"
        "os.uname = lambda: os.uname_result(('Linux','h','6','1','riscv64'))\n"
        "sys.exit(_cli.main(['run', '--', 'true']))"
    )
    result = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert result.returncode == 125
    assert "unsupported architecture riscv64" in result.stderr


# --- stdio, environment, cwd -------------------------------------------------------


def test_stdin_and_stdout_pass_through():
    result = sandlock("run", "--", "tr", "a-z", "A-Z", input="hello\n")
    assert result.stdout == "HELLO\n"


def test_env_sets_variables_and_clean_env_drops_others():
    env = {**os.environ, "SECRET_TOKEN": "s3cret"}
    shown = sandlock("run", "--env", "FOO=bar", "--", "env", env=env).stdout
    assert "FOO=bar" in shown and "SECRET_TOKEN=s3cret" in shown
    clean = sandlock("run", "--clean-env", "--env", "FOO=bar", "--", "env", env=env).stdout
    names = {line.split("=", 1)[0] for line in clean.splitlines()}
    assert "SECRET_TOKEN" not in names
    assert names <= {"PATH", "HOME", "TERM", "LANG", "USER", "SHELL", "FOO"}
    assert "FOO" in names and "PATH" in names


def test_cwd(tmp_path):
    result = sandlock("run", "--cwd", str(tmp_path), "--", "pwd")
    assert result.stdout.strip() == str(tmp_path)


# --- signals, timeout, lifetime ----------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_signals_are_forwarded_to_the_command(sig):
    # The command reports the signal it receives and exits 100 + its number.
    script = (
        "import signal, sys, time\n"
        "def h(s, f): print(s, flush=True); sys.exit(100 + s)\n"
        f"signal.signal({int(sig)}, h)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    with subprocess.Popen([*SANDLOCK, "run", "--", PY, "-c", script],
                          stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        assert proc.stdout.readline().strip() == str(int(sig))
        assert proc.wait(10) == 100 + sig


def test_uncaught_forwarded_signal_gives_128_plus_n():
    with subprocess.Popen([*SANDLOCK, "run", "--", "sh", "-c", "echo ready; sleep 30"],
                          stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline().strip() == "ready"
        proc.terminate()
        assert proc.wait(10) == 128 + signal.SIGTERM


def test_ignored_sighup_is_inherited_like_nohup():
    script = "import signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)"
    result = subprocess.run(["nohup", *SANDLOCK, "run", "--", PY, "-c", script],
                            capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == "True"
    plain = sandlock("run", "--", PY, "-c", script)
    assert plain.stdout.strip() == "False"


def test_timeout_kills_the_whole_tree_and_exits_124():
    start = time.monotonic()
    marker = unique_sleep()
    result = sandlock("run", "-t", "0.5", "--", "sh", "-c", f"sleep {marker} & sleep 60")
    assert result.returncode == 124
    assert time.monotonic() - start < 10
    assert "timeout" in result.stderr
    assert wait_no_process("sleep", marker)


def test_background_processes_die_when_the_command_exits():
    marker = unique_sleep()
    result = sandlock("run", "--", "sh", "-c", f"sleep {marker} >/dev/null 2>&1 &")
    assert result.returncode == 0
    assert wait_no_process("sleep", marker)


def test_setsid_daemon_cannot_outlive_the_sandbox():
    # A daemon that left the process group and session is still killed.
    marker = unique_sleep()
    script = f"setsid sh -c 'sleep {marker}' </dev/null >/dev/null 2>&1 & sleep 0.3"
    sandlock("run", "--", "sh", "-c", script)
    assert wait_no_process("sleep", marker)


@pytest.mark.parametrize("allow_ipc", [False, True])
def test_confined_processes_die_when_sandlock_is_killed(allow_ipc):
    extra = ["--allow-ipc"] if allow_ipc else []
    markers = unique_sleep(), unique_sleep()
    script = f"sleep {markers[0]} & echo $!; setsid sleep {markers[1]} & echo $!; wait"
    with subprocess.Popen([*SANDLOCK, "run", *extra, "--", "sh", "-c", script],
                          stdout=subprocess.PIPE, text=True) as proc:
        pids = [host_pid(int(proc.stdout.readline()), proc.pid) for _ in range(2)]
        proc.kill()
        proc.wait()
    for pid, marker in zip(pids, markers):
        assert wait_gone(pid) and wait_no_process("sleep", marker), f"{pid} survived sandlock"


def test_terminal_is_passed_through_and_command_is_foreground_job():
    script = (
        "import os, sys\n"
        "fg = os.tcgetpgrp(0) == os.getpgrp()\n"
        "print('tty', os.isatty(0), os.isatty(1), 'fg', fg)\n"
        "print('got', sys.stdin.readline().strip())\n"
    )
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(PY, [*SANDLOCK, "run", "--", PY, "-c", script])
    output = b""
    os.write(fd, b"typed\n")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # read until the pty closes (EIO)
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    _, status = os.waitpid(pid, 0)
    text = output.decode()
    assert "tty True True fg True" in text
    assert "got typed" in text
    assert os.waitstatus_to_exitcode(status) == 0


# --- filesystem through the CLI ----------------------------------------------------


def test_write_allowlist(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    ok = sandlock("run", "-r", "/", "-w", str(inside), "--", "sh", "-c", f"echo x > {inside}/f")
    assert ok.returncode == 0 and (inside / "f").read_text() == "x\n"
    denied = sandlock("run", "-r", "/", "-w", str(inside), "--", "sh", "-c", f"echo x > {outside}/f")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert not (outside / "f").exists()


def test_fs_deny_inside_a_grant(tmp_path):
    (tmp_path / "secret").write_text("s")
    (tmp_path / "public").write_text("p")
    result = sandlock("run", "-r", "/", "--fs-deny", str(tmp_path / "secret"), "--",
                      "sh", "-c", f"cat {tmp_path}/public; cat {tmp_path}/secret")
    assert result.stdout == "p"
    assert "Permission denied" in result.stderr


def test_default_workspace_protects_credentials(tmp_path):
    home = tmp_path / "home"
    for store in (".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure"):
        (home / store).mkdir(parents=True)
        (home / store / "key").write_text("secret")
    (home / ".config" / "gcloud").mkdir(parents=True)
    (home / ".config" / "gcloud" / "key").write_text("secret")
    for name in (".netrc", ".git-credentials", ".pypirc", ".npmrc"):
        (home / name).write_text("secret")
    ca = home / ".local" / "share" / "sandlock" / "ca"
    ca.mkdir(parents=True)
    (ca / "ca.key").write_text("secret")
    (home / "notes.txt").write_text("notes")
    (home / ".config" / "app.conf").write_text("conf")
    work = tmp_path / "work"
    work.mkdir()
    stores = [".ssh/key", ".aws/key", ".gnupg/key", ".kube/key", ".docker/key", ".azure/key",
              ".config/gcloud/key", ".netrc", ".git-credentials", ".pypirc", ".npmrc",
              ".local/share/sandlock/ca/ca.key"]
    script = "; ".join(f"cat $HOME/{s} 2>/dev/null && echo LEAK {s}" for s in stores)
    script += "; cat $HOME/notes.txt $HOME/.config/app.conf; echo w > out.txt; echo t > /tmp/sandlock-t-$$"
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_DATA_HOME", None)
    result = sandlock("run", "--cwd", str(work), "--", "sh", "-c", script, env=env)
    assert "LEAK" not in result.stdout
    assert "notesconf" in result.stdout
    assert (work / "out.txt").read_text() == "w\n"
    denied = sandlock("run", "--cwd", str(work), "--", "sh", "-c", "echo x > /etc/sandlock-test",
                      env=env)
    assert denied.returncode != 0 and not os.path.exists("/etc/sandlock-test")


@pytest.mark.parametrize("options", [
    [],
    ["--clean-env"],
    ["--env", "XDG_DATA_HOME=/nonexistent-data"],
    ["-r", "/", "--env", "XDG_DATA_HOME=/nonexistent-data"],
], ids=["default", "clean-env", "env-xdg", "explicit-env-xdg"])
def test_sandlocks_own_ca_dir_is_denied_whatever_the_commands_environment(tmp_path, options):
    # The CA sandlock would use is located by sandlock's XDG_DATA_HOME; the command's
    # own (changed or dropped) must not decide what is protected.
    ca = tmp_path / "data" / "sandlock" / "ca"
    ca.mkdir(parents=True)
    (ca / "ca-key.pem").write_text("secret")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    result = sandlock("run", *options, "--", "cat", str(ca / "ca-key.pem"), env=env)
    assert result.returncode != 0 and "secret" not in result.stdout
    assert "Permission denied" in result.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_inside_a_writable_directory(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    script = (
        "git init -q . && git config user.email t@e && git config user.name t && "
        "echo hi > f && git add f && git commit -qm one && echo more >> f && "
        "git commit -qam two && git log --oneline | wc -l"
    )
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    result = sandlock("run", "-r", "/", "-w", str(repo), "--cwd", str(repo), "--",
                      "sh", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"


# --- check / selftest --------------------------------------------------------------


def test_check_reports_features():
    result = sandlock("check")
    assert result.returncode == 0, result.stdout
    for word in ("Landlock", "ABI", "seccomp user notification", "pidfd_getfd", "IPC scoping"):
        assert word in result.stdout
    limits = result.stdout.split("resource limits (without cgroups):\n")[1]
    assert "--max-memory      ok  sandlock's watch, no cgroup: summed every 10 ms" in limits
    assert "its sockets' buffers every 100 ms (sock_diag: ok); memfds refused" in limits
    assert "--max-processes   ok  fork-like calls supervised" in limits
    assert "--max-cpu         ok  the sandbox's CPU time" in limits


def test_selftest_passes():
    result = sandlock("selftest", timeout=120)
    assert result.returncode == 0, result.stdout
    assert "\N{BALLOT X}" not in result.stdout
    assert result.stdout.count("\N{CHECK MARK}") >= 16


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_job_control_ctrl_z_and_fg():
    """In an interactive shell: Ctrl-Z stops the sandboxed job, fg resumes it."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["bash", "--norc", "--noprofile", "-i"])
    transcript = b""

    def expect(marker: bytes, seconds: float = 20) -> None:
        nonlocal transcript
        deadline = time.monotonic() + seconds
        while marker not in transcript:
            assert time.monotonic() < deadline, f"no {marker!r} in {transcript!r}"
            if select.select([fd], [], [], 0.5)[0]:
                transcript += os.read(fd, 4096)

    sandlock_cmd = " ".join(SANDLOCK)
    command = f"{sandlock_cmd} run -- {PY} -c \"import time; print('start'+'ed', flush=True); time.sleep(1.5); print('fin'+'ished')\""
    os.write(fd, command.encode() + b"\n")
    expect(b"started")
    os.write(fd, b"\x1a")  # Ctrl-Z
    expect(b"Stopped")
    os.write(fd, b"fg\n")
    expect(b"finished")
    os.write(fd, b"echo rc=$?; exit\n")
    expect(b"rc=0")
    os.waitpid(pid, 0)
    os.close(fd)


def test_ipc_scope_and_allow_ipc():
    """Signals and abstract unix sockets to the outside: blocked unless --allow-ipc."""
    import socket

    name = f"sandlock-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen()
    probe = (
        "import os, socket, sys\n"
        "def attempt(f):\n"
        "    try: f(); return 'ok'\n"
        "    except OSError as e: return e.strerror\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "print(attempt(lambda: os.kill(int(sys.argv[1]), 0)),"
        " attempt(lambda: s.connect('\\0' + sys.argv[2])), sep=',')\n"
    )
    with subprocess.Popen(["sleep", "30"]) as outsider:
        try:
            scoped = sandlock("run", "--", PY, "-c", probe, str(outsider.pid), name)
            opened = sandlock("run", "--allow-ipc", "--", PY, "-c", probe, str(outsider.pid), name)
        finally:
            outsider.kill()
            server.close()
    # Processes outside are not even there (the sandbox's own PID namespace), with or
    # without --allow-ipc; abstract sockets are scoped unless --allow-ipc.
    assert scoped.stdout.strip() == "No such process,Operation not permitted"
    assert opened.stdout.strip() == "No such process,ok"


def test_scratch_home_does_not_unprotect_the_real_one(tmp_path, monkeypatch):
    """--env HOME=elsewhere: the user's real credential stores stay denied."""
    real = tmp_path / "real"
    (real / ".ssh").mkdir(parents=True)
    (real / ".ssh" / "id_test").write_text("PRIVATE-KEY")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "HOME": str(real)}
    result = sandlock("run", "--env", f"HOME={scratch}", "--", "cat", str(real / ".ssh" / "id_test"),
                      env=env)
    assert "PRIVATE-KEY" not in result.stdout
    assert "Permission denied" in result.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="creating device nodes needs root")
def test_root_cannot_make_device_nodes(tmp_path):
    script = (
        "import os, stat\n"
        "try:\n"
        "    os.mknod('kmsg', stat.S_IFCHR | 0o600, os.makedev(1, 11)); print('made')\n"
        "except OSError as e: print(e.errno)\n"
    )
    result = sandlock("run", "-r", "/", "-w", str(tmp_path), "--cwd", str(tmp_path), "--", PY, "-c", script)
    assert result.stdout.strip() in ("1", "13"), result.stdout + result.stderr
    assert not (tmp_path / "kmsg").exists()


def test_a_start_warning_to_a_full_stderr_does_not_change_the_outcome(tmp_path):
    """A policy file in the workspace draws a warning at start; with stderr full
    (2>/dev/full) the line is lost, and the run's status and output are the command's.
    Control: with a stderr that takes it, the warning is there."""
    (tmp_path / "pol.toml").write_text('[network]\nallow = ["127.0.0.1:9"]\n')
    argv = [*SANDLOCK, "run", "--policy", "pol.toml", "--", "sh", "-c", "echo ran; exit 3"]
    with open("/dev/full", "w") as full:
        result = subprocess.run(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=full,
                                text=True, timeout=60)
    assert (result.returncode, result.stdout) == (3, "ran\n")
    control = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (control.returncode, control.stdout) == (3, "ran\n")
    assert "sandlock: warning: policy file" in control.stderr, control.stderr
