"""Which commands change files (verify mode), and the file they would write when it can
be told from their arguments. Anything not known to write is allowed: package installs
(pip, npm, cargo, go install: a test run needs its dependencies), kill (a verification
may stop its own server), and the filters that only read (grep, sed, awk, jq, ...)."""

from __future__ import annotations

from ._git import git_change
from ._options import operands, option_values
from ._wrappers import name, unwrapped

# Commands that write wherever they point; their last operand is usually the target.
_ALWAYS = frozenset({
    "rm", "rmdir", "unlink", "mv", "cp", "ln", "link", "mkdir", "mkfifo", "mknod", "touch",
    "truncate", "tee", "chmod", "chown", "chgrp", "chattr", "setfacl", "shred", "rsync",
    "patch", "install", "mktemp", "rename", "split", "csplit", "zip",
})
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma",
                          "unlzma", "zstd", "unzstd", "lz4", "compress", "uncompress"})
_GO_CHANGES = {"get": None, "generate": None, "fix": None, "fmt": None,
               "mod": {"tidy", "edit", "init", "vendor"},
               "work": {"init", "use", "edit", "sync", "vendor"}}
# Formatters and fixers: command -> (options that make it write, options that make it only check).
# An empty first set means it writes unless told to check.
_FORMATTERS = {"black": ((), ("--check", "--diff")), "isort": ((), ("--check", "--check-only", "-c", "--diff")),
               "gofmt": (("-w",), ()), "goimports": (("-w",), ()), "rustfmt": ((), ("--check",)),
               "prettier": (("--write", "-w"), ()), "eslint": (("--fix",), ()),
               "clang-format": (("-i",), ())}
_DISCARDED = (None, "-", "/dev/null", "/dev/stdout")  # an output option's value that is no file


def mutation(argv: tuple[str, ...]) -> str | None:
    """Why the command ``argv`` (after its wrappers) changes files, or None."""
    argv = unwrapped(argv)
    command, args = name(argv), argv[1:]
    if not command:
        return None
    if command in _ALWAYS:
        return _writes(command, operands(args)[-1:])
    check = _CHECKS.get(command)
    return check(command, args) if check else None


def _writes(what: str, targets: list[str | None]) -> str:
    shown = [target for target in targets if target]
    return f"{what} changes files" + (f" ({shown[0]})" if shown else "")


def _dd(command: str, args: tuple[str, ...]) -> str | None:
    outputs = [arg[3:] for arg in args if arg.startswith("of=")]
    return _writes(command, outputs) if outputs and outputs[0] not in _DISCARDED else None


def _in_place(command: str, args: tuple[str, ...]) -> str | None:
    """sed -i / perl -i, in any cluster (sed -ni, perl -lpi, -i.bak, --in-place=.bak)."""
    takes_value = "efl" if command == "sed" else "eEMmIxCdDF"
    if option_values(args, "i", takes_value, ("--in-place",)):
        return f"{command} -i changes files in place"
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


def _compressor(command: str, args: tuple[str, ...]) -> str | None:
    """gzip FILE replaces FILE with FILE.gz; to stdout (-c), listing or testing it writes none."""
    for letter, long in (("c", "--stdout"), ("c", "--to-stdout"), ("l", "--list"), ("t", "--test")):
        if option_values(args, letter, "SbLo", (long,)):
            return None
    files = operands(args, "SbLo")
    return _writes(command, files[:1]) if files else None


def _tar(command: str, args: tuple[str, ...]) -> str | None:
    """tar x/r/u/A writes into the tree or the archive; tar c writes its archive (-f)."""
    modes = args[0] if args and not args[0].startswith("-") else ""  # tar xzf a.tar
    writing = set("xruA") & set(modes) or any(
        option_values(args, letter, "fCTXbgHKLNV") for letter in "xruA") or any(
        arg in ("--extract", "--get", "--append", "--update", "--catenate", "--concatenate",
                "--delete") for arg in args)
    if writing:
        return f"{command} changes files"
    archives = option_values(args, "f", "fCTXbgHKLNV", ("--file",))
    if "f" in modes:
        archives.append(args[1] if len(args) > 1 else None)
    creating = "c" in modes or option_values(args, "c", "fCTXbgHKLNV", ("--create",))
    if creating and archives and archives[0] not in _DISCARDED:
        return _writes(f"{command} -c", archives)
    return None


def _unzip(command: str, args: tuple[str, ...]) -> str | None:
    listing = {"-l", "-t", "-p", "-c", "-v", "-Z", "-z"}
    return None if listing & set(args) else f"{command} changes files"


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


def _go(command: str, args: tuple[str, ...]) -> str | None:
    if not args or args[0] not in _GO_CHANGES:
        return None
    actions = _GO_CHANGES[args[0]]
    if actions is None or (len(args) > 1 and args[1] in actions):
        return f"go {' '.join(args[:1 if actions is None else 2])} changes go.mod, go.sum or sources"
    return None


def _git(command: str, args: tuple[str, ...]) -> str | None:
    return git_change(args)


def _formatter(command: str, args: tuple[str, ...]) -> str | None:
    writes, checks = _FORMATTERS[command]
    if set(checks) & set(args) or (writes and not set(writes) & set(args)):
        return None
    return f"{command} rewrites files"


def _ruff(command: str, args: tuple[str, ...]) -> str | None:
    formats = args[:1] == ("format",) and not {"--check", "--diff"} & set(args)
    fixes = "--fix" in args and "--no-fix" not in args
    return f"ruff {'format' if formats else '--fix'} rewrites files" if formats or fixes else None


def _cargo(command: str, args: tuple[str, ...]) -> str | None:
    if args[:1] == ("fmt",) and "--check" not in args:
        return "cargo fmt rewrites files"
    if args[:1] in (("add",), ("remove",), ("rm",)):
        return f"cargo {args[0]} changes Cargo.toml"
    return None


_CHECKS = {"dd": _dd, "sed": _in_place, "perl": _in_place, "find": _find, "sort": _sort,
           "uniq": _uniq, "tar": _tar, "unzip": _unzip, "curl": _curl, "wget": _wget,
           "go": _go, "git": _git, "ruff": _ruff, "cargo": _cargo,
           **{tool: _compressor for tool in _COMPRESSORS},
           **{tool: _formatter for tool in _FORMATTERS}}
