"""The decisions: a parsed command line -> allowed or not, with a reason a model can act
on. Pure: the tables below are the whole policy.

Baseline (``decide``): no ``cd`` (commands already run in the workspace), no
redirection into a file (that is what the write tool is for), nothing that does not
parse. Verify (``decide_verify``), for commands that check work rather than do it:
also nothing that changes files or the repository, seen through the wrappers that run
another command (``sudo rm``, ``xargs rm``, ``git -C dir commit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._parse import Parsed, parse


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    code: str | None = None  # "syntax", "cd", "redirect" or "mutation" when refused


ALLOWED = Decision(True, "allowed")

_CHANGE_DIRECTORY = frozenset({"cd", "pushd", "popd"})
# Commands that change files wherever they point.
_MUTATING = frozenset({
    "rm", "rmdir", "unlink", "mv", "cp", "ln", "mkdir", "touch", "truncate", "tee", "chmod",
    "chown", "chgrp", "shred", "rsync", "patch", "install", "mktemp", "dd",
})
# Commands that change files only with an option: (command, options).
_MUTATING_WITH = {"sed": ("-i", "--in-place"), "perl": ("-i", "-pi"), "find": ("-delete",)}
_GIT_MUTATING = frozenset({
    "add", "am", "apply", "branch", "checkout", "cherry-pick", "clean", "commit", "fetch",
    "gc", "init", "merge", "mv", "pull", "push", "rebase", "reset", "restore", "revert", "rm",
    "stash", "switch", "tag", "worktree", "config", "remote", "submodule", "update-ref",
})
_GO_MUTATING = frozenset({"mod", "get", "generate", "fmt", "fix", "work"})
# Anything else is allowed: package installs (they fill caches and environments, which
# a test run needs), kill, and the filters that only read (grep, sed, awk, jq, ...).
# Wrappers that run the rest of their arguments as a command: name -> how many
# arguments after their options belong to the wrapper itself.
_WRAPPERS = {"sudo": 0, "doas": 0, "env": 0, "nohup": 0, "nice": 0, "ionice": 0, "time": 0,
             "command": 0, "exec": 0, "stdbuf": 0, "xargs": 0, "timeout": 1, "chroot": 1,
             "watch": 0, "strace": 0, "builtin": 0}
# Options of a wrapper that take a value (their next word is not the command).
_WRAPPER_VALUES = {"sudo": {"-u", "-g", "-C", "-h", "-p", "-U"}, "nice": {"-n"},
                   "ionice": {"-c", "-n", "-p"}, "xargs": {"-n", "-I", "-L", "-P", "-d", "-E",
                                                           "-s", "-a"},
                   "timeout": {"-s", "-k", "--signal", "--kill-after"},
                   "stdbuf": {"-i", "-o", "-e"}, "strace": {"-o", "-e", "-p"}}
_GIT_GLOBAL_VALUES = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}


def decide(line: str) -> Decision:
    """Whether ``line`` may run as an agent's shell command."""
    return _decide(parse(line), verify=False)


def decide_verify(line: str) -> Decision:
    """Whether ``line`` may run as a verification: the baseline, and no changes."""
    return _decide(parse(line), verify=True)


def _decide(parsed: Parsed, *, verify: bool) -> Decision:
    if parsed.syntax_error is not None:
        return Decision(False, f"not valid bash ({parsed.syntax_error}); fix the quoting "
                        "or the syntax", "syntax")
    for command in parsed.commands:
        if _name(command.argv) in _CHANGE_DIRECTORY:
            return Decision(False, "cd: the shell stays in the workspace; name paths instead "
                            "(ls DIR, grep -r PATTERN DIR, the read tool) or a tool's own "
                            "directory option (git -C, make -C)", "cd")
    if parsed.writes:
        return Decision(False, f"writes {parsed.writes[0]} through a redirection: use the "
                        "file write or edit tool for files (redirecting to /dev/null, or "
                        "2>&1, is fine)", "redirect")
    if verify:
        for command in parsed.commands:
            reason = _mutation(_unwrapped(command.argv))
            if reason is not None:
                return Decision(False, f"verify mode: {reason}; a verification must not "
                                "change files or the repository", "mutation")
    return ALLOWED


def _name(argv: tuple[str, ...]) -> str:
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def _unwrapped(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a chain of wrappers finally runs (``sudo -u x timeout 5 rm a`` -> rm a)."""
    while argv and _name(argv) in _WRAPPERS:
        wrapper = _name(argv)
        rest = list(argv[1:])
        values = _WRAPPER_VALUES.get(wrapper, set())
        while rest and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])):
            option = rest.pop(0)
            if option in values and rest:
                rest.pop(0)
        argv = tuple(rest[_WRAPPERS[wrapper]:])
    return argv


def _mutation(argv: tuple[str, ...]) -> str | None:
    """Why ``argv`` changes files, or None."""
    name = _name(argv)
    if not name:
        return None
    if name in _MUTATING:
        if name == "dd" and not any(arg.startswith("of=") for arg in argv):
            return None
        targets = [arg for arg in argv[1:] if not arg.startswith("-")]
        return f"{name} changes files" + (f" ({targets[-1]})" if targets else "")
    options = _MUTATING_WITH.get(name, ())
    used = [arg for arg in argv[1:] if arg in options or (name == "sed" and arg.startswith("-i"))]
    if used:
        return f"{name} {used[0]} changes files"
    if name == "find" and "-exec" in argv:
        return _mutation(tuple(argv[argv.index("-exec") + 1:]))
    if name == "git":
        return _git(argv[1:])
    if name == "go" and len(argv) > 1 and argv[1] in _GO_MUTATING:
        return f"go {argv[1]} changes go.mod, go.sum or sources"
    return None


def _git(args: tuple[str, ...]) -> str | None:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _GIT_GLOBAL_VALUES and rest:
            rest.pop(0)
    if rest and rest[0] in _GIT_MUTATING:
        return f"git {rest[0]} changes the repository"
    return None
