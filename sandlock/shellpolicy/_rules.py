"""The decisions: a command line -> allowed or not, with a reason a model can act on.

Baseline (``decide``): no ``cd`` (commands already run in the workspace), no
redirection into a file (that is what the write tool is for), nothing that does not
parse. Verify (``decide_verify``), for commands that check work rather than do it:
also nothing that changes files or the repository (``_mutations``). Both see every
command that runs: through wrappers (``sudo rm``, ``npx prettier``), into the code a
shell is handed as text (``bash -c``, ``eval``, ``trap``, a heredoc fed to ``sh``,
quoted substitutions bash may evaluate), refusing what they cannot read (``opaque``).
Strict (the default) also refuses code that exists only when the line runs
(``runtime``: ``$CMD``, ``bash -c "$x"``, a script from a pipe, a script the line
writes before running it); ``permissive=True`` reads such code as written instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._code import assigned, examine
from ._programs import Code, Finding, Script, special_file
from ._mutations import creates_content, mutation, runtime_option
from ._parse import Command, parse
from ._sed import sed_effects
from ._words import Word, literal, shown, substitutions
from ._wrappers import layers, name, run_by_find, unwrapped


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    code: str | None = None  # syntax, cd, redirect, opaque, runtime or mutation when refused


ALLOWED = Decision(True, "allowed")

_CHANGE_DIRECTORY = frozenset({"cd", "pushd", "popd"})
_NESTING = 4  # bash -c "bash -c '...'" deeper than this is refused, not followed
_ORDER = ("syntax", "cd", "redirect", "opaque", "runtime", "mutation")


@dataclass
class _Line:
    """Everything a line runs, nested scripts included, and what was refused on the way."""

    commands: list[Command] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    refusals: dict[str, str] = field(default_factory=dict)  # code -> first reason
    files: list[str] = field(default_factory=list)  # script files run

    def refuse(self, code: str, reason: str) -> None:
        self.refusals.setdefault(code, reason)


def decide(line: str, *, permissive: bool = False) -> Decision:
    """Whether ``line`` may run as an agent's shell command."""
    return _decide(line, verify=False, strict=not permissive)


def decide_verify(line: str, *, permissive: bool = False) -> Decision:
    """Whether ``line`` may run as a verification: the baseline, and no changes."""
    return _decide(line, verify=True, strict=not permissive)


def _decide(line: str, *, verify: bool, strict: bool) -> Decision:
    try:
        line.encode()
    except UnicodeEncodeError as error:  # bytes a command line held, not text
        return Decision(False, f"the command is not UTF-8 text (character {error.start + 1}); "
                        "write it in UTF-8", "syntax")
    found = _Line()
    _read(line, found, strict, depth=0, origin="")
    if strict:
        _scripts_the_line_wrote(found)
    if verify:
        for command in found.commands:
            reason = mutation(command.argv)
            if reason is not None:
                found.refuse("mutation", f"verify mode: {reason}; a verification must not "
                             "change files or the repository")
                continue
            built = runtime_option(command.argv) if strict else None
            if built is not None:
                found.refuse("runtime", f"verify mode: {built}")
    code = next((code for code in _ORDER if code in found.refusals), None)
    if verify and code == "runtime" and "mutation" in found.refusals:
        code = "mutation"  # a writer is the plainer reason than how its words are built
    return ALLOWED if code is None else Decision(False, found.refusals[code], code)


def _read(text: str, found: _Line, strict: bool, depth: int, origin: str) -> None:
    """Vet ``text`` (the line, or a script it hands a shell) into ``found``."""
    parsed = parse(text)
    if parsed.syntax_error is not None:
        where = f"the script of {origin}: " if origin else ""
        found.refuse("syntax", f"{where}{parsed.syntax_error}; fix the quoting or the syntax")
    for target in parsed.writes:
        found.refuse("redirect", f"writes {shown(target)} through a redirection{_in(origin)}: use the "
                     "file write or edit tool for files (redirecting to /dev/null, or 2>&1, "
                     "is fine)")
    code = Code([], [], [])
    assigned(parsed.assignments, code)
    queue = list(parsed.commands)  # grows: find -exec's commands are vetted in turn
    while queue:
        command = queue.pop(0)
        chain = layers(command.argv)
        found.commands.append(command)  # as written: verify reads its wrappers too
        queue += [Command(run) for run in run_by_find(command.argv) if run]
        _command(command, chain, found, strict, origin, code)
    for hidden in parsed.hidden:
        code.scripts += [Script(Word(inner), _HIDDEN) for inner in substitutions(hidden)]
    _follow(code, found, strict, depth)


def _command(command: Command, chain: list[tuple[str, ...]], found: _Line, strict: bool,
             origin: str, code: Code) -> None:
    """One command: cd, a name built at run time, and the code each layer of its
    wrappers runs from text (``watch 'CMD'``, then ``bash -c``...)."""
    argv = chain[-1]
    if name(argv) in _CHANGE_DIRECTORY:
        found.refuse("cd", f"cd{_in(origin)}: the shell stays in the workspace; name paths "
                     "instead (ls DIR, grep -r PATTERN DIR, the read tool) or a tool's own "
                     "directory option (git -C, make -C)")
    if argv and not literal(argv[0]) and strict:
        found.refuse("runtime", f"the command name {shown(argv[0])} is built when the line runs"
                     f"{_in(origin)}, so vet cannot tell what runs: write the command out")
    sed = sed_effects(argv[1:]) if name(argv) == "sed" else None
    assigned(command.assignments, code)
    for layer in chain:
        inner = examine(layer, command.stdin, sed.commands if sed and layer is argv else [])
        code.scripts += inner.scripts
        code.findings += inner.findings
        code.files += inner.files
    if sed is not None and sed.runs_text:
        code.findings.append(_runtime("sed's e runs the text it edits as a command"))
    if argv and literal(argv[0]) and "/" in argv[0] and name(argv) not in ("source", "."):
        found.files.append(argv[0])  # ./build.sh: a script file too


def _follow(code: Code, found: _Line, strict: bool, depth: int) -> None:
    """Vet the scripts found, record the refusals and the script files run."""
    for finding in code.findings:
        if finding.code != "runtime" or strict:
            found.refuse(finding.code, finding.reason)
    for path in code.files:
        if special_file(path):
            found.refuse("opaque", f"runs the script {shown(path)}, whose content is what the line "
                         "feeds it; vet cannot read it")
        elif not literal(path) and strict:
            found.refuse("runtime", f"runs the script {shown(path)}, which is built when the line runs")
        else:
            found.files.append(path)
    for script in code.scripts:
        if not literal(script.text) and strict:
            found.refuse("runtime", f"{script.origin} runs code built when the line runs "
                         f"({shown(script.text)}); vet cannot read it: write the code out")
            continue
        if depth == _NESTING:
            found.refuse("syntax", f"shells nested more than {_NESTING} deep cannot be checked")
            return
        _read(script.text, found, strict, depth + 1, script.origin)


_HIDDEN = "a quoted $(...) that bash runs if it evaluates the text (a subscript, a prompt)"


def _scripts_the_line_wrote(found: _Line) -> None:
    """A script file run on a line that also writes files may be one it wrote."""
    if not found.files:
        return
    writer = next((command for command in found.commands if creates_content(command.argv)), None)
    if writer is not None:
        found.refuse("runtime", f"runs {shown(found.files[0])} on a line that writes files "
                     f"({shown(' '.join(unwrapped(writer.argv)[:3]))}): the script may be what the line wrote; "
                     "write it first, in its own command")


def _runtime(reason: str) -> Finding:
    return Finding("runtime", reason)


def _in(origin: str) -> str:
    return f" (in the script of {origin})" if origin else ""
