"""What the command line and the docs say matches what sandlock does: -m's units, the
help of -P, --audit and --upstream-ca, errors in sandlock's own form (with the option
a typo probably meant), the synopsis, --cwd's error, and the samples of the docs
(the npm example, credentials.md, workspace.md, `workspace diff --patch`). Each runs
the real CLI; samples are compared with what it prints."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SANDLOCK, UNWIDENED, sandlock
from sandlock import Policy, PolicyError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def run_help() -> str:
    result = sandlock("run", "--help", env={**os.environ, "COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    return result.stdout


# --- -m: a bare number is bytes ---------------------------------------------------------

def test_a_bare_memory_size_below_a_mebibyte_is_refused(tmp_path):
    """Before: `-m 10` was 10 bytes, and the sandbox was killed at once (137)."""
    result = sandlock("run", "-m", "10", "--", "sleep", "1", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, (
        "sandlock: error: --max-memory: '10' is 10 bytes (a number without a unit is bytes): "
        "write the unit, e.g. 10M (units K, M, G, T)\n"))
    policy = tmp_path / "p.toml"
    policy.write_text("[limits]\nmax_memory = 512\n")
    from_file = sandlock("run", "--policy", str(policy), "--", "true", cwd=tmp_path)
    assert from_file.returncode == 2
    assert from_file.stderr.startswith(f"sandlock: error: {policy}:2: limits.max_memory: 512 is "
                                       "512 bytes")
    with pytest.raises(PolicyError) as raised:
        Policy(max_memory=10)
    assert raised.value.field == "max_memory"
    # The control: a bare number of a mebibyte or more, and any size with its unit.
    for size in ("1048576", "64M"):
        ran = sandlock("run", "-m", size, "--", "sleep", "0.1", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
    assert "a bare number is bytes" in " ".join(run_help().split())


# --- help that said otherwise -----------------------------------------------------------

def test_the_help_of_P_names_the_default_cap_that_applies(tmp_path):
    """Before: "default and 0: no cap", while 1024 tasks are the cap by default."""
    text = " ".join(run_help().split())
    assert "no cap" not in text and "Without it (or 0), the default cap: 1024 tasks" in text
    for options in ((), ("-P", "0")):
        result = sandlock("run", *options, "--", "bash", "-c", "ulimit -u", cwd=tmp_path)
        assert (result.returncode, result.stdout) == (0, "1024\n"), result.stderr


def test_the_help_of_audit_names_every_kind_of_record(tmp_path):
    """Before: "one JSON line per network decision", while limits (and more) are logged."""
    text = " ".join(run_help().split())
    assert "limit hit, workspace outcome, full-access run and policy_fn verdict" in text
    log = tmp_path / "audit.jsonl"
    result = sandlock("run", "-t", "0.2", "--audit", str(log), "--", "sleep", "5", cwd=tmp_path)
    assert result.returncode == 124
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(record.get("limit") == "timeout" for record in records), records


def test_upstream_ca_says_it_is_repeatable(tmp_path, upstream_ca):
    text = " ".join(run_help().split())
    assert "also trust these CA certificates for upstream servers (repeatable)" in text
    second = tmp_path / "second.pem"
    shutil.copy(upstream_ca[1], second)
    result = sandlock("run", "--upstream-ca", upstream_ca[1], "--upstream-ca", str(second),
                      "--print-policy", env=UNWIDENED)
    assert result.returncode == 0, result.stderr
    assert f'"{upstream_ca[1]}",\n    "{second}",\n]' in result.stdout


# --- errors in sandlock's form ----------------------------------------------------------

@pytest.mark.parametrize("argv, error", [
    # Before: "argument -t/--timeout: invalid float value: 'abc'" (argparse's wording).
    (["run", "-t", "abc", "--", "true"], "--timeout: expected a number, got 'abc'"),
    (["run", "-P", "x", "--", "true"], "--max-processes: expected a whole number, got 'x'"),
    (["run", "-m"], "--max-memory: expected a value"),
    # Before: "unrecognized arguments: --net-alow", without the option it meant.
    (["run", "--net-alow", "x", "--", "true"], "--net-alow: no such option: did you mean --net-allow?"),
    (["run", "--dry-rn", "--", "true"], "--dry-rn: no such option: did you mean --dry-run?"),
    (["policy", "test", "--net-alow", "x"], "--net-alow: no such option: did you mean --net-allow?"),
    (["learn", "-o", "x", "--colapse", "3", "--", "true"],
     "--colapse: no such option: did you mean --collapse?"),
    (["run", "--frobnicate", "--", "true"], "--frobnicate: no such option: `sandlock run --help` lists them"),
    (["run", "--mode", "readonly", "--", "true"], "--mode: invalid choice 'readonly': did you mean 'read-only'?"),
    (["polcy", "test"], "COMMAND: invalid choice 'polcy': did you mean 'policy'?"),
])
def test_bad_options_get_one_line_in_sandlocks_form(argv, error):
    result = sandlock(*argv)
    assert (result.returncode, result.stderr) == (2, f"sandlock: error: {error}\n")


def test_cwd_that_does_not_exist_is_said_so(tmp_path):
    """Before: "not a directory" for a directory that is not there."""
    missing = sandlock("run", "--cwd", str(tmp_path / "nope"), "--", "true")
    assert missing.stderr == f"sandlock: error: --cwd: {tmp_path / 'nope'}: no such directory\n"
    (tmp_path / "file").write_text("")
    a_file = sandlock("run", "--cwd", str(tmp_path / "file"), "--", "true")
    assert a_file.stderr == f"sandlock: error: --cwd: {tmp_path / 'file'}: not a directory\n"


# --- the docs' synopsis and samples -----------------------------------------------------

def test_the_synopsis_of_usage_md_has_every_command():
    """Before: `workspace` and `vet` were missing."""
    from sandlock.cli._parser import COMMANDS

    synopsis = (DOCS / "usage.md").read_text().split("```")[1]
    shown = {line.split()[1] for line in synopsis.splitlines() if line.startswith("sandlock ")}
    assert shown == set(COMMANDS)


@pytest.mark.skipif(shutil.which("npm") is None, reason="no npm here")
def test_the_npm_example_runs_as_its_comment_says(unscratched):
    """Its comment said ~/.npm was not writable and to move the cache: the default
    workspace makes ~/.npm (npm on PATH) and npm fills it."""
    from test_policy_docs import EXAMPLES, StandIns, npm_package

    example = EXAMPLES / "npm-install.toml"
    comment = "\n".join(line[1:] for line in example.read_text().splitlines() if line.startswith("#"))
    assert "does not let it write" not in comment
    command = next(line.strip() for line in comment.splitlines() if "sandlock run" in line)
    argv = shlex.split(command)
    assert argv[:4] == ["sandlock", "run", "--policy", "docs/examples/npm-install.toml"]
    home = unscratched
    (home / "proj").mkdir()
    (home / "proj" / "package.json").write_text('{"name": "p", "version": "1.0.0"}')
    registry = home / "registry"
    with StandIns(["registry.npmjs.org"], **{"registry.npmjs.org": {
            "files": str(registry), "files_at": "/"}}) as stand_ins:
        url = f"http://registry.npmjs.org:{stand_ins.port}"
        npm_package(registry, url)
        dashes = argv.index("--")
        result = subprocess.run(
            [*SANDLOCK, "run", "--policy", str(example), *argv[4:dashes], *stand_ins.options(),
             "--", "npm", "install", "--registry", f"{url}/", "tinypkg"],
            capture_output=True, text=True, timeout=180, cwd=home / "proj",
            env={**UNWIDENED, "HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (home / "proj" / "node_modules" / "tinypkg" / "index.js").exists()
    assert (home / ".npm" / "_cacache").is_dir()


def test_the_dry_run_sample_of_workspace_md_is_what_it_prints(tmp_path):
    text = (DOCS / "workspace.md").read_text()
    sample = re.search(r"```text\n(sandlock: dry run: .*?)```", text, re.S)[1]
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "build").mkdir()
    (project / "build" / "main.o").write_text("object\n")
    (project / "Makefile").write_text("all:\n")
    script = ("head -c 1229 /dev/zero > src/new.c; rm -r build; "
              "head -c 340 /dev/zero > Makefile; mkdir vendor")
    result = sandlock("run", "--dry-run", "--workdir", ".", "--", "sh", "-c", script, cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == sample.replace("/home/me/proj", str(project))


def test_workspace_diff_patch_adds_and_deletes_through_dev_null(tmp_path):
    """Before: a new file was `--- a/b.txt`, which `git apply` takes for a change to a
    file it then cannot find."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("one\n")
    (project / "c.txt").write_text("gone\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    ran = subprocess.run([*SANDLOCK, "run", "-q", "--workdir", ".", "--on-exit", "keep", "--", "sh",
                          "-c", "echo two >> a.txt; echo new > b.txt; rm c.txt"],
                         capture_output=True, text=True, cwd=project, env=env, timeout=60)
    assert ran.returncode == 0, ran.stderr
    listed = subprocess.run([*SANDLOCK, "workspace", "list"], capture_output=True, text=True,
                            env=env, timeout=60)
    workspace = listed.stdout.splitlines()[1].split()[0]
    patch = subprocess.run([*SANDLOCK, "workspace", "diff", "--patch", workspace],
                           capture_output=True, text=True, env=env, timeout=60).stdout
    assert "--- /dev/null\n+++ b/b.txt\n" in patch
    assert "--- a/c.txt\n+++ /dev/null\n" in patch
    assert "--- a/a.txt\n+++ b/a.txt\n" in patch
    # The patch does to a copy of the directory what the run did (a user's way to use it).
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    applied = subprocess.run(["git", "apply", "-"], input=patch, capture_output=True, text=True,
                             cwd=copy)
    assert applied.returncode == 0, applied.stderr
    assert (copy / "a.txt").read_text() == "one\ntwo\n" and (copy / "b.txt").read_text() == "new\n"
    assert not (copy / "c.txt").exists()
