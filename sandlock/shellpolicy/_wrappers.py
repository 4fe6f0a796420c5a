"""Commands that run another command: the wrappers (``sudo rm a`` runs ``rm a``), the
package runners (``npx prettier --write .`` runs ``prettier``), ``python -m black``,
and what ``find -exec`` and ``xargs`` run. What runs is what is vetted, in both modes.
Words only known when the line runs stay marked so (xargs's input, find's ``{}``)."""

from __future__ import annotations

import shlex

from ._words import Word

# Wrapper -> how many arguments after its options are its own (timeout's duration).
_WRAPPERS = {"sudo": 0, "doas": 0, "env": 0, "nohup": 0, "nice": 0, "ionice": 0, "time": 0,
             "command": 0, "builtin": 0, "exec": 0, "stdbuf": 0, "xargs": 0, "setsid": 0,
             "unbuffer": 0, "busybox": 0, "strace": 0, "ltrace": 0, "coproc": 0,
             "setpriv": 0, "unshare": 0, "nsenter": 0, "prlimit": 0, "numactl": 0,
             "fakeroot": 0, "faketime": 1, "catchsegv": 0, "valgrind": 0, "torsocks": 0,
             "proxychains": 0, "proxychains4": 0, "chronic": 0, "ifne": 0, "runuser": 0,
             "noglob": 0, "nocorrect": 0,  # zsh's precommand modifiers
             "timeout": 1, "chroot": 1, "flock": 1, "taskset": 1, "chrt": 1, "watch": 0}
# A wrapper's options that take a value as the next word (that word is not the command).
_VALUES = {
    "sudo": {"-u", "-g", "-C", "-D", "-R", "-h", "-p", "-U", "-r", "-t", "--user", "--group",
             "--chdir", "--chroot", "--host", "--prompt", "--other-user", "--role", "--type",
             "--close-from"},
    "doas": {"-u", "-C"},
    "env": {"-u", "-C", "--unset", "--chdir"},
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "-n", "-p", "--class", "--classdata", "--pid"},
    "time": {"-f", "-o", "--format", "--output"},
    "exec": {"-a"},
    "stdbuf": {"-i", "-o", "-e"},
    "xargs": {"-n", "-I", "-L", "-P", "-d", "-E", "-s", "-a", "--max-args", "--max-procs",
              "--delimiter", "--arg-file", "--max-chars", "--max-lines", "--eof"},
    "watch": {"-n", "--interval", "-d", "-q", "--equexit"},
    "strace": {"-o", "-e", "-p", "-s", "-u", "-E", "-P", "-a", "-b", "-I", "-O", "-S", "-X"},
    "ltrace": {"-o", "-e", "-p", "-s", "-u", "-a", "-n", "-l", "-L", "-x", "-A"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
    "setpriv": {"--reuid", "--regid", "--ruid", "--euid", "--rgid", "--egid", "--groups",
                "--inh-caps", "--ambient-caps", "--bounding-set", "--securebits",
                "--pdeathsig", "--selinux-label", "--apparmor-profile", "--landlock-access",
                "--landlock-rule"},
    "nsenter": {"-t", "--target", "-S", "--setuid", "-G", "--setgid", "-r", "-w"},
    "prlimit": {"-p", "--pid"},
    "runuser": {"-u", "-g", "-G", "--user", "--group", "--supp-group", "-s", "--shell"},
    "unshare": {"--map-user", "--map-group", "--setuid", "--setgid", "-S", "-G", "-R", "-w",
                "--root", "--wd"},
    "valgrind": {"--tool", "--log-file"},
}
# `command -v rm` and `type rm` look a name up; they run nothing.
_LOOKUPS = {"command": {"-v", "-V"}}
# Package runners: (command words, their options that take a value).
_RUNNER_VALUES = frozenset({"-p", "--package", "--prefix", "-w", "--workspace", "--from",
                            "--with", "--with-editable", "--with-requirements", "--python",
                            "--index", "--default-index", "--index-url", "--extra-index-url",
                            "-f", "--find-links", "--spec", "--pip-args", "--project",
                            "--directory", "--extra", "--group", "--only-group", "--no-group",
                            "--env-file", "--config-file", "--cache-dir", "-n", "--name",
                            "--cwd", "--userconfig", "--node-options"})
_RUNNERS = {("npx",), ("pnpx",), ("bunx",), ("uvx",), ("npm", "exec"), ("npm", "x"),
            ("pnpm", "dlx"), ("pnpm", "exec"), ("yarn", "dlx"), ("yarn", "exec"), ("bun", "x"),
            ("uv", "run"), ("uv", "tool", "run"), ("pipx", "run"), ("poetry", "run"),
            ("pdm", "run"), ("hatch", "run"), ("pipenv", "run"), ("rye", "run"),
            ("conda", "run"), ("mamba", "run"), ("micromamba", "run")}
_PYTHON_VALUES = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def name(argv: tuple[str, ...]) -> str:
    """The command's name without its directory (/bin/rm is rm)."""
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def python(command: str) -> bool:
    """python, python3, python3.12, pypy3..."""
    return command.startswith(("python", "pypy")) and command.rstrip("0123456789.") in (
        "python", "pypy")


def unwrapped(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a chain of wrappers finally runs (``sudo -u x timeout 5 rm a`` -> rm a);
    () when it runs none (``command -v rm``)."""
    return layers(argv)[-1]


def layers(argv: tuple[str, ...]) -> list[tuple[str, ...]]:
    """``argv``, then what each wrapper of the chain runs, down to the final command
    (() when it runs none). Each layer may run code of its own (``watch 'CMD'``)."""
    found = [argv]
    while argv:
        wrapper = name(argv)
        if wrapper in _WRAPPERS:
            options, rest = _split_options(wrapper, argv[1:])
            if _LOOKUPS.get(wrapper, set()) & set(options):
                argv = ()
            else:
                argv = rest[_WRAPPERS[wrapper]:]
                if wrapper == "xargs":
                    argv = _xargs_run(options, argv)
                elif wrapper == "env":
                    argv = _env_split(options) + argv
                elif argv[:1] in (("-c",), ("--command",)):  # flock LOCK -c 'CMD': a script
                    argv = ()
        elif runner := next((words for words in _RUNNERS
                             if (wrapper, *argv[1:len(words)]) == words), None):
            argv = _runner_command(argv[len(runner):])
        elif python(wrapper) and "-m" in argv[1:]:
            argv = _python_module(argv[1:]) or ()
        elif wrapper == "sandlock" and argv[1:2] == ("run",) and "--" in argv:
            argv = argv[argv.index("--") + 1:]
        else:
            break
        found.append(argv)
    return found


def run_by_find(argv: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The commands ``find ... -exec CMD {} ;`` runs (-execdir, -ok, -okdir alike); a
    word holding ``{}`` is the found path, only known at run time."""
    command = unwrapped(argv)
    if name(command) != "find":
        return []
    found = []
    index = 0
    while index < len(command):
        if command[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            # One pass: a command runs to its ";" or "+" (find's own error without one,
            # read as running the rest), and the scan goes on after it.
            end = next((i for i in range(index + 1, len(command)) if command[i] in (";", "+")),
                       len(command))
            found.append(tuple(_found_path(word) for word in command[index + 1:end]))
            index = end
        index += 1
    return found


def _found_path(word: str) -> str:
    """A word of find -exec: holding {}, it is only known at run time; find's paths
    begin with its start points, so {} alone is no option."""
    if "{}" not in word:
        return word
    return Word(word, False, word.split("{}")[0] or ".")


def _split_options(wrapper: str, args: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
    """A wrapper's leading options (with env's NAME=value) and the words after them."""
    rest = list(args)
    options: list[str] = []
    values = _VALUES.get(wrapper, set())
    while rest and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])
                    or (wrapper == "time" and rest[0] == "-p")):
        option = rest.pop(0)
        options.append(option)
        if option == "--":
            break
        if (option in values or (wrapper == "env" and option in ("-S", "--split-string"))) and rest:
            options.append(rest.pop(0))
    return options, tuple(rest)


def _xargs_run(options: list[str], argv: tuple[str, ...]) -> tuple[str, ...]:
    """What xargs runs: its words, those holding the -I string filled from its input,
    and (without -I) input words added at the end, which could be options."""
    replace = next((options[i + 1] for i, option in enumerate(options[:-1])
                    if option == "-I"), None)
    replace = replace or next((option[2:] for option in options
                               if option.startswith("-I") and len(option) > 2), None)
    replace = replace or next(((option[2:] if option.startswith("-i") else option.partition("=")[2])
                               or "{}" for option in options
                               if option.startswith(("-i", "--replace"))), None)
    if not argv:
        argv = ("echo",)
    if replace:
        return tuple(Word(w, False, w.split(replace)[0]) if replace in w else w for w in argv)
    return (*argv, Word("<input>", False, ""))


def _env_split(options: list[str]) -> tuple[str, ...]:
    """env -S 'rm -f x' splits its string into the words it runs."""
    for index, option in enumerate(options[:-1]):
        if option in ("-S", "--split-string"):
            value = options[index + 1]
            if not getattr(value, "literal", True):
                return (value,)
            try:
                return tuple(shlex.split(value))
            except ValueError:
                return (Word(value, False, ""),)
    return ()


def _runner_command(args: tuple[str, ...]) -> tuple[str, ...]:
    """npx/uvx/pipx run...: the package's command, its version dropped (prettier@3)."""
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "--":
        option = rest.pop(0)
        if option in ("-m", "--module") and rest:  # uv run -m pytest
            return tuple(rest)
        if option in _RUNNER_VALUES and rest:
            rest.pop(0)
        elif option in ("-c", "--call", "--shell-mode"):
            return ()  # the command is a script: see scripts()
    if rest[:1] == ["--"]:
        rest.pop(0)
    if not rest:
        return ()
    package = rest[0]
    bare = package.split("@", 2)[1] if package.startswith("@") else package.split("@", 1)[0]
    bare = bare.rsplit("/", 1)[-1] if package.startswith("@") else bare
    for separator in ("==", ">=", "<=", "~=", "["):
        bare = bare.split(separator, 1)[0]
    word = Word(bare, getattr(package, "literal", True), "")
    return (word, *rest[1:])


def _python_module(args: tuple[str, ...]) -> tuple[str, ...] | None:
    """python -m MODULE ARGS -> (MODULE, ARGS); None when -c comes first (a program)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "-m" and rest:
            return tuple(rest)
        if option.startswith("-c") or option == "-":
            return None
        if option in _PYTHON_VALUES and rest:
            rest.pop(0)
    return None
