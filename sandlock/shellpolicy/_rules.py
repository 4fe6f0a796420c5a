"""The decisions: a command line -> allowed or not, with a reason a model can act on.

Baseline (``decide``): no ``cd`` (commands already run in the workspace), no
redirection into a file (that is what the write tool is for), nothing that does not
parse. Verify (``decide_verify``), for commands that check work rather than do it:
also nothing that changes files or the repository (``_mutations``). Both see every
command of the line, through the wrappers that run another command (``sudo rm``,
``xargs rm``) and into the scripts a shell runs from a string (``bash -c 'cd /'``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._mutations import mutation
from ._parse import Command, Parsed, parse
from ._wrappers import name, run_by_find, script, unwrapped


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    code: str | None = None  # "syntax", "cd", "redirect" or "mutation" when refused


ALLOWED = Decision(True, "allowed")

_CHANGE_DIRECTORY = frozenset({"cd", "pushd", "popd"})
_NESTING = 4  # bash -c "bash -c '...'" deeper than this is refused, not followed


def decide(line: str) -> Decision:
    """Whether ``line`` may run as an agent's shell command."""
    return _decide(_everything(line), verify=False)


def decide_verify(line: str) -> Decision:
    """Whether ``line`` may run as a verification: the baseline, and no changes."""
    return _decide(_everything(line), verify=True)


def _decide(parsed: Parsed, *, verify: bool) -> Decision:
    if parsed.syntax_error is not None:
        return Decision(False, f"{parsed.syntax_error}; fix the quoting or the syntax",
                        "syntax")
    for command in parsed.commands:
        if name(unwrapped(command.argv)) in _CHANGE_DIRECTORY:
            return Decision(False, "cd: the shell stays in the workspace; name paths instead "
                            "(ls DIR, grep -r PATTERN DIR, the read tool) or a tool's own "
                            "directory option (git -C, make -C)", "cd")
    if parsed.writes:
        return Decision(False, f"writes {parsed.writes[0]} through a redirection: use the "
                        "file write or edit tool for files (redirecting to /dev/null, or "
                        "2>&1, is fine)", "redirect")
    if verify:
        for command in parsed.commands:
            reason = mutation(command.argv)
            if reason is not None:
                return Decision(False, f"verify mode: {reason}; a verification must not "
                                "change files or the repository", "mutation")
    return ALLOWED


def _everything(line: str, depth: int = 0) -> Parsed:
    """The line's commands and redirections, with those that find -exec runs and those
    of the scripts run from a string (``sh -c '...'``, ``eval '...'``)."""
    parsed = parse(line)
    commands: list[Command] = []
    writes = list(parsed.writes)
    error = parsed.syntax_error
    queue = list(parsed.commands)  # grows: find -exec's commands are vetted in turn
    while queue:
        command = queue.pop(0)
        commands.append(command)
        queue += [Command(run) for run in run_by_find(command.argv) if run]
        nested = script(command.argv)
        if nested is None:
            continue
        if depth == _NESTING:
            error = error or f"shells nested more than {_NESTING} deep cannot be checked"
            break
        inner = _everything(nested, depth + 1)  # complete: its own scripts included
        commands += inner.commands
        writes += inner.writes
        if inner.syntax_error and not error:
            error = f"the script of {name(unwrapped(command.argv))}: {inner.syntax_error}"
    return Parsed(tuple(commands), tuple(writes), error)
