"""Which git commands change the repository (verify mode). Git's global options come
before the subcommand (``git -C . rm x`` is ``git rm``). Some subcommands only read in
some forms: ``git branch`` lists and ``git branch x`` creates, ``git stash list`` reads
and ``git stash`` stores."""

from __future__ import annotations

from ._options import operands

_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace",
                            "--exec-path", "--config-env", "--super-prefix"})
_CHANGES = frozenset({
    "add", "am", "apply", "bisect", "checkout", "checkout-index", "cherry-pick", "clean",
    "clone", "commit", "fetch", "filter-branch", "gc", "init", "maintenance", "merge", "mv",
    "prune", "pull", "push", "read-tree", "rebase", "repack", "replace", "reset", "restore",
    "revert", "rm", "sparse-checkout", "switch", "update-index", "update-ref",
})
# Subcommands whose first argument says whether they read: (reads with no argument,
# arguments that read). Any other first argument changes something.
_ACTIONS = {
    "stash": (False, {"list", "show"}),
    "remote": (True, {"-v", "--verbose", "show", "get-url"}),
    "worktree": (False, {"list"}),
    "submodule": (True, {"status", "summary"}),
    "notes": (True, {"list", "show"}),
    "reflog": (True, {"show", "exists"}),
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


def git_change(args: tuple[str, ...]) -> str | None:
    """Why ``git ARGS`` changes the repository, or None."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _GLOBAL_VALUES and rest:
            rest.pop(0)
    if not rest:
        return None
    subcommand, sub_args = rest[0], tuple(rest[1:])
    if _changes(subcommand, sub_args):
        return f"git {subcommand} changes the repository"
    return None


def _changes(subcommand: str, args: tuple[str, ...]) -> bool:
    if subcommand in _CHANGES:
        return True
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
    return False


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
