"""What to tell a user whose command failed: the paths it named (its program included)
that the filesystem policy left out, and the grant that would bring each in; never a
bare "Permission denied" that sends users to --mode full-access (docs/usage.md, "When
it bites"). Computed only after a failure, never on the start path.

Every note is a guess from the command line: what a program finds by itself (a
config file, a cache) cannot be known this way.
"""

from __future__ import annotations

import errno
import os
import re
import sys

from ._fspolicy import within
from ._workspace import WIDEN_READ, WIDEN_WRITE, WorkspaceError, default_workspace, private_scratch

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

_NOTE = "sandlock: note: "
_PIP = re.compile(r"pip(\d+(\.\d+)?)?$")


class _Workspace:
    """The default workspace's grants, as real paths, for the checks below."""

    def __init__(self, home: str, cwd: str, env: Mapping[str, str], widen: Mapping[str, str]) -> None:
        read, write, deny = default_workspace(home, cwd, env, widen)
        self.home = home
        self.private = tuple(os.path.realpath(path) for path in private_scratch(widen))
        self.write = [os.path.realpath(path) for path in write]
        self.read = [*(os.path.realpath(path) for path in read), *self.write]
        self.denied = [os.path.realpath(path) for path in deny]

    def readable(self, path: str) -> bool:
        return _inside(path, self.read) and self.shown(path)

    def writable(self, path: str) -> bool:
        return _inside(path, self.write) and self.shown(path)

    def hidden_scratch(self, path: str) -> str | None:
        """The private scratch directory ``path`` is in, unless a grant beneath it
        brings it into the sandbox's own."""
        for scratch in self.private:
            if within(path, scratch) and not any(
                    grant != scratch and within(grant, scratch) and within(path, grant)
                    for grant in self.read):
                return scratch
        return None

    def shown(self, path: str) -> bool:
        return self.hidden_scratch(path) is None


def failure_notes(policy: object, argv: Sequence[str], cwd: str, env: Mapping[str, str],
                  start_errno: int | None = None, widen: Mapping[str, str] = os.environ,
                  ) -> list[str]:
    """The notes for ``argv``, run in ``cwd`` with ``env`` under ``policy``, having
    failed (``start_errno``: why its program could not be started, if it could not)."""
    if getattr(policy, "full_access", False):
        return []
    program = _program(argv[0], cwd, env) if argv else None
    if not getattr(policy, "uses_default_workspace", True):
        return _explicit_notes(policy, argv[0], program, start_errno) if program else []
    home = env.get("HOME") or os.path.expanduser("~")
    try:
        workspace = _Workspace(home, cwd, env, widen)
    except (OSError, WorkspaceError):
        return []  # (the run itself said what is wrong with it)
    notes: list[str] = []
    if program is not None:
        notes += _program_notes(workspace, argv, program, start_errno)
    for path in _named_paths(argv[1:], cwd):
        notes += _path_notes(workspace, path)
    return list(dict.fromkeys(notes))


def _explicit_notes(policy: object, name: str, program: str, start_errno: int | None) -> list[str]:
    """With -r/-w, nothing else is reachable: a program outside them cannot start."""
    granted = [os.path.realpath(path) for path in
               (*getattr(policy, "fs_readable", ()), *getattr(policy, "fs_writable", ()))]
    if start_errno == errno.EACCES and not _inside(program, granted):
        return [f"{_NOTE}{name} ({program}) is not inside an -r/--fs-read path: with -r/-w, "
                f"nothing else is reachable (-r {os.path.dirname(program)} grants it)"]
    return []


def _program_notes(workspace: _Workspace, argv: Sequence[str], program: str,
                   start_errno: int | None) -> list[str]:
    named = argv[0] if "/" in argv[0] else f"{argv[0]} ({program})"
    notes = []
    venv = _venv_of(program)
    if venv is not None:
        notes += _venv_notes(workspace, named, venv, _installs(argv))
    else:
        notes += _project_venv_notes(workspace, argv)
        if "/" in argv[0] or start_errno is not None:  # (found on PATH and started: its own failure)
            notes += _path_notes(workspace, program, named)
    if _installs(argv) and "--user" in argv:
        local = os.path.join(workspace.home, ".local")
        notes.append(f"{_NOTE}pip install --user writes {local}, which the default workspace "
                     "does not let it write (your own tools run what is there, unconfined): "
                     f"install into a venv in the workspace, or {WIDEN_WRITE}={local}/lib:"
                     f"{local}/bin grants it")
    return notes


def _venv_notes(workspace: _Workspace, named: str, venv: str, installs: bool) -> list[str]:
    """A venv's program needs its pyvenv.cfg, its base interpreter's prefix, and to
    install, to write the venv."""
    prefix = _base_prefix(venv)
    if not workspace.readable(venv):
        missing = [venv, *([prefix] if prefix and not workspace.readable(prefix) else [])]
        what = "the venv's pyvenv.cfg" + (", its interpreter's prefix" if len(missing) > 1 else "")
        return [f"{_NOTE}{named} is in the Python venv {venv}, {_where(workspace, venv)}; "
                f"{WIDEN_READ}={':'.join(missing)} grants it ({what})"]
    if prefix and not workspace.readable(prefix):
        return [f"{_NOTE}{named} is in the Python venv {venv}, whose interpreter's prefix "
                f"{prefix} is {_where(workspace, prefix)}; {WIDEN_READ}={prefix} grants it"]
    if installs and not workspace.writable(venv):
        return [f"{_NOTE}{named} installs into the Python venv {venv}, which the default "
                f"workspace does not let it write; {WIDEN_WRITE}={venv} grants it"]
    if installs and os.path.realpath(venv) == os.path.realpath(sys.prefix):
        return [_own_venv_note(f"{named} installs into the Python venv {venv}, which runs "
                               "sandlock:", venv)]
    return []


def _own_venv_note(lead: str, venv: str) -> str:
    return (f"{_NOTE}{lead} read-only for the command (what is there runs at sandlock's "
            f"next start, unconfined); {WIDEN_WRITE}={venv} grants it, or run sandlock from "
            "a venv of its own (pipx, or one outside the project)")


# Project managers, and their subcommands that install into the project's venv.
_PROJECT_INSTALLS = {"uv": {"add", "remove", "sync", "pip"}, "poetry": {"add", "remove", "install",
                     "update", "sync"}, "pdm": {"add", "remove", "install", "update", "sync"},
                     "pipenv": {"install", "uninstall", "sync", "update"}}


def _project_venv_notes(workspace: _Workspace, argv: Sequence[str]) -> list[str]:
    """uv, poetry, pdm or pipenv asked to install into the project's venv, when that
    venv (found in the workspace) is the one that runs sandlock, read-only here."""
    commands = _PROJECT_INSTALLS.get(os.path.basename(argv[0]), set())
    if not any(argument in commands for argument in argv[1:3]):
        return []
    venv = sys.prefix
    if venv == sys.base_prefix or not workspace.writable(os.path.realpath(venv)):
        return []
    return [_own_venv_note(f"{os.path.basename(argv[0])} installs into the project's venv; "
                           f"the venv {venv} runs sandlock:", venv)]


def _where(workspace: _Workspace, path: str) -> str:
    scratch = workspace.hidden_scratch(path)
    if scratch is None:
        return "outside the default workspace"
    return (f"in the host's {scratch}, which the sandbox does not see (its {scratch} is its "
            "own, empty at start)")


def _path_notes(workspace: _Workspace, path: str, named: str | None = None) -> list[str]:
    named = named or path
    if not os.path.exists(path):
        return _missing_notes(workspace, path)
    if _inside(path, workspace.denied):
        return [f"{_NOTE}{named} is a credential store, denied in every policy"]
    if not workspace.readable(path):
        return [f"{_NOTE}{named} is {_where(workspace, path)}; {WIDEN_READ}={path} (or "
                f"{WIDEN_WRITE}) grants it, or choose the paths with -r/-w"]
    return []


def _missing_notes(workspace: _Workspace, path: str) -> list[str]:
    """A path to be made where the workspace reaches nothing (``git worktree add
    ../wt``): the command's own error names no grant."""
    parent = os.path.dirname(path)
    while parent != "/" and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent == "/" or workspace.readable(parent) or workspace.hidden_scratch(parent):
        return []
    return [f"{_NOTE}{path} does not exist, and {parent}, where it would be made, is "
            f"outside the default workspace: make it first and grant it with "
            f"{WIDEN_WRITE}={path}, or choose the paths with -r/-w"]


def _named_paths(arguments: Sequence[str], cwd: str) -> Iterator[str]:
    """The arguments that look like paths (a "/" or a leading "~"; an option's value
    after "="), as real paths."""
    for argument in arguments:
        candidate = argument.partition("=")[2] if argument.startswith("-") else argument
        if "/" in candidate or candidate.startswith("~"):
            if "://" not in candidate:
                yield os.path.realpath(os.path.join(cwd, os.path.expanduser(candidate)))


def _program(name: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """The file ``name`` runs, as the command's PATH finds it on the host."""
    if "/" in name:
        return os.path.abspath(os.path.join(cwd, name))
    for directory in env.get("PATH", os.defpath).split(":"):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(os.path.join(cwd, candidate))
    return None


def _venv_of(program: str) -> str | None:
    """The venv ``program`` is in (its directory's parent holds a pyvenv.cfg)."""
    venv = os.path.dirname(os.path.dirname(program))
    return venv if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else None


def _base_prefix(venv: str) -> str | None:
    """The prefix of a venv's base interpreter (``home = PREFIX/bin`` in pyvenv.cfg), as
    a real path (sys.base_prefix)."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition("=")
                if key.strip() == "home" and os.path.isabs(value.strip()):
                    return os.path.realpath(os.path.dirname(value.strip()))
    except OSError:
        pass
    return None


def _installs(argv: Sequence[str]) -> bool:
    """pip (``pip ...``, ``python -m pip ...``) asked to install."""
    pip = _PIP.match(os.path.basename(argv[0])) or list(argv[1:3]) == ["-m", "pip"]
    return bool(pip) and "install" in argv


def _inside(path: str, grants: Sequence[str]) -> bool:
    return any(within(path, grant) for grant in grants)
