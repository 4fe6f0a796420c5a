"""Command line: a thin layer that turns policy files and options into a Policy and runs
a Sandbox (or prints or tests the policy: ``cli._policy``).

Errors follow one contract: ``sandlock: error: OPTION: what is wrong`` (or
``FILE:LINE: key: what is wrong``) on one line and exit status 2 for bad input, 125
when the sandbox cannot be set up.
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import gc
import os
import sys

from .._errors import (
    EXIT_TIMEOUT,
    EXIT_USAGE,
    PolicyError,
    SandlockError,
    fail,
    tell,
    visible,
)
from ..kernel import PR_SET_DUMPABLE, prctl
from ..policy import POLICY_FIELDS, Policy, flag_of
from ._options import quick_run_args

TYPE_CHECKING = False  # typing itself costs ~2 ms to import; checkers honour this spelling
if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Sequence

    from ..policyfiles import PolicyFile
    from ..process import Capture
    from ._runreport import Indicator

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _options_of(args: Namespace) -> dict[str, object]:
    """The policy options given on the command line (each a Policy field)."""
    return {name: getattr(args, name) for name in POLICY_FIELDS if hasattr(args, name)}


def _policy_of(args: Namespace) -> Policy:
    """The files and profiles given, in order, then the options given on top of them."""
    options = _options_of(args)
    if not args.sources:  # the usual run: no files, no merging machinery to import
        try:
            return Policy(**options)
        except PolicyError as exc:
            fail(_option_error(exc))
    from ..policyfiles import from_options, merge

    try:
        return merge([*(_load_source(kind, value).settings for kind, value in args.sources),
                      from_options(options)])
    except SandlockError as exc:
        fail(str(exc), exc.exit_code)


def _option_error(exc: PolicyError) -> str:
    return f"{flag_of(exc.field)}: {exc.message}"


def _load_source(kind: str, value: str) -> PolicyFile:
    from ..policyfiles import load_policy_file

    return load_policy_file(_source_file(kind, value))


def _source_file(kind: str, value: str) -> str:
    from ..policyfiles import profile_path

    return profile_path(value) if kind == "profile" else value


def _policy_files(args: Namespace) -> tuple[str, ...]:
    """The files the policy was read from (after _policy_of: each one exists)."""
    return tuple(_source_file(kind, value) for kind, value in args.sources)


def _command_of(args: Namespace) -> list[str]:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        fail("run: missing COMMAND (usage: sandlock run [OPTIONS] -- COMMAND [ARG...])")
    return command


def _run(args: Namespace) -> int:
    policy = _policy_of(args)
    if args.print_policy:
        from ..policyfiles import dumps

        sys.stdout.write(dumps(policy, comments=_widening_notes(policy)))
        return 0
    if args.no_supervisor:
        from ._unsupervised import exec_confined

        return exec_confined(policy, _command_of(args), args)
    command = _command_of(args)
    code = _execute(policy, command, audit=args.audit, quiet=args.quiet,
                    pass_fds=args.pass_fds, full_access=args.dangerously_allow_full_access,
                    dry_run=args.dry_run, policy_files=_policy_files(args), name=args.name,
                    status_fd=args.status_fd)
    files = [value for kind, value in args.sources if kind == "file"]
    if code != 0 and files and not args.quiet:  # (upstream's hint)
        import shlex

        tell(visible(f"sandlock: hint: if a denial caused this, `sandlock learn --merge "
                     f"{shlex.quote(files[-1])} -- {shlex.join(command)}` adds the network "
                     "and HTTP access the command needs to that policy file"))
    return code


def _vet(args: Namespace) -> int:
    """0 allowed, 1 refused; the decision on stdout (a line, or JSON)."""
    words = list(args.command)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        fail("vet: missing COMMAND (usage: sandlock vet [--verify] -- 'COMMAND')")
    from .. import shellpolicy

    decide = shellpolicy.decide_verify if args.verify else shellpolicy.decide
    decision = decide(" ".join(words), permissive=args.permissive)
    if args.json:
        import json

        print(json.dumps({"allowed": decision.allowed, "code": decision.code,
                          "reason": decision.reason}))
    else:
        # (the reason quotes the command: what does not show is escaped, the verdict one line)
        print("allowed" if decision.allowed
              else visible(f"refused ({decision.code}): {decision.reason}"))
    return 0 if decision.allowed else 1


def _widening_notes(policy: Policy) -> list[str]:
    """What SANDLOCK_FS_READ/WRITE add to this run (not part of the policy: they are
    this environment's)."""
    if not policy.uses_default_workspace:
        return []
    from ..confinement import widening

    return [f"{name} adds to the default workspace: {':'.join(paths)}"
            for name, paths in widening().items()]


def _execute(policy: Policy, command: list[str], *, audit: str | None, quiet: bool,
             pass_fds: list[int] | tuple[int, ...] = (), full_access: bool = False,
             dry_run: bool = False, policy_files: tuple[str, ...] = (), name: str | None = None,
             status_fd: int | None = None) -> int:
    """Run ``command`` under ``policy`` in the foreground; its exit status.
    ``policy_files``: those it was read from (read-only in the sandbox); ``name``: --name;
    ``status_fd``: where to write how it ended (``_runreport``)."""
    from ..api import Sandbox
    from ..process import TimeoutExpired

    if status_fd is not None:
        from ._runreport import check_status_fd

        try:
            check_status_fd(status_fd)
        except PolicyError as exc:
            fail(f"--status-fd: {exc.message}")

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
    if policy.net_allow and not quiet:
        _note_portless_rules(policy.net_allow)
    try:
        sandbox = Sandbox(policy, audit=audit, quiet=quiet, dangerously_allow_full_access=full_access,
                          name=name)
    except PolicyError as exc:
        fail(_option_error(exc))
    sandbox.policy_files = policy_files
    relay = _output_relay(policy)
    indicator = _indicator(policy, command, quiet)
    try:
        process = sandbox.start(command, foreground=True, pass_fds=pass_fds, dry_run=dry_run,
                                **(relay.child_stdio() if relay else {}))
    except PolicyError as exc:
        fail(_option_error(exc))
    except SandlockError as exc:
        fail(str(exc), exc.exit_code)
    if relay is not None:
        relay.start()
    gc.enable()  # the supervisor may run for hours: its garbage is collected again
    if not quiet:
        for warning in sandbox.warnings:
            tell(f"sandlock: warning: {visible(warning)}")
    for sig in pending:
        process.send_signal(sig)
    if process.start_error:
        tell(f"sandlock: {process.start_error}")
    timed_out = False
    try:
        code = process.wait(policy.timeout)
    except TimeoutExpired:
        timed_out = True
        tell(f"sandlock: timeout: killed {command[0]!r} and everything it started "
             f"after {policy.timeout:g} s")
        process.end_for_timeout(policy.timeout)
        code = EXIT_TIMEOUT
    notices = list(process.notices)
    if relay is not None:
        relay.finish()
        relay.__exit__()
        notices += relay.drop_notices(process.audit)
        if any(relay.dropped):  # (for --status-fd)
            process.limits_hit.append(("max_output", "truncate"))
    if not quiet:
        for notice in notices:
            tell(notice)
        if code != 0:
            _name_what_was_left_out(policy, command, process.start_errno)
    if status_fd is not None:
        from ._runreport import status_line, write_status

        write_status(status_fd, status_line(process, code, timed_out))
    if indicator is not None:
        indicator.completed(code, process.level)
    return code


def _indicator(policy: Policy, command: list[str], quiet: bool) -> Indicator | None:
    """The run indicator's first lines, said now if it is wanted (``_runreport``)."""
    if not (policy.announce or (not quiet and _stderr_is_terminal())):
        return None  # the usual run in a pipeline: the module is not even imported
    from ._runreport import Indicator

    return Indicator(policy, command, policy.cwd or policy.workdir or os.getcwd())


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # stderr closed or replaced
        return False


def _note_portless_rules(rules: Sequence[str]) -> None:
    """A --net-allow HOST without ports opens every port of HOST, TCP and UDP, which a
    user meaning one service may not expect: said in one line (-q silences it)."""
    from ..netrules import portless

    opened = [(text, *found) for text in rules if (found := portless(text))]
    if not opened:
        return
    what = "; ".join(f"--net-allow {text} opens every "
                     f"{'port' if len(protocols) > 1 else next(iter(protocols)).upper() + ' port'}"
                     f" of {target}{', TCP and UDP' if len(protocols) > 1 else ''}"
                     for text, target, protocols in opened)
    target = opened[0][1]
    example = f"[{target}]" if ":" in target and not target.startswith("[") else target
    tell(f"sandlock: note: {what} (give the ports to open only those, e.g. {example}:443)")


def _output_relay(policy: Policy) -> Capture | None:
    """With --max-output, the command's stdout and stderr are pipes that sandlock passes
    on to its own, up to the limit."""
    if policy.max_output is None:
        return None
    from ..process import Capture

    return Capture(None, True, limit=policy.max_output, forward=True)


def _name_what_was_left_out(policy: Policy, command: list[str], start_errno: int | None) -> None:
    """After a failure, the paths the command named that the policy left out, and how
    to grant them: never a bare "Permission denied" that sends users to --mode
    full-access."""
    from ..confinement import failure_notes

    cwd = policy.cwd or policy.workdir or os.getcwd()
    for note in failure_notes(policy, command, cwd, {**os.environ, **policy.env}, start_errno):
        tell(note)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `sandlock` command."""
    # Start-up makes no garbage worth a collection pass (~1 ms of passes otherwise);
    # collection resumes once the command runs (_execute).
    collecting = gc.isenabled()
    gc.disable()
    try:
        code = _dispatch(argv)
    finally:
        if collecting:
            gc.enable()
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
        from ._ca import main as ca

        return ca(argv[1:])
    if argv[:1] == ["image"]:  # its own parser, like ca's
        from ._image import main as image

        return image(argv[1:])
    args = quick_run_args(argv)  # an everyday `run`: argparse is not even imported
    if args is not None:
        return _run(args)
    from ._parser import build_parser

    parser = build_parser(argv[0] if argv else None)
    # Known args, so that `policy test` takes requests after --net too (argparse stops
    # filling a positional list at the first option); anything else unknown is an error.
    args, extra = parser.parse_known_args(argv)
    if extra and (getattr(args, "requests", None) is None or extra[0].startswith("-")):
        parser.reject_unknown(args.subcommand, extra)  # type: ignore[attr-defined]
    if args.subcommand == "run":
        return _run(args)
    if args.subcommand == "sandbox":  # LocalGPT's names for check and selftest
        args.subcommand = "check" if args.action == "status" else "selftest"
    if args.subcommand == "check":
        from ._check import main as check

        return check()
    if args.subcommand == "vet":
        return _vet(args)
    if args.subcommand == "selftest":
        from ._selftest import main as selftest

        return selftest()
    if args.subcommand == "profile":
        return _profile(args)
    if args.subcommand == "workspace":
        from ._workspace import main as workspace

        return workspace(args)
    if args.subcommand in ("ps", "inspect", "kill"):
        from ._sandboxes import main as sandboxes

        return sandboxes(args)
    if args.subcommand == "learn":
        from ._learn import learn

        return learn(args)
    if args.subcommand == "mcp":
        from ._mcp import main as mcp

        return mcp(args, _policy_of(args), _policy_files(args))
    if args.subcommand == "policy":
        from ._policy import policy_test

        return policy_test(_policy_of(args), [*args.requests, *extra], args.net)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _profile(args: Namespace) -> int:
    from . import _policy

    if args.action == "list":
        return _policy.profile_list()
    if args.action == "show":
        return _policy.profile_show(args.name)
    return _policy.profile_validate(args.files)
