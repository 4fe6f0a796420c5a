"""Verify mode for the tools an agent verifies with: their read-only subcommands are
allowed, anything else is refused (an allowlist, not a list of writers). Building and
testing are allowed (``cargo test``, ``go build ./...``, ``npm test``): the caches and
build directories those tools keep are theirs. Installing dependencies is allowed
(``pip install``, ``npm install``, ``cargo install``: tests need them; they fill caches
and environments), unless it changes the project's manifest (``npm install PKG``).
What a build or test script runs (a Makefile, package.json's scripts) is the sandbox's
job: vet does not read files."""

from __future__ import annotations

from ._options import option_values

# cargo: the subcommands that build, test or read; +toolchain and global options first.
_CARGO_READS = frozenset({
    "build", "b", "check", "c", "test", "t", "bench", "run", "r", "doc", "d", "clippy", "tree",
    "metadata", "search", "locate-project", "pkgid", "verify-project", "read-manifest",
    "version", "help", "fetch", "install", "nextest", "audit", "expand", "fmt", "--version", "-V",
    "--list", "--help", "-h"})
_CARGO_GLOBAL_VALUES = frozenset({"--color", "--config", "-Z", "-C", "--manifest-path"})
_GO_READS = frozenset({"build", "test", "vet", "run", "list", "doc", "env", "version", "help",
                       "install", "bug"})
_GO_MOD_READS = frozenset({"download", "graph", "why", "verify"})
_GO_OUTPUTS = ("-o", "-c", "-coverprofile", "-cpuprofile", "-memprofile", "-blockprofile",
               "-mutexprofile", "-trace", "-outputdir")
_NPM_READS = frozenset({
    "test", "t", "tst", "run", "run-script", "rum", "urn", "start", "stop", "restart", "ls",
    "list", "ll", "la", "view", "v", "info", "show", "outdated", "audit", "doctor", "help",
    "explain", "why", "ping", "search", "s", "find", "root", "prefix", "whoami", "fund",
    "query", "ci", "clean-install", "install-clean", "install", "i", "in", "ins", "inst",
    "insta", "instal", "isnt", "isntal", "isntall", "diff", "sbom", "help-search", "config",
    "get", "version", "pack", "cache", "-v", "--version", "-h", "--help", "install-test", "it"})
_NPM_INSTALLS = frozenset({"install", "i", "in", "ins", "inst", "insta", "instal", "isnt",
                           "isntal", "isntall"})
# pnpm and yarn run a package.json script for a name they do not know, so for them
# the writers are listed instead.
_PNPM_YARN_WRITES = frozenset({
    "add", "remove", "rm", "uninstall", "un", "update", "up", "upgrade", "upgrade-interactive",
    "link", "ln", "unlink", "import", "init", "create", "publish", "pack", "patch",
    "patch-commit", "patch-remove", "prune", "rebuild", "rb", "dedupe", "set", "version",
    "deploy", "setup", "self-update", "policies", "plugin", "constraints", "workspaces",
    "recursive", "-r", "generate-lock-entry", "autoclean", "approve-builds", "env", "store",
    "owner", "tag", "unpublish", "login", "logout"})
_PIP_READS = frozenset({"install", "list", "show", "freeze", "check", "help", "debug", "index",
                        "inspect", "search", "hash", "--version", "-V", "-h", "--help"})
_UV_READS = frozenset({"sync", "tree", "venv", "help", "--version", "-V", "-h", "--help",
                       "version", "export", "cache", "python", "tool", "lock", "format",
                       "pip", "generate-shell-completion"})
_PYTEST_WRITES = ("--junitxml", "--junit-xml", "--html", "--result-log", "--resultlog",
                  "--report-log", "--json-report-file", "--alluredir", "--snapshot-update",
                  "--update-snapshots", "--force-regen", "--regen-all", "--inline-snapshot",
                  "--pastebin", "--basetemp")
_SNAPSHOT_UPDATES = ("-u", "--updateSnapshot", "--update-snapshots", "--update", "--update-snapshot")


def tool_change(command: str, args: tuple[str, ...]) -> str | None:
    """Why ``command ARGS`` (one of the tools known here) changes files, or None;
    ``...`` when ``command`` is not one of them."""
    check = _TOOLS.get(command)
    return check(command, args) if check else ...


def _first(args: tuple[str, ...], values: frozenset[str] = frozenset()) -> tuple[str, tuple[str, ...]]:
    """The subcommand after the global options, and its arguments."""
    rest = list(args)
    while rest and (rest[0].startswith("-") or rest[0].startswith("+")) and rest[0] not in (
            "--version", "-V", "--list", "-h", "--help", "-v"):
        option = rest.pop(0)
        if option in values and rest:
            rest.pop(0)
    return (rest[0], tuple(rest[1:])) if rest else ("", ())


def _refused(tool: str, subcommand: str, what: str = "is not one of its read-only subcommands") -> str:
    return f"{tool} {subcommand} {what}"


def _cargo(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args, _CARGO_GLOBAL_VALUES)
    if not subcommand:
        return None
    if subcommand not in _CARGO_READS:
        return _refused("cargo", subcommand)
    if subcommand == "fmt" and "--check" not in rest:
        return "cargo fmt rewrites files (not with --check)"
    if subcommand == "clippy" and {"--fix", "--allow-dirty"} & set(rest):
        return "cargo clippy --fix rewrites sources"
    return None


def _go(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args)
    if not subcommand:
        return None
    if subcommand == "mod":
        action = rest[0] if rest else ""
        return None if action in _GO_MOD_READS else _refused("go", f"mod {action}".strip(),
                                                             "changes go.mod, go.sum or sources")
    if subcommand not in _GO_READS:
        return _refused("go", subcommand, "changes go.mod, go.sum or sources, or is not one of "
                        "its read-only subcommands")
    if subcommand == "env" and {"-w", "-u"} & set(rest):
        return "go env -w changes go's configuration file"
    if subcommand in ("build", "test"):
        written = [arg for arg in rest if arg.partition("=")[0] in _GO_OUTPUTS]
        if written:
            return f"go {subcommand} {written[0]} writes a file"
    return None


def _npm(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args, frozenset({"--prefix", "-w", "--workspace", "-C"}))
    if not subcommand:
        return None
    if subcommand not in _NPM_READS:
        return _refused("npm", subcommand)
    if subcommand in _NPM_INSTALLS and _packages(rest) and "--no-save" not in rest:
        return f"npm {subcommand} PACKAGE adds it to package.json (--no-save does not)"
    if subcommand == "audit" and rest[:1] == ("fix",):
        return "npm audit fix changes package.json and the lock file"
    if subcommand in ("config", "cache") and rest[:1] not in (("get",), ("list",), ("ls",), ("verify",)):
        return f"npm {subcommand} {' '.join(rest[:1])} changes npm's files"
    if subcommand == "version" and _packages(rest):
        return "npm version changes package.json"
    if subcommand == "pack" and "--dry-run" not in rest:
        return "npm pack writes a tarball"
    return None


def _packages(args: tuple[str, ...]) -> list[str]:
    return [arg for arg in args if not arg.startswith("-")]


def _pnpm_yarn(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args, frozenset({"--filter", "-F", "-C", "--dir", "--cwd"}))
    if subcommand in _PNPM_YARN_WRITES:
        return _refused(command, subcommand, "changes the project or its manifest")
    if subcommand in ("install", "i") and _packages(rest):
        return f"{command} {subcommand} PACKAGE changes package.json"
    if subcommand == "audit" and {"--fix", "fix"} & set(rest):
        return f"{command} audit --fix changes the manifest"
    if subcommand == "config" and rest[:1] not in (("get",), ("list",)):
        return f"{command} config changes its configuration"
    return None


def _pip(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args, frozenset({"--python", "--log", "--proxy", "--cache-dir",
                                               "--timeout", "--retries", "--exists-action"}))
    if not subcommand:
        return None
    if subcommand == "config" or subcommand == "cache":
        return None if rest[:1] in (("list",), ("get",), ("dir",), ("info",), ("debug",)) \
            else _refused(command, f"{subcommand} {' '.join(rest[:1])}".strip(), "changes pip's files")
    if subcommand in ("compile",) and not option_values(rest, "o", "o", ("--output-file",)):
        return None  # uv pip compile prints the lock
    if subcommand == "sync":
        return None  # uv pip sync installs
    if subcommand not in _PIP_READS:
        return _refused(command, subcommand)
    if subcommand == "install" and (option_values(rest, "t", "tcer", ("--target",))
                                    or {"--root", "--prefix", "--report"} & {a.partition("=")[0] for a in rest}):
        return f"{command} install --target/--root/--prefix writes files where it says"
    return None


def _uv(command: str, args: tuple[str, ...]) -> str | None:
    subcommand, rest = _first(args, frozenset({"--directory", "--project", "--cache-dir",
                                               "--config-file", "--color", "-p", "--python"}))
    if not subcommand:
        return None
    if subcommand not in _UV_READS:
        return _refused("uv", subcommand)
    if subcommand == "pip":
        return _pip("uv pip", rest)
    checked = {"--check", "--locked", "--dry-run", "--diff", "--frozen"} & set(rest)
    if subcommand in ("lock", "format") and not checked:
        return _refused("uv", subcommand, "rewrites files (not with --check)")
    if subcommand == "version" and (_packages(rest) or "--bump" in rest):
        return "uv version changes pyproject.toml"
    if subcommand == "export" and option_values(rest, "o", "o", ("--output-file",)):
        return "uv export -o writes a file"
    if subcommand == "python" and rest[:1] in (("pin",), ("uninstall",)):
        return f"uv python {rest[0]} changes files"
    if subcommand == "cache" and rest[:1] not in (("dir",),):
        return "uv cache changes its cache"
    if subcommand == "tool" and rest[:1] not in (("install",), ("list",), ("dir",), ("run",)):
        return "uv tool changes installed tools"
    return None


def _pytest(command: str, args: tuple[str, ...]) -> str | None:
    for arg in args:
        spelled = arg.partition("=")[0]
        if spelled in _PYTEST_WRITES:
            return f"{command} {spelled} writes a file"
        if spelled == "--cov-report" and not arg.partition("=")[2].startswith("term"):
            return f"{command} --cov-report writes a report file"
    return None


def _make(command: str, args: tuple[str, ...]) -> str | None:
    """make runs its recipes (the Makefile is the sandbox's business); -t touches targets."""
    if "--touch" in args or option_values(args, "t", "CfIjlWoE", ()):
        return f"{command} -t touches targets"
    return None


def _tsc(command: str, args: tuple[str, ...]) -> str | None:
    reads = {"--noEmit", "--listFilesOnly", "--showConfig", "-v", "--version", "-h", "--help",
             "--all"}
    return None if reads & set(args) else "tsc writes its output files (not with --noEmit)"


def _snapshots(command: str, args: tuple[str, ...]) -> str | None:
    updating = [arg for arg in args if arg.partition("=")[0] in _SNAPSHOT_UPDATES]
    return f"{command} {updating[0]} rewrites snapshots" if updating else None


_TOOLS = {"cargo": _cargo, "go": _go, "npm": _npm, "pnpm": _pnpm_yarn, "yarn": _pnpm_yarn,
          "pip": _pip, "pip3": _pip, "uv": _uv, "pytest": _pytest, "py.test": _pytest,
          "make": _make, "gmake": _make, "tsc": _tsc, "jest": _snapshots, "vitest": _snapshots,
          "playwright": _snapshots}
