"""Commands that run another command: the wrappers (``sudo rm a`` runs ``rm a``) and
the shells given a script as a string (``bash -c 'rm a'``, ``eval 'rm a'``). What
runs is what is vetted, in both modes."""

from __future__ import annotations

# Wrapper -> how many arguments after its options are its own (timeout's duration).
_WRAPPERS = {"sudo": 0, "doas": 0, "env": 0, "nohup": 0, "nice": 0, "ionice": 0, "time": 0,
             "command": 0, "builtin": 0, "exec": 0, "stdbuf": 0, "xargs": 0, "setsid": 0,
             "unbuffer": 0, "busybox": 0, "watch": 0, "strace": 0, "timeout": 1,
             "chroot": 1, "flock": 1, "taskset": 1, "chrt": 1}
# A wrapper's options that take a value as the next word (that word is not the command).
_VALUES = {
    "sudo": {"-u", "-g", "-C", "-D", "-R", "-h", "-p", "-U", "-r", "-t", "--user", "--group",
             "--chdir", "--chroot", "--host", "--prompt", "--other-user", "--role", "--type",
             "--close-from"},
    "doas": {"-u", "-C"},
    "env": {"-u", "-C", "-S", "--unset", "--chdir", "--split-string"},
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "-n", "-p", "--class", "--classdata", "--pid"},
    "time": {"-f", "-o", "--format", "--output"},
    "exec": {"-a"},
    "stdbuf": {"-i", "-o", "-e"},
    "xargs": {"-n", "-I", "-L", "-P", "-d", "-E", "-s", "-a", "--max-args", "--max-procs",
              "--delimiter", "--arg-file", "--max-chars"},
    "watch": {"-n", "--interval"},
    "strace": {"-o", "-e", "-p", "-s", "-u", "-E", "-P", "-a", "-b", "-I", "-O", "-S"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "flock": {"-w", "-E", "--timeout", "--conflict-exit-code"},
}
# `command -v rm` and `type rm` look a name up; they run nothing.
_LOOKUPS = {"command": {"-v", "-V"}}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})  # busybox sh: unwrapped
_SHELL_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def name(argv: tuple[str, ...]) -> str:
    """The command's name without its directory (/bin/rm is rm)."""
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def unwrapped(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command a chain of wrappers finally runs (``sudo -u x timeout 5 rm a`` -> rm a);
    () when it runs none (``command -v rm``)."""
    while argv and name(argv) in _WRAPPERS:
        wrapper = name(argv)
        options, rest = _split_options(wrapper, argv[1:])
        if _LOOKUPS.get(wrapper, set()) & set(options):
            return ()
        argv = rest[_WRAPPERS[wrapper]:]
    return argv


def run_by_find(argv: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The commands ``find ... -exec CMD {} ;`` runs (-execdir, -ok, -okdir alike)."""
    command = unwrapped(argv)
    if name(command) != "find":
        return []
    found = []
    for index, word in enumerate(command):
        if word in ("-exec", "-execdir", "-ok", "-okdir"):
            run = command[index + 1:]
            found.append(run[:next((i for i, w in enumerate(run) if w in (";", "+")), len(run))])
    return found


def script(argv: tuple[str, ...]) -> str | None:
    """The bash a command runs from a string (``bash -lc 'make && rm x'``, ``eval 'rm x'``),
    or None. The string is as written: expansions in it are not followed."""
    command = unwrapped(argv)
    if name(command) == "eval":
        return " ".join(command[1:])
    if name(command) not in _SHELLS:
        return None
    args = list(command[1:])
    reads_string = False
    while args and args[0][:1] in ("-", "+") and args[0] != "--":
        option = args.pop(0)
        if option in _SHELL_VALUES and args:
            args.pop(0)
        elif not option.startswith("--") and "c" in option[1:]:
            reads_string = True  # -c, -lc, -ec ...
    if args[:1] == ["--"]:
        args.pop(0)
    return args[0] if reads_string and args else None


def _split_options(wrapper: str, args: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
    """A wrapper's leading options (with env's NAME=value) and the words after them."""
    rest = list(args)
    options: list[str] = []
    values = _VALUES.get(wrapper, set())
    while rest and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])):
        option = rest.pop(0)
        options.append(option)
        if option == "--":
            break
        if option in values and rest:
            rest.pop(0)
    return options, tuple(rest)
