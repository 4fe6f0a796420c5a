"""Which git commands change the repository (verify mode): an allowlist of the
subcommands that only read, anything else refused (``git hash-object -w``, ``git
fast-import``, an alias). Git's global options come before the subcommand (``git -C .
rm x`` is ``git rm``). Some subcommands only read in some forms: ``git branch`` lists
and ``git branch x`` creates, ``git stash list`` reads and ``git stash`` stores."""

from __future__ import annotations

from ._options import operands

_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace",
                            "--exec-path", "--config-env", "--super-prefix", "--list-cmds"})
# Subcommands that only read, whatever their arguments (but --output=FILE, below).
_READS = frozenset({
    "status", "diff", "log", "show", "blame", "annotate", "grep", "ls-files", "ls-tree",
    "ls-remote", "rev-parse", "rev-list", "cat-file", "describe", "shortlog", "whatchanged",
    "for-each-ref", "show-ref", "merge-base", "name-rev", "cherry", "range-diff",
    "check-ignore", "check-attr", "check-ref-format", "check-mailmap", "count-objects",
    "verify-commit", "verify-tag", "verify-pack", "version", "help", "var", "diff-tree",
    "diff-index", "diff-files", "show-branch", "request-pull", "column", "stripspace",
    "get-tar-commit-id", "show-index", "fsck", "fast-export", "bugreport", "--version",
    "--help", "-v", "-h"})
# Their writing options: a file named by an option, or objects/refs written.
_WRITING_OPTIONS = ("--output", "--export-marks", "--lost-found", "--open-files-in-pager")
# Subcommands whose first argument says whether they read: (reads with no argument,
# arguments that read). Any other first argument changes something.
_ACTIONS = {
    "stash": (False, {"list", "show"}),
    "remote": (True, {"-v", "--verbose", "show", "get-url"}),
    "worktree": (False, {"list"}),
    "submodule": (True, {"status", "summary"}),
    "notes": (True, {"list", "show"}),
    "reflog": (True, {"show", "exists", "list"}),
    "bundle": (False, {"verify", "list-heads"}),
    "sparse-checkout": (False, {"list"}),
}
# git branch and git tag list with no name, or with --list (the names are patterns).
_LISTING = {
    "branch": {"-a", "--all", "-r", "--remotes", "-v", "-vv", "--verbose", "--show-current",
               "-i", "--ignore-case", "--column", "--no-column", "--color", "--no-color",
               "--abbrev", "--no-abbrev", "--omit-empty", "-q", "--quiet"},
    "tag": {"-n", "-i", "--ignore-case", "--column", "--no-column", "--color", "--no-color",
            "--omit-empty", "-v", "--verify"},
}
_LIST = {"-l", "--list"}
_LISTING_VALUES = ("--contains", "--no-contains", "--merged", "--no-merged", "--points-at",
                   "--sort", "--format")
_CONFIG_READS = {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l",
                 "--get-color", "--get-colorbool", "get", "list"}
_CONFIG_WRITES = {"--add", "--unset", "--unset-all", "--replace-all", "--rename-section",
                  "--remove-section", "-e", "--edit", "set", "unset", "rename-section",
                  "remove-section", "edit"}
# Named in reasons as writers (anything not read-only is refused all the same).
_WRITERS = frozenset({
    "add", "am", "apply", "bisect", "checkout", "checkout-index", "cherry-pick", "clean",
    "clone", "commit", "commit-tree", "fetch", "fast-import", "filter-branch", "gc", "init",
    "maintenance", "merge", "mktag", "mktree", "mv", "prune", "pull", "push", "read-tree",
    "rebase", "repack", "replace", "reset", "restore", "revert", "rm", "switch",
    "unpack-objects", "index-pack", "update-index", "update-ref", "write-tree", "pack-objects",
    "pack-refs", "prune-packed", "merge-file", "merge-index", "notes"})
_SOMETIMES_READ = frozenset({"config", "symbolic-ref", "format-patch", "archive", "hash-object",
                             "apply", "interpret-trailers"})
_APPLY_CHECKS = {"--check", "--stat", "--numstat", "--summary"}
_APPLY_WRITES = {"--apply", "--index", "--cached", "--3way", "-3", "--intent-to-add", "-N"}


def git_change(args: tuple[str, ...]) -> str | None:
    """Why ``git ARGS`` changes the repository, or None."""
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] not in ("--version", "--help", "-v", "-h"):
        option = rest.pop(0)
        if option in _GLOBAL_VALUES and rest:
            rest.pop(0)
    if not rest:
        return None
    subcommand, sub_args = rest[0], tuple(rest[1:])
    if not _changes(subcommand, sub_args):
        return None
    known = subcommand in _READS or subcommand in _ACTIONS or subcommand in _LISTING or \
        subcommand in _SOMETIMES_READ
    if known or subcommand in _WRITERS:
        return f"git {subcommand} changes the repository"
    return f"git {subcommand} is not one of git's read-only subcommands"


def _changes(subcommand: str, args: tuple[str, ...]) -> bool:
    if subcommand in _READS:
        return any(arg.partition("=")[0] in _WRITING_OPTIONS for arg in args) or (
            subcommand == "grep" and any(arg.startswith("-O") for arg in args))  # runs a pager
    if subcommand in _ACTIONS:
        reads_bare, reads = _ACTIONS[subcommand]
        return not reads_bare if not args else args[0] not in reads
    if subcommand in _LISTING:
        return not _lists(subcommand, args)
    if subcommand == "config":
        return _config_writes(args)
    if subcommand == "symbolic-ref":
        return "-d" in args or "--delete" in args or len(operands(args, "m")) > 1
    if subcommand == "format-patch":
        return "--stdout" not in args
    if subcommand == "archive":
        return any(arg in ("-o", "--output") or arg.startswith("--output=") for arg in args)
    if subcommand == "hash-object":
        return "-w" in args
    if subcommand == "apply":
        return not (_APPLY_CHECKS & set(args)) or bool(_APPLY_WRITES & set(args))
    if subcommand == "interpret-trailers":
        return "--in-place" in args
    return True


def _lists(subcommand: str, args: tuple[str, ...]) -> bool:
    """Whether git branch/tag ARGS only lists (any option not known to list may change)."""
    names = operands(args, long_values=_LISTING_VALUES)
    for arg in args:
        option = arg.partition("=")[0]
        known = _LISTING[subcommand] | _LIST | set(_LISTING_VALUES)
        if arg.startswith("-") and option not in known and not _count_option(subcommand, arg):
            return False
    return not names or bool(_LIST & set(args)) or _verifying(subcommand, args)


def _count_option(subcommand: str, arg: str) -> bool:
    return subcommand == "tag" and arg.startswith("-n") and arg[2:].isdigit()  # -n5


def _verifying(subcommand: str, args: tuple[str, ...]) -> bool:
    return subcommand == "tag" and ("-v" in args or "--verify" in args)


def _config_writes(args: tuple[str, ...]) -> bool:
    if _CONFIG_WRITES & set(args):
        return True
    if _CONFIG_READS & set(args):
        return False
    # git config NAME reads it; git config NAME VALUE sets it.
    return len(operands(args, "f", ("--file", "--blob", "--type", "--default"))) > 1
