"""The command line's parser: every command and option (one --help group per
concern), built for the command asked for only. Bad options are one line and exit 2.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from .._errors import fail
from ._options import GROUPS, POLICY_OPTIONS, RUN_OPTIONS, Option, whole_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, sized without ``shutil``: argparse builds one for every
    option it adds, and importing shutil (with bz2, lzma, fnmatch) cost ~2.5 ms of each
    start. Same width rule as shutil.get_terminal_size: $COLUMNS, the terminal, 80."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


def _columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands: dict[str, Parser] = {}  # (the top parser's) each command's own

    def error(self, message: str) -> None:  # type: ignore[override]
        """argparse's messages, in sandlock's form: ``OPTION: what is wrong``."""
        fail(_our_form(message))

    def reject_unknown(self, command: str | None, extra: list[str]) -> None:
        """Arguments no option of ``command`` takes: the first unknown option, with the
        one it probably meant (as policy files do for their keys)."""
        options = [word for word in extra if word.startswith("-")]
        if not options:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        known = _long_flags(self.commands.get(command or "", self))
        unknown = options[0].partition("=")[0]
        close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else \
            f"`sandlock {command} --help` lists them" if command else "`sandlock --help` lists them"
        fail(f"{unknown}: no such option: {hint}")


def _long_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The --options of ``parser`` and of its commands' parsers (``policy test``)."""
    flags = []
    for action in parser._actions:
        flags += [flag for flag in action.option_strings if flag.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags += _long_flags(command)
    return list(dict.fromkeys(flags))


def _our_form(message: str) -> str:
    """``argument -t/--timeout: expected a number, got 'abc'`` -> ``--timeout: expected
    a number, got 'abc'``; an invalid choice gets the choice it probably meant."""
    flags, colon, problem = message.partition(": ")
    if not flags.startswith("argument ") or not colon:
        return message
    flag = flags.removeprefix("argument ").split("/")[-1]
    if problem == "expected one argument":
        return f"{flag}: expected a value"
    choice = re.fullmatch(r"invalid choice: '(.*)' \(choose from (.*)\)", problem)
    if choice:
        choices = re.findall(r"'([^']*)'", choice[2])
        close = difflib.get_close_matches(choice[1], choices, n=1, cutoff=0.6)
        if close:
            return f"{flag}: invalid choice '{choice[1]}': did you mean '{close[0]}'?"
    return f"{flag}: {problem}"


# Each command's one-line help, shown by `sandlock --help`.
COMMANDS = {
    "run": "run COMMAND confined",
    "learn": "run COMMAND with the network open but observed, and write the policy it needs",
    "policy": "test what a policy allows",
    "profile": "list, show or validate policy profiles",
    "workspace": "list kept copy-on-write workspaces; diff, commit or abort one",
    "ps": "list your running named sandboxes (run --name)",
    "inspect": "print a running named sandbox's policy",
    "kill": "kill a running named sandbox and everything it started",
    "ca": "manage sandlock's persistent CA (init, show, export, install, uninstall)",
    "image": "pull a registry's image for --image anew, or list those pulled (pull, ls)",
    "check": "show which kernel features sandlock can use",
    "selftest": "run real confined programs and check each protection",
    "sandbox": "LocalGPT's names: `sandbox status` is check, `sandbox test` is selftest",
    "vet": "check an agent's shell command before it runs (cd, redirects, syntax; --verify: changes)",
    "mcp": "serve a confined shell to an AI client (Model Context Protocol, stdio)",
}


def build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``wanted``, only that command's options are built (argparse
    building every command's ~40 options costs milliseconds on each start).

    While it is built, argparse's own strings ("options", "show this help message and
    exit"...) are taken as they are: argparse passes each through gettext, which looks
    for message catalogues on disk at every call (~2.5 ms per start, for catalogues
    Python does not ship). Its messages at parse time still go through gettext."""
    translate = argparse._
    argparse._ = _as_written
    try:
        return _build(wanted)
    finally:
        argparse._ = translate


def _as_written(message: str) -> str:
    return message


def _build(wanted: str | None) -> argparse.ArgumentParser:
    parser = Parser(
        prog="sandlock",
        description="Run a command confined by Landlock and seccomp, without root.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version")
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=Parser)
    builders = {"run": _add_run_parser, "learn": _add_learn_parser,
                "policy": _add_policy_parser, "profile": _add_profile_parser,
                "vet": _add_vet_parser, "workspace": _add_workspace_parser,
                "ps": _add_ps_parser, "inspect": _add_inspect_parser, "kill": _add_kill_parser,
                "sandbox": _add_sandbox_parser, "mcp": _add_mcp_parser}
    if wanted not in COMMANDS:
        wanted = None  # build them all: --help, or argparse's error listing the choices
    for name, summary in COMMANDS.items():
        builder = builders.get(name)
        if builder is not None and wanted in (None, name):
            builder(commands)
        else:
            # `sandlock ca` is handed to sandlock.ca before this parser; check and
            # selftest take no options.
            commands.add_parser(name, help=summary)
    parser.commands = dict(commands.choices)  # type: ignore[arg-type]
    return parser


def _add_sandbox_parser(commands: argparse._SubParsersAction) -> None:
    sandbox = commands.add_parser("sandbox", help=COMMANDS["sandbox"],
                                  description="The LocalGPT shell sandbox spec's diagnostic "
                                  "commands, as sandlock's own.")
    actions = sandbox.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                     required=True)
    actions.add_parser("status", help=COMMANDS["check"] + " (= sandlock check)")
    actions.add_parser("test", help=COMMANDS["selftest"] + " (= sandlock selftest)")


def _add_vet_parser(commands: argparse._SubParsersAction) -> None:
    vet = commands.add_parser(
        "vet", help=COMMANDS["vet"],
        usage="sandlock vet [--verify] [--permissive] [--json] -- 'COMMAND'",
        description="Decide whether an agent's bash command may run (docs/vet.md): a first "
        "pass, not a boundary. Exit status: 0 allowed, 1 refused (the reason on stdout), "
        "2 for invalid options.")
    vet.add_argument("--verify", action="store_true",
                     help="verify mode: also refuse commands that change files or the repository")
    vet.add_argument("--permissive", action="store_true",
                     help="read code built when the line runs ($CMD, bash -c \"$x\") as written "
                     "instead of refusing it")
    vet.add_argument("--json", action="store_true",
                     help='print {"allowed": ..., "code": ..., "reason": ...}')
    vet.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND")


def _add_mcp_parser(commands: argparse._SubParsersAction) -> None:
    mcp = commands.add_parser(
        "mcp", help=COMMANDS["mcp"],
        usage="sandlock mcp [--policy FILE | -p PROFILE] [--workdir DIR] [OPTIONS]",
        description="Serve the Model Context Protocol on stdin/stdout: an AI client's "
        "run_command calls are vetted, then each runs confined by this policy (default: "
        "the default workspace of the current directory, or --cwd DIR; no network). "
        "--timeout and --max-output bound each call. docs/mcp.md.")
    groups = _add_policy_options(mcp)
    for option, default in RUN_OPTIONS:
        if option.dest in ("audit", "quiet"):
            _add(groups[option.group], option, default=default)


def _add_run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help=COMMANDS["run"],
        usage="sandlock run [OPTIONS] -- COMMAND [ARG...]",
        description="Run COMMAND confined. Exit status: COMMAND's own, 128+N if it died of "
        "signal N, 124 on timeout, 125 if the sandbox could not be set up, 126 if COMMAND "
        "cannot be executed, 127 if it is not found, 2 for invalid options.",
    )
    groups = _add_policy_options(run)
    for option, default in RUN_OPTIONS:
        _add(groups[option.group], option, default=default)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG...]")


def _add_policy_options(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Policy files and profiles, then one option per Policy field (its ``dest`` is the
    field, its flag the field's own): only options given are set, so that they add to
    or override the files (docs/policy.md)."""
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    for option in POLICY_OPTIONS:
        if option.action == "source":
            groups[option.group].add_argument(*option.flags, action=_SourceAction,
                                              const=option.const, metavar=option.metavar,
                                              help=option.help)
        else:
            _add(groups[option.group], option, default=argparse.SUPPRESS)
    return groups


def _add(group: argparse._ArgumentGroup, option: Option, default: object) -> None:
    extra = {name: getattr(option, name) for name in ("metavar", "choices")
             if getattr(option, name) is not None}
    if option.type is not None:
        extra["type"] = _saying_why(option.type)
    group.add_argument(*option.flags, dest=option.dest, action=option.action, default=default,
                       help=option.help, **extra)


def _saying_why(convert: Callable[[str], object]) -> Callable[[str], object]:
    """``convert`` whose ValueError argparse shows as it is (``--timeout: expected a
    number, got '1e10' ...``), not as "invalid number value"."""

    def converted(text: str) -> object:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return converted


class _SourceAction(argparse.Action):
    """--policy FILE and --profile NAME, in one list (``sources``) in the order given."""

    def __init__(self, option_strings: list[str], dest: str, const: str, **kwargs: object) -> None:
        super().__init__(option_strings, "sources", const=const, default=[], **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 value: object, option_string: str | None = None) -> None:
        namespace.sources = [*namespace.sources, (self.const, value)]


def _add_profile_parser(commands: argparse._SubParsersAction) -> None:
    profile = commands.add_parser("profile", help=COMMANDS["profile"],
                                  description="Profiles are policy files by name: "
                                  "$XDG_CONFIG_HOME/sandlock/profiles/NAME.toml "
                                  "(default ~/.config/...), used with run -p NAME.")
    actions = profile.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                     required=True)
    actions.add_parser("list", help="the profiles there are, with their descriptions")
    show = actions.add_parser("show", help="print a profile's file")
    show.add_argument("name", metavar="NAME")
    validate = actions.add_parser("validate", help="check policy files (exit 2 if any is "
                                  "invalid)")
    validate.add_argument("files", nargs="+", metavar="FILE")


# ps, inspect, kill (docs/usage.md, "Named sandboxes"): exit status 1 when no running
# sandbox has the NAME, 2 for invalid input.
def _add_ps_parser(commands: argparse._SubParsersAction) -> None:
    ps = commands.add_parser("ps", help=COMMANDS["ps"])
    ps.add_argument("--json", action="store_true", help="one JSON array of the sandboxes")


def _add_inspect_parser(commands: argparse._SubParsersAction) -> None:
    inspect = commands.add_parser("inspect", help=COMMANDS["inspect"])
    inspect.add_argument("name", metavar="NAME")
    inspect.add_argument("--toml", action="store_true",
                         help="as a policy file (which `sandlock run --policy` takes)")


def _add_kill_parser(commands: argparse._SubParsersAction) -> None:
    kill = commands.add_parser("kill", help=COMMANDS["kill"])
    kill.add_argument("name", metavar="NAME")
    kill.add_argument("-s", "--signal", default="KILL", metavar="SIG",
                      help="the signal for the sandbox's command (default KILL: the whole "
                      "sandbox ends at once; another ends it when the command exits)")


def _add_workspace_parser(commands: argparse._SubParsersAction) -> None:
    workspace = commands.add_parser(
        "workspace", help=COMMANDS["workspace"],
        description="The workspaces of `run --workdir` that were kept (--on-exit keep, "
        "--on-error keep, conflicts, an interrupted run), in "
        "$XDG_STATE_HOME/sandlock/workspaces (docs/workspace.md).")
    workspace.add_argument("--fs-storage", metavar="DIR", dest="fs_storage",
                           help="the store the runs used with --fs-storage DIR")
    actions = workspace.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                       required=True)
    actions.add_parser("list", help="the workspaces, with their directory, state and changes")
    diff = actions.add_parser("diff", help="what a workspace changes (A added, M modified, "
                              "D deleted), or with --patch a unified diff")
    diff.add_argument("id", metavar="ID")
    diff.add_argument("--patch", action="store_true", help="show a unified diff (diff -ruN)")
    commit = actions.add_parser("commit", help="apply a workspace to its directory, then "
                                "remove it (what changed there since its run is left aside)")
    commit.add_argument("id", metavar="ID")
    commit.add_argument("--force", action="store_true",
                        help="apply even what changed in the directory since the run")
    commit.add_argument("--allow-autorun-writes", action="store_true",
                        help="apply autorun files and repositories it made as they are "
                        "(by default quarantined first, as at the end of a run)")
    abort = actions.add_parser("abort", help="remove a workspace without applying it")
    abort.add_argument("id", metavar="ID")


def _add_learn_parser(commands: argparse._SubParsersAction) -> None:
    learn = commands.add_parser(
        "learn",
        help=COMMANDS["learn"],
        usage="sandlock learn (-o FILE | --merge FILE) [--collapse N] [OPTIONS] -- COMMAND [ARG...]",
        description="Run COMMAND confined as by `run`, but with every network destination "
        "allowed and every HTTP(S) request inspected and recorded; then write to FILE the "
        "smallest policy (the options and files given, plus what COMMAND did) that allows "
        "it again. Exit status: COMMAND's (see `run`). docs/policy.md, learn mode.",
    )
    groups = _add_policy_options(learn)
    groups["files"].add_argument("-o", "--output", metavar="FILE",
                                 help="where to write the learned policy (TOML)")
    groups["files"].add_argument("--merge", metavar="FILE",
                                 help="start from the policy file FILE and write it back with "
                                 "what COMMAND needed added (-o FILE2 writes elsewhere)")
    groups["files"].add_argument("--collapse", type=_saying_why(whole_number), default=3,
                                 metavar="N",
                                 help="a path level with N or more siblings becomes '*' "
                                 "(default 3; 0: keep every path)")
    groups["process"].add_argument("-q", "--quiet", action="store_true",
                                   help="no notices on stderr")
    learn.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG...]")


def _add_policy_parser(commands: argparse._SubParsersAction) -> None:
    policy = commands.add_parser("policy", help=COMMANDS["policy"])
    actions = policy.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                    required=True)
    test = actions.add_parser(
        "test",
        help="ALLOW or DENY, and the deciding rule, for each request or connection",
        usage="sandlock policy test [POLICY OPTIONS] [METHOD] URL... [--net ENDPOINT]...",
        description="Decide each request, then each --net connection, as a run with this "
        "policy would, and print ALLOW or DENY with the rule that decided. Nothing is "
        "resolved or sent. Exit status: 0 if everything is allowed, 1 if anything is "
        "denied, 2 for invalid input.",
    )
    _add_policy_options(test)
    test.add_argument("--net", action="append", default=[], metavar="ENDPOINT",
                      help="a connection to test: [tcp://|udp://|icmp://]HOST[:PORT] "
                      "(repeatable; no scheme: TCP)")
    test.add_argument("requests", nargs="*", metavar="REQUEST",
                      help="'[METHOD] URL', e.g. 'POST https://api.github.com/repos/x/y/issues' "
                      "(no METHOD: GET)")


class _VersionAction(argparse.Action):
    """--version, looked up only when asked (importlib.metadata costs ~20 ms to import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"sandlock {version('sandlock')}")
        except PackageNotFoundError:
            print("sandlock (not installed)")
        parser.exit()
