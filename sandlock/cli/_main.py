"""Command line: a thin layer that turns policy files and options into a Policy and runs
a Sandbox (or prints or tests the policy: ``_policycli``).

Errors follow one contract: ``sandlock: error: OPTION: what is wrong`` (or
``FILE:LINE: key: what is wrong``) on one line and exit status 2 for bad input, 125
when the sandbox cannot be set up.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields

from ._errors import EXIT_SETUP, EXIT_TIMEOUT, EXIT_USAGE, PolicyError, SandlockError, error_line
from ._libc import PR_SET_DUMPABLE, prctl
from ._policy import HTTPS_INSPECT_MODES, Policy, flag_of

TYPE_CHECKING = False  # typing itself costs ~2 ms to import; checkers honour this spelling
if TYPE_CHECKING:
    from ._policyfile import PolicyFile

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(message)


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print the one-line error and exit (raises SystemExit)."""
    print(error_line(message), file=sys.stderr)
    raise SystemExit(code)


# Each command's one-line help, shown by `sandlock --help`.
_COMMANDS = {
    "run": "run COMMAND confined",
    "learn": "run COMMAND with the network open but observed, and write the policy it needs",
    "policy": "test what a policy allows",
    "profile": "list, show or validate policy profiles",
    "ca": "manage sandlock's persistent CA (init, show, export, install, uninstall)",
    "check": "show which kernel features sandlock can use",
    "selftest": "run real confined programs and check each protection",
}


def _build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``wanted``, only that command's options are built (argparse
    building every command's ~40 options costs milliseconds on each start)."""
    parser = _Parser(
        prog="sandlock",
        description="Run a command confined by Landlock and seccomp, without root.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version")
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    builders = {"run": _add_run_parser, "learn": _add_learn_parser,
                "policy": _add_policy_parser, "profile": _add_profile_parser}
    if wanted not in _COMMANDS:
        wanted = None  # build them all: --help, or argparse's error listing the choices
    for name, summary in _COMMANDS.items():
        builder = builders.get(name)
        if builder is not None and wanted in (None, name):
            builder(commands)
        else:
            # `sandlock ca` is handed to sandlock.ca before this parser; check and
            # selftest take no options.
            commands.add_parser(name, help=summary)
    return parser


def _add_run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help=_COMMANDS["run"],
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
    _option(fs, "fs_read", "-r", action="append", metavar="PATH",
            help="allow reading PATH (repeatable)")
    _option(fs, "fs_write", "-w", action="append", metavar="PATH",
            help="allow reading and writing PATH (repeatable)")
    _option(fs, "fs_deny", action="append", metavar="PATH",
            help="deny PATH even inside an allowed one (repeatable)")
    net = parser.add_argument_group("network (default: none)")
    _option(net, "net_allow", action="append", metavar="SPEC",
            help="allow [tcp://|udp://|icmp://]TARGET[:PORTS]; TARGET: host, IP, CIDR, "
            "[IPv6], * or empty; PORTS: 22,443,8000-8100 or * (repeatable)")
    _option(net, "net_deny", action="append", metavar="SPEC",
            help="allow everything but IP/CIDR[:PORTS] (repeatable; not with --net-allow)")
    _option(net, "net_allow_bind", action="append", metavar="PORTS",
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
    _option(confine, "allow_syscalls", action="append", metavar="NAME",
            help="DANGEROUS: lift sandlock's restriction on syscall NAME")
    _option(confine, "best_effort", action="store_true",
            help="run without Landlock or IPC scoping if the kernel lacks them, "
            "with a warning (seccomp stays required)")
    proc = parser.add_argument_group("process")
    _option(proc, "env", action="append", metavar="K=V",
            help="set an environment variable (repeatable)")
    _option(proc, "clean_env", action="store_true",
            help="keep only PATH HOME TERM LANG USER SHELL from the environment")
    _option(proc, "cwd", metavar="DIR", help="run COMMAND in DIR")
    _option(proc, "timeout", "-t", type=float, metavar="SECONDS",
            help="kill COMMAND and everything it started after SECONDS (exit 124)")
    return {"files": files, "network": net, "process": proc}


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
    profile = commands.add_parser("profile", help=_COMMANDS["profile"],
                                  description="Profiles are policy files by name: "
                                  "$XDG_CONFIG_HOME/sandlock/profiles/NAME.toml "
                                  "(default ~/.config/...), used with run -p NAME.")
    actions = profile.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser,
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
        help=_COMMANDS["learn"],
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
    policy = commands.add_parser("policy", help=_COMMANDS["policy"])
    actions = policy.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser,
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


def _policy_of(args: argparse.Namespace) -> Policy:
    """The files and profiles given, in order, then the options given on top of them."""
    options = {field.name: getattr(args, field.name) for field in fields(Policy)
               if hasattr(args, field.name)}
    if not args.sources:  # the usual run: no files, no merging machinery to import
        try:
            return Policy(**options)
        except PolicyError as exc:
            _fail(_option_error(exc))
    from ._policysources import from_options, merge

    try:
        return merge([*(_load_source(kind, value).settings for kind, value in args.sources),
                      from_options(options)])
    except SandlockError as exc:
        _fail(str(exc), exc.exit_code)


def _option_error(exc: PolicyError) -> str:
    return f"{flag_of(exc.field)}: {exc.message}"


def _load_source(kind: str, value: str) -> PolicyFile:
    from . import _policyfile, _profiles

    return _policyfile.load(_profiles.path_of(value) if kind == "profile" else value)


def _command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        _fail("run: missing COMMAND (usage: sandlock run [OPTIONS] -- COMMAND [ARG...])")
    return command


def _run(args: argparse.Namespace) -> int:
    policy = _policy_of(args)
    if args.print_policy:
        from ._policytoml import dumps

        sys.stdout.write(dumps(policy))
        return 0
    return _execute(policy, _command_of(args), audit=args.audit, quiet=args.quiet)


def _learn(args: argparse.Namespace) -> int:
    import tempfile

    from . import _learn
    from ._policytoml import dumps

    if args.collapse < 0:
        _fail("--collapse: expected 0 or more")
    base = _policy_of(args)
    command = _command_of(args)
    target = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(target) or not os.access(target, os.W_OK):
        _fail(f"--output: {args.output}: cannot write there")  # before running, not after
    with tempfile.TemporaryDirectory(prefix="sandlock-learn-") as directory:
        audit = os.path.join(directory, "audit.jsonl")
        try:
            observing = _learn.observing(base)
        except PolicyError as exc:
            _fail(_option_error(exc))
        code = _execute(observing, command, audit=audit, quiet=args.quiet)
        learned = _learn.learn(_learn.read_audit(audit), args.collapse)
    policy = _learn.applied(learned, base)
    try:
        with open(args.output, "w", encoding="utf-8") as file:
            # The program's name only: its arguments may carry tokens (see _learn).
            program = os.path.basename(command[0])
            file.write(dumps(policy, description=f"learned by `sandlock learn` from {program}"))
    except OSError as exc:
        _fail(f"--output: {args.output}: {exc.strerror}", EXIT_SETUP)
    if not args.quiet:
        print(f"sandlock: learned {len(learned.net_allow)} network and {len(learned.http_allow)} "
              f"HTTP rules; wrote {args.output}", file=sys.stderr)
    return code


def _execute(policy: Policy, command: list[str], *, audit: str | None, quiet: bool) -> int:
    """Run ``command`` under ``policy`` in the foreground; its exit status."""
    from ._process import TimeoutExpired
    from ._sandbox import Sandbox

    # sandlock holds the supervisor (and later the proxy's secrets): not readable or
    # writable through /proc/PID/mem, environ or fd by anything of the same user.
    # (Landlock already keeps the sandbox out; this also covers --best-effort runs.)
    prctl(PR_SET_DUMPABLE, 0)
    process = None
    pending: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if process is None:
            pending.append(signum)
        else:
            process.send_signal(signum)

    for sig in FORWARDED_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:  # keep nohup's SIGHUP ignored
            signal.signal(sig, forward)
    sandbox = Sandbox(policy, audit=audit, quiet=quiet)
    try:
        process = sandbox.start(command, foreground=True)
    except PolicyError as exc:
        _fail(_option_error(exc))
    except SandlockError as exc:
        _fail(str(exc), exc.exit_code)
    if not quiet:
        for warning in sandbox.warnings:
            print(f"sandlock: warning: {warning}", file=sys.stderr)
    for sig in pending:
        process.send_signal(sig)
    if process.start_error:
        print(f"sandlock: {process.start_error}", file=sys.stderr)
    try:
        code = process.wait(policy.timeout)
    except TimeoutExpired:
        print(f"sandlock: timeout: killed {command[0]!r} and everything it started "
              f"after {policy.timeout:g} s", file=sys.stderr)
        process.kill()
        process.wait()
        code = EXIT_TIMEOUT
    if not quiet:
        for notice in process.notices:
            print(notice, file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sandlock` command."""
    code = _dispatch(argv)
    if argv is None:
        # The console script: skip interpreter teardown, which costs several ms and
        # has nothing left to do (no buffered files but stdio, flushed here).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _dispatch(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["ca"]:  # its own parser; cryptography is never imported for a run
        from .ca._cli import main as ca

        return ca(argv[1:])
    parser = _build_parser(argv[0] if argv else None)
    # Known args, so that `policy test` takes requests after --net too (argparse stops
    # filling a positional list at the first option); anything else unknown is an error.
    args, extra = parser.parse_known_args(argv)
    if extra and (getattr(args, "requests", None) is None or extra[0].startswith("-")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.subcommand == "run":
        return _run(args)
    if args.subcommand == "check":
        from ._check import main as check

        return check()
    if args.subcommand == "selftest":
        from ._selftest import main as selftest

        return selftest()
    if args.subcommand == "profile":
        return _profile(args)
    if args.subcommand == "learn":
        return _learn(args)
    if args.subcommand == "policy":
        from ._policycli import policy_test

        return policy_test(_policy_of(args), [*args.requests, *extra], args.net)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _profile(args: argparse.Namespace) -> int:
    from . import _policycli

    if args.action == "list":
        return _policycli.profile_list()
    if args.action == "show":
        return _policycli.profile_show(args.name)
    return _policycli.profile_validate(args.files)
