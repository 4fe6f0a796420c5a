"""The command line's parser: every command and option (one --help group per
concern), built for the command asked for only. Bad options are one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from .._errors import EXIT_USAGE, error_line
from ..policy import HTTPS_INSPECT_MODES, MODES, flag_of


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

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(message)


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print the one-line error and exit (raises SystemExit)."""
    print(error_line(message), file=sys.stderr)
    raise SystemExit(code)


# Each command's one-line help, shown by `sandlock --help`.
COMMANDS = {
    "run": "run COMMAND confined",
    "learn": "run COMMAND with the network open but observed, and write the policy it needs",
    "policy": "test what a policy allows",
    "profile": "list, show or validate policy profiles",
    "ca": "manage sandlock's persistent CA (init, show, export, install, uninstall)",
    "check": "show which kernel features sandlock can use",
    "selftest": "run real confined programs and check each protection",
    "vet": "check an agent's shell command before it runs (cd, redirects, syntax; --verify: changes)",
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
                "vet": _add_vet_parser}
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
    return parser


def _add_vet_parser(commands: argparse._SubParsersAction) -> None:
    vet = commands.add_parser(
        "vet", help=COMMANDS["vet"], usage="sandlock vet [--verify] [--json] -- 'COMMAND'",
        description="Decide whether an agent's bash command may run (docs/vet.md): a first "
        "pass, not a boundary. Exit status: 0 allowed, 1 refused (the reason on stdout), "
        "2 for invalid options.")
    vet.add_argument("--verify", action="store_true",
                     help="verify mode: also refuse commands that change files or the repository")
    vet.add_argument("--json", action="store_true",
                     help='print {"allowed": ..., "code": ..., "reason": ...}')
    vet.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND")


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
    groups["files"].add_argument("--print-policy", action="store_true",
                                 help="print the effective policy as a policy file (TOML) "
                                 "and exit without running anything")
    groups["network"].add_argument("--audit", metavar="FILE",
                                   help="append one JSON line per network decision to FILE")
    groups["process"].add_argument("-q", "--quiet", action="store_true",
                                   help="no notices on stderr")
    groups["process"].add_argument("-i", "--interactive", action="store_true",
                                   help="keep the terminal and stdin (always the case: "
                                   "COMMAND gets both, and job control works)")
    groups["filesystem"].add_argument("--dangerously-allow-full-access", action="store_true",
                                      help="consent to --mode full-access (announced on "
                                      "stderr and in the audit log)")
    groups["process"].add_argument("--pass-fd", dest="pass_fds", type=int, action="append",
                                   default=[], metavar="N",
                                   help="let COMMAND inherit descriptor N (repeatable; "
                                   "every other one above 2 is closed)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG...]")


def _add_policy_options(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Policy files and profiles, then one option per Policy field (its ``dest`` is the
    field, its flag the field's own): only options given are set, so that they add to
    or override the files (docs/policy.md)."""
    files = parser.add_argument_group("policy files (docs/policy.md; options add to them)")
    files.add_argument("--policy", action=_SourceAction, const="file", metavar="FILE",
                       help="read the policy from FILE (repeatable: later ones add to or "
                       "override earlier ones)")
    files.add_argument("-p", "--profile", action=_SourceAction, const="profile",
                       metavar="NAME", help="read the profile NAME, "
                       "$XDG_CONFIG_HOME/sandlock/profiles/NAME.toml (repeatable)")
    fs = parser.add_argument_group("filesystem (with any -r/-w, nothing else is reachable)")
    _option(fs, "fs_readable", "-r", action="append", metavar="PATH",
            help="allow reading PATH (repeatable)")
    _option(fs, "fs_writable", "-w", action="append", metavar="PATH",
            help="allow reading and writing PATH (repeatable)")
    _option(fs, "fs_denied", action="append", metavar="PATH",
            help="deny PATH even inside an allowed one (repeatable)")
    _option(fs, "mode", choices=MODES,
            help="workspace-write (default): the default workspace; read-only: the same "
            "reads, no writes; full-access: no confinement (with "
            "--dangerously-allow-full-access)")
    _option(fs, "allow_autorun_writes", action="store_true",
            help="let write grants cover git hooks and config, shell start-up files, "
            "autostart entries and editor tasks (read-only by default)")
    net = parser.add_argument_group("network (default: none)")
    _option(net, "net_allow", action="append", metavar="SPEC",
            help="allow [tcp://|udp://|icmp://]TARGET[:PORTS]; TARGET: host, IP, CIDR, "
            "[IPv6], * or empty; PORTS: 22,443,8000-8100 or * (repeatable)")
    _option(net, "net_allow_hosts", action="append", metavar="HOST",
            help="allow HOST on every port, TCP and UDP (pinned like --net-allow; repeatable)")
    _option(net, "net_connect", action="append", metavar="PORTS",
            help="allow TCP connections to any host on PORTS (repeatable)")
    _option(net, "net_deny", action="append", metavar="SPEC",
            help="allow everything but IP/CIDR[:PORTS] (repeatable; not with the allows)")
    _option(net, "net_bind", "--net-allow-bind", action="append", metavar="PORTS",
            help="ports COMMAND may bind and listen on, or * (repeatable)")
    _option(net, "unix_allow", action="append", metavar="PATH",
            help="a host's pathname unix socket COMMAND may connect to (repeatable; "
            "sockets the sandbox binds itself need none)")
    _option(net, "dns_servers", action="append", metavar="IP[:PORT]",
            help="resolve policy names with this server (default: /etc/resolv.conf)")
    _option(net, "resolve", action="append", metavar="HOST=IP[,IP...]",
            help="pin HOST to these addresses without asking DNS (repeatable)")
    _option(net, "dns_allow_private", action="store_true",
            help="let DNS answers pin loopback and private-range addresses")
    http = parser.add_argument_group("HTTP(S) through sandlock's proxy (see docs/http.md)")
    _option(http, "http_allow", action="append", metavar="RULE",
            help="allow requests matching 'METHODS HOST[/PATH]', e.g. "
            "'GET api.github.com/repos/*'; implies reaching HOST on the HTTP ports "
            "(repeatable)")
    _option(http, "http_deny", action="append", metavar="RULE",
            help="deny requests matching 'METHODS HOST[/PATH]'; wins over "
            "--http-allow (repeatable)")
    _option(http, "http_ports", action="append", metavar="PORT",
            help="a port HTTP rules govern (repeatable; default: 80 and 443)")
    _option(http, "https_inspect", choices=HTTPS_INSPECT_MODES,
            help="auto (default): decrypt HTTPS only for hosts whose rules need the method "
            "or path; on: always; off: never (SNI checks only)")
    _option(http, "upstream_ca", action="append", metavar="FILE",
            help="also trust these CA certificates for upstream servers")
    _option(http, "http_ca", metavar="CERT", help="sign with this CA (with --http-key)")
    _option(http, "http_key", metavar="KEY", help="the key of --http-ca")
    _option(http, "ca_env", action="store_false",
            help="do not point the command's TLS clients at the sandbox CA")
    _option(http, "http_ca_out", metavar="PATH",
            help="write the sandbox CA certificate (never its key) to PATH")
    confine = parser.add_argument_group("confinement")
    _option(confine, "allow_ipc", action="store_true",
            help="allow abstract unix sockets and signals to processes outside")
    _option(confine, "isolate_ipc", action="store_true",
            help="isolate abstract unix sockets (the default; --allow-ipc relaxes it)")
    _option(confine, "isolate_signals", action="store_true",
            help="isolate signals (the default; --allow-ipc relaxes it)")
    _option(confine, "allow_sysv_ipc", action="store_true",
            help="allow SysV IPC and POSIX message queues (machine-wide: a channel to "
            "other processes)")
    _option(confine, "allow_syscalls", action="append", metavar="NAME",
            help="DANGEROUS: lift sandlock's restriction on syscall NAME")
    _option(confine, "best_effort", action="store_true",
            help="run without Landlock or IPC scoping if the kernel lacks them, "
            "with a warning (seccomp stays required)")
    proc = parser.add_argument_group("process")
    _option(proc, "env", action="append", metavar="K=V|NAME",
            help="set an environment variable, or pass NAME from sandlock's environment "
            "(for secrets: not in sandlock's command line) (repeatable)")
    _option(proc, "clean_env", action="store_true",
            help="keep only PATH HOME TERM LANG USER SHELL from the environment")
    _option(proc, "cwd", "--workdir", metavar="DIR",
            help="run COMMAND in DIR (the default workspace's writable directory)")
    _option(proc, "timeout", "-t", type=float, metavar="SECONDS",
            help="kill COMMAND and everything it started after SECONDS (exit 124)")
    return {"files": files, "filesystem": fs, "network": net, "process": proc}


def _option(group: argparse._ArgumentGroup, field: str, *short: str, **kwargs: object) -> None:
    """The option of Policy ``field``; absent from the parsed namespace unless given."""
    group.add_argument(*short, flag_of(field), dest=field, default=argparse.SUPPRESS, **kwargs)


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


def _add_learn_parser(commands: argparse._SubParsersAction) -> None:
    learn = commands.add_parser(
        "learn",
        help=COMMANDS["learn"],
        usage="sandlock learn -o FILE [--collapse N] [OPTIONS] -- COMMAND [ARG...]",
        description="Run COMMAND confined as by `run`, but with every network destination "
        "allowed and every HTTP(S) request inspected and recorded; then write to FILE the "
        "smallest policy (the options and files given, plus what COMMAND did) that allows "
        "it again. Exit status: COMMAND's (see `run`). docs/policy.md, learn mode.",
    )
    groups = _add_policy_options(learn)
    groups["files"].add_argument("-o", "--output", required=True, metavar="FILE",
                                 help="where to write the learned policy (TOML)")
    groups["files"].add_argument("--collapse", type=int, default=3, metavar="N",
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
