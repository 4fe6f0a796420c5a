"""Where a shell's or an interpreter's program comes from: a string (``bash -c``), a
file, or its standard input (a heredoc is looked into for a shell, refused for an
interpreter; a pipe exists only at run time; an input vet cannot see is refused); and
the shell options that make bash run text it was not given as code."""

from __future__ import annotations

from dataclasses import dataclass

from ._parse import Input
from ._words import Word, literal
from ._wrappers import python

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh",
                    "rbash", "fish", "hush"})
# Shell options that make bash run text it was not given as code: history expansion
# (!:1* re-runs words of an earlier line), -k (NAME=value anywhere sets the variable).
_SET_OPTIONS = {"H": "history expansion", "k": "keyword assignments"}
# For a shell's own command line: -i makes it interactive (aliases, history expansion).
_SHELL_OPTIONS = {**_SET_OPTIONS, "i": "interactive mode (aliases, history expansion)"}
_SET_NAMES = {"history": "history expansion", "histexpand": "history expansion",
              "keyword": "keyword assignments"}
FOREIGN_SHELLS = frozenset({"csh", "tcsh", "nu", "elvish", "xonsh", "pwsh", "rc", "es", "oil",
                             "osh", "ysh"})
_SHELL_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file", "-C",
                           "--init-command", "--command", "--debug-output", "--features"})
# Interpreter -> (options giving the program inline, options taking a value; one letter
# each for clusters, long options whole).
_INTERPRETERS = {
    "python": ("c", "WX", ("--check-hash-based-pycs",)),
    "node": ("ep", "rC", ("--eval", "--print", "--require", "--import", "--loader",
                          "--experimental-loader", "--conditions", "--input-type", "--title")),
    "perl": ("eE", "IMmxdDFC0l", ()),
    "ruby": ("e", "IrCEFx", ("--encoding",)),
    "php": ("rBRFE", "cdfz", ()),
    "lua": ("e", "l", ()),
}
_INTERPRETER_NAMES = {"nodejs": "node", "luajit": "lua", "lua5.4": "lua", "lua5.3": "lua",
                      "lua5.1": "lua"}
# Files whose content is what the line gives the command, not a file of the workspace.
_SPECIAL_FILES = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/",
                  "/dev/tcp/", "/dev/udp/")


@dataclass(frozen=True)
class Script:
    """Text a command runs as a shell script; ``origin`` says which (``bash -c``)."""

    text: Word
    origin: str


@dataclass(frozen=True)
class Finding:
    """A refusal: ``opaque`` (code vet cannot read) or ``runtime`` (code built when the
    line runs; strict mode only)."""

    code: str
    reason: str


@dataclass
class Code:
    """What one command runs from text: scripts to vet, refusals, script files it runs."""

    scripts: list[Script]
    findings: list[Finding]
    files: list[str]


def special_file(path: str) -> bool:
    """/dev/stdin, /dev/fd/N...: a file whose content the line itself feeds."""
    return path.startswith(_SPECIAL_FILES) or path == "-"


def shell(command: str, args: tuple[str, ...], stdin: Input | None, code: Code) -> None:
    """A shell's program: -c STRING, a script file, or its standard input."""
    expands = set_option(leading_options(args), _SHELL_OPTIONS)
    if expands and command != "fish":
        code.findings.append(Finding("opaque", f"{command} turns on {expands}, which runs text "
                                     "vet reads as data"))
    rest = list(args)
    reads_string = reads_input = False
    while rest and rest[0][:1] in ("-", "+") and rest[0] != "--":
        option = rest.pop(0)
        spelled, equals, value = option.partition("=")
        if spelled in ("--command", "--init-command", "-C") or (command == "fish" and option == "-c"):
            text = value if equals else (rest.pop(0) if rest else "")
            add_script(code, text, f"{command} {spelled}")
            reads_string = reads_string or spelled != "-C" and spelled != "--init-command"
        elif spelled in ("--rcfile", "--init-file") and (equals or rest):
            code.files.append(value if equals else rest.pop(0))
        elif spelled in _SHELL_VALUES and not equals and rest:
            rest.pop(0)
        elif not option.startswith("--"):
            reads_string = reads_string or "c" in option[1:]
            reads_input = reads_input or "s" in option[1:]
    if rest[:1] == ["--"]:
        rest.pop(0)
    if command == "fish" and reads_string:
        return
    if reads_string:
        if rest:
            add_script(code, rest[0], f"{command} -c")
    elif rest and not reads_input:
        code.files.append(rest[0])
    else:
        program_input(command, stdin, code, shell=True)


def interpreter(command: str) -> str | None:
    if python(command):
        return "python"
    command = _INTERPRETER_NAMES.get(command, command)
    return command if command in _INTERPRETERS else None


def interpreted(command: str, args: tuple[str, ...], stdin: Input | None, code: Code) -> None:
    """Where an interpreter's program comes from: inline (-c, -e: not read, a documented
    limit), a module, a file, or its standard input."""
    inline, values, long_values = _INTERPRETERS[interpreter(command)]
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] not in ("-", "--"):
        option = rest.pop(0)
        if option.startswith("--"):
            spelled = option.partition("=")[0]
            if spelled in ("--eval", "--print"):
                return
            if spelled in long_values and "=" not in option and rest:
                rest.pop(0)
            continue
        for index, letter in enumerate(option[1:], start=1):
            if letter in inline or (letter == "m" and interpreter(command) == "python"):
                return  # the program is the option's value: inline code or a module
            if letter in values:
                if index == len(option) - 1 and rest:
                    rest.pop(0)
                break
    if rest[:1] == ["--"]:
        rest.pop(0)
    if rest and rest[0] != "-":
        code.files.append(rest[0])
    else:
        program_input(command, stdin, code, shell=False)


def program_input(command: str, stdin: Input | None, code: Code, *, shell: bool) -> None:
    """A shell or an interpreter that reads its program on its standard input."""
    if stdin is None:
        code.findings.append(Finding("opaque", f"{command} reads its program from the standard "
                                     "input, which vet cannot see; give it as a string or a file"))
    elif stdin.kind == "pipe":
        code.findings.append(Finding("runtime", f"{command} reads its program from a pipe: "
                                     "it exists only when the line runs"))
    elif stdin.kind == "file":
        code.files.append(stdin.text if stdin.text is not None else "/dev/fd/")
    elif shell:
        add_script(code, stdin.text, f"the input of {command}")
    else:
        code.findings.append(Finding("opaque", f"{command} reads a program from a heredoc or "
                                     "here-string, which vet cannot read; put it in a file "
                                     "with the write tool and run the file"))


def leading_options(args: tuple[str, ...]) -> tuple[str, ...]:
    """A shell's options before its operands (with the values of -o and -O)."""
    end = 0
    while end < len(args) and args[end][:1] in ("-", "+") and args[end] != "--":
        end += 2 if args[end] in _SHELL_VALUES else 1
    return args[:end]


def set_option(args: tuple[str, ...], letters: dict[str, str] = _SET_OPTIONS) -> str | None:
    """The option of set (or of a shell's command line) that makes bash run text."""
    for index, arg in enumerate(args):
        if arg in ("-o", "+o") or arg.startswith("--"):
            value = args[index + 1] if index + 1 < len(args) else ""
            if arg == "-o" and value in _SET_NAMES:
                return _SET_NAMES[value]
            if arg == "--interactive" and "i" in letters:
                return letters["i"]
        elif arg.startswith("-"):
            for letter in arg[1:]:
                if letter in letters:
                    return letters[letter]
        elif not literal(arg):
            return "options built when the line runs"
    return None


def add_script(code: Code, text: str, origin: str) -> None:
    code.scripts.append(Script(text if isinstance(text, Word) else Word(text), origin))
