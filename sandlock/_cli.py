"""Command line: a thin layer that turns options into a Policy and runs a Sandbox.

Errors follow one contract: ``sandlock: error: OPTION: what is wrong`` on one line and
exit status 2 for bad input, 125 when the sandbox cannot be set up.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from ._errors import EXIT_TIMEOUT, EXIT_USAGE, PolicyError, SandlockError
from ._libc import PR_SET_DUMPABLE, prctl
from ._policy import DEFAULT_HTTP_PORTS, HTTPS_INSPECT_MODES, Policy, flag_of

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(message)


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print the one-line error and exit (raises SystemExit)."""
    print(f"sandlock: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sandlock",
        description="Run a command confined by Landlock and seccomp, without root.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version")
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    _add_run_parser(commands)
    # Listed for --help only: `sandlock ca` is handed to sandlock.ca before this parser.
    commands.add_parser("ca", help="manage sandlock's persistent CA (init, show, export, "
                        "install, uninstall)")
    commands.add_parser("check", help="show which kernel features sandlock can use")
    commands.add_parser("selftest", help="run real confined programs and check each protection")
    return parser


def _add_run_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="run COMMAND confined",
        usage="sandlock run [OPTIONS] -- COMMAND [ARG...]",
        description="Run COMMAND confined. Exit status: COMMAND's own, 128+N if it died of "
        "signal N, 124 on timeout, 125 if the sandbox could not be set up, 126 if COMMAND "
        "cannot be executed, 127 if it is not found, 2 for invalid options.",
    )
    fs = run.add_argument_group("filesystem (with any -r/-w, nothing else is reachable)")
    fs.add_argument("-r", "--fs-read", action="append", default=[], metavar="PATH",
                    help="allow reading PATH (repeatable)")
    fs.add_argument("-w", "--fs-write", action="append", default=[], metavar="PATH",
                    help="allow reading and writing PATH (repeatable)")
    fs.add_argument("--fs-deny", action="append", default=[], metavar="PATH",
                    help="deny PATH even inside an allowed one (repeatable)")
    net = run.add_argument_group("network (default: none)")
    net.add_argument("--net-allow", action="append", default=[], metavar="SPEC",
                     help="allow [tcp://|udp://|icmp://]TARGET[:PORTS]; TARGET: host, IP, CIDR, "
                     "[IPv6], * or empty; PORTS: 22,443,8000-8100 or * (repeatable)")
    net.add_argument("--net-deny", action="append", default=[], metavar="SPEC",
                     help="allow everything but IP/CIDR[:PORTS] (repeatable; not with --net-allow)")
    net.add_argument("--net-allow-bind", action="append", default=[], metavar="PORTS",
                     help="ports COMMAND may bind and listen on, or * (repeatable)")
    net.add_argument("--unix-allow", action="append", default=[], metavar="PATH",
                     help="a host's pathname unix socket COMMAND may connect to (repeatable; "
                     "sockets the sandbox binds itself need none)")
    net.add_argument("--dns-server", action="append", default=[], metavar="IP[:PORT]",
                     help="resolve policy names with this server (default: /etc/resolv.conf)")
    net.add_argument("--resolve", action="append", default=[], metavar="HOST=IP[,IP...]",
                     help="pin HOST to these addresses without asking DNS (repeatable)")
    net.add_argument("--dns-allow-private", action="store_true",
                     help="let DNS answers pin loopback and private-range addresses")
    http = run.add_argument_group("HTTP(S) through sandlock's proxy (see docs/http.md)")
    http.add_argument("--http-allow", action="append", default=[], metavar="RULE",
                      help="allow requests matching 'METHODS HOST[/PATH]', e.g. "
                      "'GET api.github.com/repos/*'; implies reaching HOST on the HTTP ports "
                      "(repeatable)")
    http.add_argument("--http-deny", action="append", default=[], metavar="RULE",
                      help="deny requests matching 'METHODS HOST[/PATH]'; wins over "
                      "--http-allow (repeatable)")
    http.add_argument("--http-port", action="append", metavar="PORT",
                      help="a port HTTP rules govern (repeatable; default: 80 and 443)")
    http.add_argument("--https-inspect", choices=HTTPS_INSPECT_MODES, default="auto",
                      help="auto: decrypt HTTPS only for hosts whose rules need the method "
                      "or path; on: always; off: never (SNI checks only)")
    http.add_argument("--upstream-ca", action="append", default=[], metavar="FILE",
                      help="also trust these CA certificates for upstream servers")
    http.add_argument("--http-ca", metavar="CERT", help="sign with this CA (with --http-key)")
    http.add_argument("--http-key", metavar="KEY", help="the key of --http-ca")
    http.add_argument("--no-ca-env", dest="ca_env", action="store_false",
                      help="do not point the command's TLS clients at the sandbox CA")
    http.add_argument("--http-ca-out", metavar="PATH",
                      help="write the sandbox CA certificate (never its key) to PATH")
    net.add_argument("--audit", metavar="FILE",
                     help="append one JSON line per network decision to FILE")
    confine = run.add_argument_group("confinement")
    confine.add_argument("--allow-ipc", action="store_true",
                         help="allow abstract unix sockets and signals to processes outside")
    confine.add_argument("--allow-syscall", action="append", default=[], metavar="NAME",
                         help="DANGEROUS: lift sandlock's restriction on syscall NAME")
    confine.add_argument("--best-effort", action="store_true",
                         help="run without Landlock or IPC scoping if the kernel lacks them, "
                         "with a warning (seccomp stays required)")
    proc = run.add_argument_group("process")
    proc.add_argument("--env", action="append", default=[], metavar="K=V",
                      help="set an environment variable (repeatable)")
    proc.add_argument("--clean-env", action="store_true",
                      help="keep only PATH HOME TERM LANG USER SHELL from the environment")
    proc.add_argument("--cwd", metavar="DIR", help="run COMMAND in DIR")
    proc.add_argument("-t", "--timeout", type=float, metavar="SECONDS",
                      help="kill COMMAND and everything it started after SECONDS (exit 124)")
    proc.add_argument("-q", "--quiet", action="store_true", help="no notices on stderr")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG...]")


class _VersionAction(argparse.Action):
    """--version, looked up only when asked (importlib.metadata costs ~20 ms to import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"sandlock {version('sandlock')}")
        except PackageNotFoundError:
            print("sandlock (not installed)")
        parser.exit()


def _policy_from(args: argparse.Namespace) -> Policy:
    try:
        return Policy(
            fs_read=tuple(args.fs_read),
            fs_write=tuple(args.fs_write),
            fs_deny=tuple(args.fs_deny),
            allow_ipc=args.allow_ipc,
            allow_syscalls=tuple(args.allow_syscall),
            env=tuple(args.env),
            clean_env=args.clean_env,
            cwd=args.cwd,
            timeout=args.timeout,
            best_effort=args.best_effort,
            net_allow=tuple(args.net_allow),
            net_deny=tuple(args.net_deny),
            net_allow_bind=tuple(args.net_allow_bind),
            unix_allow=tuple(args.unix_allow),
            dns_servers=tuple(args.dns_server),
            resolve=tuple(args.resolve),
            dns_allow_private=args.dns_allow_private,
            http_allow=tuple(args.http_allow),
            http_deny=tuple(args.http_deny),
            http_ports=tuple(args.http_port or DEFAULT_HTTP_PORTS),
            https_inspect=args.https_inspect,
            upstream_ca=tuple(args.upstream_ca),
            http_ca=args.http_ca,
            http_key=args.http_key,
            ca_env=args.ca_env,
            http_ca_out=args.http_ca_out,
        )
    except PolicyError as exc:
        _fail(f"{flag_of(exc.field)}: {exc.message}")


def _command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        _fail("run: missing COMMAND (usage: sandlock run [OPTIONS] -- COMMAND [ARG...])")
    return command


def _run(args: argparse.Namespace) -> int:
    from ._process import TimeoutExpired
    from ._sandbox import Sandbox

    policy = _policy_from(args)
    command = _command_of(args)
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
    sandbox = Sandbox(policy, audit=args.audit, quiet=args.quiet)
    try:
        process = sandbox.start(command, foreground=True)
    except PolicyError as exc:
        _fail(f"{flag_of(exc.field)}: {exc.message}")
    except SandlockError as exc:
        _fail(str(exc), exc.exit_code)
    if not args.quiet:
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
    if not args.quiet:
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
    args = _build_parser().parse_args(argv)
    if args.subcommand == "run":
        return _run(args)
    if args.subcommand == "check":
        from ._check import main as check

        return check()
    if args.subcommand == "selftest":
        from ._selftest import main as selftest

        return selftest()
    _build_parser().print_help(sys.stderr)
    return EXIT_USAGE
