"""Code a command runs from text. The scripts handed to a shell as a literal (``bash -c
'...'``, a heredoc fed to ``sh``, ``eval``, ``trap``, ``watch``, ``GIT_PAGER=...``) are
vetted like the line itself; what vet cannot read is refused (``opaque``: an alias, a
program on an interpreter's standard input, csh's language); code that exists only
when the line runs (``bash -c "$x"``, a script from a pipe) is ``runtime``, refused in
strict mode."""

from __future__ import annotations

from ._parse import Input
from ._programs import (FOREIGN_SHELLS, SHELLS, Code, Finding, add_script, interpreted,
                        interpreter, program_input, set_option, shell, special_file)
from ._words import Word, literal, shown
from ._wrappers import name

_SHOPT_REFUSED = frozenset({"expand_aliases", "autocd"})
# Commands that hand text to a shell running elsewhere or later.
_HANDS_ON = frozenset({"tmux", "screen", "at", "batch", "crontab", "systemd-run"})
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


def examine(argv: tuple[str, ...], stdin: Input | None, sed_commands: list[str]) -> Code:
    """The code ``argv`` (already unwrapped) runs from text; ``sed_commands`` the shell
    commands its sed scripts run (``e``)."""
    code = Code([], [], [])
    command = name(argv)
    args = argv[1:]
    if command in SHELLS:
        shell(command, args, stdin, code)
    elif command in FOREIGN_SHELLS and ("-c" in args or not args):
        code.findings.append(Finding("opaque", f"{command} runs a script in its own language, "
                                     "which vet cannot read; use bash"))
    elif command in _HANDS_ON:
        code.findings.append(Finding("opaque", f"{command} hands commands to a shell vet does "
                                     "not see (later, or in another terminal)"))
    elif command == "parallel":
        code.findings.append(Finding("runtime", "parallel runs commands it builds from its "
                                     "arguments and input when the line runs"))
    elif command in ("make", "gmake") and _makefile_from_input(args):
        code.findings.append(Finding("opaque", f"{command} -f - reads a makefile, recipes "
                                     "included, from its input: put it in a file"))
    elif interpreter(command):
        interpreted(command, args, stdin, code)
    elif command in ("source", "."):
        code.files += list(args[1:2] if args[:1] == ("--",) else args[:1])
    elif command == "eval":
        add_script(code, _joined(args[1:] if args[:1] == ("--",) else args), "eval")
    elif command == "env":
        assigned(_env_assignments(args), code)
    elif _starts_a_shell(command, argv):
        program_input(f"{command}'s shell", stdin, code, shell=True)
    else:
        _builtin(command, args, code)
    for text in sed_commands:
        add_script(code, Word(text), "sed's e command")
    return code


def assigned(assignments: tuple[tuple[str, Word], ...], code: Code) -> None:
    """Scripts and refusals from variables set on the line or for a command."""
    for variable, value in assignments:
        base = variable.split("[", 1)[0]
        if base in CODE_VARIABLES:
            add_script(code, value, f"the value of {base}, which {CODE_VARIABLES[base]} run")
        elif base.startswith(_REFUSED_VARIABLES):
            code.findings.append(Finding("opaque", f"setting {base} changes what commands run "
                                         "or how bash reads them, which vet cannot follow"))
        elif base in _SOURCED_VARIABLES:
            code.files.append(value)
        elif base.startswith("PS") and not literal(value):
            code.findings.append(Finding("runtime", f"{base} is built when the line runs, "
                                         "and bash expands it as a prompt"))


def _makefile_from_input(args: tuple[str, ...]) -> bool:
    for index, arg in enumerate(args):
        spelled, equals, value = arg.partition("=")
        if spelled in ("-f", "--file", "--makefile"):
            value = value if equals else (args[index + 1] if index + 1 < len(args) else "")
        elif arg.startswith("-f") and len(arg) > 2:
            value = arg[2:]
        else:
            continue
        if special_file(value):
            return True
    return False


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
    expands = set_option(args) if command == "set" else None
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
        add_script(code, operands[0], "trap")
    elif command in ("mapfile", "readarray", "compgen", "complete"):
        _optionadd_script(code, command, args, ("-C",))
    elif command == "watch" and not {"-x", "--exec"} & set(args):
        add_script(code, _joined(_after_options(args, {"-n", "--interval", "-d", "-q"})), "watch")
    elif command in ("flock", "su", "runuser", "script", "npx", "pnpx"):
        _optionadd_script(code, command, args, ("-c", "--command", "--call"))
    elif command == "nix-shell":
        _optionadd_script(code, command, args, ("--run", "--command"))
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


def _optionadd_script(code: Code, command: str, args: tuple[str, ...], options: tuple[str, ...]) -> None:
    for index, arg in enumerate(args):
        spelled, equals, value = arg.partition("=")
        if spelled in options:
            text = value if equals else (args[index + 1] if index + 1 < len(args) else "")
            add_script(code, text, f"{command} {spelled}")


def _after_options(args: tuple[str, ...], values: set[str]) -> tuple[str, ...]:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        if rest.pop(0) in values and rest:
            rest.pop(0)
    return tuple(rest)


def _joined(args: tuple[str, ...]) -> Word:
    return Word(" ".join(args), all(map(literal, args)), "")


