"""Which commands change files (verify mode), known by what they do: the commands that
always write (rm, cp, editors), the options that make a command write (``sed -i``, ``sort
-o``, ``sed 'w FILE'``), the tools with an allowlist of read-only subcommands (git,
cargo, go, npm..., ``_tools``), and for any other command the flags that write by
convention (``-i``, ``--fix``, ``--write``, ``-w``, ``-o FILE``, ``fmt``, ``x``). The
commands that only read (``grep``, ``cat``, ``wc``...) pass whatever their options. In
strict mode, a word built at run time that could be an option (``$opt``, ``*``, what
xargs adds) is refused for any command that is not one of those."""

from __future__ import annotations

import re

from ._archives import CHECKS as _ARCHIVES
from ._archives import DISCARDED as _DISCARDED
from ._archives import writes as _writes
from ._git import git_change
from ._options import operands, option_values
from ._sed import sed_effects
from ._tools import tool_change
from ._words import literal, may_be_option, shown
from ._wrappers import layers, name, python, unwrapped

# Commands that write wherever they point; their last operand is usually the target.
_ALWAYS = frozenset({
    "rm", "rmdir", "unlink", "mv", "cp", "ln", "link", "mkdir", "mkfifo", "mknod", "touch",
    "truncate", "tee", "chmod", "chown", "chgrp", "chattr", "setfacl", "shred", "rsync",
    "patch", "install", "mktemp", "rename", "split", "csplit", "zip", "virtualenv", "venv",
    "vi", "vim", "nvim", "view", "ex", "ed", "red", "nano", "pico", "emacs", "emacsclient",
    "micro", "kak", "hx", "helix", "joe", "jed", "mcedit", "ne", "vis", "gedit",
    "pyupgrade", "add-trailing-comma", "pre-commit", "git-filter-repo", "sponge", "sudoedit",
})
# Writers that only move or mark what exists: they cannot make a script the line runs.
_NO_CONTENT = frozenset({"rm", "rmdir", "unlink", "mkdir", "mkfifo", "mknod", "touch",
                         "truncate", "chmod", "chown", "chgrp", "chattr", "setfacl", "shred",
                         "mktemp"})
# Commands whose options never make them write a file: the generic write flags and
# runtime words are no concern for them.
READ_ONLY = frozenset({
    "cat", "tac", "head", "tail", "more", "grep", "egrep", "fgrep", "zgrep", "zcat", "bzcat",
    "xzcat", "zstdcat", "wc", "ls", "dir", "stat", "du", "df", "diff", "cmp", "comm", "cut",
    "tr", "nl", "od", "hexdump", "strings", "md5sum", "sha1sum", "sha224sum", "sha256sum",
    "sha384sum", "sha512sum", "b2sum", "cksum", "sum", "jq", "echo", "printf", "true",
    "false", "test", "[", "which", "type", "whereis", "pwd", "date", "id", "whoami", "uname",
    "printenv", "basename", "dirname", "realpath", "readlink", "seq", "yes", "sleep", "ps",
    "pgrep", "pidof", "nproc", "expr", "column", "fold", "paste", "join", "expand",
    "unexpand", "rev", "base64", "base32", "getconf", "locale", "tty", "uptime", "free",
    "lscpu", "lsblk", "fmt", "pr", "numfmt", "factor", "tsort", "kill", ":", "wait", "exit",
    "return", "set", "shift", "read", "local", "export", "declare", "typeset", "readonly",
    "unset", "let", "getopts", "jobs", "times", "umask", "help", "apropos", "whatis", "look",
    "cal", "env", "lsof", "ss", "break", "continue", "shopt", "exec", "command",
})
# Interpreters and shells: the words after their program are the program's, not options.
_PROGRAM_FIRST = frozenset({"node", "nodejs", "perl", "ruby", "php", "lua", "bash", "sh", "dash",
                            "zsh", "ksh", "fish"})
# Options that write, by convention, for a command not known here.
_WRITE_OPTIONS = frozenset({"--write", "--fix", "--in-place", "--inplace", "--autofix",
                            "--autocorrect", "--autocorrect-all", "--apply", "--overwrite",
                            "--output", "--output-file", "--out-file", "--outfile",
                            "--output-dir", "--outdir", "--out-dir", "--update-snapshots",
                            "--updateSnapshot", "--replace", "--unsafe-fixes"})
# Subcommands that write, by convention, for a tool not known here (``terraform fmt``,
# ``poetry add``, ``7z x``), unless told to check.
_WRITE_SUBCOMMANDS = frozenset({"fmt", "format", "fix", "add", "remove", "init", "new", "clean",
                                "lock", "bump", "upgrade", "update", "generate", "apply",
                                "migrate", "x", "e", "extract", "write"})
_CHECKING = frozenset({"--check", "-check", "--diff", "--dry-run", "--check-only",
                       "--verify-no-changes", "--check-formatted", "--fail-on-change", "--lint",
                       "--validate", "--test", "--list-different", "-l"})
# Formatters that rewrite files unless told to check.
_REWRITE_UNLESS_CHECKING = frozenset({"black", "isort", "rustfmt", "nixfmt", "alejandra",
                                      "stylua", "swiftformat", "elm-format", "mdformat", "rufo",
                                      "scalafmt", "csharpier", "ssort"})
_AWK_WRITES = re.compile(r"\b(print|printf)\b[^;{}]*?(>|\|)|\bsystem\s*\(|\|\s*&?\s*getline"
                         r"|\bfflush\b|\bclose\b")


def mutation(argv: tuple[str, ...]) -> str | None:
    """Why the command ``argv`` (or one of its wrappers: ``strace -o FILE``) changes
    files, or None."""
    for layer in layers(argv)[:-1]:
        reason = _wrapper_writes(name(layer), layer[1:])
        if reason is not None:
            return reason
    argv = unwrapped(argv)
    command, args = name(argv), argv[1:]
    if not command or command in READ_ONLY:
        return None
    reason = _known(command, args)
    return _by_convention(command, args) if reason is ... else reason


def _wrapper_writes(wrapper: str, args: tuple[str, ...]) -> str | None:
    """A wrapper's own output file: strace/ltrace -o, time -o, valgrind --log-file."""
    outputs: list[str | None] = []
    for index, arg in enumerate(args):
        if arg == "--" or not arg.startswith("-"):
            break
        spelled, equals, value = arg.partition("=")
        if (wrapper in ("strace", "ltrace", "time") and spelled in ("-o", "--output")) or (
                wrapper == "valgrind" and spelled in ("--log-file", "--xml-file")):
            outputs.append(value if equals else (args[index + 1] if index + 1 < len(args) else None))
    outputs = [output for output in outputs if output not in _DISCARDED]
    return _writes(f"{wrapper} -o", outputs) if outputs else None


def creates_content(argv: tuple[str, ...]) -> bool:
    """Whether the command writes what could be a script (cp, tee, curl -o; not rm, mkdir)."""
    argv = unwrapped(argv)
    return name(argv) not in _NO_CONTENT and mutation(argv) is not None


def _known(command: str, args: tuple[str, ...]) -> str | None:
    """The verdict of the command's own rule; ``...`` when it has none."""
    if command in _ALWAYS:
        return _writes(command, operands(args)[-1:])
    check = _CHECKS.get(command) or _ARCHIVES.get(command)
    if check is not None:
        return check(command, args)
    if python(command):
        return None  # python script.py, python -c: what a program does is the sandbox's job
    return tool_change(command, args)


def _by_convention(command: str, args: tuple[str, ...]) -> str | None:
    words = [arg for arg in args if arg != "--"]
    if {"--version", "--help", "-h", "-V"} & set(words[:1]):
        return None
    checking = _CHECKING & {arg.partition("=")[0] for arg in words}
    for index, arg in enumerate(words):
        spelled = arg.partition("=")[0]
        if spelled in _WRITE_OPTIONS and not checking:
            return f"{command} {spelled} writes files"
        if arg == "-o" and index + 1 < len(words) and words[index + 1] not in _DISCARDED:
            return _writes(f"{command} -o", [words[index + 1]])
        if re.fullmatch(r"-[A-Za-z]*i(\.\S*)?|-w", arg) and not checking:
            return f"{command} {arg} changes files in place"
    subcommand = next((arg for arg in words if not arg.startswith("-")), "")
    if subcommand in _WRITE_SUBCOMMANDS and not checking:
        return f"{command} {subcommand} writes files (not with --check or --dry-run)"
    return None


def runtime_option(argv: tuple[str, ...]) -> str | None:
    """Why a word of ``argv`` built at run time could make it write (strict verify mode):
    ``sed $opt``, ``*`` (a file named -i), the words xargs adds; not for the commands
    that only read, nor after ``--`` or an interpreter's program."""
    argv = unwrapped(argv)
    command, args = name(argv), argv[1:]
    if not command or command in READ_ONLY:
        return None
    program_first = command in _PROGRAM_FIRST or python(command)
    for arg in args:
        if arg == "--" or (program_first and literal(arg) and not arg.startswith("-")):
            return None
        if not literal(arg) and may_be_option(arg):
            what = "the words xargs adds are" if arg == "<input>" else f"{shown(arg)} is"
            return (f"{command}: {what} built when the line runs and could be an option "
                    "that writes (-i, --fix...); write it out, put it after --, or start it "
                    "with ./")
    return None


def _dd(command: str, args: tuple[str, ...]) -> str | None:
    outputs = [arg[3:] for arg in args if arg.startswith("of=")]
    return _writes(command, outputs) if outputs and outputs[0] not in _DISCARDED else None


def _sed(command: str, args: tuple[str, ...]) -> str | None:
    """sed -i (any cluster, -i.bak, --in-place), and scripts that write (w FILE)."""
    if option_values(args, "i", "efl", ("--in-place",)):
        return f"{command} -i changes files in place"
    effects = sed_effects(args)
    if effects.writes:
        return f"sed's w command writes {effects.writes[0]}"
    if effects.unreadable:
        return f"{effects.unreadable}, so what it writes cannot be told"
    return None


def _in_place(command: str, args: tuple[str, ...]) -> str | None:
    """perl -i / ruby -i, in any cluster (perl -lpi, -i.bak)."""
    takes_value = "eEMmIxCdDF" if command == "perl" else "eIrCEFx"
    if option_values(args, "i", takes_value, ("--in-place",)):
        return f"{command} -i changes files in place"
    return None


def _awk(command: str, args: tuple[str, ...]) -> str | None:
    """gawk -i inplace and output files; a program that prints into a file or runs one."""
    if any(value == "inplace" for value in option_values(args, "i", "fvFiloEpd", ("--include",))):
        return f"{command} -i inplace changes files in place"
    for letter, long in (("o", "--pretty-print"), ("p", "--profile"), ("d", "--dump-variables")):
        if option_values(args, letter, "fvFiloEpd", (long,)):
            return f"{command} {long} writes a file"
    program = next(iter(option_values(args, "e", "fvFiloEpd", ("--source",))), None) or next(
        iter(operands(args, "fvFiloEpd", ("--file", "--source", "--include", "--assign"))), "")
    if program and _AWK_WRITES.search(program):
        return f"{command}'s program writes a file or runs a command (print > FILE, system())"
    return None


def _find(command: str, args: tuple[str, ...]) -> str | None:
    """find's own writes; what its -exec runs is vetted as a command of its own."""
    for writer in ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls"):
        if writer in args:
            return f"find {writer} changes files"
    return None


def _sort(command: str, args: tuple[str, ...]) -> str | None:
    outputs = option_values(args, "o", "oktST", ("--output",))
    return _writes(f"{command} -o", outputs) if outputs else None


def _uniq(command: str, args: tuple[str, ...]) -> str | None:
    files = operands(args, "fsw")
    return _writes(command, files[1:]) if len(files) > 1 else None  # uniq IN OUT


def _output_option(letter: str, long: str, takes_value: str) -> object:
    """A command that writes a file with one option (shuf -o, tree -o, less -o...)."""
    def check(command: str, args: tuple[str, ...]) -> str | None:
        outputs = [value for value in option_values(args, letter, takes_value, (long,))
                   if value not in _DISCARDED]
        return _writes(f"{command} -{letter}", outputs) if outputs else None
    return check


def _second_operand(command: str, args: tuple[str, ...]) -> str | None:
    """xxd IN OUT writes OUT."""
    files = operands(args, "clsgo")
    return _writes(command, files[1:]) if len(files) > 1 else None


def _python_archive(command: str, args: tuple[str, ...]) -> str | None:
    """python -m zipfile / tarfile: -c creates an archive, -e extracts one."""
    writing = {"-c", "--create", "-e", "--extract"} & set(args)
    return f"python -m {command} {sorted(writing)[0]} changes files" if writing else None


def _curl(command: str, args: tuple[str, ...]) -> str | None:
    takes_value = "oDcdHXuAexTFbKmrwyYzECPQtU"
    if option_values(args, "O", takes_value, ("--remote-name", "--remote-name-all")):
        return f"{command} -O changes files"
    for letter, long in (("o", "--output"), ("D", "--dump-header"), ("c", "--cookie-jar")):
        outputs = [value for value in option_values(args, letter, takes_value, (long,))
                   if value not in _DISCARDED]
        if outputs:
            return _writes(f"{command} {long}", outputs)
    return None


def _wget(command: str, args: tuple[str, ...]) -> str | None:
    """wget saves what it fetches unless told -O - (or --spider); -o/-a write a log."""
    takes_value = "OoaePtTwQiUBlDAR"
    if "--spider" not in args:
        documents = option_values(args, "O", takes_value, ("--output-document",))
        if not documents or documents[-1] not in _DISCARDED:
            return _writes(command, documents[-1:])
    for letter, long in (("o", "--output-file"), ("a", "--append-output")):
        logs = [log for log in option_values(args, letter, takes_value, (long,))
                if log not in _DISCARDED]
        if logs:
            return _writes(f"{command} {long}", logs)
    return None


def _git(command: str, args: tuple[str, ...]) -> str | None:
    return git_change(args)


def _formatter(command: str, args: tuple[str, ...]) -> str | None:
    """Formatters that write only when told (gofmt -w, prettier --write, eslint --fix)."""
    writes = _FORMATTERS[command]
    if not {arg.partition("=")[0] for arg in args} & set(writes):
        return None
    return f"{command} rewrites files"


def _rewrites(command: str, args: tuple[str, ...]) -> str | None:
    """Formatters that write unless told to check (black, isort, rustfmt...)."""
    if _CHECKING & {arg.partition("=")[0] for arg in args} or {"-c", "--version", "-h",
                                                                "--help"} & set(args):
        return None
    return f"{command} rewrites files (not with --check)"


def _ruff(command: str, args: tuple[str, ...]) -> str | None:
    formats = args[:1] == ("format",) and not {"--check", "--diff"} & set(args)
    fixes = ("--fix" in args or "--unsafe-fixes" in args or "--add-noqa" in args) and (
        "--no-fix" not in args and "--diff" not in args)
    writes = option_values(args, "o", "o", ("--output-file",))
    if formats or fixes or writes:
        return f"ruff {'format' if formats else '--fix'} rewrites files" if not writes else \
            "ruff --output-file writes a file"
    return None


def _rubocop(command: str, args: tuple[str, ...]) -> str | None:
    fixing = {"-a", "-A", "-x", "--autocorrect", "--autocorrect-all", "--fix-layout",
              "--auto-correct", "--auto-correct-all"} & set(args)
    return f"{command} {sorted(fixing)[0]} rewrites files" if fixing else None


_FORMATTERS = {"gofmt": ("-w",), "goimports": ("-w",), "gofumpt": ("-w",),
               "prettier": ("--write", "-w"), "eslint": ("--fix",), "stylelint": ("--fix",),
               "clang-format": ("-i",), "clang-tidy": ("--fix", "--fix-errors", "-fix",
                                                        "-fix-errors", "--export-fixes"),
               "shfmt": ("-w", "--write"), "autopep8": ("-i", "--in-place"),
               "autoflake": ("-i", "--in-place"), "yapf": ("-i", "--in-place"),
               "docformatter": ("-i", "--in-place")}
_CHECKS = {"dd": _dd, "sed": _sed, "perl": _in_place, "ruby": _in_place, "find": _find,
           "sort": _sort, "uniq": _uniq, "curl": _curl, "wget": _wget, "git": _git,
           "ruff": _ruff, "rubocop": _rubocop, "awk": _awk, "gawk": _awk, "mawk": _awk,
           "xxd": _second_operand, "shuf": _output_option("o", "--output", "on"),
           "tree": _output_option("o", "-o", "oLPIH"), "less": _output_option("o", "--log-file", "o"),
           "iconv": _output_option("o", "--output", "oft"),
           "sdiff": _output_option("o", "--output", "o"),
           "file": lambda command, args: f"{command} -C writes a magic file" if option_values(
               args, "C", "efFmP", ("--compile",)) else None,
           "rg": lambda command, args: "rg --pre runs a program on every file" if any(
               arg.startswith("--pre") and not arg.startswith("--pre-glob") for arg in args) else None,
           "script": lambda command, args: None if "/dev/null" in args else
           f"{command} writes a typescript file",
           "zipfile": _python_archive, "tarfile": _python_archive, "json.tool": _second_operand,
           **{tool: _formatter for tool in _FORMATTERS},
           **{tool: _rewrites for tool in _REWRITE_UNLESS_CHECKING}}
