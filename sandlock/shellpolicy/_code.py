"""Code a command runs from text. The scripts handed to a shell as a literal (``bash -c
'...'``, a heredoc fed to ``sh``, ``eval``, ``trap``, ``watch``, ``GIT_PAGER=...``) are
vetted like the line itself; what vet cannot read is refused (``opaque``: an alias, a
program on an interpreter's standard input, csh's language); code that exists only
when the line runs (``bash -c "$x"``, a script from a pipe) is ``runtime``, refused in
strict mode."""

from __future__ import annotations

from dataclasses import dataclass

from ._parse import Command, Input
from ._words import Word, literal, shown
from ._wrappers import name, python

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh",
                    "rbash", "fish", "hush"})
# Shell options that make bash run text it was not given as code: history expansion
# (!:1* re-runs words of an earlier line), -k (NAME=value anywhere sets the variable).
_SET_OPTIONS = {"H": "history expansion", "k": "keyword assignments"}
_SET_NAMES = {"history": "history expansion", "histexpand": "history expansion",
              "keyword": "keyword assignments"}
_SHOPT_REFUSED = frozenset({"expand_aliases", "autocd"})
_FOREIGN_SHELLS = frozenset({"csh", "tcsh", "nu", "elvish", "xonsh", "pwsh", "rc", "es", "oil",
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
# Variables whose value a shell or a program runs as a shell command.
CODE_VARIABLES = {
    "PROMPT_COMMAND": "bash", "PAGER": "pagers", "GIT_PAGER": "git", "MANPAGER": "man",
    "SYSTEMD_PAGER": "systemd", "EDITOR": "editors", "VISUAL": "editors",
    "GIT_EDITOR": "git", "GIT_SEQUENCE_EDITOR": "git", "GIT_EXTERNAL_DIFF": "git",
    "GIT_SSH_COMMAND": "git", "FCEDIT": "fc", "BROWSER": "browsers"}
# Variables that change what names run or how code is read: refused.
_REFUSED_VARIABLES = ("BASH_ALIASES", "BASH_CMDS", "BASHOPTS", "SHELLOPTS", "GIT_CONFIG_",
                      "LESSOPEN", "LESSCLOSE", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_SSH",
                      "GIT_EXEC_PATH", "GIT_PROXY_COMMAND", "BASH_FUNC_", "HISTFILE")
_SOURCED_VARIABLES = frozenset({"BASH_ENV", "ENV"})  # a file bash reads on start
# Builtins that set a variable named by an operand (read NAME, printf -v NAME).
_NAMING = frozenset({"read", "printf", "mapfile", "readarray", "declare", "typeset", "export",
                     "local", "readonly", "getopts"})
# git configuration whose value git runs (alias.x=!cmd, core.pager...): refused as -c.
_GIT_SAFE_CONFIG = ("user.", "color.", "core.quotepath", "core.abbrev", "safe.directory",
                    "init.defaultbranch", "advice.", "log.", "diff.renames", "diff.noprefix",
                    "diff.algorithm", "diff.context", "status.", "column.", "i18n.",
                    "core.autocrlf", "core.filemode", "core.ignorecase", "grep.", "pull.rebase",
                    "merge.conflictstyle", "commit.gpgsign", "tag.gpgsign", "protocol.version",
                    "http.sslverify", "maintenance.auto", "gc.auto", "fetch.prune")


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


def examine(argv: tuple[str, ...], stdin: Input | None, sed_commands: list[str]) -> Code:
    """The code ``argv`` (already unwrapped) runs from text; ``sed_commands`` the shell
    commands its sed scripts run (``e``)."""
    code = Code([], [], [])
    command = name(argv)
    args = argv[1:]
    if command in SHELLS:
        _shell(command, args, stdin, code)
    elif command in _FOREIGN_SHELLS and ("-c" in args or not args):
        code.findings.append(Finding("opaque", f"{command} runs a script in its own language, "
                                     "which vet cannot read; use bash"))
    elif _interpreter(command):
        _interpreted(command, args, stdin, code)
    elif command in ("source", "."):
        code.files += args[:1]
    elif command == "eval":
        _script(code, _joined(args), "eval")
    elif command == "env":
        assigned(_env_assignments(args), code)
    elif _starts_a_shell(command, argv):
        _program_input(f"{command}'s shell", stdin, code, shell=True)
    else:
        _builtin(command, args, code)
    for text in sed_commands:
        _script(code, Word(text), "sed's e command")
    return code


def assigned(assignments: tuple[tuple[str, Word], ...], code: Code) -> None:
    """Scripts and refusals from variables set on the line or for a command."""
    for variable, value in assignments:
        base = variable.split("[", 1)[0]
        if base in CODE_VARIABLES:
            _script(code, value, f"the value of {base}, which {CODE_VARIABLES[base]} run")
        elif base.startswith(_REFUSED_VARIABLES):
            code.findings.append(Finding("opaque", f"setting {base} changes what commands run "
                                         "or how bash reads them, which vet cannot follow"))
        elif base in _SOURCED_VARIABLES:
            code.files.append(value)
        elif base.startswith("PS") and not literal(value):
            code.findings.append(Finding("runtime", f"{base} is built when the line runs, "
                                         "and bash expands it as a prompt"))


def _env_assignments(args: tuple[str, ...]) -> tuple[tuple[str, Word], ...]:
    """env NAME=VALUE ... before the command it runs."""
    found, rest = [], list(args)
    while rest:
        word = rest.pop(0)
        if word in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") and rest:
            rest.pop(0)
        elif "=" in word and not word.startswith("-"):
            variable, _, value = word.partition("=")
            found.append((variable, Word(value, literal(word), "")))
        elif not word.startswith("-"):
            break
    return tuple(found)


def _starts_a_shell(command: str, argv: tuple[str, ...]) -> bool:
    """sudo -s / sudo -i without a command, su without -c: a shell reading its input."""
    if command == "sudo":
        options = [arg for arg in argv[1:] if arg.startswith("-")]
        operands = [arg for arg in argv[1:] if not arg.startswith("-")]
        return not operands and any(option in ("-s", "-i", "--shell", "--login") for option in options)
    return command == "su" and not {"-c", "--command"} & {a.partition("=")[0] for a in argv[1:]}


def special_file(path: str) -> bool:
    return path.startswith(_SPECIAL_FILES) or path == "-"


def _shell(command: str, args: tuple[str, ...], stdin: Input | None, code: Code) -> None:
    expands = _set_option(_leading_options(args))
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
            _script(code, text if equals else text, f"{command} {spelled}")
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
            _script(code, rest[0], f"{command} -c")
    elif rest and not reads_input:
        code.files.append(rest[0])
    else:
        _program_input(command, stdin, code, shell=True)


def _interpreter(command: str) -> str | None:
    if python(command):
        return "python"
    command = _INTERPRETER_NAMES.get(command, command)
    return command if command in _INTERPRETERS else None


def _interpreted(command: str, args: tuple[str, ...], stdin: Input | None, code: Code) -> None:
    """Where an interpreter's program comes from: inline (-c, -e: not read, a documented
    limit), a module, a file, or its standard input."""
    inline, values, long_values = _INTERPRETERS[_interpreter(command)]
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
            if letter in inline or (letter == "m" and _interpreter(command) == "python"):
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
        _program_input(command, stdin, code, shell=False)


def _program_input(command: str, stdin: Input | None, code: Code, *, shell: bool) -> None:
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
        _script(code, stdin.text, f"the input of {command}")
    else:
        code.findings.append(Finding("opaque", f"{command} reads a program from a heredoc or "
                                     "here-string, which vet cannot read; put it in a file "
                                     "with the write tool and run the file"))


def _builtin(command: str, args: tuple[str, ...], code: Code) -> None:
    """The builtins and tools that run code from text, or change how bash reads it."""
    operands = [arg for arg in args if not arg.startswith("-")]
    opaque = {
        "alias": any("=" in arg for arg in args),
        "shopt": "-s" in args and (bool(_SHOPT_REFUSED & set(args)) or not all(map(literal, args))),
        "history": any(arg.startswith("-") and "s" in arg for arg in args),
        "bind": True, "fc": True,
        "enable": any(arg.startswith("-") and "f" in arg for arg in args),
        "hash": any(arg.startswith("-") and "p" in arg for arg in args),
        "git": _git_runs_config(args),
    }
    expands = _set_option(args) if command == "set" else None
    if expands:
        code.findings.append(Finding("opaque", f"set turns on {expands}, which runs text vet "
                                     "reads as data"))
    if command in ("declare", "typeset", "local") and any(
            arg.startswith("-") and "n" in arg for arg in args):
        code.findings.append(Finding("opaque", f"{command} -n makes a name stand for another "
                                     "variable, which vet cannot follow"))
    if opaque.get(command):
        code.findings.append(Finding("opaque", _OPAQUE_REASONS.get(command, f"{command} changes "
                                     "what bash runs in a way vet cannot follow")))
    if command == "trap" and len(operands) >= 2 and operands[0] not in ("-", ""):
        _script(code, operands[0], "trap")
    elif command in ("mapfile", "readarray", "compgen", "complete"):
        _option_script(code, command, args, ("-C",))
    elif command == "watch" and not {"-x", "--exec"} & set(args):
        _script(code, _joined(_after_options(args, {"-n", "--interval", "-d", "-q"})), "watch")
    elif command in ("flock", "su", "runuser", "script", "npx", "pnpx"):
        _option_script(code, command, args, ("-c", "--command", "--call"))
    elif command == "nix-shell":
        _option_script(code, command, args, ("--run", "--command"))
    elif command in _NAMING:
        for variable in _named_variables(command, args):
            base = variable.partition("=")[0].split("[", 1)[0]
            if not literal(variable) or base in CODE_VARIABLES or base.startswith(_REFUSED_VARIABLES):
                code.findings.append(Finding("runtime", f"{command} sets {shown(variable)} to a "
                                             "value vet cannot see, and it may run code"))
                break


def _named_variables(command: str, args: tuple[str, ...]) -> list[str]:
    """The variables a builtin sets: read's names, printf -v's, mapfile's array..."""
    if command == "printf":
        return [args[index + 1] for index, arg in enumerate(args[:-1]) if arg == "-v"]
    if command == "getopts":
        return list(args[1:2])
    names, rest = [], list(args)
    while rest:
        word = rest.pop(0)
        if word.startswith(("-", "+")) and literal(word):
            takes_value = {"read": "adinNptu", "mapfile": "dnOsuCc", "readarray": "dnOsuCc"}
            if word[-1:] in takes_value.get(command, "") and rest:
                value = rest.pop(0)
                if word[-1:] == "a":
                    names.append(value)
            continue
        names.append(word)
    return names


_OPAQUE_REASONS = {
    "alias": "alias: an alias is code bash reads where the name is used; write the command out",
    "shopt": "shopt -s expand_aliases (or autocd) makes names run code vet cannot follow",
    "history": "history -s puts text in the history, which history expansion runs",
    "bind": "bind runs code on keys, which vet cannot follow",
    "fc": "fc runs commands from the history, which vet cannot see",
    "enable": "enable -f loads a builtin from a file, which vet cannot read",
    "hash": "hash -p makes a name run another program",
    "git": "git -c sets configuration that git runs as a command (an alias, a pager, a hook); "
           "vet cannot follow it",
}


def _leading_options(args: tuple[str, ...]) -> tuple[str, ...]:
    """A shell's options before its operands (with the values of -o and -O)."""
    end = 0
    while end < len(args) and args[end][:1] in ("-", "+") and args[end] != "--":
        end += 2 if args[end] in _SHELL_VALUES else 1
    return args[:end]


def _set_option(args: tuple[str, ...]) -> str | None:
    """The option of set (or of a shell's command line) that makes bash run text."""
    for index, arg in enumerate(args):
        if arg in ("-o", "+o") or arg.startswith("--"):
            value = args[index + 1] if index + 1 < len(args) else ""
            if arg == "-o" and value in _SET_NAMES:
                return _SET_NAMES[value]
        elif arg.startswith("-"):
            for letter in arg[1:]:
                if letter in _SET_OPTIONS:
                    return _SET_OPTIONS[letter]
        elif not literal(arg):
            return "options built when the line runs"
    return None


def _git_runs_config(args: tuple[str, ...]) -> bool:
    """git -c KEY=VALUE / --config-env before the subcommand, with a KEY that may run code."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option.startswith("--config-env"):
            return True
        if option == "-c" and rest:
            key = rest.pop(0).partition("=")[0].lower()
            if not key.startswith(_GIT_SAFE_CONFIG):
                return True
        elif option in ("-C", "--git-dir", "--work-tree", "--namespace", "--exec-path") and rest:
            rest.pop(0)
    return False


def _option_script(code: Code, command: str, args: tuple[str, ...], options: tuple[str, ...]) -> None:
    for index, arg in enumerate(args):
        spelled, equals, value = arg.partition("=")
        if spelled in options:
            text = value if equals else (args[index + 1] if index + 1 < len(args) else "")
            _script(code, text, f"{command} {spelled}")


def _after_options(args: tuple[str, ...], values: set[str]) -> tuple[str, ...]:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        if rest.pop(0) in values and rest:
            rest.pop(0)
    return tuple(rest)


def _joined(args: tuple[str, ...]) -> Word:
    return Word(" ".join(args), all(map(literal, args)), "")


def _script(code: Code, text: str, origin: str) -> None:
    code.scripts.append(Script(text if isinstance(text, Word) else Word(text), origin))


def file_runs(command: Command, argv: tuple[str, ...]) -> list[str]:
    """A command run by its path (./build.sh) is a script file too."""
    return [argv[0]] if argv and "/" in argv[0] else []
