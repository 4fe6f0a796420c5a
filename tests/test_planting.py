"""Nothing the sandbox writes may run later outside it (docs/usage.md, "Autorun files").

Each attack is performed by a real confined command in a workspace under a realistic
home, as an unprivileged user (and the key ones as root); then the user's own,
unconfined action follows, the one that would run what was planted: ``git status``,
``git diff``, ``git commit``, a shell that reads ~/.bashrc, direnv, an editor opening
the folder. What was planted runs ``touch MARKER``; each test asserts the marker is
absent, and its control (the same steps with --allow-autorun-writes) that it is there:
the test sees the attack succeed where it is allowed to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SANDLOCK, UNPRIVILEGED_UID, unprivileged

IDENTITY = {"GIT_AUTHOR_NAME": "User", "GIT_AUTHOR_EMAIL": "user@example.test",
            "GIT_COMMITTER_NAME": "User", "GIT_COMMITTER_EMAIL": "user@example.test"}
CONTROL = "--allow-autorun-writes"
# The user's later actions.
GIT_ACTIONS = ("git status", "git diff", "git commit -q --allow-empty -m x")


class World:
    """A user (nobody, or root) with a home, a project in it, and a marker to plant."""

    def __init__(self, base: Path, nobody: bool) -> None:
        self.nobody = nobody
        self.home = base / "home"
        self.project = self.home / "project"
        self.project.mkdir(parents=True)
        self.marker = self.home / "PWNED"
        if nobody:
            subprocess.run(["chown", "-R", f"{UNPRIVILEGED_UID}:{UNPRIVILEGED_UID}", str(self.home)],
                           check=True)
        self.touch = f"touch {self.marker}"

    @property
    def env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "SANDLOCK_FS_READ", "SANDLOCK_FS_WRITE", "XDG_RUNTIME_DIR")
        return {**{name: os.environ[name] for name in keep if name in os.environ},
                "HOME": str(self.home), **IDENTITY}

    def _argv(self, argv: list[str]) -> list[str]:
        return unprivileged(argv) if self.nobody else argv

    def user(self, script: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """The user's own shell, unconfined."""
        return subprocess.run(self._argv(["sh", "-c", script]), capture_output=True, text=True,
                              timeout=60, cwd=cwd or self.project, env=self.env)

    def setup(self, script: str, cwd: Path | None = None) -> None:
        result = self.user(script, cwd)
        assert result.returncode == 0, result.stderr

    def sandlock(self, script: str, *options: str, cwd: Path | None = None,
                 ) -> subprocess.CompletedProcess:
        """``script`` confined (the attack), in the project."""
        argv = self._argv([*SANDLOCK, "run", *options, "--", "sh", "-c", script])
        return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              cwd=cwd or self.project, env=self.env)

    def git_actions(self, cwd: Path | None = None) -> None:
        for action in GIT_ACTIONS:
            self.user(action, cwd)

    def fsmonitor_config(self) -> str:
        return f'[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = "{self.touch}; false"\\n'

    @property
    def pwned(self) -> bool:
        return self.marker.exists()


@pytest.fixture
def nobody_world(unscratched, as_nobody) -> World:
    return World(unscratched, nobody=True)


@pytest.fixture(params=["nobody", "root"])
def world(request, unscratched) -> World:
    """Key attacks: as nobody and as root."""
    if request.param == "nobody":
        request.getfixturevalue("as_nobody")
    elif os.getuid() != 0:
        pytest.skip("needs root")
    return World(unscratched, nobody=request.param == "nobody")


def repository(world: World, path: Path | None = None) -> Path:
    path = path or world.project
    world.setup("git init -q . && git commit -q --allow-empty -m init", cwd=path)
    return path


def attack(world: World, script: str, *options: str, actions=None, cwd: Path | None = None,
           control: bool = False) -> subprocess.CompletedProcess:
    """Plant, then the user's actions; the sandlock run's result."""
    result = world.sandlock(script, *options, *((CONTROL,) if control else ()), cwd=cwd)
    (actions or world.git_actions)()
    return result


def attack_there(world: World, script: str, where: str, control: bool,
                 ) -> subprocess.CompletedProcess:
    """The attack, then the user's git in ``where`` (in the project): it ran only in the
    control."""
    result = attack(world, script + " && echo planted", control=control,
                    actions=lambda: world.git_actions(world.project / where))
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control, result.stderr
    return result


# --- git: files that move where git reads config and hooks -----------------------------

COMMONDIR = ("mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/ && "
             "printf '{config}' > evil/config && echo \"$PWD/evil\" > .git/commondir && echo planted")


@pytest.mark.parametrize("control", [False, True])
def test_a_commondir_made_during_the_run_is_quarantined(world, control):
    repository(world)
    result = attack(world, COMMONDIR.format(config=world.fsmonitor_config()), control=control)
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control
    if not control:
        assert "quarantined" in result.stderr and ".git/commondir" in result.stderr
        assert list((world.project / ".git").glob("commondir.sandlock-quarantined-*"))


@pytest.mark.parametrize("control", [False, True])
def test_a_commondir_committed_from_a_workdir_is_quarantined_first(world, control):
    repository(world)
    result = attack(world, COMMONDIR.format(config=world.fsmonitor_config()), "--workdir", ".",
                    control=control)
    assert "planted" in result.stdout, result.stderr
    assert "workspace: committed" in result.stderr
    assert world.pwned == control
    if not control:
        assert "quarantined" in result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_a_kept_workspace_is_checked_again_when_committed(nobody_world, control):
    """A run whose own end check did not look (here: allowed; or sandlock was killed)
    leaves a layer that `sandlock workspace commit` checks before applying it."""
    world = nobody_world
    repository(world)
    kept = world.sandlock(COMMONDIR.format(config=world.fsmonitor_config()), "--workdir", ".",
                          "--on-exit", "keep", CONTROL)
    ident = kept.stderr.split(" as ")[1].split()[0]
    argv = [*SANDLOCK, "workspace", "commit", ident, *((CONTROL,) if control else ())]
    committed = subprocess.run(unprivileged(argv) if world.nobody else argv, capture_output=True,
                               text=True, timeout=60, cwd=world.project, env=world.env)
    assert committed.returncode == 0, committed.stderr
    world.git_actions()
    assert world.pwned == control, committed.stderr
    if not control:
        assert "quarantined" in committed.stderr


@pytest.mark.parametrize("where", ["sub", "vendor/lib/sub"])
@pytest.mark.parametrize("control", [False, True])
def test_a_nested_repository_added_as_a_gitlink_is_neutralised(world, control, where):
    repository(world)
    script = (f"mkdir -p {where} && git init -q {where} && "
              f"git -C {where} config core.fsmonitor '{world.touch}; false' && "
              f"git -C {where} commit -q --allow-empty -m x && git add {where} && echo planted")
    result = attack(world, script, control=control)
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control
    if not control:
        config = (world.project / where / ".git" / "config").read_text()
        assert "fsmonitor" not in config and "repositoryformatversion" in config
        assert "core.fsmonitor" in result.stderr


def test_a_sha256_repository_made_during_the_run_is_read_with_its_hash_size(nobody_world):
    """Its index is read as git reads it: with SHA-256's hashes, as its config says."""
    world = nobody_world
    script = ("git init -q --object-format=sha256 made && cd made && mkdir -p a/b && "
              "git init -q --object-format=sha256 a/b/sub && "
              f"git -C a/b/sub config core.fsmonitor '{world.touch}; false' && "
              "git -C a/b/sub commit -q --allow-empty -m x && git add a/b/sub && echo planted")
    result = attack(world, script, actions=lambda: world.git_actions(world.project / "made"))
    assert "planted" in result.stdout, result.stderr
    assert not world.pwned and "a/b/sub/.git/config" in result.stderr, result.stderr


def test_a_repository_made_in_a_gitlink_that_had_none_is_neutralised(nobody_world):
    """An uninitialised submodule's directory, where the command makes a repository."""
    world = nobody_world
    repository(world)
    world.setup("mkdir -p lib/sub && git init -q lib/sub && git -C lib/sub commit -q --allow-empty "
                "-m s && git add lib/sub && git commit -q -m sub && rm -rf lib/sub/.git")
    script = f"git init -q lib/sub && git -C lib/sub config core.fsmonitor '{world.touch}; false'"
    result = attack(world, script)
    assert not world.pwned, result.stderr
    assert "lib/sub/.git/config" in result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_a_repository_made_during_the_run_is_neutralised(world, control):
    """No repository at start: git init, a pre-commit hook, core.fsmonitor."""
    script = ("git init -q && printf '#!/bin/sh\\n%s\\n' > .git/hooks/pre-commit && "
              "chmod +x .git/hooks/pre-commit && git config core.fsmonitor '%s; false' && "
              "git config alias.st '!%s' && echo planted") % (world.touch, world.touch, world.touch)
    result = attack(world, script, control=control,
                    actions=lambda: (world.git_actions(), world.user("git st")))
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control
    if not control:
        assert (world.project / ".git" / "hooks" / "pre-commit").exists() is False
        config = (world.project / ".git" / "config").read_text()
        assert "fsmonitor" not in config and "alias" not in config
        quarantined = list((world.project / ".git").glob("config.sandlock-quarantined-*"))
        assert len(quarantined) == 1 and "fsmonitor" in quarantined[0].read_text()


@pytest.mark.parametrize("control", [False, True])
def test_a_hooks_link_of_a_repository_made_during_the_run_is_quarantined(nobody_world, control):
    world = nobody_world
    attack_there(world, "git init -q made && rm -r made/.git/hooks && "
                 + HOOK.format(dir="hooks", touch=world.touch) + " && ln -s ../../hooks made/.git/hooks",
                 "made", control)


def test_a_clone_made_during_the_run_keeps_its_remote_but_not_its_hooks(nobody_world):
    world = nobody_world
    repository(world, world.project)
    world.setup("mkdir src && cd src && git init -q && git commit -q --allow-empty -m src")
    script = (f"git clone -q src copy && printf '#!/bin/sh\\n{world.touch}\\n' > "
              "copy/.git/hooks/post-checkout && chmod +x copy/.git/hooks/post-checkout && "
              "printf '#!/bin/sh\\n%s\\n' > copy/.git/hooks/pre-commit && chmod +x copy/.git/hooks/pre-commit"
              % world.touch)
    result = attack(world, script, actions=lambda: world.git_actions(world.project / "copy"))
    assert not world.pwned, result.stderr
    assert "url" in (world.project / "copy" / ".git" / "config").read_text()
    assert "config" not in result.stderr.split("quarantined")[-1].split(":")[0]


@pytest.mark.parametrize("control", [False, True])
def test_a_git_file_naming_a_repository_of_the_command_is_quarantined(nobody_world, control):
    world = nobody_world
    script = ("git init -q elsewhere && mv elsewhere/.git attacker.git && rmdir elsewhere && "
              f"git --git-dir=attacker.git config core.fsmonitor '{world.touch}; false' && "
              "mkdir sub && echo 'gitdir: ../attacker.git' > sub/.git")
    result = attack_there(world, script, "sub", control)
    if not control:
        assert "sub/.git" in result.stderr and not (world.project / "sub" / ".git").exists()


@pytest.mark.parametrize("control", [False, True])
def test_a_worktree_directory_naming_another_repository_is_quarantined(nobody_world, control):
    world = nobody_world
    repository(world)
    script = ("mkdir -p evil .git/worktrees/wt wt && cp -r .git/objects .git/refs .git/HEAD evil/ && "
              f"printf '{world.fsmonitor_config()}' > evil/config && "
              "echo \"$PWD/evil\" > .git/worktrees/wt/commondir && cp .git/HEAD .git/worktrees/wt/ && "
              "echo \"$PWD/wt/.git\" > .git/worktrees/wt/gitdir && "
              "echo \"gitdir: $PWD/.git/worktrees/wt\" > wt/.git")
    attack_there(world, script, "wt", control)


@pytest.mark.parametrize("control", [False, True])
def test_an_existing_worktree_directory_cannot_be_swapped(nobody_world, control):
    """The directory holding a protected file is pinned: renamed aside, another one
    with a commondir of the command's would take its place."""
    world = nobody_world
    repository(world)
    world.setup("git worktree add -q wt -b topic")
    script = ("mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/ && "
              f"printf '{world.fsmonitor_config()}' > evil/config && "
              "mv .git/worktrees/wt .git/worktrees/aside && cp -r .git/worktrees/aside .git/worktrees/wt && "
              "echo \"$PWD/evil\" > .git/worktrees/wt/commondir && echo planted")
    result = attack(world, script, control=control,
                    actions=lambda: world.git_actions(world.project / "wt"))
    assert world.pwned == control, result.stderr
    if not control:
        assert "planted" not in result.stdout and "busy" in result.stderr


def test_a_pinned_repository_keeps_the_workdir_mounted_inside_it(nobody_world):
    """Pins are bound with what is mounted beneath them: a --workdir inside a pinned
    repository stays copy-on-write (a plain bind would hide its overlay, and the
    command would write the real directory)."""
    world = nobody_world
    repository(world)
    world.setup("mkdir -p sub")
    result = world.sandlock("echo x > written", "-r", "/", "-w", str(world.home), "--workdir",
                            str(world.project / "sub"), "--on-exit", "abort",
                            cwd=world.project / "sub")
    assert "discarded 1 change" in result.stderr, result.stderr
    assert not (world.project / "sub" / "written").exists()


def test_the_directory_holding_an_editor_task_cannot_be_swapped(nobody_world):
    world = nobody_world
    world.setup("mkdir .vscode && echo '{}' > .vscode/tasks.json")
    result = world.sandlock("mv .vscode aside; echo moved=$?")
    assert result.stdout.split() == ["moved=1"], result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_the_gitlinks_of_a_worktree_made_during_the_run_are_looked_at_there(nobody_world, control):
    """`git worktree add` is kept; a repository planted at a gitlink of its work tree
    (which `git status` there recurses into) is vetted in that work tree."""
    world = nobody_world
    repository(world)
    world.setup("mkdir -p vendor && git init -q vendor/x && git -C vendor/x commit -q --allow-empty "
                "-m x && git add vendor/x 2>/dev/null && git commit -q -m vendor")
    script = (f"git worktree add -q wt -b topic && git init -q wt/vendor/x && "
              f"git -C wt/vendor/x config core.fsmonitor '{world.touch}; false' && echo planted")
    result = attack(world, script, control=control,
                    actions=lambda: world.git_actions(world.project / "wt"))
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control
    if not control:
        assert (world.project / "wt" / ".git").is_file()  # the worktree itself is kept
        assert "wt/vendor/x/.git/config" in result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_a_config_worktree_made_during_the_run_is_quarantined(nobody_world, control):
    world = nobody_world
    repository(world)
    world.setup("git config extensions.worktreeConfig true")
    script = f"printf '{world.fsmonitor_config()}' > .git/config.worktree && echo planted"
    result = attack(world, script, control=control)
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control


def test_a_git_symlink_made_during_the_run_is_quarantined(nobody_world):
    world = nobody_world
    script = ("git init -q attacker && mv attacker/.git attacker.git && "
              f"git --git-dir=attacker.git config core.fsmonitor '{world.touch}; false' && "
              "mkdir sub && ln -s ../attacker.git sub/.git")
    result = attack(world, script, actions=lambda: world.git_actions(world.project / "sub"))
    assert not world.pwned, result.stderr
    assert not os.path.lexists(world.project / "sub" / ".git")


def test_a_symlink_on_the_way_to_an_autorun_file_is_quarantined(nobody_world):
    """``.vscode`` made a link to a directory holding tasks.json: the link goes, not
    what it points to."""
    world = nobody_world
    result = world.sandlock("mkdir elsewhere && echo '{}' > elsewhere/tasks.json && "
                            "ln -s elsewhere .vscode")
    assert not os.path.lexists(world.project / ".vscode"), result.stderr
    assert (world.project / "elsewhere" / "tasks.json").exists()
    assert ".vscode" in result.stderr and "symbolic link" in result.stderr


def test_from_a_subdirectory_the_writable_git_directory_is_checked(nobody_world):
    """The default workspace in a subdirectory of a repository writes its .git."""
    world = nobody_world
    repository(world)
    (world.project / "sub").mkdir()
    if world.nobody:
        os.chown(world.project / "sub", UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    result = attack(world, COMMONDIR.format(config=world.fsmonitor_config()).replace(
        ".git/", "../.git/"), cwd=world.project / "sub")
    assert not world.pwned, result.stderr
    assert "commondir" in result.stderr


# --- git: hooks that live in the work tree ---------------------------------------------

HOOK = "mkdir -p {dir} && printf '#!/bin/sh\\n{touch}\\n' > {dir}/pre-commit && chmod +x {dir}/pre-commit"


@pytest.mark.parametrize("existing", [True, False])
@pytest.mark.parametrize("control", [False, True])
def test_husky_hooks_in_the_work_tree_are_autorun_files(nobody_world, control, existing):
    world = nobody_world
    repository(world)
    world.setup("git config core.hooksPath .husky" + (" && mkdir .husky" if existing else ""))
    result = attack(world, HOOK.format(dir=".husky", touch=world.touch) + " && echo planted",
                    control=control)
    assert world.pwned == control, result.stderr
    if not control and existing:
        assert "planted" not in result.stdout  # read-only during the run
    elif not control:
        assert "planted" in result.stdout and ".husky" in result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_husky_9_hooks_beside_its_shims_are_autorun_files(nobody_world, control):
    """husky 9: core.hooksPath=.husky/_, whose shims run .husky/NAME."""
    world = nobody_world
    repository(world)
    world.setup("git config core.hooksPath .husky/_ && mkdir -p .husky/_ && "
                "printf '#!/bin/sh\n[ -f .husky/pre-commit ] && sh .husky/pre-commit\nexit 0\n' "
                "> .husky/_/pre-commit && chmod +x .husky/_/pre-commit")
    result = attack(world, f"echo '{world.touch}' > .husky/pre-commit && echo planted",
                    control=control)
    assert world.pwned == control, result.stderr
    assert ("planted" in result.stdout) == control


@pytest.mark.parametrize("control", [False, True])
def test_a_relative_hooks_path_of_the_users_config_in_a_new_repository(nobody_world, control):
    """Your ~/.gitconfig's core.hooksPath=.githooks runs every repository's .githooks."""
    world = nobody_world
    (world.home / ".gitconfig").write_text("[core]\n\thooksPath = .githooks\n")
    attack_there(world, "git init -q made && " + HOOK.format(dir="made/.githooks", touch=world.touch),
                 "made", control)


# pre-commit is not installed here: its shim, simulated, runs each local hook's entry.
PRE_COMMIT_SHIM = """#!/usr/bin/env bash
# File generated by pre-commit: https://pre-commit.com
ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)
[ -f .pre-commit-config.yaml ] || exit 0
sed -n 's/^ *entry: *//p' .pre-commit-config.yaml | while read -r entry; do sh -c "$entry"; done
"""


@pytest.mark.parametrize("existing", [True, False])
@pytest.mark.parametrize("control", [False, True])
def test_pre_commit_config_is_an_autorun_file_where_its_shim_is_installed(nobody_world, control,
                                                                           existing):
    world = nobody_world
    repository(world)
    shim = world.project / ".git" / "hooks" / "pre-commit"
    shim.write_text(PRE_COMMIT_SHIM)
    shim.chmod(0o755)
    if world.nobody:
        os.chown(shim, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    if existing:
        world.setup("printf 'repos: []\\n' > .pre-commit-config.yaml")
    yaml = ("repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    language: system\\n"
            f"    entry: {world.touch}\\n")
    result = attack(world, f"printf '{yaml}' > .pre-commit-config.yaml && echo planted",
                    control=control)
    assert world.pwned == control, result.stderr
    if not control:
        assert ("planted" in result.stdout) != existing


@pytest.mark.parametrize("control", [False, True])
def test_what_a_shim_of_your_own_hooks_path_runs_is_an_autorun_file_everywhere(nobody_world,
                                                                            control):
    """core.hooksPath=~/.githooks in your config, pre-commit's shim there: every
    repository's .pre-commit-config.yaml runs at its commits, a new one's too."""
    world = nobody_world
    hooks = world.home / ".githooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(PRE_COMMIT_SHIM)
    (hooks / "pre-commit").chmod(0o755)
    (world.home / ".gitconfig").write_text("[core]\n\thooksPath = ~/.githooks\n")
    yaml = f"repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    entry: {world.touch}\\n"
    result = attack(world, f"git init -q made && printf '{yaml}' > made/.pre-commit-config.yaml",
                    control=control, actions=lambda: world.git_actions(world.project / "made"))
    assert world.pwned == control, result.stderr


def test_lefthook_files_are_autorun_files_where_its_shim_is_installed(nobody_world):
    world = nobody_world
    repository(world)
    world.setup("printf '#!/bin/sh\\n# lefthook shim\\nexit 0\\n' > .git/hooks/pre-commit && "
                "printf 'pre-commit: {}\\n' > lefthook.yml")
    result = world.sandlock("echo x >> lefthook.yml; echo yml=$?; echo x > .lefthook.yml; "
                            "echo made=$?")
    assert result.stdout.split() == ["yml=2", "made=0"], result.stderr
    assert not (world.project / ".lefthook.yml").exists()
    assert ".lefthook.yml" in result.stderr


# --- git: configs included from the user's own -----------------------------------------

@pytest.mark.parametrize("existing", [True, False])
@pytest.mark.parametrize("control", [False, True])
def test_an_include_target_of_the_users_config_is_an_autorun_file(nobody_world, control, existing):
    world = nobody_world
    repository(world)
    local = world.project / ".gitconfig-local"
    (world.home / ".gitconfig").write_text(
        f'[includeIf "gitdir:{world.project}/"]\n\tpath = {local}\n')
    if existing:
        world.setup("echo '[user]' > .gitconfig-local")
    result = attack(world, f"printf '{world.fsmonitor_config()}' > .gitconfig-local && echo planted",
                    control=control)
    assert world.pwned == control, result.stderr
    if not control:
        assert ("planted" in result.stdout) != existing


# --- editors, direnv, shells ---------------------------------------------------------

FOLDER_OPEN = """
import json, subprocess, sys
try:
    tasks = json.load(open(".vscode/tasks.json"))["tasks"]
except OSError:
    sys.exit(0)
for task in tasks:
    if task.get("runOptions", {}).get("runOn") == "folderOpen":
        subprocess.run(task["command"], shell=True)
"""


@pytest.mark.parametrize("control", [False, True])
def test_editor_tasks_and_envrc_made_during_the_run_are_quarantined(nobody_world, control):
    world = nobody_world
    tasks = json.dumps({"version": "2.0.0", "tasks": [
        {"label": "x", "type": "shell", "command": world.touch, "runOptions": {"runOn": "folderOpen"}}]})
    script = f"mkdir -p .vscode && echo '{tasks}' > .vscode/tasks.json && echo planted"

    def open_folder():  # as VS Code would, once the folder is trusted
        world.user(f"python3 -c '{FOLDER_OPEN}'")

    result = attack(world, script, control=control, actions=open_folder)
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control
    world.marker.unlink(missing_ok=True)
    result = attack(world, f"echo '{world.touch}' > .envrc", control=control,
                    actions=lambda: world.user("[ -f .envrc ] && . ./.envrc"))  # direnv, once allowed
    assert world.pwned == control, result.stderr


@pytest.mark.parametrize("control", [False, True])
def test_a_shell_start_up_file_made_during_the_run_is_quarantined(nobody_world, control):
    world = nobody_world
    result = attack(world, f"echo '{world.touch}' > ~/.bashrc", "-r", "/", "-w", str(world.home),
                    control=control, actions=lambda: world.user("bash -ic true"))
    assert world.pwned == control, result.stderr
    if not control:
        assert ".bashrc" in result.stderr


# --- policy files --------------------------------------------------------------------

POLICY = '[network]\nallow = ["127.0.0.1:9"]\n'


def test_a_policy_file_in_the_workspace_is_read_only_for_the_run(nobody_world):
    world = nobody_world
    policy = world.project / "pol.toml"
    policy.write_text(POLICY)
    other = world.project / "other.toml"
    other.write_text(POLICY)
    if world.nobody:
        for path in (policy, other):
            os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    widen = "printf '[network]\\nallow = [\"*\"]\\n' > {}; echo $?"
    result = world.sandlock(f"{widen.format('pol.toml')}; {widen.format('other.toml')}",
                            "--policy", "pol.toml", CONTROL)
    assert result.stdout.split() == ["2", "0"], result.stderr  # the control: other.toml
    assert policy.read_text() == POLICY
    assert "policy file" in result.stderr and "inside a writable directory" in result.stderr
    again = world.sandlock("true", "--policy", "pol.toml", "--print-policy")
    assert '"*"' not in again.stdout and "127.0.0.1:9" in again.stdout


def test_a_policy_file_outside_every_write_grant_is_not_mentioned(nobody_world):
    world = nobody_world
    policy = world.home / "pol.toml"
    policy.write_text(POLICY)
    result = world.sandlock("true", "--policy", str(policy))
    assert result.returncode == 0 and "policy file" not in result.stderr, result.stderr


API_PROFILE = """
import os, sys
from sandlock import Sandbox
sandbox = Sandbox("work", fs_writable=[os.getcwd()], fs_readable=["/"])
result = sandbox.run(["sh", "-c", "echo '[filesystem]' >> profiles/sandlock/profiles/work.toml; echo $?"])
print(result.stdout.decode().strip(), any("policy file" in w for w in sandbox.warnings))
"""


def test_a_profile_the_api_loads_from_a_writable_directory_is_read_only(nobody_world):
    world = nobody_world
    world.setup("mkdir -p profiles/sandlock/profiles && echo 'fs_readable = [\"/usr\"]' > "
                "profiles/sandlock/profiles/work.toml")
    argv = [sys.executable, "-c", API_PROFILE]
    result = subprocess.run(unprivileged(argv) if world.nobody else argv, capture_output=True,
                            text=True, timeout=60, cwd=world.project,
                            env={**world.env, "XDG_CONFIG_HOME": str(world.project / "profiles")})
    assert result.stdout.split() == ["2", "True"], result.stderr


def test_what_was_quarantined_is_in_the_audit_log(nobody_world):
    world = nobody_world
    audit = world.home / "audit.jsonl"
    world.sandlock(f"echo '{world.touch}' > .envrc", "--audit", str(audit))
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    quarantined = [r for r in records if r["event"] == "quarantine"]
    assert len(quarantined) == 1 and quarantined[0]["path"] == str(world.project / ".envrc")
    assert os.path.exists(quarantined[0]["renamed"])


# --- ordinary work -------------------------------------------------------------------

ORDINARY = """set -e
git init -q
echo a > a && git add a && git commit -q -m a
git branch topic && git checkout -q topic && echo b > b && git add b && git commit -q -m b
mkdir src && git -C src init -q && git -C src commit -q --allow-empty -m s
git clone -q src clone && git -C clone log --oneline >/dev/null
git worktree add -q wt topic 2>/dev/null || git worktree add -q wt -b wt-branch
git -C wt status --short
git -c protocol.file.allow=always submodule -q add ./src module
git commit -q -m module
echo done
"""


def test_ordinary_git_work_goes_on_and_the_end_check_is_quiet(world):
    result = world.sandlock(ORDINARY)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert "quarantined" not in result.stderr
    status = world.user("git status --short && git -C clone status --short && "
                        "git -C wt status --short && git -C module status --short")
    assert status.returncode == 0 and status.stderr == "", status.stderr


def test_the_end_check_is_quiet_in_an_existing_repository(nobody_world):
    world = nobody_world
    repository(world)
    result = world.sandlock("echo x > f && git add f && git commit -q -m f && echo done")
    assert result.stdout.split() == ["done"] and "quarantined" not in result.stderr, result.stderr


# --- sandlock's own code --------------------------------------------------------------

# Opens a module of sandlock's for writing (nothing is written: a regression must not
# change the checkout), and a file beside the package, in the same write grant.
OWN_CODE = """
import errno, os, sys
package, beside = sys.argv[1], sys.argv[2]
for name, path in (("module", os.path.join(package, "netcall", "_binder.py")),
                   ("proxy", os.path.join(package, "proxy", "_addon.py")),
                   ("ca", os.path.join(package, "ca", "_authority.py")), ("beside", beside)):
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        print(name, "writable")
    except OSError as error:
        print(name, errno.errorcode[error.errno])
"""


@pytest.mark.parametrize("grant", ["default workspace", "-w"])
def test_sandlocks_own_code_is_read_only_in_a_write_grant(grant):
    """A checkout or venv of sandlock's inside the project: the command could change a
    module that sandlock (and its keeper and init, outside the command's confinement)
    imports while the command runs, or at the next run. It is read-only (EROFS), its
    proxy and CA packages too (in a checkout, sandlock/proxy and sandlock/ca are links
    to ../proxy and ../ca: the proxy holds the CA's key); control: a file beside the
    package, in the same write grant, is written."""
    from sandlock.confinement._isolation import SANDLOCK_PACKAGE

    top = os.path.dirname(SANDLOCK_PACKAGE)
    beside = Path(top) / f".own-code-control-{os.getpid()}"
    options = [] if grant == "default workspace" else ["-r", "/", "-w", top]
    try:
        result = subprocess.run([*SANDLOCK, "run", "-q", *options, "--", sys.executable, "-c",
                                 OWN_CODE, SANDLOCK_PACKAGE, str(beside)],
                                cwd=top, capture_output=True, text=True, timeout=60)
        assert result.stdout.split("\n")[:4] == ["module EROFS", "proxy EROFS", "ca EROFS",
                                                  "beside writable"], result
        assert beside.exists()
    finally:
        beside.unlink(missing_ok=True)


# What the command tries in the Python that runs sandlock (a venv inside the project):
# a new .pth file in its site-packages (site runs its import lines at every start of
# that Python: sandlock's next run among them), a new script beside `sandlock` in its
# bin/, its pyvenv.cfg opened for writing (it names the interpreter; nothing is written);
# and a file beside the venv, in the same write grant. Where the attack succeeds, the
# test removes the (empty) files it made, and only those.
ENVIRONMENT = """
import errno, os, sys
beside, pth, script = sys.argv[1:4]
tries = (("pth", pth, os.O_CREAT | os.O_EXCL), ("script", script, os.O_CREAT | os.O_EXCL),
         ("pyvenv.cfg", os.path.join(sys.prefix, "pyvenv.cfg"), os.O_APPEND),
         ("beside", beside, os.O_CREAT))
for name, path, flags in tries:
    try:
        os.close(os.open(path, os.O_WRONLY | flags, 0o644))
        print(name, "writable", path)
    except OSError as error:
        print(name, errno.errorcode[error.errno])
"""


@pytest.mark.parametrize("grant", ["default workspace", "-w"])
def test_the_python_that_runs_sandlock_is_read_only_in_a_write_grant(grant):
    """sandlock's venv inside the project: a .pth file, a script or its pyvenv.cfg there
    would run at the next `sandlock` (or the user's next use of that venv), outside any
    sandbox. It is read-only (EROFS); control: a file beside the venv, in the same write
    grant, is made."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the suite runs in a venv (README); this interpreter is not one")
    import site

    top = os.path.dirname(sys.prefix)
    beside = Path(top) / f".environment-control-{os.getpid()}"
    site_packages = next(path for path in site.getsitepackages()
                         if path.startswith(sys.prefix + "/") and os.path.isdir(path))
    planted = [Path(site_packages) / f"zz-planted-{os.getpid()}.pth",
               Path(sys.prefix) / "bin" / f"planted-{os.getpid()}"]
    options = [] if grant == "default workspace" else ["-r", "/", "-w", top]
    try:
        result = subprocess.run([*SANDLOCK, "run", *options, "--", sys.executable, "-c",
                                 ENVIRONMENT, str(beside), *map(str, planted)],
                                cwd=top, capture_output=True, text=True, timeout=60)
        assert [line.split()[:2] for line in result.stdout.splitlines()] == [
            ["pth", "EROFS"], ["script", "EROFS"], ["pyvenv.cfg", "EROFS"],
            ["beside", "writable"]], result
    finally:
        for path in (*planted, beside):
            path.unlink(missing_ok=True)


def test_a_grant_of_the_environment_itself_is_the_users_word():
    """`-w VENV` asks for the command to install into it: it is not made read-only."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the suite runs in a venv (README); this interpreter is not one")
    planted = Path(sys.prefix) / "bin" / f"granted-{os.getpid()}"
    try:
        result = subprocess.run([*SANDLOCK, "run", "-q", "-r", "/", "-w", sys.prefix, "--",
                                 "touch", str(planted)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and planted.exists(), result
    finally:
        planted.unlink(missing_ok=True)


def test_an_install_into_sandlocks_venv_is_told_why_it_fails():
    """pip of the venv that runs sandlock, asked to install from the default workspace:
    it fails (read-only), and the note says why and how to grant it."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the suite runs in a venv (README); this interpreter is not one")
    top = os.path.dirname(sys.prefix)
    pip = os.path.join(sys.prefix, "bin", "pip")
    if not os.path.exists(pip):
        pytest.skip("this venv has no pip")
    result = subprocess.run([*SANDLOCK, "run", "--", pip, "install", "--no-index", "--no-deps",
                             "--no-build-isolation", os.path.join(top, "no-such-package-dir")],
                            cwd=top, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert (f"installs into the Python venv {sys.prefix}, which runs sandlock: read-only "
            f"for the command") in result.stderr, result.stderr


# --- what the user's tools run from the home ------------------------------------------

HOME_PLANTS = {
    # Debian's ~/.bashrc sources ~/.bash_aliases: the user's next interactive bash
    "bash_aliases": ("printf '{touch}\\n' > ~/.bash_aliases",
                     "bash -ic true"),
    # Python's user site-packages: a .pth line that imports runs at every start
    "user_site": ("mkdir -p ~/.local/lib/python3.11/site-packages && printf "
                  "'import os; os.system(\"{touch}\")\\n' > ~/.local/lib/python3.11/site-packages/x.pth",
                  "/usr/bin/python3 -c pass"),
    # the first program of its name on the PATH that Debian's ~/.profile sets
    "local_bin": ("mkdir -p ~/.local/bin && printf '#!/bin/sh\\n{touch}\\n' > ~/.local/bin/git "
                  "&& chmod +x ~/.local/bin/git",
                  'PATH="$HOME/.local/bin:$PATH" git --version'),
}


@pytest.mark.parametrize("plant", sorted(HOME_PLANTS))
@pytest.mark.parametrize("control", [False, True])
def test_what_the_users_tools_run_from_the_home_is_quarantined(nobody_world, plant, control):
    """-w over the home: a file made during the run that the user's shell, Python or
    PATH runs at their next start is quarantined at the end; the user's action runs it
    only in the control (--allow-autorun-writes)."""
    world = nobody_world
    (world.home / ".bashrc").write_text('[ -f ~/.bash_aliases ] && . ~/.bash_aliases\n')
    script, action = HOME_PLANTS[plant]
    result = attack(world, script.format(touch=world.touch) + " && echo planted",
                    "-r", "/", "-w", str(world.home), control=control,
                    actions=lambda: world.user(action))
    assert "planted" in result.stdout, result.stderr
    assert world.pwned == control, result.stderr


def test_a_project_manager_installing_into_sandlocks_venv_is_told_why_it_fails(tmp_path):
    """`uv sync` (here a stand-in of that name, which writes into the venv as uv does)
    from the default workspace holding sandlock's venv: refused, and the note says why."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the suite runs in a venv (README); this interpreter is not one")
    top = os.path.dirname(sys.prefix)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "uv").write_text(f"#!/bin/sh\ntouch {sys.prefix}/lib/uv-was-here-$$ || exit 2\n")
    (tools / "uv").chmod(0o755)
    result = subprocess.run([*SANDLOCK, "run", "--", str(tools / "uv"), "sync"], cwd=top,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "SANDLOCK_FS_READ": str(tools)})
    assert result.returncode == 2, result
    assert f"uv installs into the project's venv; the venv {sys.prefix} runs sandlock: " \
           "read-only for the command" in result.stderr, result.stderr


# --- caches the user's tools run from ---------------------------------------------------

@pytest.mark.parametrize("control", [False, True])
def test_pre_commits_cache_is_a_private_view(nobody_world, control):
    """pre-commit runs its hook repositories from ~/.cache/pre-commit as they are, at
    the user's next git commit: the default workspace's write grant of ~/.cache let the
    command rewrite one. In the sandbox the cache is a copy-on-write view: the command
    reads it, changes it and adds to it (pre-commit works there), and the host's is
    untouched; the user's hook then runs only what it held (the control, with
    --allow-autorun-writes, runs the planted line)."""
    world = nobody_world
    hook = world.home / ".cache" / "pre-commit" / "repo1" / "hook.sh"
    world.setup(f"mkdir -p {hook.parent} && printf 'echo lint\\n' > {hook} && chmod 700 {hook.parent}")
    script = (f"cat {hook} && echo '{world.touch}' >> {hook} && cat {hook} | wc -l && "
              f"mkdir {hook.parent.parent}/repo2 && echo made")
    result = attack(world, script, control=control, actions=lambda: world.user(f"sh {hook}"))
    assert result.stdout.split() == ["echo", "lint", "2", "made"], result.stderr
    assert world.pwned == control, result.stderr
    assert (hook.parent.parent / "repo2").exists() == control
    assert oct(hook.parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("control", [False, True])
def test_an_npx_cache_made_during_the_run_is_quarantined(nobody_world, control):
    """npx runs the packages in ~/.npm/_npx as they are: one made where there was none
    is quarantined at the end (the control keeps it)."""
    world = nobody_world
    package = world.home / ".npm" / "_npx" / "0123" / "node_modules" / ".bin" / "tool"
    script = f"mkdir -p {package.parent} && printf '#!/bin/sh\\n{world.touch}\\n' > {package} && echo made"
    result = attack(world, script, control=control, actions=lambda: world.user(
        f"[ -f {package} ] && sh {package}"))
    assert "made" in result.stdout, result.stderr
    assert world.pwned == control, result.stderr


def test_a_grant_of_the_cache_itself_is_the_users_word(nobody_world):
    """`-w ~/.cache/pre-commit`: the command may write the host's cache there."""
    world = nobody_world
    cache = world.home / ".cache" / "pre-commit"
    world.setup(f"mkdir -p {cache}")
    result = world.sandlock(f"touch {cache}/made && echo made", "-r", "/", "-w", str(cache),
                            "-w", str(world.project))
    assert "made" in result.stdout and (cache / "made").exists(), result.stderr
